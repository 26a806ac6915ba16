"""Generating stages sharded over a real Ray give the local run's artifacts byte for byte.

Every test that starts Ray runs it inside a private network namespace that has only `lo` (`unshare
-n`, then `ip link set lo up`): an embedded Ray in the `rla` process with
`cluster.node_ip_address=127.0.0.1`, or two raylets and the `rla` process together
(`tests/cluster/two_nodes.py`, every port pinned; those slow tests are in tests/flows/test_two_nodes.py). Ray would otherwise bind the machine's interface
address. Ray is never stopped by name: an embedded Ray stops with the `rla` process that started it,
the raylets are stopped by their sessions, and each test checks that none of their processes is left.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flows.runs import load_run_config
from rla_core.config import build_config
from rla_core.store import ArtifactStore
from tests.cluster.two_nodes import run_in_netns
from tests.flows.conftest import FlowEnv
from tests.flows.test_loop import attempt_dirs, attempts_in_use
from tests.flows.test_reproducible import parquet_artifacts

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")


def ray_args(workers: int) -> list[str]:
    return [
        "--set", "cluster.backend=ray", "--set", f"cluster.workers={workers}",
        "--set", "cluster.node_ip_address=127.0.0.1",
    ]  # fmt: skip


def rla_in_netns(flow_env: FlowEnv, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """``rla *args`` in a network namespace with only loopback (what Ray binds stays on this machine), as
    the leader of a session of its own: nothing of that session (its embedded Ray, its Prefect server)
    may outlive it. It starts its own ephemeral Prefect server: the session's is outside the namespace."""
    argv = [sys.executable, "-m", "flows.cli", *args]
    proc, left = run_in_netns(
        argv,
        cwd=flow_env.base, env=flow_env.ephemeral().env, timeout=timeout,
    )  # fmt: skip
    assert proc.returncode == 0, f"rla {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    assert left == []
    return proc


def assert_same_artifacts(a: dict[tuple[int, str, str], bytes], b: dict[tuple[int, str, str], bytes]) -> None:
    assert set(a) == set(b) and len(a) > 10
    assert [key for key in sorted(a) if a[key] != b[key]] == []


def run_until(base: tuple[Path, str], root: Path, iterations: int) -> None:
    """``root`` holds the base run as it stood after ``iterations`` iterations: a copy of its run directory
    without the later iterations, its run.json naming ``root`` and ``iterations`` (what `rla run
    --set iterations=N` would have written there, without running those iterations again)."""
    base_root, run_id = base

    def skipped(folder: str, names: list[str]) -> list[str]:  # later iterations, and the last progress line
        top = Path(folder) == base_root / run_id
        late = [n for n in names if n.startswith("iter-") and int(n.removeprefix("iter-")) > iterations]
        return [*late, "progress.json"] if top else []

    shutil.copytree(base_root / run_id, root / run_id, ignore=skipped)
    base_store = ArtifactStore(str(base_root))
    cfg = load_run_config(base_store, run_id).model_dump(mode="json")
    new = build_config({**cfg, "artifact_root": str(root), "iterations": iterations})
    ArtifactStore(str(root)).write_run_info(
        run_id,
        config=new.model_dump(mode="json"),
        config_hash=new.config_hash(),
        code_version=base_store.read_run_info(run_id).code_version,
    )


def test_a_local_run_continued_on_ray_with_3_shards_reruns_nothing_and_equals_the_local_run(
    flow_env: FlowEnv, base_run: tuple[Path, str]
) -> None:
    """The local base run as it stood after iteration 1 is continued to iteration 2 with
    cluster.backend=ray and 3 shards (uneven: 3 tasks' worth of episodes over 3 actors on 2 cores).
    Nothing of iteration 0-1 is re-run, and every artifact of iterations 0-2 equals the uninterrupted
    local run's ('base')."""
    base_root, run_id = base_run
    root = flow_env.base / "ray-continued"
    run_until(base_run, root, 1)
    store = ArtifactStore(str(root))
    before, dirs_before = attempts_in_use(store, run_id), attempt_dirs(root, run_id)
    assert {it for it, _stage in before} == {0, 1}
    proc = rla_in_netns(
        flow_env, "run", "--preset", "test", *flow_env.settings(root), "--run-id", run_id, *ray_args(3)
    )
    after = attempts_in_use(store, run_id)
    assert {k: v for k, v in after.items() if k in before} == before  # nothing committed again
    assert attempt_dirs(root, run_id) - dirs_before == {
        str(Path(run_id) / "iter-0002" / stage / "attempt-0001")
        for stage in ("rollout", "judge", "label", "adapt", "train_policy", "train_reward", "evaluate")
    }  # only iteration 2 ran
    assert "rollout shard" not in proc.stderr  # no shard failed
    assert_same_artifacts(
        parquet_artifacts(store, run_id), parquet_artifacts(ArtifactStore(str(base_root)), run_id)
    )
