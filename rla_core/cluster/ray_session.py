"""The Ray side of ``cluster.backend=ray``: one connection per process, one actor per shard.

* **connect** — :func:`connect` attaches to ``cluster.address`` or, when it is null, starts an embedded
  Ray for this process (CPUs and custom resources for the most shard actors one stage starts,
  :meth:`~rla_core.config.ClusterConfig.most_actors`; the machine's own GPUs when
  ``gpus_per_worker`` > 0; no dashboard, no usage stats). The processes of an embedded Ray are
  recorded in a pidfile under ``rla_core.procs``' runtime directory, so that if this process is
  SIGKILLed the next connect reaps them; :func:`disconnect` (also at exit) shuts Ray down and removes
  the record.
* **run** — :func:`run_shards` reserves one placement-group bundle per shard (:func:`shard_needs`:
  ``cluster.cpus_per_worker``, ``resources``, and GPUs — a shard whose :class:`ShardRequest` says it
  starts a vLLM server takes exactly that server's GPUs (its role's ``models.serving.tensor_parallel``);
  others ``gpus_per_worker``), all or none: a stage whose replicas cannot all be placed fails before any
  starts (at once on an embedded Ray, which cannot grow; after ``cluster.start_timeout_s`` on an
  attached one, whose autoscaler may add nodes). It starts one actor per bundle (no restarts, no
  retries), asks each where it runs, calls ``fn(*payload)`` on it and returns the results in shard
  order. The first shard to fail ends the stage: a Python error in a shard is re-raised as itself with
  a note naming the shard and its node; a shard lost with its worker or node raises
  :class:`~rla_core.errors.ClusterError` naming both. The actors and the placement group are released
  when the call returns or fails, so nothing of a stage outlives it.
  :func:`run_batches` does the same for contiguous batches of a list (sandboxed executions).

Shard bodies run in the actor's process: they import rla_core (never Prefect or MLflow), so a worker
needs the project's environment, and the checkpoints and data files at the paths the driver sees. A
generating shard opens its own generator on exactly the stage's input checkpoint (with vLLM: its own
server, under the stage's served name), so every replica serves the checkpoint the stage was given.
"""

from __future__ import annotations

import atexit
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from rla_core.config import ClusterConfig
from rla_core.errors import ClusterError
from rla_core.procs import (
    default_runtime_dir,
    live_processes,
    owner_record,
    reap_stale,
    remove_scratch,
    start_time,
    write_pidfile,
)

T = TypeVar("T")
R = TypeVar("R")

_KIND = "ray"
_pidfile: Path | None = None
_recorded: list[int] = []  # the pids in _pidfile
# The embedded Ray's own temporary directory (its session, sockets and logs), removed when it stops or is
# reaped; Ray's default, /tmp/ray, would keep every session.
_scratch: Path | None = None
_embedded_for: dict[str, Any] | None = None  # the ray.init arguments of this process's embedded Ray


def runtime_dir() -> Path:
    """Where the pidfiles of embedded Ray clusters live (one per owning process)."""
    return default_runtime_dir("ray")


def connect(cfg: ClusterConfig) -> None:
    """Connect this process to Ray once: attach to ``cfg.address``, or start an embedded Ray."""
    global _pidfile, _embedded_for
    import ray

    init = _embedded_init(cfg) if cfg.address is None else None
    if ray.is_initialized():
        if init is None or init == _embedded_for:
            return
        disconnect()  # an embedded Ray sized for other workers: start one that fits these
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no calls home, none are possible anyway
    reap_stale(runtime_dir(), kind=_KIND)  # an embedded Ray of a SIGKILLed process
    common: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
    if cfg.address is not None:
        try:
            ray.init(address=cfg.address, **common)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ClusterError(
                f"cannot attach to the Ray cluster at cluster.address={cfg.address!r}: {exc}; start it "
                "(`ray start --head`), fix the address, or set cluster.address=null for an embedded Ray"
            ) from None
    else:
        assert init is not None
        scratch = Path(tempfile.mkdtemp(prefix="rla-ray-"))  # short: Ray's socket paths live under it
        try:
            ray.init(**init, include_dashboard=False, _temp_dir=str(scratch), **common)
        except BaseException:
            remove_scratch(scratch)
            raise
        _embedded_for = init
        _pidfile = _record_embedded(scratch)
    atexit.register(disconnect)


def _embedded_init(cfg: ClusterConfig) -> dict[str, Any]:
    """An embedded Ray holds the CPUs and custom resources of the most actors one stage starts, and,
    when actors take GPUs, the GPUs this machine has (Ray counts them: a replica's GPUs are real
    devices, its role's tensor-parallel size, which :func:`shard_needs` asks for)."""
    actors = cfg.most_actors()
    init: dict[str, Any] = {
        "num_cpus": max(1, math.ceil(cfg.cpus_per_worker * actors)),
        "num_gpus": None if cfg.gpus_per_worker > 0 else 0,
        "resources": {name: amount * actors for name, amount in cfg.resources.items()} or None,
    }
    if cfg.node_ip_address is not None:
        init["_node_ip_address"] = cfg.node_ip_address
    return init


