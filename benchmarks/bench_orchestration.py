"""Orchestration overhead of the staged loop (issue 6): iteration wall time minus the sum of stage compute.

Usage:
    python benchmarks/bench_orchestration.py                 # runs `rla run` with the embedded default
    python benchmarks/bench_orchestration.py --run RUN_ID    # analyses a finished run under ./runs

An iteration's wall time runs from the moment its first stage attempt began (``_begun.json``) to the
commit of its last manifest; stage compute time is what each stage body took (``stage_compute_s`` in
the manifest). The difference is Prefect task/flow bookkeeping, artifact commits and model loading
outside the stage bodies. Target: overhead ≤ 5% of iteration time at the default size.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path

from rla_core.store import ArtifactStore


def _ts(text: str) -> float:
    return dt.datetime.fromisoformat(text).timestamp()


def analyse(root: str, run_id: str) -> None:
    store = ArtifactStore(root)
    total_stage: dict[str, float] = {}
    print(f"run {run_id}")
    print(f"{'iter':>4} {'wall_s':>8} {'stages_s':>9} {'overhead_s':>10} {'overhead%':>9}")
    overall_wall = overall_stage = 0.0
    for it in store.list_iterations(run_id):
        begun: list[float] = []
        committed: list[float] = []
        compute = 0.0
        for stage in store.list_stages(run_id, it):
            manifest = store.manifest(run_id, it, stage)
            if manifest is None:
                continue
            begun_file = Path(store.attempt_location(run_id, it, stage, manifest.attempt)) / "_begun.json"
            begun.append(_ts(json.loads(begun_file.read_text())["at"]))
            committed.append(_ts(manifest.created_at))
            secs = float(manifest.extra.get("stage_compute_s", 0.0))
            compute += secs
            total_stage[stage] = total_stage.get(stage, 0.0) + secs
        if not begun:
            continue
        wall = max(committed) - min(begun)
        if it > 0:
            overall_wall += wall
            overall_stage += compute
        print(
            f"{it:>4} {wall:>8.1f} {compute:>9.1f} {wall - compute:>10.2f} {100 * (wall - compute) / wall:>8.1f}%"
        )
    if overall_wall:
        print(
            f"iterations 1..N: wall {overall_wall:.1f}s, stages {overall_stage:.1f}s, overhead "
            f"{overall_wall - overall_stage:.1f}s = {100 * (overall_wall - overall_stage) / overall_wall:.1f}% (target ≤ 5%)"
        )
    grand = sum(total_stage.values())
    print("per-stage share of stage time:")
    for stage, secs in sorted(total_stage.items(), key=lambda kv: -kv[1]):
        print(f"  {stage:<14} {secs:8.1f}s  {100 * secs / grand:5.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run", help="analyse this finished run instead of starting one")
    parser.add_argument("--root", default="runs")
    parser.add_argument("--preset", default="default")
    args = parser.parse_args()
    run_id = args.run
    if run_id is None:
        run_id = f"bench-orch-{int(time.time())}"
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "flows.cli", "run", "--preset", args.preset, "--run-id", run_id,
             "--set", f"artifact_root={args.root}"],
            check=True,
        )  # fmt: skip
        print(f"`rla run --preset {args.preset}` took {time.perf_counter() - started:.1f}s end to end")
    analyse(args.root, run_id)


if __name__ == "__main__":
    main()
