"""Issue 29: policy and reward-model updates under Ray Train's TorchTrainer on a two-node Ray cluster.

The cluster is tests/cluster/two_nodes.py's (two raylets on loopback inside a private network namespace
with only `lo`, every port pinned, stopped by session; never `ray stop`). The derivation of the
accelerate settings (no Ray) is tested in tests/models/test_trainer_placement.py.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rla_core.models.trainer import rl_update
from rla_core.store import ArtifactStore
from tests.flows.conftest import FlowEnv
from tests.flows.test_loop import attempts_in_use
from tests.flows.test_ray_runs import assert_same_artifacts, on_two_nodes, run_until
from tests.flows.test_reproducible import parquet_artifacts

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")


def _checkpoint(store: ArtifactStore, run_id: str, iteration: int, stage: str, role: str) -> Path:
    manifest = store.manifest(run_id, iteration, stage)
    assert manifest is not None, (iteration, stage)
    return Path(store.attempt_location(run_id, iteration, stage, manifest.attempt)) / role


def _one_process_update(store: ArtifactStore, run_id: str, role: str) -> dict[str, torch.Tensor]:
    """Iteration 1's update of ``role`` redone in this process with one torch thread: the 1-process
    reference of tests/models/test_trainer_placement.py's DDP test (its inputs read from the run)."""
    from flows.runs import load_run_config
    from tasks.stage import stage_seed

    cfg = load_run_config(store, run_id)
    stage, frame, train = {
        "policy": ("train_policy", "policy_samples", cfg.training.policy),
        "reward": ("train_reward", "reward_samples", cfg.training.reward),
    }[role]
    out = Path(tempfile.mkdtemp(prefix="rla-one-process-")) / role
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rl_update(
            _checkpoint(store, run_id, 0, "bootstrap", role), store.read_frame(run_id, 1, "label", frame),
            cfg=train, out_dir=out, seed=stage_seed(cfg.seed, 1, stage), lora=cfg.models.lora,
        )  # fmt: skip
        return load_file(out / "model.safetensors")
    finally:
        torch.set_num_threads(before)
        shutil.rmtree(out.parent)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_updates_under_ray_train_one_worker_per_node_match_one_process_and_the_local_run(
    flow_env: FlowEnv, base_run: tuple[Path, str]
) -> None:
    """Issue 29 on the two-node cluster (one CPU and one `rla_shard` per node):

    * the accelerate settings reach Ray Train workers: an ``Accelerator`` created in each of two
      TorchTrainer workers (one per node) reports mixed precision 'bf16' with the environment
      ``accelerate_env('ddp', 2, 'bf16')`` derives from infra/accelerate/ddp.yaml, and 'no' without it
      (what the issue's probe saw: nothing reads the YAML under TorchTrainer);
    * a failing rank fails the update with its own first line, and nothing is written;
    * the DDP test of tests/models/test_trainer_placement.py (its rows and config) on two Ray Train
      workers, one per node, equals its 1-process update bit for bit — that test's bound; its docstring
      says why equality holds with one torch thread per process (2 threads // 2 workers here);
    * iteration 1 of the base run redone with training.processes=2 on the cluster runs its train stages
      as one Ray Train worker on each node; both checkpoints equal the local run's with the same
      settings (`accelerate launch`, 2 processes on this machine) bit for bit and the 1-process update
      within the bound stated below; every Parquet artifact of iterations 0-1 equals the local run's,
      and nothing of iteration 0 ran again (every `cluster` and `training.processes` key is speed only).
    """
    base_root, run_id = base_run
    base_store = ArtifactStore(str(base_root))
    roots = {name: flow_env.base / f"train-{name}" for name in ("ray", "local")}
    for root in roots.values():  # the base run after iteration 0; iteration 1 is computed again
        run_until(base_run, root, 1)
        shutil.rmtree(root / run_id / "iter-0001")
    args = ["run", "--preset", "test", "--set", "iterations=1", "--run-id", run_id]
    flow_env.rla(*args, *flow_env.settings(roots["local"]), "--set", "training.processes=2", timeout=900)
    spec = {
        "rla": [*args, *flow_env.settings(roots["ray"])],
        "checkpoint": str(_checkpoint(base_store, run_id, 0, "bootstrap", "policy")),
        "timeout": 1200,
    }
    report = on_two_nodes(flow_env, "train_on_ray", spec, timeout=1500)

    passed, missing = report["probe_passed_on"], report["probe_not_passed_on"]
    assert passed["error"] is None and missing["error"] is None, report
    assert [r["mixed_precision"] for r in passed["ranks"]] == ["bf16", "bf16"]
    assert [r["mixed_precision"] for r in missing["ranks"]] == ["no", "no"]
    assert {r["num_processes"] for r in passed["ranks"]} == {2}
    assert len({r["node_id"] for r in passed["ranks"]}) == 2  # one worker on each node
    assert {(r["torch_threads"], r["omp_num_threads"]) for r in passed["ranks"]} == {(1, "1")}
    failing = report["failing"]
    assert failing["error"] is not None and not failing["out_exists"]
    assert "training workers (ddp, 2 processes on Ray Train) failed: rank " in failing["error"]
    assert "safetensor" in failing["error"].lower()

    ddp = report["ddp_setup"]  # the DDP test's bound: equal, bit for bit
    assert ddp["largest_update"] > 1e-3 and ddp["unequal"] == 0, ddp

    assert report["run"]["rc"] == 0, report["run"]["stderr"]
    assert report["train_workers_per_node"] == {"head": 1, "b": 1}, report["train_workers_per_node"]
    ray_store, local_store = ArtifactStore(str(roots["ray"])), ArtifactStore(str(roots["local"]))
    before = {k: v for k, v in attempts_in_use(base_store, run_id).items() if k[0] == 0}
    assert {k: v for k, v in attempts_in_use(ray_store, run_id).items() if k[0] == 0} == before  # speed only
    assert_same_artifacts(parquet_artifacts(ray_store, run_id), parquet_artifacts(local_store, run_id))
    for role, stage in (("policy", "train_policy"), ("reward", "train_reward")):
        start = load_file(_checkpoint(ray_store, run_id, 0, "bootstrap", role) / "model.safetensors")
        ray = load_file(_checkpoint(ray_store, run_id, 1, stage, role) / "model.safetensors")
        local = load_file(_checkpoint(local_store, run_id, 1, stage, role) / "model.safetensors")
        one = _one_process_update(ray_store, run_id, role)
        assert set(one) == set(ray) == set(local)
        # Ray Train and `accelerate launch` give each rank the same rows and run the same ops: equal.
        unequal = {k: int((local[k] != ray[k]).sum()) for k in local if not torch.equal(local[k], ray[k])}
        assert not unequal, f"{role}: {sum(unequal.values())} weights differ: {sorted(unequal)[:5]}"
        # Against 1 process: the DDP test's equality needs one row per micro-batch. Here (micro-batches
        # of 8) the policy's optimizer steps of 3 rows are split 2 + 1 over the ranks, so rank 0 runs 2
        # rows in one forward pass where one process runs 3: other shapes and padding, other float
        # reduction order, and AdamW's g/√v can turn a last-bit gradient difference into a larger
        # weight difference. Measured in two runs of this test on the loaded 2-core machine (load ~6):
        # policy max |Δ| 1.5e-6 = 0.5% of the largest update (29,676 of 467,968 weights) both times;
        # reward (one row per step) equal. Bound: 5% of the largest update, 10× that; dropping a rank's gradient or
        # counting a padding micro-batch as a row moves weights by about half an update (DDP test).
        largest = max(float((one[k] - start[k]).abs().max()) for k in one)
        worst = max(float((one[k] - ray[k]).abs().max()) for k in one)
        assert largest > 0.0 and worst <= 0.05 * largest, (role, worst, largest)
    assert report["left"] == []
