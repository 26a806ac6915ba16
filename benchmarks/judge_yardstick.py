"""The judge's yardstick and its ceiling (docs/study.md, "The judge's yardstick" and "The judge's ceiling").

``record RUN --tasks FILE --episodes N --out OUT.parquet``
    Play the warm-started policy of run ``RUN`` (its bootstrap stage's ``policy`` checkpoint) on the games of
    ``FILE``, ``N`` episodes each, with the run's evaluation settings (sampling, step budget, the spec's
    fallback for invalid answers), and write every step — prompt, response, next observation, the engine's
    expert actions — as 'rollouts' rows. On the validation games this is the judge's yardstick
    (``evaluation.judge_steps``); on the training games, the supervised data of ``ceiling``.

``ceiling RUN --train STEPS.parquet --yardstick YARD.parquet --sizes 128x2,256x4 --rows 2000,8000``
    The judge's ceiling: for each tiny size (width x layers) and number of training rows, a tiny judge is
    bootstrapped at that size with the run's tokenizer corpus and trained *supervised* on clean step labels
    (each training step's judge prompt → the warm start's verdict for its expert label, the very input the
    trained judge reads: nothing privileged in the prompt), then it judges the yardstick with the run's
    ``judge.m`` and sampling; prints one line per cell (balanced accuracy, good-verdict share, minutes) and
    appends it to ``--out`` (JSON lines). Rows are drawn with the seed, balanced by label when ``--balanced``.

``warmstart RUN --yardstick YARD.parquet --noise 0.25,0.1 --epochs 2,6``
    The judge's warm start as the run's bootstrap stage makes it (the setting's judge demonstrations, a share
    ``--noise`` of their labels flipped, ``--epochs`` passes, the run's SFT learning rate and warm-start seed),
    for each (noise, epochs), measured on the yardstick: how to give the judge a competent-but-imperfect start
    (the values then go in ``models.reward_label_noise`` and ``models.reward_warm_start_epochs``).

Run (after a run of the preset exists, e.g. ``rla run --preset bench-long --run-id ws1 --set iterations=1``):
``.venv/bin/python benchmarks/judge_yardstick.py record ws1 --root runs --tasks
data/textworld/bench-long-validation.jsonl --episodes 4 --out data/textworld/bench-long-yardstick.parquet``
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl

from flows.evals import policy_checkpoint
from flows.runs import load_run_config
from rla_core.algo.judging import judge_step_metrics, optimal_steps
from rla_core.config import RunConfig, TinySize
from rla_core.schemas import validate
from rla_core.stage_inputs import EvaluateInputs, Role, StageName
from rla_core.store import ArtifactStore


def record(args: argparse.Namespace) -> None:
    import torch

    from tasks.evaluate import play_checkpoint

    store = ArtifactStore(args.root)
    cfg = load_run_config(store, args.run)
    inputs = EvaluateInputs.from_config(cfg)
    evaluation = inputs.evaluation.model_copy(update={"rollouts_per_task": args.episodes})
    inputs = inputs.model_copy(update={"evaluation": evaluation})
    torch.set_num_threads(inputs.threads)
    start = time.monotonic()
    with policy_checkpoint(store, args.run, 0, StageName.BOOTSTRAP) as policy_dir:
        played = play_checkpoint(inputs, policy_dir, tasks_file=args.tasks, iteration=0, seed=args.seed)
    steps = validate("rollouts", played.frames["rollouts"], where="judge_yardstick record")
    good = optimal_steps(steps.filter(pl.col("step").is_not_null()))
    steps.write_parquet(args.out)
    episodes = steps.select("task_id", "rollout_id").unique().height
    print(
        f"{args.out}: {steps.height} steps of {episodes} episodes on {args.tasks}; good steps "
        f"{int(good.sum())} ({float(good.mean()):.3f}); won episodes "
        f"{steps.filter(pl.col('outcome') > 0).select('task_id', 'rollout_id').unique().height}; "
        f"{time.monotonic() - start:.0f} s"
    )


def judge_rows(steps: pl.DataFrame) -> pl.DataFrame:
    """Supervised judge rows: each step's judge prompt (as the judge stage renders it) and the warm start's
    verdict for its expert label (good → ``\\boxed{1}``, else ``\\boxed{-1}``)."""
    from rla_core.envs.prompts import judge_demo_response, render_judge_prompt
    from rla_core.models.multimodal import strip_image_slots

    good = optimal_steps(steps).to_list()
    rows = [
        {
            "prompt": render_judge_prompt(
                prompt=strip_image_slots(s["prompt"]),
                response=s["response"],
                next_observation=s["next_observation"],
                template="judge",
            ),
            "response": judge_demo_response(s["action"], good=g),
            "good": g,
        }
        for s, g in zip(steps.iter_rows(named=True), good, strict=True)
    ]
    return pl.DataFrame(rows, schema={"prompt": pl.String, "response": pl.String, "good": pl.Boolean})


def _pick(rows: pl.DataFrame, n: int, *, seed: int, balanced: bool) -> pl.DataFrame:
    rng = random.Random(seed)
    if not balanced:
        idx = rng.sample(range(rows.height), min(n, rows.height))
        return rows[sorted(idx)]
    parts = []
    for label in (True, False):
        sub = rows.filter(pl.col("good") == label)
        # with replacement when a class is short: each label gets n / 2 rows
        parts.append(sub[[rng.randrange(sub.height) for _ in range(n // 2)]])
    return pl.concat(parts).sample(fraction=1.0, shuffle=True, seed=seed)


def _warm_start_data(cfg: RunConfig) -> tuple[Any, int]:
    """The setting's warm-start demonstrations as the bootstrap stage draws them, and their seed
    (``models.warm_start_seed``, which the ``bench`` presets set, else the run's seed)."""
    from rla_core.settings import adapter_of
    from rla_core.stage_inputs import BootstrapInputs

    inputs = BootstrapInputs.from_config(cfg)
    seed = cfg.models.warm_start_seed if cfg.models.warm_start_seed is not None else cfg.seed
    with tempfile.TemporaryDirectory(prefix="rla-ws-") as work:
        return adapter_of(inputs).warm_start(inputs, seed=seed, workdir=Path(work)), seed


def measure(cfg: RunConfig, judge_dir: Path, yardstick: pl.DataFrame, *, seed: int) -> dict[str, float]:
    """The judge at ``judge_dir`` on the yardstick, as the judge_eval stage measures it."""
    from rla_core.envs.judge import judge_steps
    from rla_core.models.generator import GeneratorSpec

    spec = GeneratorSpec(judge_dir, cfg.models, threads=cfg.threads, role=Role.REWARD)
    with spec.open() as gen:
        judgments = judge_steps(
            yardstick, generator=gen, m=cfg.judge.m, sampling=cfg.judge.sampling, seed=seed, iteration=0
        )
    return judge_step_metrics(yardstick, judgments, prefix="")


def ceiling(args: argparse.Namespace) -> None:
    import torch

    from rla_core.models.bootstrap import resolve_model, tiny_arch
    from rla_core.models.sft import sft

    store = ArtifactStore(args.root)
    cfg = load_run_config(store, args.run)
    torch.set_num_threads(cfg.threads)
    train_steps = pl.read_parquet(args.train).filter(pl.col("step").is_not_null())
    yardstick = pl.read_parquet(args.yardstick).filter(pl.col("step").is_not_null())
    if args.show_action:  # what the judge would see if its prompt named the action the environment played
        train_steps, yardstick = (
            frame.with_columns(response=pl.col("response") + "\n[Action played] " + pl.col("action"))
            for frame in (train_steps, yardstick)
        )
    train = judge_rows(train_steps)
    corpus = list(_warm_start_data(cfg)[0].corpus)  # the tokenizer corpus of the run's tiny models
    print(
        f"training steps {train.height} (good {float(train['good'].mean()):.3f}); yardstick {yardstick.height}"
    )
    out = Path(args.out)
    for size_text in args.sizes.split(","):
        width, layers = (int(x) for x in size_text.split("x"))
        base = resolve_model(
            "tiny:reward", corpus=corpus, cache_dir=Path(cfg.models.cache_dir),
            arch=tiny_arch(TinySize(width=width, layers=layers)),
        )  # fmt: skip
        for n in (int(x) for x in args.rows.split(",")):
            rows = _pick(train, n, seed=args.seed, balanced=args.balanced).select("prompt", "response")
            start = time.monotonic()
            with tempfile.TemporaryDirectory(prefix="rla-ceiling-") as tmp:
                stats = sft(
                    base, rows, out_dir=Path(tmp) / "judge", epochs=args.epochs, lr=args.lr, seed=args.seed
                )
                trained = time.monotonic() - start
                metrics = measure(cfg, Path(tmp) / "judge", yardstick, seed=args.seed)
            cell: dict[str, Any] = {
                "width": width, "layers": layers, "rows": n, "epochs": args.epochs, "lr": args.lr,
                "balanced_rows": args.balanced, "show_action": args.show_action, "seed": args.seed, "train_min": round(trained / 60, 1),
                "sft_loss": stats.get("loss"), **metrics,
            }  # fmt: skip
            print(json.dumps(cell), flush=True)
            with out.open("a") as fh:
                fh.write(json.dumps(cell) + "\n")


def warmstart(args: argparse.Namespace) -> None:
    import torch

    from rla_core.models.bootstrap import resolve_model, tiny_arch
    from rla_core.models.sft import sft
    from rla_core.settings.warm_start import flip_judge_labels

    store = ArtifactStore(args.root)
    cfg = load_run_config(store, args.run)
    torch.set_num_threads(cfg.threads)
    data, seed = _warm_start_data(cfg)
    base = resolve_model(
        cfg.models.reward, corpus=data.corpus, cache_dir=Path(cfg.models.cache_dir),
        arch=tiny_arch(cfg.models.tiny.reward),
    )  # fmt: skip
    yardstick = pl.read_parquet(args.yardstick).filter(pl.col("step").is_not_null())
    print(f"judge demonstrations {data.reward_rows.height}; yardstick {yardstick.height}", flush=True)
    for noise in (float(x) for x in args.noise.split(",")):
        rows = flip_judge_labels(data.reward_rows, share=noise, seed=seed) if noise > 0 else data.reward_rows
        for epochs in (int(x) for x in args.epochs.split(",")):
            start = time.monotonic()
            with tempfile.TemporaryDirectory(prefix="rla-ws-") as tmp:
                stats = sft(
                    base, rows, out_dir=Path(tmp) / "judge", epochs=epochs, lr=cfg.training.sft_lr, seed=seed
                )
                metrics = measure(cfg, Path(tmp) / "judge", yardstick, seed=args.seed)
            cell = {
                "noise": noise, "epochs": epochs, "demos": rows.height, "minutes": round((time.monotonic() - start) / 60, 1),
                "sft_loss": stats.get("loss"), **metrics,
            }  # fmt: skip
            print(json.dumps(cell), flush=True)
            with Path(args.out).open("a") as fh:
                fh.write(json.dumps(cell) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("run")
    rec.add_argument("--root", default="runs")
    rec.add_argument("--tasks", required=True)
    rec.add_argument("--episodes", type=int, default=4)
    rec.add_argument("--seed", type=int, default=0)
    rec.add_argument("--out", required=True)
    cei = sub.add_parser("ceiling")
    cei.add_argument("run")
    cei.add_argument("--root", default="runs")
    cei.add_argument("--train", required=True)
    cei.add_argument("--yardstick", required=True)
    cei.add_argument("--sizes", default="128x2,256x4")
    cei.add_argument("--rows", default="2000,8000")
    cei.add_argument("--epochs", type=int, default=2)
    cei.add_argument("--lr", type=float, default=3e-3)
    cei.add_argument("--seed", type=int, default=0)
    cei.add_argument("--balanced", action="store_true")
    cei.add_argument(
        "--show-action", action="store_true", help="name the played action in the judge's prompt"
    )
    cei.add_argument("--out", default="judge_ceiling.jsonl")
    ws = sub.add_parser("warmstart")
    ws.add_argument("run")
    ws.add_argument("--root", default="runs")
    ws.add_argument("--yardstick", required=True)
    ws.add_argument("--noise", default="0.25,0.1")
    ws.add_argument("--epochs", default="2,6")
    ws.add_argument("--seed", type=int, default=0)
    ws.add_argument("--out", default="judge_warmstart.jsonl")
    args = parser.parse_args()
    {"record": record, "ceiling": ceiling, "warmstart": warmstart}[args.mode](args)


if __name__ == "__main__":
    main()
