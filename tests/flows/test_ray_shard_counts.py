"""The sharded stages on 1 and 2 shards equal the local run (3 shards: test_ray_runs.py; 2 shards
on two nodes: tests/flows/test_two_nodes.py).

The Ray side runs inside a private network namespace with only `lo` (tests/cluster/stages_on_ray.py),
where one embedded Ray bound to 127.0.0.1 serves the replays and stops with the process.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.cluster.two_nodes import run_in_netns
from tests.flows.conftest import FlowEnv

# 1 shard (one actor holds the whole stage) and 2 shards; 3 shards: tests/flows/test_ray_runs.py.
SHARD_COUNTS = (1, 2)

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")


@pytest.mark.timeout(1200)
def test_rollout_judge_and_evaluate_on_1_and_2_shards_equal_the_local_run(
    flow_env: FlowEnv, base_run: tuple[Path, str]
) -> None:
    """The local base run's iteration-2 rollout, judge and evaluate stage bodies, replayed on one embedded
    Ray with 1 and with 2 shards (tests/cluster/stages_on_ray.py: each body with its committed inputs,
    committed into a scratch store), write every frame byte for byte like the local run (3 shards:
    tests/flows/test_ray_runs.py). In the default suite."""
    base_root, run_id = base_run
    work = flow_env.base / "ray-replayed"
    argv = [
        sys.executable,
        "-m",
        "tests.cluster.stages_on_ray",
        str(base_root),
        run_id,
        "2",
        str(work),
        str(work / "report.json"),
        ",".join(map(str, SHARD_COUNTS)),
    ]
    proc, left = run_in_netns(
        argv,
        cwd=flow_env.base, env=flow_env.ephemeral().env, timeout=1100,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert left == []
    report = json.loads((work / "report.json").read_text())
    frames = {"rollout": ["rollouts.parquet"], "judge": ["judgments.parquet"], "evaluate": ["eval.parquet"]}
    assert report == {
        f"{stage}/workers={workers}": dict.fromkeys(names, True)
        for workers in SHARD_COUNTS
        for stage, names in frames.items()
    }
