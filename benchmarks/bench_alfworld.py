"""ALFWorld-style games: generation, reset, batched rollouts, expert-label cost, rewrite validity.

Prints, for the CPU task set (``data/alfworld/train.jsonl``, rooms capped at 5 receptacles) and for
whole rooms (``data/alfworld/paper-eval.jsonl``, first 6):

* game generation + planner check (s/game) and reset (s/episode, engine pooled, translation memoised);
* batched rollouts with the tiny policy (``run_rollouts``, n=4, 10 steps, a label at every step as the
  rollout stage records them): episodes/s, steps/s, generation vs. engine share;
* label (re-planning) cost per step: a uniformly random walk of 10 steps per episode (the worst case:
  every state is new), searches, cache hits, plan tails reused and planner seconds per step;
* rewrite validity: every (object class, receptacle class) pair of each root room as a two-token
  rewrite (what a model guessing uniformly would get), and the parametric rewriter's candidates.

``--setup`` also times building the fast-downward wheel from its sdist (the set-up time this engine
adds on a fresh machine; needs the package index). Run: ``.venv/bin/python benchmarks/bench_alfworld.py``
(~3-6 min on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from rla_core.algo.adaptation import Goal
from rla_core.algo.curriculum import PlayTask
from rla_core.config import SamplingConfig
from rla_core.envs.alfworld.env import AlfworldEnv
from rla_core.envs.alfworld.pddl import goal_of, read_facts
from rla_core.envs.alfworld.rewriter import (
    ParametricRewriter,
    candidate_from_text,
    check_parametric,
    check_two_token,
)
from rla_core.envs.demos import corpus_texts
from rla_core.envs.rewriter import RewriteRequest
from rla_core.envs.rollout import RolloutTimings, run_rollouts
from rla_core.models.bootstrap import ensure_tiny_model
from rla_core.models.generator import TransformersGenerator
from rla_core.stage_inputs import RolloutRequest


def _rows(path: str, limit: int | None = None) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    return rows[:limit]


def _games(env: AlfworldEnv, specs: list[dict[str, Any]], label: str) -> None:
    start = time.perf_counter()
    for spec in specs:
        env.game(spec)
    gen = (time.perf_counter() - start) / len(specs)
    start = time.perf_counter()
    for spec in specs:
        env.open(spec, seed=0).close()
    reset = (time.perf_counter() - start) / len(specs)
    print(f"{label}: generate + plan {gen:.2f} s/game, reset {reset:.3f} s/episode")


def _random_walk(env: AlfworldEnv, specs: list[dict[str, Any]], label: str, *, steps: int = 10) -> None:
    rng = random.Random(0)
    before = env.plans.stats.seconds, env.plans.stats.searches, env.plans.stats.hits, env.plans.stats.tails
    labelled = 0
    step_s = 0.0
    for spec in specs:
        for _ in range(2):
            ep = env.open(spec, seed=0)
            for _ in range(steps):
                if ep.done:
                    break
                ep.expert_actions()
                labelled += 1
                t = time.perf_counter()
                ep.step(rng.choice(ep.admissible_actions))
                step_s += time.perf_counter() - t
            ep.close()
    s = env.plans.stats
    print(
        f"{label}: random walk, {labelled} labelled steps: planner {1000 * (s.seconds - before[0]) / labelled:.1f} "
        f"ms/step ({s.searches - before[1]} searches, {s.hits - before[2]} cache hits, {s.tails - before[3]} tails), "
        f"engine step {1000 * step_s / labelled:.1f} ms"
    )


def _rollouts(env: AlfworldEnv, rows: list[dict[str, Any]]) -> None:
    specs = [r["spec"] for r in rows]
    model = ensure_tiny_model(
        "policy", corpus=corpus_texts(env, specs), cache_dir=Path(".cache/models-bench-alfworld")
    )
    gen = TransformersGenerator(model, device="cpu", batch_size=32)
    tasks = [PlayTask(r["slot_id"], r["slot_id"], False, r["spec"]) for r in rows]
    timings = RolloutTimings()
    searches = env.plans.stats.searches
    start = time.perf_counter()
    frame = run_rollouts(RolloutRequest(tasks=tasks, n=4, max_steps=10, sampling=SamplingConfig(temperature=0.8, top_p=0.95, max_new_tokens=24), seed=1, iteration=1, history_turns=2, env_retries=0), env=env, generator=gen, timings=timings)  # fmt: skip
    wall = time.perf_counter() - start
    episodes = frame.select(["task_id", "rollout_id"]).unique().height
    print(
        f"batched rollouts (tiny policy, {len(tasks)} tasks x 4, 10 steps): {episodes / wall:.2f} episodes/s, "
        f"{frame.height / wall:.1f} steps/s, generation {100 * timings.generation_s / wall:.0f} % / engine "
        f"{100 * timings.engine_s / wall:.0f} % (labels included: {env.plans.stats.searches - searches} searches), "
        f"success {float((frame['outcome'] > 0).mean()):.2f}"
    )


def _rewrites(env: AlfworldEnv, rows: list[dict[str, Any]]) -> None:
    valid = total = 0
    for row in rows:
        spec = row["spec"]
        request = RewriteRequest(row["slot_id"], row["slot_id"], spec, spec, Goal.HARDER, prev_acc=1.0)
        problem = env.game(spec)["pddl_problem"]
        task_type, _ = goal_of(problem)
        facts = read_facts(problem)
        seconds = set(facts.receptacle_class.values()) | {
            facts.object_class[o] for o in facts.flags.get("toggleable", set())
        }
        for obj in sorted(set(facts.object_class.values())):
            for second in sorted(seconds):
                cand = candidate_from_text(f"\\boxed{{{obj},{second}}}", spec, task_type)
                assert cand.spec is not None
                reason = check_two_token(env, cand.spec, request) or env.check_winnable(cand.spec)
                valid += reason is None
                total += 1
    print(
        f"two-token rewrites, every class pair of the root rooms: {valid}/{total} valid ({valid / total:.2f})"
    )
    valid = total = 0
    for row in rows:
        for goal in (Goal.HARDER, Goal.EASIER):
            request = RewriteRequest(
                row["slot_id"], row["slot_id"], row["spec"], row["spec"], goal, prev_acc=0.5
            )
            for cand in ParametricRewriter().propose(request, k=3, seed=0):
                reason = (
                    cand.reason
                    or (check_parametric(cand.spec, request) if cand.spec is not None else "no spec")
                    or env.check_winnable(cand.spec or {})
                )
                valid += reason is None
                total += 1
    print(f"parametric rewrites (harder + easier, k=3): {valid}/{total} valid ({valid / total:.2f})")


def _setup_time() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-cache-dir", "-w", tmp, "fast-downward-textworld"],
            check=True,
        )  # fmt: skip
        print(f"set-up added: fast-downward-textworld wheel build {time.perf_counter() - start:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setup", action="store_true", help="also time the fast-downward wheel build")
    args = parser.parse_args()
    torch.set_num_threads(2)
    env = AlfworldEnv(Path(tempfile.mkdtemp(prefix="bench-alfworld-")))
    small = _rows("data/alfworld/train.jsonl")
    whole = _rows("data/alfworld/paper-eval.jsonl", limit=6)
    _games(env, [r["spec"] for r in small], "capped rooms (5 receptacles)")
    _games(env, [r["spec"] for r in whole], "whole rooms")
    _rollouts(env, small)
    _random_walk(AlfworldEnv(env.cache_dir), [r["spec"] for r in small], "capped rooms")
    _random_walk(AlfworldEnv(env.cache_dir), [r["spec"] for r in whole], "whole rooms")
    _rewrites(env, small)
    if args.setup:
        _setup_time()


if __name__ == "__main__":
    main()
