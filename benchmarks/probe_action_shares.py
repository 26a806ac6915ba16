"""Share of no-op and optimal actions in a study's training rollouts, per arm and iteration (docs/bench-design.md §4).

A no-op is ``look``, ``inventory`` or ``examine …`` (never one of the engine's optimal actions in these
games); an optimal action is one of the step's ``expert_actions``. Seeds are pooled.

Run: ``.venv/bin/python benchmarks/probe_action_shares.py runs s16 --seeds 1,2,3 --iterations 1,6,12``
"""

from __future__ import annotations

import argparse
from pathlib import Path

import polars as pl

from flows.study import ARMS
from rla_core.algo.judging import optimal_steps

NOOP_VERBS = ["look", "inventory", "examine"]


def action_flags(steps: pl.DataFrame) -> pl.DataFrame:
    """``steps`` (with ``action`` and ``expert_actions``) plus boolean columns ``optimal`` and ``noop``."""
    verb = pl.col("action").str.split(" ").list.first()
    return steps.with_columns(optimal=optimal_steps(steps), noop=verb.is_in(NOOP_VERBS).fill_null(False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="artifact root")
    parser.add_argument("study", help="study id")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--iterations", default="1,6,12")
    args = parser.parse_args()
    for arm in ARMS:
        cells = []
        for it in (int(i) for i in args.iterations.split(",")):
            files = [
                f
                for seed in args.seeds.split(",")
                for f in sorted(
                    args.root.glob(
                        f"{args.study}-{arm}-s{seed}/iter-{it:04d}/rollout/attempt-*/rollouts.parquet"
                    )
                )[-1:]
            ]
            if not files:
                continue
            steps = action_flags(
                pl.concat([pl.read_parquet(f, columns=["action", "expert_actions"]) for f in files])
            )
            cells.append(f"it {it}: no-op {steps['noop'].mean():.2f} optimal {steps['optimal'].mean():.2f}")
        if cells:
            print(f"{arm}: " + " | ".join(cells))


if __name__ == "__main__":
    main()
