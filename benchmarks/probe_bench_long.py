"""Properties of the long-horizon `bench-long` preset and `bench-reach` candidate (docs/bench-design.md §10, §11).

Its modes never read a held-out set (the run modes read whatever the runs evaluated on: the validation split):

``random TASKS --max-steps 8,12,16``
    Success of a uniformly random policy over the admissible commands, per game and pooled, with
    ``--episodes`` episodes per game. No model: a cheap first look at how far a game is out of reach of a
    policy that picks about uniformly among its listed actions (the reading-drill warm start, §8), used to
    choose the game distribution and the step budget before paying for a warm start.

``grid --first-seed 20000 --games 6``
    The same random policy on a grid of spec cells (world_size × nb_objects × quest_length), ``--games``
    freshly drawn games per cell with seeds from ``--first-seed`` on (a design pool apart from the three
    sets' seed ranges), to see which cells a near-uniform policy wins 5-20 % of the time.

``run RUN_DIR [RUN_DIR ...]``
    The issue's "Done means" from the artifacts of short runs (the latest attempt of each stage):

    1. validation success of the warm start: ``eval/success_rate`` of the iteration-0 evaluate stage of a run
       started with ``--set textgame.eval_tasks=data/textworld/bench-long-validation.jsonl`` (its Wilson
       interval too); target 0.05-0.2;
    2. share of iteration-1 task groups (``task_id`` of ``rollouts.parquet``) whose ``rollout.rollouts_per_task``
       outcomes are all equal, i.e. zero GRPO advantage under the outcome reward alone; target >= 0.6;
    3. ``reward_model/step_accuracy`` of each iteration's judge stage (iteration 1 judges with the warm-started
       judge); target 0.55-0.65 at iteration 1 and a rise of >= 0.05 by iteration 4;
    4. share of iteration-1 task groups with 0 successes out of n. Iteration 1's rollouts are played by the
       warm start itself, so with ``--set rollout.tasks_per_iter=32`` (every training game) this is the warm
       start's 0/8 share on the training games; target >= 0.25.

``reach RUN_DIR [RUN_DIR ...]``
    The four properties of a long-horizon benchmark within the policy's reach (`bench-reach`, §11), from a run of
    the oracle arm (``judge.source=oracle``, frozen judge, static tasks) evaluated on the validation split:

    1. validation success of the warm start (the iteration-0 evaluate stage, Wilson interval); target 0.25-0.45;
    2. mean optimal steps per quest (walkthrough length) of the training and evaluation games; target >= 4;
    3. share of iteration-1 task groups whose outcomes are all equal (zero advantage under the outcome
       reward); iteration 1 is played by the warm start; target >= 0.5;
    4. validation success at every evaluation and its change from iteration 0 to the last; target >= +0.10.

``band RUN_DIR [RUN_DIR ...]``
    What the policy's accuracy filter (``reward.policy_acc_band``) does to the training rows: for every
    iteration's label stage, :func:`rla_core.algo.labels.policy_samples` is recomputed from that iteration's
    rollouts and judgments (and the pending variants the stage accepted) under the AlfWorld filter
    (1/8-7/8) and under none (0-1), once with the run's reward (step-wise) and once with the outcome reward
    alone, and the rows kept, their tasks and the rows of all-equal groups are printed; the row count the
    label stage wrote is printed beside them as a check (it must equal the column of the run's own filter).

Run: ``.venv/bin/python benchmarks/probe_bench_long.py random data/textworld/bench-long-train.jsonl``;
``.venv/bin/python benchmarks/probe_bench_long.py run /tmp/benchlong/runs/<run id>``
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import polars as pl

from rla_core.algo.stats import proportion, proportion_text
from rla_core.envs.textworld_env import TextWorldEnv


def random_success(
    env: TextWorldEnv, spec: dict, *, episodes: int, max_steps: int, rng: random.Random
) -> int:
    """Wins of ``episodes`` uniformly random episodes of at most ``max_steps`` steps."""
    wins = 0
    for _ in range(episodes):
        episode = env.open(spec, seed=0)
        try:
            for _step in range(max_steps):
                if episode.done or not episode.admissible_actions:
                    break
                episode.step(rng.choice(episode.admissible_actions))
            wins += int(episode.won)
        finally:
            episode.close()
    return wins


def random_mode(args: argparse.Namespace) -> None:
    env = TextWorldEnv(args.game_cache)
    tasks = [json.loads(line) for line in args.tasks.read_text().splitlines() if line.strip()]
    budgets = [int(b) for b in args.max_steps.split(",")]
    for budget in budgets:
        rng = random.Random(args.seed)
        rates = [
            random_success(env, t["spec"], episodes=args.episodes, max_steps=budget, rng=rng) for t in tasks
        ]
        total = sum(rates)
        n = args.episodes * len(tasks)
        zero = sum(r == 0 for r in rates) / len(tasks)
        by_length: dict[int, list[int]] = {}
        for task, wins in zip(tasks, rates, strict=True):
            by_length.setdefault(task["spec"]["quest_length"], []).append(wins)
        per_length = ", ".join(
            f"q{q}: {sum(w) / (args.episodes * len(w)):.3f} ({len(w)} games)"
            for q, w in sorted(by_length.items())
        )
        print(
            f"max_steps {budget}: random success {total}/{n} = {total / n:.3f}; games at 0/{args.episodes} "
            f"{zero:.2f}; per quest length {per_length}",
            flush=True,
        )


def grid_mode(args: argparse.Namespace) -> None:
    env = TextWorldEnv(args.game_cache)
    budgets = [int(b) for b in args.max_steps.split(",")]
    seed = args.first_seed
    rng = random.Random(args.seed)
    for world_size in (int(v) for v in args.world_sizes.split(",")):
        for nb_objects in (int(v) for v in args.objects.split(",")):
            for quest_length in (int(v) for v in args.quest_lengths.split(",")):
                specs: list[dict] = []
                while len(specs) < args.games and seed < args.first_seed + 100_000:
                    spec = {"world_size": world_size, "nb_objects": nb_objects, "quest_length": quest_length,
                            "seed": seed}  # fmt: skip
                    seed += 1
                    if env.check_winnable(spec) is None:
                        specs.append(spec)
                lengths = [len(env.demonstrations(s, seed=0)[0]) for s in specs]
                cells = [f"walkthrough {sum(lengths) / max(len(lengths), 1):.1f} steps"]
                for budget in budgets:
                    wins = [
                        random_success(env, s, episodes=args.episodes, max_steps=budget, rng=rng)
                        for s in specs
                    ]
                    n = args.episodes * len(specs)
                    cells.append(f"{budget} steps {sum(wins) / n:.3f} (wins per game {sorted(wins)})")
                print(
                    f"rooms {world_size} objects {nb_objects} quest {quest_length}: " + "; ".join(cells),
                    flush=True,
                )


def _latest(run: Path, iteration: int, stage: str) -> Path | None:
    attempts = sorted((run / f"iter-{iteration:04d}" / stage).glob("attempt-*/_manifest.json"))
    return attempts[-1].parent if attempts else None


def _metrics(attempt: Path) -> dict[str, float]:
    return json.loads((attempt / "_manifest.json").read_text()).get("extra", {}).get("metrics", {})


def run_mode(args: argparse.Namespace) -> None:
    for run in args.runs:
        print(f"== {run.name}")
        evaluate = _latest(run, 0, "evaluate")
        if evaluate is not None:
            frame = pl.read_parquet(next(evaluate.glob("*.parquet")))
            wins, n = int((frame["outcome"] > 0).sum()), frame.height
            clean = int(((frame["outcome"] > 0) & (frame["invalid_actions"] == 0)).sum())
            print(
                f"1. iteration-0 evaluation success {proportion_text(proportion(wins, n))} "
                f"(clean {clean / n:.3f}); target 0.05-0.2"
            )
        rollout = _latest(run, 1, "rollout")
        if rollout is not None:
            steps = pl.read_parquet(
                rollout / "rollouts.parquet", columns=["task_id", "rollout_id", "outcome", "step"]
            )
            episodes = steps.group_by("task_id", "rollout_id").agg(
                pl.col("outcome").first(), pl.len().alias("steps")
            )
            groups = episodes.group_by("task_id").agg(
                wins=(pl.col("outcome") > 0).sum(), n=pl.len(), distinct=pl.col("outcome").n_unique()
            )
            equal = float((groups["distinct"] == 1).mean())
            zero = float((groups["wins"] == 0).mean())
            success = float((episodes["outcome"] > 0).mean())
            print(
                f"2. iteration-1 groups with all-equal outcomes {int((groups['distinct'] == 1).sum())}/"
                f"{groups.height} = {equal:.2f} (target >= 0.6)"
            )
            print(
                f"4. iteration-1 groups at 0/{int(groups['n'].max())} successes {int((groups['wins'] == 0).sum())}/"
                f"{groups.height} = {zero:.2f} (target >= 0.25); rollout success {success:.3f}, "
                f"mean steps {episodes['steps'].mean():.1f}; wins per group "
                f"{sorted(groups['wins'].to_list())}"
            )
        accuracies = []
        for iteration in range(1, 100):
            judge = _latest(run, iteration, "judge")
            if judge is None:
                if not (run / f"iter-{iteration:04d}").exists():
                    break
                continue
            value = _metrics(judge).get("reward_model/step_accuracy")
            if value is not None:
                accuracies.append((iteration, value))
        if accuracies:
            cells = ", ".join(f"it {i}: {v:.3f}" for i, v in accuracies)
            print(f"3. judge step accuracy {cells}; target 0.55-0.65 at it 1, rise >= 0.05 by it 4")


def _eval_success(attempt: Path) -> tuple[int, int, int]:
    """Wins, clean wins (no invalid answer, which the evaluation's fallback would play) and episodes."""
    frame = pl.read_parquet(next(attempt.glob("*.parquet")), columns=["outcome", "invalid_actions"])
    won = frame["outcome"] > 0
    return int(won.sum()), int((won & (frame["invalid_actions"] == 0)).sum()), frame.height


def reach_mode(args: argparse.Namespace) -> None:
    """The four properties of a long-horizon preset within reach, from one run of the oracle arm."""
    env = TextWorldEnv(args.game_cache)
    for run in args.runs:
        config = json.loads((run / "run.json").read_text())["config"]
        tasks, eval_tasks = config["textgame"]["tasks"], config["textgame"]["eval_tasks"]
        print(f"== {run.name} (judge.source={config['judge'].get('source')}; evaluation on {eval_tasks})")
        lengths = {}
        for name, path in (("training", tasks), ("evaluation", eval_tasks)):
            specs = [json.loads(line)["spec"] for line in Path(path).read_text().splitlines() if line.strip()]
            walks = [len(env.demonstrations(spec, seed=0)[0]) for spec in specs]
            lengths[name] = f"{sum(walks) / len(walks):.2f} ({len(walks)} games)"
        points = []
        for iteration in range(0, 100):
            evaluate = _latest(run, iteration, "evaluate")
            if evaluate is not None:
                points.append((iteration, *_eval_success(evaluate)))
            elif not (run / f"iter-{iteration:04d}").exists():
                break
        if points:
            _, wins, clean, n = points[0]
            print(
                f"1. iteration-0 evaluation success {proportion_text(proportion(wins, n))} (clean "
                f"{proportion_text(proportion(clean, n))}); target 0.25-0.45"
            )
        print(f"2. mean optimal steps (walkthrough length): {'; '.join(f'{k} {v}' for k, v in lengths.items())}; "
              "target >= 4")  # fmt: skip
        rollout = _latest(run, 1, "rollout")
        if rollout is not None:
            steps = pl.read_parquet(
                rollout / "rollouts.parquet", columns=["task_id", "rollout_id", "outcome"]
            )
            groups = (
                steps.group_by("task_id", "rollout_id")
                .agg(pl.col("outcome").first())
                .group_by("task_id")
                .agg(wins=(pl.col("outcome") > 0).sum(), distinct=pl.col("outcome").n_unique())
            )
            equal = int((groups["distinct"] == 1).sum())
            print(
                f"3. iteration-1 groups with all-equal outcomes {equal}/{groups.height} = "
                f"{equal / groups.height:.2f} (target >= 0.5); wins per group {sorted(groups['wins'].to_list())}"
            )
        if len(points) > 1:
            (_, w0, _, n0), (last, w1, _, n1) = points[0], points[-1]
            curve = ", ".join(f"it {i}: {w / n:.3f} (clean {c / n:.3f})" for i, w, c, n in points)
            print(
                f"4. evaluation success {curve}; change 0 -> {last}: {w1 / n1 - w0 / n0:+.3f} (target >= +0.10)"
            )


def _frame(attempt: Path, name: str) -> pl.DataFrame:
    return pl.read_parquet(attempt / f"{name}.parquet")


def band_mode(args: argparse.Namespace) -> None:
    from rla_core.algo.curriculum import accepted_pending
    from rla_core.algo.labels import policy_samples, task_accuracy
    from rla_core.config import Band, build_config, upgrade_stored_config

    bands = {"1/8-7/8": Band(low=0.125, high=0.875), "0-1": Band(low=0.0, high=1.0)}
    for run in args.runs:
        cfg = build_config(upgrade_stored_config(json.loads((run / "run.json").read_text())["config"]))
        print(
            f"== {run.name} (its filter {cfg.reward.policy_acc_band.low}-{cfg.reward.policy_acc_band.high})"
        )
        for iteration in range(1, 100):
            label, rollout, judge = (_latest(run, iteration, s) for s in ("label", "rollout", "judge"))
            if label is None or rollout is None or judge is None:
                if not (run / f"iter-{iteration:04d}").exists():
                    break
                continue
            rollouts, judgments = _frame(rollout, "rollouts"), _frame(judge, "judgments")
            accepted = accepted_pending(_frame(label, "decisions"))
            acc = task_accuracy(rollouts)
            equal = set(acc.filter((pl.col("acc") == 0) | (pl.col("acc") == 1))["task_id"].to_list())
            cells = []
            for reward_name, stepwise in (("run's reward", cfg.reward.use_stepwise), ("outcome only", False)):
                for band_name, band in bands.items():
                    reward = cfg.reward.model_copy(update={"policy_acc_band": band, "use_stepwise": stepwise})
                    rows, _ = policy_samples(
                        rollouts, judgments, cfg=reward, m=cfg.judge.m, accepted_pending=accepted
                    )
                    in_equal = int(rows["task_id"].is_in(list(equal)).sum())
                    cells.append(
                        f"{reward_name} {band_name}: {rows.height} rows / {rows['task_id'].n_unique()} tasks "
                        f"({in_equal} from all-equal groups)"
                    )
            written = pl.read_parquet(label / "policy_samples.parquet").height
            print(
                f"it {iteration}: {len(equal)}/{acc.height} tasks all-equal; "
                + "; ".join(cells)
                + f"; label wrote {written}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    rnd = sub.add_parser("random", help="uniformly random policy on a task set")
    rnd.add_argument("tasks", type=Path)
    rnd.add_argument("--max-steps", default="8,12,16")
    rnd.add_argument("--episodes", type=int, default=8)
    rnd.add_argument("--seed", type=int, default=0)
    rnd.add_argument("--game-cache", type=Path, default=Path(".cache/games"))
    rnd.set_defaults(func=random_mode)
    grid = sub.add_parser("grid", help="uniformly random policy on a grid of spec cells")
    grid.add_argument("--first-seed", type=int, default=20000)
    grid.add_argument("--games", type=int, default=6)
    grid.add_argument("--episodes", type=int, default=8)
    grid.add_argument("--world-sizes", default="1,2,3")
    grid.add_argument("--objects", default="3,4")
    grid.add_argument("--quest-lengths", default="3,4,5")
    grid.add_argument("--max-steps", default="12,16")
    grid.add_argument("--seed", type=int, default=0)
    grid.add_argument("--game-cache", type=Path, default=Path(".cache/games"))
    grid.set_defaults(func=grid_mode)
    runs = sub.add_parser("run", help="properties 1-4 from run directories")
    runs.add_argument("runs", type=Path, nargs="+")
    runs.set_defaults(func=run_mode)
    reach = sub.add_parser("reach", help="the four properties of a preset within reach, from oracle-arm runs")
    reach.add_argument("runs", type=Path, nargs="+")
    reach.add_argument("--game-cache", type=Path, default=Path(".cache/games"))
    reach.set_defaults(func=reach_mode)
    band = sub.add_parser(
        "band", help="training rows under the policy's accuracy filters, from run directories"
    )
    band.add_argument("runs", type=Path, nargs="+")
    band.set_defaults(func=band_mode)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