def disconnect() -> None:
    """Shut this process's Ray connection down (an embedded Ray stops with it)."""
    global _pidfile, _embedded_for, _scratch
    import ray

    _embedded_for = None
    if ray.is_initialized():
        ray.shutdown()
    if _pidfile is not None:
        _pidfile.unlink(missing_ok=True)
        _pidfile = None
        _recorded.clear()
    if _scratch is not None:
        remove_scratch(_scratch)
        _scratch = None


def _record_embedded(scratch: Path) -> Path:
    """Record the processes an embedded Ray started (and their descendants), and its temporary directory
    ``scratch``, for :func:`reap_stale`."""
    global _scratch
    import ray

    _scratch = scratch

    node = ray._private.worker._global_node  # the embedded head's process table; no public API has it
    assert node is not None, "called right after ray.init started an embedded Ray"
    pids = [info.process.pid for infos in node.all_processes.values() for info in infos]
    path = runtime_dir() / f"{_KIND}-{os.getpid()}-{node.session_name[-12:]}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_record(path, pids)
    return path


def _write_record(path: Path, pids: Sequence[int]) -> None:
    global _recorded
    everything = _with_descendants([*_recorded, *pids])
    _recorded = everything
    write_pidfile(
        path,
        owner_record(
            [], pids=[[pid, start_time(pid)] for pid in everything], what="embedded ray",
            **({"scratch": str(_scratch)} if _scratch is not None else {}),
        ),
    )  # fmt: skip


def _with_descendants(pids: Sequence[int]) -> list[int]:
    children: dict[int, list[int]] = {}
    for proc in live_processes():
        children.setdefault(proc["ppid"], []).append(proc["pid"])
    out, todo = [], list(pids)
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


class _ShardWorker:
    """A shard's process: torch threads set first (unless the work runs no torch: ``threads=None``, which
    spares the actor importing it), then whatever the shard body opens."""

    def __init__(self, threads: int | None) -> None:
        if threads is None:
            return
        import torch

        os.environ["OMP_NUM_THREADS"] = str(threads)  # Ray sets 1 for its workers
        torch.set_num_threads(threads)  # part of what a row computes on CPU (float reduction order)

    def where(self) -> dict[str, Any]:
        import ray

        context = ray.get_runtime_context()
        return {"node_id": context.get_node_id(), "ip": ray.util.get_node_ip_address(), "pid": os.getpid()}

    def run(self, fn: Callable[..., Any], payload: tuple[Any, ...]) -> Any:
        return fn(*payload)


@dataclass(frozen=True)
class ShardRequest:
    """What each shard of one call asks of its actor, beyond ``cluster.cpus_per_worker`` and ``resources``.

    ``threads``: torch's intra-op threads in the actor (None: the work runs no torch, and the actor never
    imports it). ``role``: the model role a generating shard serves (None: it generates nothing), named
    in the advice when a stage does not fit. ``vllm_gpus``: the GPUs of the vLLM server a shard starts
    (its role's ``models.serving.tensor_parallel``), None when it starts none.

    Example:
        >>> shard_needs(ClusterConfig(gpus_per_worker=1), ShardRequest(threads=1, role="policy", vllm_gpus=4))
        {'CPU': 1.0, 'GPU': 4.0}
    """

    threads: int | None = None
    role: str | None = None
    vllm_gpus: int | None = None


def shard_needs(cfg: ClusterConfig, request: ShardRequest) -> dict[str, float]:
    """The Ray resources of one shard's actor (a placement-group bundle; zero amounts left out).

    CPUs: ``cluster.cpus_per_worker``; custom: ``cluster.resources``; GPUs: a shard that starts a vLLM
    server on GPUs (``gpus_per_worker`` > 0) takes that server's ``request.vllm_gpus`` (its
    ``--tensor-parallel-size``, which Ray hands it as CUDA_VISIBLE_DEVICES), any other actor
    ``gpus_per_worker``.
    """
    gpus = cfg.gpus_per_worker
    if request.vllm_gpus is not None and gpus > 0:
        gpus = float(request.vllm_gpus)
    needs = {"CPU": cfg.cpus_per_worker, "GPU": gpus, **cfg.resources}
    return {name: float(amount) for name, amount in needs.items() if amount > 0}


def stage_needs(cfg: ClusterConfig, request: ShardRequest, shards: int) -> dict[str, float]:
    """What a stage of ``shards`` shards reserves in all (its placement group's bundles summed)."""
    return {name: amount * shards for name, amount in shard_needs(cfg, request).items()}


