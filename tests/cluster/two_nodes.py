"""A real Ray cluster of two raylets on this machine, and the scenarios the multi-node tests run on it.

The multi-node checks of sharded stages need two Ray nodes (two raylets, each with its own object manager and
worker pool) attached to one GCS — what `ray start --head` + `ray start --address=…` give on two
machines, here both on loopback. Every Ray process must stay on loopback, so this module runs as a
script **inside a private network namespace that has only `lo`** (the test starts it with
``unshare -n sh -c 'ip link set lo up && exec python -m tests.cluster.two_nodes …'``): the raylets, the
`rla` process and everything they start share that namespace, and nothing can bind another interface.
It refuses to start Ray when it sees any interface but `lo`.

How a node is started and stopped (never `ray stop`, which kills every Ray process on the host by name):

* each node is one ``ray start --block`` process started in a NEW session (``start_new_session``), so
  the node's processes (gcs_server, raylet, dashboard and runtime-env agents, log monitor, workers)
  are members of that session; ``--block`` keeps the leader alive and makes it tear its node down
  when one of its processes dies (a SIGKILLed raylet takes its node with it, as a lost machine would);
* every port is pinned (GCS, node manager, object manager, worker range, agents, metrics); the
  dashboard is off, and no Ray client server starts (it needs ``ray[client]``, which is not installed); custom resources (``rla_shard: 1`` per node) pin one shard per node;
* stopping SIGTERMs the session, waits a grace period, then SIGKILLs whatever is left (Ray's agents may
  ignore SIGTERM); "left" means any process in one of our sessions or whose command line names our
  ``--temp-dir``.

A scenario writes a JSON report (the `rla` commands' exit codes and output tails, which stages were
committed after a failure, the processes left); the test asserts on it and on the artifacts on disk.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

RAY = [sys.executable, "-m", "ray.scripts.scripts"]
HOST = "127.0.0.1"
GCS_PORT = 26379
SHARD_RESOURCE = "rla_shard"
_STOP_GRACE_S = 5.0


def _ports(slot: int) -> dict[str, int]:
    """Pinned ports of the node in ``slot`` (0 = head): disjoint blocks of 40 above GCS_PORT."""
    base = GCS_PORT + 1 + 40 * slot
    return {
        "node-manager-port": base,
        "object-manager-port": base + 1,
        "dashboard-agent-listen-port": base + 2,
        "dashboard-agent-grpc-port": base + 3,
        "metrics-export-port": base + 4,
        "runtime-env-agent-port": base + 5,
        "min-worker-port": base + 10,
        "max-worker-port": base + 39,
    }


@dataclass
class Node:
    """One ``ray start --block`` (the leader of its own session) and the log it writes."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path


