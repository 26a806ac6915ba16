"""Probe :func:`rla_core.cluster.ray_session.keep_actors` on an embedded Ray: kept actors by key, a dead one
replaced, what the dead one held (a tethered process group, as a replica's vLLM server) ended with its
process, a failed call's running shard ended by the release, all released at the end; then, on a Ray of
2 CPUs, two roles' kept actors taking turns.

``python -m tests.cluster.kept_on_ray REPORT``, started by tests/cluster/test_kept_actors.py inside a
private network namespace that has only `lo` (``unshare -n``): the embedded Ray binds 127.0.0.1 and stops
when this process exits. REPORT (JSON) records what each call saw: the pid of every shard's actor.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rla_core.cluster.ray_session import ShardRequest, keep_actors, run_shards
from rla_core.config import ClusterBackend, ClusterConfig
from rla_core.errors import ClusterError
from rla_core.procs import ProcessGroup, group_members

CLUSTER = ClusterConfig(
    backend=ClusterBackend.RAY, workers=2, node_ip_address="127.0.0.1", start_timeout_s=60.0
)
HOLD_DIR = "RLA_KEPT_HOLD_DIR"  # where each kept actor's hold records its process group (inherited by actors)
_held: dict[str, Any] = {}  # in an actor: what its hold opened
_closed = threading.Event()  # in an actor: set when what its hold opened closes


@contextmanager
def _hold() -> Iterator[dict[str, Any]]:
    """What a kept actor holds across calls: a record of its calls, marked closed on release, and a
    tethered process group standing in for its server (its group id in ``<HOLD_DIR>/<actor pid>``)."""
    state: dict[str, Any] = {"pid": os.getpid(), "calls": 0, "closed": False}
    _held["state"] = state
    hold_dir = Path(os.environ[HOLD_DIR])
    with ProcessGroup.start(["sleep", "300"], kind="hold", runtime_dir=hold_dir, tethered=True) as server:
        (hold_dir / str(os.getpid())).write_text(str(server.pgid))
        try:
            yield state
        finally:
            state["closed"] = True
            _closed.set()


def _gone_s(pgid: int, timeout_s: float = 30.0) -> float | None:
    """Seconds until process group ``pgid`` has no live member, None if it still has one after ``timeout_s``."""
    start = time.monotonic()
    while group_members(pgid):
        if time.monotonic() - start > timeout_s:
            return None
        time.sleep(0.05)
    return time.monotonic() - start


def _pid(_shard: int) -> int:
    if "state" in _held:
        _held["state"]["calls"] += 1
    return os.getpid()


def _exit_if_first(shard: int) -> int:
    if shard == 0:
        os._exit(1)  # the actor's worker is lost, as with a lost node
    return os.getpid()


def _fail_or_wait(shard: int) -> bool:
    """Shard 0 fails; shard 1 works until what its actor holds closes (as a shard using its server)."""
    if shard == 0:
        raise ValueError("shard 0 failed")
    return _closed.wait(timeout=120)


def _take_turns(policy: ShardRequest, reward: ShardRequest) -> dict[str, Any]:
    """On a Ray of 2 CPUs, 2 kept policy actors leave no room for a reward actor: each role's kept actors
    are released when the other role's stage needs their room (as two roles' replicas on one GPU node)."""
    import ray

    from rla_core.cluster.ray_session import disconnect
    from tests.cluster.kept_on_ray import _pid

    disconnect()
    ray.init(num_cpus=2, _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False)
    small = CLUSTER.model_copy(update={"address": ray.get_runtime_context().gcs_address})
    two = [(0,), (1,)]
    with keep_actors() as kept:
        turns: dict[str, Any] = {"policy": run_shards(small, _pid, two, request=policy, what="probe")}
        turns["reward"] = run_shards(small, _pid, [(0,)], request=reward, what="probe")
        turns["policy_again"] = run_shards(small, _pid, two, request=policy, what="probe")
    turns["released"] = [[r.role, i, state["closed"]] for r, i, state in kept.released]
    return turns


def main() -> None:
    import ray

    # By module name, not __main__'s: the actors import it, so _hold and _pid share its _held there.
    from tests.cluster.kept_on_ray import _exit_if_first, _fail_or_wait, _hold, _pid

    report: dict[str, Any] = {"driver": os.getpid()}
    hold_dir = Path(sys.argv[1]).parent / "holds"
    hold_dir.mkdir()
    os.environ[HOLD_DIR] = str(hold_dir)  # before Ray starts: its workers inherit it
    policy = ShardRequest(role="policy", hold=_hold)
    reward = ShardRequest(role="reward", hold=_hold)
    two = [(0,), (1,)]
    with keep_actors() as kept:
        report["first"] = run_shards(CLUSTER, _pid, two, request=policy, what="probe")
        report["again"] = run_shards(CLUSTER, _pid, two, request=policy, what="probe")
        report["reward"] = run_shards(CLUSTER, _pid, [(0,)], request=reward, what="probe")
        report["plain"] = [
            run_shards(CLUSTER, _pid, two, request=ShardRequest(), what="probe") for _ in range(2)
        ]
        try:
            run_shards(CLUSTER, _exit_if_first, two, request=policy, what="probe")
        except ClusterError as exc:
            report["lost"] = str(exc)
        # The lost actor's worker exited without any cleanup: the group its hold started ends on its own.
        report["lost_hold_gone_s"] = _gone_s(int((hold_dir / str(report["first"][0])).read_text()))
        report["replaced"] = run_shards(CLUSTER, _pid, two, request=policy, what="probe")
        report["started"] = kept.started
        try:  # a failed call: its error as today, while the other shard still runs on its kept actor
            run_shards(CLUSTER, _fail_or_wait, two, request=policy, what="probe")
        except ValueError as exc:
            report["failed"] = [str(exc), *getattr(exc, "__notes__", [])]
        closing = time.monotonic()
    report["close_s"] = time.monotonic() - closing  # the release did not wait for the running shard to end
    report["released"] = [
        {"role": request.role, "index": index, "state": state} for request, index, state in kept.released
    ]
    report["groups"] = sorted({g["state"] for g in ray.util.placement_group_table().values()})
    # An actor's process ends once killed; ask Ray which are still alive (none of the kept ones may be).
    report["alive"] = [
        a["Pid"] for a in ray._private.state.actors().values() if a["State"] == "ALIVE"
    ]  # no public API without the dashboard
    report["holds_left"] = [
        pgid for f in hold_dir.iterdir() if f.name.isdigit() and group_members(pgid := int(f.read_text()))
    ]
    report["turns"] = _take_turns(policy, reward)
    with open(sys.argv[1], "w") as out:
        json.dump(report, out)


if __name__ == "__main__":
    main()
