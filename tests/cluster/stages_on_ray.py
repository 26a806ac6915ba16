"""Replay a committed run's rollout, judge and evaluate stages on an embedded Ray with given shard counts.

``python -m tests.cluster.stages_on_ray ROOT RUN_ID ITERATION OUT REPORT SHARD_COUNTS`` (e.g. ``1,2``), started by
tests/flows/test_ray_shard_counts.py inside a private network namespace that has only `lo` (``unshare -n``). One
Ray bound to 127.0.0.1 serves every replay (each replay attaches to it: no Ray restart between shard
counts) and stops when this process exits. Each stage body runs as `rla` runs it — its typed slice of the
run's config with ``cluster.backend=ray`` and ``cluster.workers`` set, its seed, the committed attempts
it took as inputs (read from ROOT, never written there) — and commits into a scratch store under OUT.
REPORT (JSON) lists, per ``"<stage>/workers=<n>"``, each frame's path and whether its sha256 equals the
committed attempt's: Parquet byte for byte.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import ray

from flows.runs import load_run_config
from rla_core.config import build_config
from rla_core.stage_inputs import StageName
from rla_core.store import ArtifactStore, Manifest
from tasks.context import RunContext
from tasks.stage import STAGES, StageContext, StageRef, all_stages, stage_seed

REPLAYED = (StageName.ROLLOUT, StageName.JUDGE, StageName.EVALUATE)


def committed_refs(run_id: str, manifests: dict[tuple[int, str], Manifest]) -> dict[str, StageRef]:
    """Every attempt in use of the run, by content key (how manifests name their inputs)."""
    return {
        m.content_key: StageRef(run_id, it, name, m.attempt, m.content_key, {})
        for (it, name), m in manifests.items()
    }


def main() -> None:
    root, run_id, iteration, out, report_path, counts = sys.argv[1:7]
    it = int(iteration)
    store = ArtifactStore(root)
    base = load_run_config(store, run_id)
    manifests = store.committed(run_id)  # read once: the replayed stages' manifests and their inputs
    refs = committed_refs(run_id, manifests)
    all_stages()
    ray.init(num_cpus=2, _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False)
    address = ray.get_runtime_context().gcs_address
    report: dict[str, dict[str, bool]] = {}
    for workers in map(int, counts.split(",")):
        cluster = {"backend": "ray", "workers": workers, "address": address, "node_ip_address": "127.0.0.1"}
        run = RunContext(
            run_id=run_id, config=build_config({**base.model_dump(mode="json"), "cluster": cluster})
        )
        scratch = ArtifactStore(str(Path(out) / f"workers-{workers}"))
        for name in REPLAYED:
            stage, committed = STAGES[name], manifests[(it, name)]
            inputs = {k: refs[key] for k, key in committed.inputs.items()}
            with scratch.begin(run_id, it, name) as writer:
                ctx = StageContext(
                    _run=run, iteration=it, stage=name, seed=stage_seed(base.seed, it, name), run_seed=base.seed,
                    inputs=stage.slice(run.config), writer=writer,
                )  # fmt: skip
                try:
                    stage.body(ctx, **inputs)
                finally:
                    ctx.cleanup()
                replayed = writer.commit("replay", inputs=committed.inputs)
            want = {e.path: e.sha256 for e in committed.artifacts}
            report[f"{name}/workers={workers}"] = {
                e.path: want.get(e.path) == e.sha256 for e in replayed.artifacts
            }
    Path(report_path).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
