"""The Ray side of ``cluster.backend=ray``: one connection per process, one actor per shard.

* **connect** — :func:`connect` attaches to ``cluster.address`` or, when it is null, starts an embedded
  Ray for this process (CPUs and custom resources for the most shard actors one stage starts,
  :meth:`~rla_core.config.ClusterConfig.most_actors`, and inside :func:`keep_actors` for the kept ones
  too, :meth:`~rla_core.config.ClusterConfig.kept_actors`; the machine's own GPUs when
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
* **keep** — inside a :func:`keep_actors` block, a call whose :class:`ShardRequest` has a ``hold`` (a
  context each actor enters on its first call and keeps open) reuses the actors of earlier calls with
  the same request, resources and shard index (:class:`KeptActors`): found alive, they run the new
  shards; found dead, they are replaced in their bundle; missing, they are started in a placement group
  of their own, after releasing other requests' kept actors if the cluster has no room beside them. The
  block's end releases every kept actor (``hold`` exits in it, also while a shard of a failed call still
  runs there: a kept actor takes two calls at once), kills it and removes its placement group. A shard's
  failure fails the call as above; the kept actor stays for the next call.

Shard bodies run in the actor's process: they import rla_core (never Prefect or MLflow), so a worker
needs the project's environment, and the checkpoints and data files at the paths the driver sees. A
generating shard opens its own generator on exactly the stage's input checkpoint (with vLLM: a server of
its own, started per stage, or kept by its actor for the whole run and reloaded in place:
``rla_core.models.server_pool``), so every replica serves the checkpoint the stage was given.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
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

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

_KIND = "ray"
_pidfile: Path | None = None
_recorded: list[int] = []  # the pids in _pidfile
# The embedded Ray's own temporary directory (its session, sockets and logs), removed when it stops or is
# reaped; Ray's default, /tmp/ray, would keep every session.
_scratch: Path | None = None
_embedded_for: dict[str, Any] | None = None  # the ray.init arguments of this process's embedded Ray
_keeper: KeptActors | None = None  # the actors this process keeps across calls (keep_actors)


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
    """An embedded Ray holds the CPUs and custom resources of the most actors one stage starts (inside a
    :func:`keep_actors` block: one kept actor per replica of every role, plus ``cluster.workers`` for a
    stage's own), and, when actors take GPUs, the GPUs this machine has (Ray counts them: a replica's
    GPUs are real devices, its role's tensor-parallel size, which :func:`shard_needs` asks for)."""
    actors = cfg.kept_actors() + cfg.workers if _keeper is not None else cfg.most_actors()
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
    spares the actor importing it), then whatever the shard body opens. With ``hold``, the first ``run``
    enters ``hold()`` and keeps it open across calls until :meth:`release` (a kept actor's own servers)."""

    def __init__(
        self, threads: int | None, hold: Callable[[], AbstractContextManager[Any]] | None = None
    ) -> None:
        self._hold = hold
        self._held: ExitStack | None = None
        self._value: Any = None
        self._lock = threading.Lock()
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
        if self._hold is not None:
            with self._lock:
                if self._held is None:
                    with ExitStack() as stack:
                        self._value = stack.enter_context(self._hold())
                        self._held = stack.pop_all()
        return fn(*payload)

    def release(self) -> Any:
        """Exit what ``hold`` opened (idempotent), also while a shard still runs (a kept actor takes two
        calls at once: a failed stage's other shards end when what they use closes); what it yielded."""
        with self._lock:
            held, self._held = self._held, None
        if held is not None:
            held.close()
        return self._value


@dataclass(frozen=True)
class ShardRequest:
    """What each shard of one call asks of its actor, beyond ``cluster.cpus_per_worker`` and ``resources``.

    ``threads``: torch's intra-op threads in the actor (None: the work runs no torch, and the actor never
    imports it). ``role``: the model role a generating shard serves (None: it generates nothing), named
    in the advice when a stage does not fit. ``vllm_gpus``: the GPUs of the vLLM server a shard starts
    (its role's ``models.serving.tensor_parallel``), None when it starts none. ``hold``: a context each
    actor enters on its first call and keeps open (a module-level function: it travels by name); with it,
    inside a :func:`keep_actors` block the actors are kept across calls (:class:`KeptActors`), outside one
    they are released when the call ends. None: plain actors of one call.

    Example:
        >>> shard_needs(ClusterConfig(gpus_per_worker=1), ShardRequest(threads=1, role="policy", vllm_gpus=4))
        {'CPU': 1.0, 'GPU': 4.0}
    """

    threads: int | None = None
    role: str | None = None
    vllm_gpus: int | None = None
    hold: Callable[[], AbstractContextManager[Any]] | None = None


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

    ``request``: what each actor asks for (:func:`shard_needs`), its torch threads and what it holds
    across calls (``request.hold``: then the actors are :class:`KeptActors`'). ``what`` names the work in
    errors (e.g. ``"rollout shard"``). Fails on the first shard that fails.
    """
    import ray

    connect(cfg)
    total = len(payloads)
    bundle = shard_needs(cfg, request)
    short = _shortfall(stage_needs(cfg, request, total), ray.cluster_resources())
    if cfg.address is None and short:  # an embedded Ray never grows: it cannot fit them, say so now
        raise ClusterError(
            f"{total} {what}s need {_needs(bundle)} each, more than this machine's embedded Ray has "
            f"({short}). {_fix(request.role)}"
        )
    if request.hold is None:
        with _stage_actors(cfg, request, bundle, total, what) as (actors, places):
            return _run_on(actors, places, fn, payloads, what)
    if _keeper is not None:
        actors, places = _keeper.actors(cfg, request, total, what)
        return _run_on(actors, places, fn, payloads, what, kept=True)
    with keep_actors(size_ray=False) as once:  # no run keeps them: they and what they hold end with the call
        actors, places = once.actors(cfg, request, total, what)
        return _run_on(actors, places, fn, payloads, what, kept=True)


@contextmanager
def _stage_actors(
    cfg: ClusterConfig, request: ShardRequest, bundle: dict[str, float], total: int, what: str
) -> Iterator[tuple[list[Any], list[dict[str, Any]]]]:
    """``total`` actors of one call in one placement group (all or none), released when the block ends."""
    import ray
    from ray.util.placement_group import remove_placement_group

    group = _placed(cfg, [bundle] * total, request, what)
    actors: list[Any] = []
    try:
        actors = [_new_actor(bundle, group, i, request.threads) for i in range(total)]
        yield actors, _located(cfg, actors, what)
    finally:
        for actor in actors:
            ray.kill(actor, no_restart=True)
        remove_placement_group(group)


def _placed(cfg: ClusterConfig, bundles: list[dict[str, float]], request: ShardRequest, what: str) -> Any:
    """A ready placement group of ``bundles`` (PACK), or ClusterError after ``cluster.start_timeout_s``."""
    import ray
    from ray.exceptions import GetTimeoutError
    from ray.util.placement_group import placement_group, remove_placement_group

    group = placement_group(bundles, strategy="PACK")
    try:
        ray.get(group.ready(), timeout=cfg.start_timeout_s)
    except GetTimeoutError:
        remove_placement_group(group)
        raise ClusterError(
            f"{len(bundles)} {what}s could not all be placed within cluster.start_timeout_s={cfg.start_timeout_s}: "
            f"each needs {_needs(bundles[0])}; the cluster has {ray.cluster_resources()} "
            f"({ray.available_resources()} free). {_fix(request.role)}"
        ) from None
    except BaseException:
        remove_placement_group(group)
        raise
    return group


def _new_actor(
    bundle: dict[str, float], group: Any, index: int, threads: int | None,
    hold: Callable[[], AbstractContextManager[Any]] | None = None,
) -> Any:  # fmt: skip
    """A :class:`_ShardWorker` in bundle ``index`` of ``group`` (no restarts, no retries)."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    custom = {name: amount for name, amount in bundle.items() if name not in ("CPU", "GPU")}
    options: dict[str, Any] = {
        "num_cpus": bundle.get("CPU", 0.0),
        "num_gpus": bundle.get("GPU", 0.0),
        "max_restarts": 0,
        "max_task_retries": 0,
    }
    if custom:
        options["resources"] = custom
    if hold is not None:  # its release may come while a shard of a failed stage still runs
        options["max_concurrency"] = 2
    actor_class: Any = ray.remote(**options)(_ShardWorker)
    return actor_class.options(
        scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index)
    ).remote(threads, hold)


def _located(cfg: ClusterConfig, actors: Sequence[Any], what: str) -> list[dict[str, Any]]:
    """Where each of ``actors`` runs (node, ip, pid), once all have started; their pids recorded."""
    import ray
    from ray.exceptions import GetTimeoutError

    try:
        places: list[dict[str, Any]] = ray.get(
            [a.where.remote() for a in actors], timeout=cfg.start_timeout_s
        )
    except GetTimeoutError:
        raise ClusterError(
            f"{len(actors)} {what}s were placed but did not all start within cluster.start_timeout_s="
            f"{cfg.start_timeout_s}; see the Ray workers' logs on their nodes"
        ) from None
    if _pidfile is not None:  # the embedded Ray now also has these workers
        _write_record(_pidfile, [p["pid"] for p in places])
    return places


def _run_on(
    actors: Sequence[Any], places: Sequence[dict[str, Any]], fn: Callable[..., Any],
    payloads: Sequence[tuple[Any, ...]], what: str, *, kept: bool = False,
) -> list[Any]:  # fmt: skip
    """``fn(*payloads[i])`` on ``actors[i]``; the first failure raised (a lost actor as ClusterError).
    ``kept``: the actors outlive the call, so the other shards of a failed call are cancelled."""
    import ray
    from ray.exceptions import RayError, RayTaskError

    total = len(payloads)
    futures = {
        a.run.remote(fn, payload): i for i, (a, payload) in enumerate(zip(actors, payloads, strict=True))
    }
    results: dict[int, Any] = {}
    pending = list(futures)
    try:
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
    finally:
        for ref in pending if kept else []:  # a kept actor is free for its release when its shard stops
            ray.cancel(ref)
    return [results[i] for i in range(total)]


@dataclass
class _Kept:
    actor: Any
    group: Any
    index: int  # its bundle in ``group``
    place: dict[str, Any]
    timeout_s: float  # cluster.start_timeout_s: how long its release may take


class KeptActors:
    """Actors kept across :func:`run_shards` calls, by (request, resources, shard index), until :meth:`close`.

    A call whose request has a ``hold`` reuses the actors it finds (each still holding what ``hold``
    opened in it: e.g. its vLLM server pool) and starts the missing ones in one placement group; an actor
    found dead (a lost worker or node) is replaced by a fresh one in its bundle. When the missing actors
    do not fit beside the kept ones of other requests (each role's replicas on GPUs of their own), those
    are released first. :meth:`close` releases every actor (``release``: what ``hold`` opened exits
    cleanly), kills it and removes its placement group.

    Example:
        >>> with keep_actors() as kept:  # doctest: +SKIP
        ...     run_shards(cfg, f, [(1,), (2,)], request=ShardRequest(hold=servers), what="shard")
        ...     run_shards(cfg, f, [(3,), (4,)], request=ShardRequest(hold=servers), what="shard")  # same actors
        >>> kept.released  # doctest: +SKIP
        [(ShardRequest(...), 0, ...), (ShardRequest(...), 1, ...)]
    """

    def __init__(self) -> None:
        self._kept: dict[tuple[ShardRequest, tuple[tuple[str, float], ...], int], _Kept] = {}
        self.started = 0  # actors started, replacements included
        self.released: list[tuple[ShardRequest, int, Any]] = []  # (request, shard index, what release gave)

    def actors(
        self, cfg: ClusterConfig, request: ShardRequest, total: int, what: str
    ) -> tuple[list[Any], list[dict[str, Any]]]:
        """The ``total`` actors of ``request`` (kept, replaced or started) and where each runs."""
        from ray.exceptions import RayActorError

        bundle = shard_needs(cfg, request)
        resources = tuple(sorted(bundle.items()))
        keys = [(request, resources, i) for i in range(total)]
        for key in keys:  # a kept actor that died (its worker or node lost) starts afresh in its bundle
            kept = self._kept.get(key)
            if kept is None:
                continue
            try:
                kept.place = _located(cfg, [kept.actor], what)[0]
            except RayActorError:
                import ray

                ray.kill(kept.actor, no_restart=True)
                kept.actor = _new_actor(bundle, kept.group, kept.index, request.threads, request.hold)
                kept.place = _located(cfg, [kept.actor], what)[0]
                self.started += 1
        missing = [key for key in keys if key not in self._kept]
        if missing:
            self._make_room(stage_needs(cfg, request, len(missing)), keep=set(keys))
            group = _placed(cfg, [bundle] * len(missing), request, what)
            fresh = [_new_actor(bundle, group, j, request.threads, request.hold) for j in range(len(missing))]
            self.started += len(fresh)
            for j, (key, actor) in enumerate(zip(missing, fresh, strict=True)):
                self._kept[key] = _Kept(actor, group, j, {}, cfg.start_timeout_s)
            for key, place in zip(missing, _located(cfg, fresh, what), strict=True):
                self._kept[key].place = place
        return [self._kept[k].actor for k in keys], [self._kept[k].place for k in keys]

    def _make_room(self, needs: dict[str, float], *, keep: set[Any]) -> None:
        """Release the kept actors outside ``keep`` when ``needs`` exceeds what the cluster has free."""
        import ray

        if _shortfall(needs, ray.available_resources()):
            self._release([key for key in self._kept if key not in keep])

    def close(self) -> None:
        """Release every kept actor (idempotent); what each release gave is appended to ``released``."""
        self._release(list(self._kept))

    def _release(self, keys: list[Any]) -> None:
        import ray
        from ray.exceptions import GetTimeoutError, RayError
        from ray.util.placement_group import remove_placement_group

        if not keys:
            return
        gone = [self._kept.pop(key) for key in keys]
        refs = [kept.actor.release.remote() for kept in gone]
        # Its servers stop cleanly; an actor that cannot be asked (lost, stuck) leaves them to the next start.
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=max(kept.timeout_s for kept in gone))
        for key, kept, ref in zip(keys, gone, refs, strict=True):
            value = None
            try:
                if ref not in ready:
                    raise GetTimeoutError(f"no answer within cluster.start_timeout_s={kept.timeout_s}")
                value = ray.get(ref)
            except (GetTimeoutError, RayError) as exc:
                log.warning("kept Ray actor %s %d was not released cleanly: %s", key[0].role, key[2] + 1, exc)
            self.released.append((key[0], key[2], value))
            ray.kill(kept.actor, no_restart=True)
        for group in {id(kept.group): kept.group for kept in gone}.values():
            if not any(other.group is group for other in self._kept.values()):
                remove_placement_group(group)


@contextmanager
def keep_actors(*, size_ray: bool = True) -> Iterator[KeptActors]:
    """Keep the actors of :func:`run_shards` calls whose request has a ``hold`` while the block runs (in this
    process, one block at a time), releasing them all at its end — on success, an exception or SIGTERM.

    ``size_ray``: an embedded Ray started inside the block holds, beside one stage's own actors, one kept
    actor per replica of every role (:func:`_embedded_init`); False: a block that keeps the actors of one
    call only, sized as any call.
    """
    global _keeper
    kept = KeptActors()
    if size_ray:
        if _keeper is not None:
            raise ClusterError("Ray actors are already kept in this process: one keep_actors block at a time")
        _keeper = kept
    try:
        yield kept
    finally:
        if size_ray:
            _keeper = None
        kept.close()


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