def run_shards(
    cfg: ClusterConfig,
    fn: Callable[..., Any],
    payloads: Sequence[tuple[Any, ...]],
    *,
    request: ShardRequest,
    what: str,
) -> list[Any]:
    """``fn(*payload)`` for every payload, each on its own actor; the results in payload order.

    ``request``: what each actor asks for (:func:`shard_needs`) and its torch threads. ``what`` names the
    work in errors (e.g. ``"rollout shard"``). Fails on the first shard that fails.
    """
    import ray
    from ray.exceptions import GetTimeoutError, RayError, RayTaskError
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    connect(cfg)
    total = len(payloads)
    bundle = shard_needs(cfg, request)
    short = _shortfall(stage_needs(cfg, request, total), ray.cluster_resources())
    if cfg.address is None and short:  # an embedded Ray never grows: it cannot fit them, say so now
        raise ClusterError(
            f"{total} {what}s need {_needs(bundle)} each, more than this machine's embedded Ray has "
            f"({short}). {_fix(request.role)}"
        )
    group = placement_group([bundle] * total, strategy="PACK")
    actors: list[Any] = []
    try:
        try:
            ray.get(group.ready(), timeout=cfg.start_timeout_s)
        except GetTimeoutError:
            raise ClusterError(
                f"{total} {what}s could not all be placed within cluster.start_timeout_s={cfg.start_timeout_s}: "
                f"each needs {_needs(bundle)}; the cluster has {ray.cluster_resources()} "
                f"({ray.available_resources()} free). {_fix(request.role)}"
            ) from None
        custom = {name: amount for name, amount in bundle.items() if name not in ("CPU", "GPU")}
        options: dict[str, Any] = {
            "num_cpus": bundle.get("CPU", 0.0),
            "num_gpus": bundle.get("GPU", 0.0),
            "max_restarts": 0,
            "max_task_retries": 0,
        }
        if custom:
            options["resources"] = custom
        actor_class: Any = ray.remote(**options)(_ShardWorker)
        actors = [
            actor_class.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i)
            ).remote(request.threads)
            for i in range(total)
        ]
        try:
            places = ray.get([a.where.remote() for a in actors], timeout=cfg.start_timeout_s)
        except GetTimeoutError:
            raise ClusterError(
                f"{total} {what}s were placed but did not all start within cluster.start_timeout_s="
                f"{cfg.start_timeout_s}; see the Ray workers' logs on their nodes"
            ) from None
        if _pidfile is not None:  # the embedded Ray now also has these workers
            _write_record(_pidfile, [p["pid"] for p in places])
        futures = {
            a.run.remote(fn, payload): i for i, (a, payload) in enumerate(zip(actors, payloads, strict=True))
        }
        results: dict[int, Any] = {}
        pending = list(futures)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            index = futures[done[0]]
            where = (
                f"{what} {index + 1}/{total} on node {places[index]['ip']} ({places[index]['node_id'][:12]})"
            )
            try:
                results[index] = ray.get(done[0])
            except RayTaskError as exc:
                cause = exc.cause if isinstance(exc.cause, BaseException) else exc
                cause.add_note(f"raised in {where}")
                raise cause from None
            except RayError as exc:
                raise ClusterError(
                    f"{where} was lost ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                    "nothing of this stage was committed: once the cluster is whole, `rla resume <run-id>` "
                    "runs the stage again"
                ) from None
        return [results[i] for i in range(total)]
    finally:
        for actor in actors:
            ray.kill(actor, no_restart=True)
        remove_placement_group(group)


def run_batches(
    cfg: ClusterConfig, fn: Callable[[list[T]], list[R]], items: Sequence[T], *, what: str
) -> list[R]:
    """``fn`` over contiguous batches of ``items``, one batch per actor (``cfg.workers`` at most), the
    results concatenated in batch order: what ``fn(list(items))`` gives when each result depends only on
    its own item. ``what`` names a batch in errors (e.g. ``"sandbox batch"``). No torch in the actors."""
    from rla_core.cluster.shards import split_even

    batches = [([items[i] for i in part],) for part in split_even(len(items), cfg.workers)]
    results = run_shards(cfg, fn, batches, request=ShardRequest(), what=what)
    return [r for batch in results for r in batch]


def _needs(needs: dict[str, float]) -> str:
    return ", ".join(f"{amount:g} {name}" for name, amount in needs.items() if amount) or "nothing"


def _shortfall(needs: dict[str, float], has: dict[str, float]) -> str:
    """'needs N X, has M' for every resource the stage needs more of than the cluster has in all."""
    return "; ".join(
        f"{amount:g} {name} needed, {has.get(name, 0):g} in all"
        for name, amount in needs.items()
        if amount > has.get(name, 0) + 1e-9
    )


def _fix(role: str | None) -> str:
    if role is None:
        return "Add nodes, or lower cluster.workers or the per-worker resources"
    return (
        f"Add nodes or GPUs, or lower cluster.replicas.{role} (null: cluster.workers), the per-worker "
        f"resources, or models.serving.tensor_parallel.{role} (the GPUs of one vLLM replica)"
    )
