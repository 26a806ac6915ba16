"""Benchmark: policy and reward-model labels for ~1,000,000 agent steps with m = 3 judgments.

Target: ``policy_samples`` + ``reward_samples`` together in under 2 s on the 2-core
development machine. Run with::

    .venv/bin/python benchmarks/bench_labels.py [--tasks 20000] [--rollouts 8] [--repeat 3]

It prints the frame sizes, the best and median wall time of each function over the repeats, and
the total. Prompts and responses are short strings (their length does not matter to polars, which
moves string views, not bytes).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import polars as pl

from rla_core.algo.labels import policy_samples, reward_samples
from rla_core.config import RewardConfig


def make_frames(n_tasks: int, n_rollouts: int, m: int, seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Synthetic rollouts (1-12 steps per rollout, mean 6.5) and m judgments per step (10% unparsable)."""
    rng = np.random.default_rng(seed)
    n_roll = n_tasks * n_rollouts
    lengths = rng.integers(1, 13, size=n_roll)
    task_of_rollout = np.repeat(np.arange(n_tasks), n_rollouts)
    rollout_id = np.tile(np.arange(n_rollouts), n_tasks)
    # Per-task success probability spread over [0, 1] so that the accuracy filters bite.
    p_success = rng.random(n_tasks)[task_of_rollout]
    outcome = np.where(rng.random(n_roll) < p_success, 1.0, -1.0)
    idx = np.repeat(np.arange(n_roll), lengths)
    starts = np.cumsum(lengths) - lengths
    step = np.arange(idx.size) - np.repeat(starts, lengths)
    task_names = np.array([f"task-{i:06d}" for i in range(n_tasks)])
    rollouts = pl.DataFrame(
        {
            "iteration": np.full(idx.size, 1, dtype=np.int64),
            "task_id": task_names[task_of_rollout[idx]],
            "pending": rng.random(n_tasks)[task_of_rollout[idx]] < 0.05,
            "rollout_id": rollout_id[idx],
            "step": step,
            "outcome": outcome[idx],
            "prompt": np.full(idx.size, "observation: you are in a kitchen. choose an action"),
            "response": np.full(idx.size, "I go to the fridge. \\boxed{2}"),
        }
    )
    n_steps = rollouts.height
    j_step = np.repeat(np.arange(n_steps), m)
    raw = rng.choice(np.array([1.0, -1.0, np.nan]), size=n_steps * m, p=[0.5, 0.4, 0.1])
    judgments = pl.DataFrame(
        {
            "task_id": rollouts["task_id"].gather(j_step),
            "rollout_id": rollouts["rollout_id"].gather(j_step),
            "step": rollouts["step"].gather(j_step),
            "judge_idx": np.tile(np.arange(m), n_steps),
            "score": raw,
            "prompt": np.full(n_steps * m, "judge ONE step of an agent"),
            "response": np.full(n_steps * m, "reasoning... \\boxed{1}"),
        }
    ).with_columns(pl.col("score").fill_nan(None))
    return rollouts, judgments


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--rollouts", type=int, default=8)
    parser.add_argument("--m", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    t0 = time.perf_counter()
    rollouts, judgments = make_frames(args.tasks, args.rollouts, args.m, args.seed)
    print(
        f"generated {rollouts.height:,} step rows and {judgments.height:,} judgment rows "
        f"in {time.perf_counter() - t0:.2f} s (polars threads: {pl.thread_pool_size()})"
    )
    cfg = RewardConfig()
    accepted = set(rollouts.filter(pl.col("pending"))["task_id"].unique().sort().to_list()[::2])

    times: dict[str, list[float]] = {"policy_samples": [], "reward_samples": []}
    cpu: dict[str, list[float]] = {"policy_samples": [], "reward_samples": []}
    for _ in range(args.repeat):
        t, c = time.perf_counter(), time.process_time()
        pol, pol_stats = policy_samples(rollouts, judgments, cfg=cfg, m=args.m, accepted_pending=accepted)
        times["policy_samples"].append(time.perf_counter() - t)
        cpu["policy_samples"].append(time.process_time() - c)
        t, c = time.perf_counter(), time.process_time()
        rm, rm_stats = reward_samples(rollouts, judgments, cfg=cfg, m=args.m, accepted_pending=accepted)
        times["reward_samples"].append(time.perf_counter() - t)
        cpu["reward_samples"].append(time.process_time() - c)

    print(f"policy_samples: {pol.height:,} rows kept; stats {pol_stats}")
    print(f"reward_samples: {rm.height:,} rows kept; stats {rm_stats}")
    for name, ts in times.items():
        print(
            f"{name}: best {min(ts):.3f} s, median {statistics.median(ts):.3f} s wall; "
            f"median {statistics.median(cpu[name]):.3f} s CPU (all threads)"
        )
    totals = [a + b for a, b in zip(times["policy_samples"], times["reward_samples"], strict=True)]
    verdict = "OK" if min(totals) < 2.0 else "ABOVE TARGET"
    # On a shared machine other processes inflate wall time; the CPU time shows the work itself.
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f}")
    print(
        f"total: best {min(totals):.3f} s, median {statistics.median(totals):.3f} s (target < 2 s: {verdict})"
    )


if __name__ == "__main__":
    main()