@dataclass
class TwoNodes:
    """A head and worker nodes on loopback, each with ``rla_shard: 1`` and one CPU."""

    temp_dir: Path
    nodes: dict[str, Node] = field(default_factory=dict)
    sessions: set[int] = field(default_factory=set)  # every session we started, also of stopped nodes
    slots: int = 0

    @property
    def address(self) -> str:
        return f"{HOST}:{GCS_PORT}"

    def start(self, name: str, *, head: bool = False, timeout_s: float = 120.0) -> Node:
        """Start node ``name`` (the head first) and wait until Ray reports it started."""
        ports = _ports(self.slots)
        self.slots += 1
        args = [
            *RAY, "start", "--block", "--disable-usage-stats", f"--node-ip-address={HOST}",
            "--num-cpus=1", "--num-gpus=0", f"--resources={json.dumps({SHARD_RESOURCE: 1})}",
            "--object-store-memory=100000000", "--include-log-monitor=false",
        ]  # fmt: skip
        if head:
            args += [
                "--head",
                f"--port={GCS_PORT}",
                "--include-dashboard=false",
                f"--dashboard-port={GCS_PORT - 1}",
            ]
            args += [f"--temp-dir={self.temp_dir}"]
        else:
            args += [f"--address={self.address}"]
        args += [f"--{key}={value}" for key, value in ports.items()]
        log = self.temp_dir.parent / f"node-{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.sessions.add(proc.pid)
        node = self.nodes[name] = Node(name, proc, log)
        deadline = time.monotonic() + timeout_s
        while b"Ray runtime started" not in log.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"Ray node {name} did not start:\n{log.read_text(errors='replace')[-3000:]}"
                )
            time.sleep(0.2)
        return node

    def raylet(self, name: str) -> int:
        """The pid of node ``name``'s raylet (a member of the node's session)."""
        for proc in _processes():
            if proc["sid"] == self.nodes[name].proc.pid and proc["comm"] == "raylet":
                return int(proc["pid"])
        raise RuntimeError(f"node {name} has no raylet")

    def node_id(self, name: str) -> str:
        """Node ``name``'s Ray node id (hex), as its raylet was started with it (``--node_id=…``)."""
        for proc in _processes():
            if proc["sid"] == self.nodes[name].proc.pid and proc["comm"] == "raylet":
                found = re.search(r"--node[-_]id=([0-9a-f]+)", proc["args"])
                if found:
                    return found.group(1)
        raise RuntimeError(f"node {name} has no raylet with a --node_id argument")

    def workers_running_shards(self, name: str) -> list[dict[str, Any]]:
        """Ray workers of node ``name`` executing a shard body (process title ``ray::_ShardWorker.run``)."""
        return [
            p
            for p in _processes()
            if p["sid"] == self.nodes[name].proc.pid and "_ShardWorker.run" in p["args"]
        ]

    def stop(self, name: str) -> None:
        """SIGTERM node ``name``'s session, SIGKILL what is left after a grace period."""
        node = self.nodes.pop(name)
        _signal_session(node.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + _STOP_GRACE_S
        while _members(node.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        _signal_session(node.proc.pid, signal.SIGKILL)
        node.proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _members(node.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)

    def stop_all(self) -> None:
        for name in [n for n in self.nodes if n != "head"] + [n for n in self.nodes if n == "head"]:
            self.stop(name)

    def left(self) -> list[str]:
        """Processes of ours still alive: in one of our sessions, or naming our temp dir."""
        mine = str(self.temp_dir)
        return [
            f"{p['pid']} {p['args'][:200]}"
            for p in _processes()
            if p["pid"] != os.getpid() and (p["sid"] in self.sessions or mine in p["args"])
        ]


def _processes() -> list[dict[str, Any]]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        out.append(
            {
                "pid": int(entry.name),
                "ppid": int(fields[1]),
                "sid": int(fields[3]),
                "comm": comm,
                "args": args,
            }
        )
    return out


def _members(sid: int) -> list[int]:
    return [p["pid"] for p in _processes() if p["sid"] == sid]


def session_left(sid: int, *, wait_s: float = 10.0) -> list[str]:
    """Processes still alive in session ``sid`` after ``wait_s`` (what a finished leader left behind).

    Scoped to one session, never to process names: another suite on this machine may run Ray too."""
    deadline = time.monotonic() + wait_s
    while (left := [p for p in _processes() if p["sid"] == sid]) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [f"{p['pid']} {p['args'][:200]}" for p in left]


def run_in_session(
    args: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run ``args`` as the leader of a new session; its result and what of the session outlived it."""
    proc = subprocess.Popen(
        args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            _signal_session(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    return subprocess.CompletedProcess(args, proc.returncode, stdout, stderr), session_left(proc.pid)


def run_in_netns(
    argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """:func:`run_in_session` of ``argv`` inside a private network namespace that has only `lo`, up:
    whatever it starts (Ray, servers) can bind loopback and nothing else."""
    script = shlex.join(argv)
    return run_in_session(
        ["unshare", "-n", "sh", "-c", f"ip link set lo up && exec {script}"],
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


def _signal_session(sid: int, sig: signal.Signals) -> None:
    # Ray starts its processes in the leader's session; some put themselves in process groups of their own,
    # so the whole session is signalled member by member rather than one process group.
    for pid in _members(sid):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            continue


def _only_loopback() -> None:
    import socket

    names = sorted(
        name for _index, name in socket.if_nameindex()
    )  # this namespace's (sysfs may show the host's)
    if names != ["lo"]:
        raise SystemExit(
            f"refusing to start Ray: this network namespace has interfaces {names}; run this module under "
            "`unshare -n sh -c 'ip link set lo up && exec python -m tests.cluster.two_nodes …'`"
        )


def _rla(cluster: TwoNodes, args: list[str], *, timeout: float) -> dict[str, Any]:
    """``rla *args`` in a session of its own (recorded: nothing of it, e.g. its Prefect server, may be left)."""
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    cluster.sessions.add(proc.pid)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            _signal_session(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    return {
        "rc": proc.returncode,
        "seconds": round(time.monotonic() - start, 1),
        "stdout": stdout[-3000:],
        "stderr": stderr[-6000:],
    }


def cluster_args(cluster: TwoNodes) -> list[str]:
    """`rla` settings that shard every generating stage over both nodes, one shard on each."""
    return [
        "--set", "cluster.backend=ray", "--set", f"cluster.address={cluster.address}",
        "--set", "cluster.workers=2", "--set", f"cluster.resources={{{SHARD_RESOURCE}: 1}}",
    ]  # fmt: skip


def lost_node(cluster: TwoNodes, spec: dict[str, Any]) -> dict[str, Any]:
    """`rla run` until node b executes a rollout shard, then SIGKILL node b's raylet; record how the run
    failed and what it committed; start node b again and `rla resume` the run."""
    from rla_core.store import ArtifactStore

    report: dict[str, Any] = {}
    err_path = cluster.temp_dir.parent / "rla-lost-node.err"
    start = time.monotonic()
    with open(err_path, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "flows.cli", *spec["rla"], *cluster_args(cluster)],
            stdout=subprocess.DEVNULL, stderr=err, start_new_session=True, text=True,
        )  # fmt: skip
    cluster.sessions.add(proc.pid)
    try:
        deadline = time.monotonic() + spec.get("timeout", 1500)
        marker = f"rollout iteration {spec['kill_in_iteration']} started"
        while not (marker in err_path.read_text(errors="replace") and cluster.workers_running_shards("b")):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the run ended before the rollout shard ran:\n{err_path.read_text()[-4000:]}"
                )
            time.sleep(0.05)
        report["killed_node_id"] = cluster.node_id("b")
        report["killed_raylet"] = cluster.raylet("b")
        os.kill(report["killed_raylet"], signal.SIGKILL)
        report["run"] = {"rc": proc.wait(timeout=600), "seconds": round(time.monotonic() - start, 1)}
    finally:
        if proc.poll() is None:
            _signal_session(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    report["run"]["stderr"] = err_path.read_text(errors="replace")[-8000:]
    store = ArtifactStore(spec["root"])
    run_id = spec["run_id"]
    report["committed_after_failure"] = [[it, stage] for it, stage in store.committed(run_id)]
    report["ours_left_of_the_run"] = [  # its actors died with it, its embedded servers with its session
        f"{p['pid']} {p['args'][:200]}" for p in _processes() if p["sid"] == proc.pid
    ]
    cluster.stop("b")  # what the killed raylet left of the node (its `ray start --block` tears it down too)
    cluster.start("b")
    report["resume"] = _rla(cluster, spec["resume"], timeout=spec.get("timeout", 1500))
    return report


def _accelerate_probe(argv: list[str]) -> int:
    """A Ray Train worker's entry that records what an ``Accelerator`` created there sees (in ``argv[0]``)."""
    import ray
    import torch
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    seen = {
        "mixed_precision": str(accelerator.mixed_precision),
        "num_processes": accelerator.num_processes,
        "rank": accelerator.process_index,
        "node_id": ray.get_runtime_context().get_node_id(),
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }
    (Path(argv[0]) / f"rank-{accelerator.process_index}.json").write_text(json.dumps(seen))
    accelerator.wait_for_everyone()
    return 0


def _watch_train_workers(cluster: TwoNodes, seen: dict[int, str], stop: threading.Event) -> None:
    """Until ``stop``: each Ray Train worker process (a ``RayTrainWorker`` actor's process, a child of its
    node's raylet) that starts after this call, in the order first seen: ``seen[pid] = node``.

    Processes, not a count at each moment: Ray Train kills an update's workers without waiting for them
    to exit, so the next update's worker may start on a node while the last one's is still going away;
    and a worker's forked child carries its command line until it execs. Workers already there when it
    is called (an earlier update's, still exiting) are not counted."""

    def workers() -> dict[int, str]:
        procs = _processes()
        by_pid = {p["pid"]: p for p in procs}
        return {
            p["pid"]: name
            for name, node in list(cluster.nodes.items())
            for p in procs
            if p["sid"] == node.proc.pid
            and p["args"].startswith("ray::RayTrainWorker")
            and by_pid.get(p["ppid"], {}).get("comm") == "raylet"
        }

    earlier = set(workers())
    while not stop.wait(0.25):
        for pid, name in workers().items():
            if pid not in earlier:
                seen.setdefault(pid, name)


def train_on_ray(cluster: TwoNodes, spec: dict[str, Any]) -> dict[str, Any]:
    """Updates under Ray Train's TorchTrainer, one worker per node:

    * ``probe``: two workers create an ``Accelerator`` with the environment derived from
      ``infra/accelerate/ddp.yaml`` and dtype bf16 (``trainer.accelerate_env``);
    * ``failing``: an update of a broken checkpoint, to see how a failing rank surfaces;
    * ``run``: `rla run` with ``training.processes=2`` (its train stages on both nodes), and the Ray Train
      workers it started: each one's node, in the order they started.
    """
    from rla_core.cluster import ray_session
    from rla_core.cluster.ray_train import run_train_workers
    from rla_core.config import ClusterBackend, ClusterConfig, LoraConfig, TrainConfig
    from rla_core.errors import ProcessError
    from rla_core.models.launch import WORKER_MODULE, Placement, accelerate_env
    from rla_core.models.update import rl_update

    report: dict[str, Any] = {}
    cfg = ClusterConfig(
        backend=ClusterBackend.RAY, address=cluster.address, workers=2, resources={SHARD_RESOURCE: 1}
    )
    work = cluster.temp_dir.parent / "train-on-ray"
    out = work / "probe"
    out.mkdir(parents=True)
    error = run_train_workers(
        cfg, WORKER_MODULE, [str(out)], processes=2, use_gpu=False,
        env={**accelerate_env("ddp", 2, "bf16"), "OMP_NUM_THREADS": "1"}, storage=out, entry=_accelerate_probe,
    )  # fmt: skip
    report["probe"] = {
        "error": error,
        "ranks": [json.loads(f.read_text()) for f in sorted(out.glob("rank-*.json"))],
    }
    broken = work / "broken"
    shutil.copytree(spec["checkpoint"], broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    rows = pl.DataFrame({"prompt": ["go"], "response": [" north"], "advantage": [1.0]})
    placement = Placement(device="cpu", processes=2, threads=2, timeout_s=600, cluster=cfg)
    try:
        rl_update(
            broken,
            rows,
            cfg=TrainConfig(),
            out_dir=work / "out",
            seed=0,
            lora=LoraConfig(),
            placement=placement,
        )
        report["failing"] = {"error": None}
    except ProcessError as exc:
        report["failing"] = {"error": str(exc), "out_exists": (work / "out").exists()}
    ray_session.disconnect()
    seen: dict[int, str] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_train_workers, args=(cluster, seen, stop), daemon=True)
    watcher.start()
    try:
        report["run"] = _rla(
            cluster, [*spec["rla"], *cluster_args(cluster), "--set", "training.processes=2"],
            timeout=spec.get("timeout", 1500),
        )  # fmt: skip
    finally:
        stop.set()
        watcher.join()
    report["train_workers"] = list(seen.values())  # each worker's node, in the order the workers started
    return report


SCENARIOS = {"lost_node": lost_node, "train_on_ray": train_on_ray}


def main() -> None:
    """``python -m tests.cluster.two_nodes SCENARIO SPEC_JSON REPORT_JSON`` (inside ``unshare -n``)."""
    scenario, spec_path, report_path = sys.argv[1:4]
    _only_loopback()
    spec = json.loads(Path(spec_path).read_text())
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    # No token authentication: nothing outside this namespace can reach the cluster, and with it on, `ray
    # start` follows whatever ~/.ray/auth_token another process on the host may have created (the head
    # then requires the token while a joining node, in the default mode, does not send it).
    os.environ["RAY_AUTH_MODE"] = "disabled"
    # Short: the raylets' unix sockets live under it (a socket path has at most 107 bytes).
    cluster = TwoNodes(temp_dir=Path(tempfile.mkdtemp(prefix="rla-ray-", dir="/tmp")) / "r")
    report: dict[str, Any] = {}
    started = time.monotonic()
    try:
        cluster.start("head", head=True)
        cluster.start("b")
        report["cluster_start_s"] = round(time.monotonic() - started, 1)
        report |= SCENARIOS[scenario](cluster, spec)
    except Exception as exc:  # reported, then the cluster is torn down all the same
        report["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        cluster.stop_all()
        report["left"] = cluster.left()
        report["seconds"] = round(time.monotonic() - started, 1)
        if "error" in report or report["left"]:  # the nodes' logs stay for whoever reads the failure
            report["kept"] = str(cluster.temp_dir.parent)
        else:
            shutil.rmtree(cluster.temp_dir.parent, ignore_errors=True)
        Path(report_path).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
