"""Issues 27 and 29 on a real two-node Ray cluster: sharded stages, a lost node, updates under Ray Train.

The cluster is tests/cluster/two_nodes.py's: two raylets (`ray start --head` + `ray start --address`) on
loopback inside a private network namespace with only `lo`, every port pinned, each node offering one
`rla_shard`, stopped by session (never `ray stop`). Each test starts one cluster. Both are slow: a
whole run on the cluster, and iteration 1 again with multi-process updates.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from rla_core.models.launch import Placement
from rla_core.models.update import rl_update
from rla_core.store import ArtifactStore
from tests.cluster.two_nodes import run_in_netns
from tests.flows.conftest import FlowEnv
from tests.flows.test_loop import attempts_in_use
from tests.flows.test_ray_runs import assert_same_artifacts, run_until
from tests.flows.test_reproducible import parquet_artifacts

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare"),
]


def on_two_nodes(flow_env: FlowEnv, scenario: str, spec: dict[str, Any], *, timeout: float) -> dict[str, Any]:
    """Run a scenario of tests/cluster/two_nodes.py (two raylets and `rla`, all in one namespace with only
    loopback) and return its report; it has stopped its raylets, and lists what of ours is left."""
    work = flow_env.base / f"two-nodes-{scenario}"
    work.mkdir()
    (work / "spec.json").write_text(json.dumps(spec))
    argv = [
        sys.executable,
        "-m",
        "tests.cluster.two_nodes",
        scenario,
        str(work / "spec.json"),
        str(work / "report.json"),
    ]
    proc, left = run_in_netns(
        argv,
        cwd=flow_env.base, env=flow_env.ephemeral().env, timeout=timeout,
    )  # fmt: skip
    assert proc.returncode == 0, f"{scenario} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    assert left == []
    report: dict[str, Any] = json.loads((work / "report.json").read_text())
    assert "error" not in report, report
    return report


@pytest.mark.timeout(1800)
def test_a_whole_run_on_two_nodes_survives_a_lost_node_and_equals_the_local_run(
    flow_env: FlowEnv, base_run: tuple[Path, str]
) -> None:
    """A whole 2-iteration test-preset run on the cluster (updates in the driver's process), with
    cluster.resources={rla_shard: 1} and 2 workers, so every sharded stage puts one shard on each node.
    Iteration 0 runs through; the raylet of node b is SIGKILLed while it executes one of iteration 1's
    rollout shards (which one Ray placed there varies). The stage fails with a ClusterError naming the shard and the node, and nothing of it is
    committed; once node b is started again, `rla resume` finishes the run on the cluster, and every
    Parquet artifact equals the uninterrupted local run's byte for byte. Nothing of ours is left: not the
    failed `rla`'s Prefect server, nor any actor, raylet or Ray agent."""
    base_root, run_id = base_run
    root = flow_env.base / "ray-lost-node"
    spec = {
        "rla": ["run", "--preset", "test", *flow_env.settings(root), "--run-id", run_id],
        "resume": ["resume", run_id, "--root", str(root)],
        "root": str(root), "run_id": run_id, "kill_in_iteration": 1, "timeout": 750,
    }  # fmt: skip
    report = on_two_nodes(flow_env, "lost_node", spec, timeout=1700)
    failed = report["run"]
    assert failed["rc"] != 0
    # Which of the two shards Ray placed on node b varies from run to run; the error names that one.
    lost = re.findall(
        r"ClusterError: rollout shard ([12])/2 on node 127\.0\.0\.1 \(([0-9a-f]{12})\)", failed["stderr"]
    )
    assert lost and {node for _, node in lost} == {report["killed_node_id"][:12]}, failed["stderr"]
    assert "was lost" in failed["stderr"] and "rla resume" in failed["stderr"]
    assert sorted(map(tuple, report["committed_after_failure"])) == [
        (0, "bootstrap"),
        (0, "evaluate"),
        (0, "seed_tasks"),
    ]  # no manifest for the failed rollout
    assert report["ours_left_of_the_run"] == []
    assert report["resume"]["rc"] == 0, report["resume"]["stderr"]
    assert_same_artifacts(
        parquet_artifacts(ArtifactStore(str(root)), run_id),
        parquet_artifacts(ArtifactStore(str(base_root)), run_id),
    )
    assert report["left"] == []


def _checkpoint(store: ArtifactStore, run_id: str, iteration: int, stage: str, role: str) -> Path:
    manifest = store.manifest(run_id, iteration, stage)
    assert manifest is not None, (iteration, stage)
    return Path(store.attempt_location(run_id, iteration, stage, manifest.attempt)) / role


def _update_here(store: ArtifactStore, run_id: str, role: str, processes: int) -> dict[str, torch.Tensor]:
    """Iteration 1's update of ``role`` redone on this machine from the run's own inputs, as its train
    stage would run it with ``training.processes=processes`` and no cluster: in this process with one
    torch thread (the 1-process reference of tests/models/test_trainer_placement.py's DDP test), or as
    ``processes`` `accelerate launch` workers sharing the run's ``threads``."""
    from flows.runs import load_run_config
    from tasks.stage import stage_seed

    cfg = load_run_config(store, run_id)
    stage, frame, train = {
        "policy": ("train_policy", "policy_samples", cfg.training.policy),
        "reward": ("train_reward", "reward_samples", cfg.training.reward),
    }[role]
    placement = Placement.from_config(
        cfg.training.model_copy(update={"processes": processes}), threads=cfg.threads
    )
    out = Path(tempfile.mkdtemp(prefix="rla-update-here-")) / role
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rl_update(
            _checkpoint(store, run_id, 0, "bootstrap", role), store.read_frame(run_id, 1, "label", frame),
            cfg=train, out_dir=out, seed=stage_seed(cfg.seed, 1, stage), lora=cfg.models.lora,
            placement=placement if processes > 1 else None,
        )  # fmt: skip
        return load_file(out / "model.safetensors")
    finally:
        torch.set_num_threads(before)
        shutil.rmtree(out.parent)


@pytest.mark.timeout(1800)
def test_updates_under_ray_train_one_worker_per_node_match_one_process_and_accelerate_launch(
    flow_env: FlowEnv, base_run: tuple[Path, str]
) -> None:
    """Ray Train updates on the two-node cluster (one CPU and one `rla_shard` per node):

    * the accelerate settings reach Ray Train workers: an ``Accelerator`` created in each of two
      TorchTrainer workers (one per node) reports mixed precision 'bf16' with the environment
      ``accelerate_env('ddp', 2, 'bf16')`` derives from infra/accelerate/ddp.yaml (without it, the issue's
      probe saw 'no': nothing reads the YAML under TorchTrainer);
    * a failing rank fails the update with its own first line, and nothing is written;
    * iteration 1 of the base run redone with training.processes=2 on the cluster runs its train stages
      as one Ray Train worker on each node; both checkpoints equal the same update run here by
      `accelerate launch` (2 processes) bit for bit, and the 1-process update within the bound stated
      below; nothing of iteration 0 ran again (every `cluster` and `training.processes` key is speed
      only), and every Parquet artifact of iterations 0-1 upstream of the updates equals the base run's.
    """
    base_root, run_id = base_run
    base_store = ArtifactStore(str(base_root))
    root = flow_env.base / "train-ray"
    run_until(base_run, root, 1)  # the base run after iteration 0; iteration 1 is computed again
    shutil.rmtree(root / run_id / "iter-0001")
    spec = {
        "rla": [
            "run",
            "--preset",
            "test",
            "--set",
            "iterations=1",
            "--run-id",
            run_id,
            *flow_env.settings(root),
        ],
        "checkpoint": str(_checkpoint(base_store, run_id, 0, "bootstrap", "policy")),
        "timeout": 1200,
    }
    report = on_two_nodes(flow_env, "train_on_ray", spec, timeout=1500)

    probe = report["probe"]
    assert probe["error"] is None, report
    assert [r["mixed_precision"] for r in probe["ranks"]] == ["bf16", "bf16"]
    assert {r["num_processes"] for r in probe["ranks"]} == {2}
    assert len({r["node_id"] for r in probe["ranks"]}) == 2  # one worker on each node
    assert {(r["torch_threads"], r["omp_num_threads"]) for r in probe["ranks"]} == {(1, "1")}
    failing = report["failing"]
    assert failing["error"] is not None and not failing["out_exists"]
    assert "training workers (ddp, 2 processes on Ray Train) failed: rank " in failing["error"]
    assert "safetensor" in failing["error"].lower()

    assert report["run"]["rc"] == 0, report["run"]["stderr"]
    ray_store = ArtifactStore(str(root))
    before = {k: v for k, v in attempts_in_use(base_store, run_id).items() if k[0] == 0}
    assert {k: v for k, v in attempts_in_use(ray_store, run_id).items() if k[0] == 0} == before  # speed only
    # The updates' outputs differ from the base run's 1-process ones (within the bound below), so the
    # evaluation of iteration 1, which plays the updated policy, is left out; the checkpoints are checked.
    upstream = {k: v for k, v in parquet_artifacts(ray_store, run_id).items() if k[:2] != (1, "evaluate")}
    base = {
        k: v
        for k, v in parquet_artifacts(base_store, run_id).items()
        if k[0] <= 1 and k[:2] != (1, "evaluate")
    }
    assert set(upstream) == set(base) and len(upstream) == 10  # iteration 0: 2 frames, 1: 8
    assert [key for key in sorted(upstream) if upstream[key] != base[key]] == []
    updated = 0  # updates with rows: each ran on Ray Train
    for role, stage in (("policy", "train_policy"), ("reward", "train_reward")):
        start = load_file(_checkpoint(ray_store, run_id, 0, "bootstrap", role) / "model.safetensors")
        ray = load_file(_checkpoint(ray_store, run_id, 1, stage, role) / "model.safetensors")
        launched = _update_here(ray_store, run_id, role, processes=2)
        one = _update_here(ray_store, run_id, role, processes=1)
        assert set(one) == set(ray) == set(launched)
        # Ray Train and `accelerate launch` give each rank the same rows and run the same ops: equal.
        unequal = {k: int((launched[k] != ray[k]).sum()) for k in ray if not torch.equal(launched[k], ray[k])}
        assert not unequal, f"{role}: {sum(unequal.values())} weights differ: {sorted(unequal)[:5]}"
        # Against 1 process: the DDP test's equality needs one row per micro-batch. Here (micro-batches
        # of 8) the policy's optimizer steps of 3 rows are split 2 + 1 over the ranks, so rank 0 runs 2
        # rows in one forward pass where one process runs 3: other shapes and padding, other float
        # reduction order, and AdamW's g/√v can turn a last-bit gradient difference into a larger
        # weight difference. Measured in two runs of this test on the loaded 2-core machine (load ~6):
        # policy max |Δ| 1.5e-6 = 0.5% of the largest update (29,676 of 467,968 weights) both times;
        # reward (one row per step) equal. Bound: 5% of the largest update, 10× that; dropping a rank's
        # gradient or counting a padding micro-batch as a row moves weights by about half an update (DDP test).
        largest = max(float((one[k] - start[k]).abs().max()) for k in one)
        worst = max(float((one[k] - ray[k]).abs().max()) for k in one)
        if role == "reward" and largest == 0.0:
            # The base run's iteration-1 reward update has no rows on the sampler's current draws (every
            # judged task outside the RM band): a no-op, which copies the checkpoint on every path.
            assert worst == 0.0 and all(torch.equal(ray[k], start[k]) for k in ray), role
            continue
        assert largest > 0.0 and worst <= 0.05 * largest, (role, worst, largest)
        updated += 1
    # The updates with rows ran one after the other, each as one worker on each node.
    workers = report["train_workers"]  # each worker's node, in the order they started
    pairs = [sorted(workers[i : i + 2]) for i in range(0, len(workers), 2)]
    assert pairs == [["b", "head"]] * updated, workers
    assert report["left"] == []
