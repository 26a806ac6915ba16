"""Issue 27: generating stages sharded over a real embedded Ray give the local run's artifacts byte for byte.

Every test that starts Ray runs its `rla` process inside a private network namespace that has only
`lo` (`unshare -n`, then `ip link set lo up`), with `cluster.node_ip_address=127.0.0.1`: Ray would
otherwise bind the machine's interface address. Ray is never stopped by name: an embedded Ray stops
with the `rla` process that started it, and the test checks that none of its processes is left.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rla_core.store import ArtifactStore
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
    """``rla *args`` in a network namespace with only loopback (what Ray binds stays on this machine)."""
    cli = shlex.join([sys.executable, "-m", "flows.cli", *args])
    proc = subprocess.run(
        ["unshare", "-n", "sh", "-c", f"ip link set lo up && exec {cli}"],
        cwd=flow_env.base, env=flow_env.env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert proc.returncode == 0, f"rla {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def ray_processes_left() -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    return [
        line
        for line in out.splitlines()
        if "ray/core/src" in line or "raylet" in line or "gcs_server" in line
    ]


def assert_same_artifacts(a: dict[tuple[int, str, str], bytes], b: dict[tuple[int, str, str], bytes]) -> None:
    assert set(a) == set(b) and len(a) > 10
    assert [key for key in sorted(a) if a[key] != b[key]] == []


def test_a_local_run_continued_on_ray_with_3_shards_reruns_nothing_and_equals_the_local_run(
    flow_env: FlowEnv, base_run: tuple[Path, str]
) -> None:
    """Iteration 1 runs locally; the run is then continued to iteration 2 with cluster.backend=ray and 3
    shards (uneven: 3 tasks' worth of episodes over 3 actors on 2 cores). Nothing of iteration 0-1 is
    re-run, and every artifact of iterations 0-2 equals the uninterrupted local run's ('base')."""
    base_root, run_id = base_run
    root = flow_env.base / "ray-continued"
    flow_env.rla(
        "run", "--preset", "test", *flow_env.settings(root), "--run-id", run_id, "--set", "iterations=1"
    )
    store = ArtifactStore(str(root))
    before, dirs_before = attempts_in_use(store, run_id), attempt_dirs(root, run_id)
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
    assert ray_processes_left() == []


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_a_whole_run_on_ray_equals_the_local_run(
    flow_env: FlowEnv, base_run: tuple[Path, str], workers: int
) -> None:
    base_root, run_id = base_run
    root = flow_env.base / f"ray-{workers}"
    rla_in_netns(
        flow_env, "run", "--preset", "test", *flow_env.settings(root), "--run-id", run_id, *ray_args(workers)
    )
    assert_same_artifacts(
        parquet_artifacts(ArtifactStore(str(root)), run_id),
        parquet_artifacts(ArtifactStore(str(base_root)), run_id),
    )
    assert ray_processes_left() == []
