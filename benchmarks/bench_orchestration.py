"""Orchestration overhead of the staged loop: iteration wall time minus the sum of stage compute.

Usage:
    python benchmarks/bench_orchestration.py                 # runs `rla run` with the embedded default
    python benchmarks/bench_orchestration.py --run RUN_ID    # analyses a finished run under ./runs

An iteration's wall time runs from the moment its first stage attempt began (``_begun.json``) to the
commit of its last manifest; stage compute time is what each stage body took (``stage_compute_s`` in
the manifest). The difference is Prefect task/flow bookkeeping, artifact commits and model loading
outside the stage bodies. Target: overhead ≤ 5% of iteration time at the default size.

Progress reporting is measured on the same run: the cost of one ``Counter.advance`` with an
active stage reporter and of one progress-record write (median of ``--repeats`` timings each), times
the calls an iteration of the run made (one advance per rollout/evaluate turn and per judge call, one
record per stage start, loop end and 3 s of stage time), over the iteration's wall time. Target < 2%.
Then ``rla status RUN`` and ``rla resume RUN`` of the finished run are timed (``--repeats`` times each,
fresh processes): they answer from the manifests without starting Prefect or MLflow. Target ≤ 10 s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rla_core.store import ArtifactStore


def _ts(text: str) -> float:
    return dt.datetime.fromisoformat(text).timestamp()


def _median_s(fn: object, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def progress_cost(repeats: int) -> tuple[float, float]:
    """(seconds per Counter.advance, seconds per progress-record write) with a real stage reporter."""
    from rla_core import progress
    from rla_core.config import load_config
    from tasks.progress import stage_progress
    from tasks.stage import RunContext

    calls = 20_000
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(None, preset="test", overrides=(f"artifact_root={tmp}",))
        run = RunContext(run_id="bench", config=cfg)
        lines: list[str] = []
        with stage_progress(run, 1, "rollout", 1, log=lines.append) as reporter:

            def advances() -> None:
                with progress.track("", total=calls, unit="episodes", rate="steps") as counter:
                    for _ in range(calls):
                        counter.advance(1, steps=4, tokens=64)

            per_advance = _median_s(advances, repeats) / calls
            assert reporter.record is not None
            record = reporter.record
            per_record = _median_s(lambda: record([]), repeats)
    return per_advance, per_record


def progress_overhead(root: str, run_id: str, repeats: int) -> None:
    """Bound the share of an iteration spent reporting progress (see the module docstring)."""
    per_advance, per_record = progress_cost(repeats)
    store = ArtifactStore(root)
    print(f"progress: {per_advance * 1e6:.2f} µs per advance, {per_record * 1e3:.2f} ms per record write "
          f"(median of {repeats})")  # fmt: skip
    worst = 0.0
    for it in store.list_iterations(run_id):
        if it == 0:
            continue
        advances = records = 0
        walls: list[float] = []
        for (_, stage), manifest in store.committed(run_id, it).items():
            secs = float(manifest.extra.get("stage_compute_s", 0.0))
            walls.append(secs)
            records += 2 + int(secs / 3.0) + 1  # start, loop end(s), one per 3 s
            if stage in ("rollout", "evaluate"):
                frame = store.read_frame(run_id, it, stage, "rollouts" if stage == "rollout" else "eval")
                advances += (
                    int(frame["step"].max() or 0) + 1
                    if stage == "rollout"
                    else int(frame["steps"].max() or 0)
                )
            elif stage == "judge":
                advances += 1
        wall = sum(walls)
        cost = advances * per_advance + records * per_record
        share = 100 * cost / wall if wall else 0.0
        worst = max(worst, share)
        print(f"  iteration {it}: {advances} advances + {records} record writes = {cost * 1e3:.2f} ms "
              f"of {wall:.1f} s stage time = {share:.3f}%")  # fmt: skip
    print(f"progress overhead: at most {worst:.3f}% of an iteration (target < 2%)")


def answer_times(root: str, run_id: str, repeats: int) -> None:
    """Wall time of `rla status RUN` and `rla resume RUN` of a finished run, in fresh processes."""
    for command in (["status", run_id], ["resume", run_id]):
        times, text = [], ""
        for _ in range(repeats):
            started = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "flows.cli", *command, "--root", root],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            times.append(time.perf_counter() - started)
            text = proc.stdout + proc.stderr
        started_prefect = "Starting temporary server" in text
        print(f"`rla {' '.join(command)}`: median {statistics.median(times):.2f}s, max {max(times):.2f}s over "
              f"{repeats} runs (target ≤ 10 s); Prefect started: {started_prefect}")  # fmt: skip


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
        for (_, stage), manifest in store.committed(run_id, it).items():
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
    parser.add_argument("--repeats", type=int, default=5, help="timings per measurement (median reported)")
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
    progress_overhead(args.root, run_id, args.repeats)
    answer_times(args.root, run_id, args.repeats)


if __name__ == "__main__":
    main()
