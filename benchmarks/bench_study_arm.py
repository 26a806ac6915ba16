"""Wall time of one study arm × one seed of the bench preset (target: <= 8 min on 2 idle cores).

Runs ``rla study`` for a single arm and seed into a fresh artifact root (models and games come from the
shared caches, so a second call measures the loop, not the warm start), then prints the wall time, the
compute time per stage (summed over iterations) and the held-out success at iteration 0 and at the end
with their Wilson intervals.

Run: ``.venv/bin/python benchmarks/bench_study_arm.py [--arm full] [--seed 1] [--set key=value ...]``
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

from flows.runs import execute_run
from flows.study import open_study, run_study, summary_markdown
from rla_core.config import load_config
from rla_core.store import ArtifactStore

TARGET_S = 8 * 60


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arm", default="full")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--preset", default="bench")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="config key=value")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-study-") as tmp:
        root = Path(tmp) / "runs"
        cfg = load_config(
            preset=args.preset,
            overrides=[
                *args.overrides,
                f"artifact_root={root}",
                f"tracking.mlflow_uri=sqlite:///{Path(tmp) / 'mlflow.db'}",
            ],
        )
        store = ArtifactStore(str(root))
        spec = open_study(store, "bench", base=cfg, arms=[args.arm], seeds=[args.seed])
        start = time.perf_counter()
        summary = run_study(store, spec, say=lambda _m: None, execute=execute_run)
        wall = time.perf_counter() - start
        frame = pl.read_parquet(root / "bench" / "study.parquet")
    timings = (
        frame.filter(pl.col("metric").str.starts_with("timing_s/"))
        .group_by("metric")
        .agg(pl.col("value").sum())
        .sort("value", descending=True)
    )
    print(
        f"arm={args.arm} seed={args.seed} iterations={cfg.iterations} wall_s={wall:.0f} (target <= {TARGET_S})"
    )
    for row in timings.iter_rows(named=True):
        print(f"  {row['metric']}: {row['value']:.1f} s")
    print(summary_markdown(summary))
    return 0 if wall <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
