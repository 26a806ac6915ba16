"""Run the 'executions' of a programs × tests pair of frames with the sandbox fanned out over 2 Ray workers.

``python -m tests.cluster.sandbox_on_ray PROGRAMS TESTS OUT`` (Parquet paths), started by
tests/cluster/test_sandbox_fanout.py inside a private network namespace that has only `lo` (``unshare
-n``): it starts an embedded Ray bound to 127.0.0.1, which stops when this process exits. Besides
writing the executions, it checks that the work really left this process: a probe through the same
``run_batches`` fan-out reports two distinct worker processes, neither of them this one.
"""

from __future__ import annotations

import os
import sys

import polars as pl

from rla_core.cluster.ray_session import run_batches
from rla_core.coding.execute import run_tests
from rla_core.config import ClusterBackend, ClusterConfig
from rla_core.sandbox.runner import Sandbox

CLUSTER = ClusterConfig(backend=ClusterBackend.RAY, workers=2, node_ip_address="127.0.0.1")


def _pids(items: list[int]) -> list[int]:
    return [os.getpid() for _ in items]


def main() -> None:
    import ray

    programs_path, tests_path, out_path = sys.argv[1:4]
    executions = run_tests(
        pl.read_parquet(programs_path),
        pl.read_parquet(tests_path),
        sandbox=Sandbox(max_parallel=2, cluster=CLUSTER),
        iteration=1,
    )
    assert ray.is_initialized(), "the executions did not go through Ray"
    pids = run_batches(CLUSTER, _pids, list(range(4)), what="pid probe")
    assert len(set(pids[:2]) | set(pids[2:])) == 2 and pids[0] != pids[2] and os.getpid() not in pids, pids
    executions.write_parquet(out_path)


if __name__ == "__main__":
    main()
