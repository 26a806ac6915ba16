"""Does a study's policy get better on the games it trains on? (docs/bench-design.md §7)

Per arm and seed: the mean training-rollout success (``policy/success_rate`` in ``study.parquet``) of the
last ``--window`` iterations minus that of the first ``--window``; then the mean over seeds with a 95 %
t-interval (:func:`rla_core.algo.stats.mean_interval`). Training rollouts end at an invalid answer
(``rollout.invalid_action=fail``) and sample ``tasks_per_iter`` of the training games per iteration, so each
iteration's rate is noisy; averaging a window of iterations smooths that. In the ``full`` arm the task pool
changes (rewritten tasks), so its rates are not on the same games throughout.

Run: ``.venv/bin/python benchmarks/probe_train_success.py runs/s16/study.parquet [--window 4]``
"""

from __future__ import annotations

import argparse
from pathlib import Path

import polars as pl

from rla_core.algo.stats import mean_interval


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study_parquet", type=Path)
    parser.add_argument("--window", type=int, default=4, help="iterations averaged at each end")
    args = parser.parse_args()
    rates = pl.read_parquet(args.study_parquet).filter(pl.col("metric") == "policy/success_rate")
    for (arm,), frame in rates.group_by("arm", maintain_order=True):
        first, last, deltas = [], [], []
        for (_seed,), run in frame.sort("seed").group_by("seed", maintain_order=True):
            values = run.sort("iteration")["value"].to_list()
            if len(values) < 2 * args.window:
                continue  # an unfinished run
            first.append(sum(values[: args.window]) / args.window)
            last.append(sum(values[-args.window :]) / args.window)
            deltas.append(last[-1] - first[-1])
        if len(deltas) < 2:
            continue
        mean, low, high = mean_interval(deltas)
        print(
            f"{arm}: seeds {len(deltas)}, first {args.window} iterations {sum(first) / len(first):.3f}, "
            f"last {args.window} {sum(last) / len(last):.3f}, change {mean:+.3f} [{low:+.3f}, {high:+.3f}] "
            f"(per seed: {', '.join(f'{d:+.3f}' for d in deltas)})"
        )


if __name__ == "__main__":
    main()
