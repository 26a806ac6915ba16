"""``training.worker_timeout_s`` on Ray Train: a hung update and one that can never be placed.

``python -m tests.cluster.train_timeout_on_ray REPORT``, started by tests/cluster/test_train_timeout.py inside a
private network namespace that has only `lo` (``unshare -n``): one embedded Ray bound to 127.0.0.1 serves
every case and stops when this process exits. Each case calls
:func:`rla_core.cluster.ray_train.run_train_workers` with ``timeout_s=3`` and writes to REPORT (JSON) how
long it took, the error and the Ray Train workers of this session still alive afterwards:

* ``hung``: 2 workers whose entry sleeps for 10 minutes;
* ``unplaceable``: 2 workers needing a custom resource no node has, on a cluster treated as attached
  (``cluster.address`` set: it might grow, so only the timeout ends the wait);
* ``embedded_too_small``: 2 workers needing a GPU the embedded Ray does not have (fails at once).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rla_core.cluster import ray_session
from rla_core.cluster.ray_train import run_train_workers
from rla_core.config import ClusterBackend, ClusterConfig
from rla_core.errors import ProcessError
from tests.cluster.two_nodes import _processes

TIMEOUT_S = 3.0
EMBEDDED = ClusterConfig(backend=ClusterBackend.RAY, workers=2, node_ip_address="127.0.0.1")


def sleeps(argv: list[str]) -> int:
    """A rank that never finishes in time."""
    time.sleep(600)
    return 0


def train_workers_alive() -> list[str]:
    """This session's Ray Train worker processes (``ray::RayTrainWorker…`` titles)."""
    sid = os.getsid(0)
    return [p["args"][:80] for p in _processes() if p["sid"] == sid and "RayTrainWorker" in p["args"]]


def case(cluster: ClusterConfig, *, use_gpu: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rla-timeout-") as tmp:
        start = time.perf_counter()
        try:
            result: dict[str, Any] = {
                "returned": run_train_workers(
                    cluster,
                    "unused",
                    [],
                    processes=2,
                    use_gpu=use_gpu,
                    env={},
                    storage=Path(tmp),
                    entry=sleeps,
                    timeout_s=TIMEOUT_S,
                    what="probe workers (ddp, 2 processes on Ray Train)",
                )
            }
        except ProcessError as exc:
            result = {"error": str(exc)}
        result["seconds"] = time.perf_counter() - start
    deadline = time.monotonic() + 10
    while (left := train_workers_alive()) and time.monotonic() < deadline:
        time.sleep(0.25)
    result["workers_left"] = left
    return result


def main() -> None:
    report = {
        "hung": case(EMBEDDED, use_gpu=False),
        "unplaceable": case(
            EMBEDDED.model_copy(update={"address": "auto", "resources": {"rla_missing": 1.0}}), use_gpu=False
        ),
        "embedded_too_small": case(EMBEDDED, use_gpu=True),
    }
    ray_session.disconnect()
    Path(sys.argv[1]).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
