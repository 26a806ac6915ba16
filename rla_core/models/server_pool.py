"""One vLLM server per role for a whole run, its weights reloaded in place (docs/gpus-and-scale.md#server-lifetime).

Starting a vLLM server costs a minute or more (loading, profiling, compiling); reloading a checkpoint's
weights into a running one costs about as long as reading them. So with ``models.serving.lifetime: run``
the run's process holds one server per role (policy, reward, environment) in a :class:`ServerPool`,
opened around the training loop by :func:`run_servers`, and every generating stage leases its role's
server for the checkpoint it was given (:meth:`ServerPool.lease`). What happens then is decided by the
pure :func:`decide` from what the server holds and what the stage asks:

* no server yet → **start** one on the checkpoint (also on resume: a fresh process starts on the
  checkpoint of the first stage that needs it);
* the server died (killed, crashed) → **restart** it on the checkpoint;
* something a reload cannot change differs (:func:`~rla_core.models.serving.start_identity`: the role's
  serving config, the checkpoint's config and tokenizer files) → **restart**;
* the same weights (:func:`~rla_core.models.vllm_worker.weights_hash`) → **reuse**;
* other weights → **reload** in place (:meth:`~rla_core.models.serving.VllmServer.reload`); a reload that
  fails restarts the server.

Either way the server's workers are asked for the hash of the weights they hold, and it must equal the
checkpoint's before the stage sends any request (a mismatch is an error naming both, never a fallback).
A lease that asks for other weights while another lease of the same role is open (two generators of one
role at once) gets a server of its own for the lease, stopped when the lease ends.

The pool is process-wide (the flow's stages call it from whichever thread Prefect runs them in; a lock
keeps the decisions and starts one at a time) and stops every server when :func:`run_servers` exits —
on success, on an exception, on SIGTERM (raised as an exception in the main thread, flows/signals.py).
After a SIGKILL the servers' pidfiles let the next start reap them (:mod:`rla_core.procs`).

Ray shards (``cluster.backend=ray``) run in other processes, and each keeps its own pool: while
:func:`run_servers` is open and the run may serve with vLLM, it keeps the run's Ray actors
(:func:`~rla_core.cluster.ray_session.keep_actors`), and a generating stage's shards ask for the actor of
their (role, shard index) to hold a pool of its own (:func:`replica_hold`, :func:`replica_servers`).
So each replica starts its server once, on the checkpoint of the first stage that needs it, and leases
it exactly as above (reuse, reload in place, restart), under the same name ``rla-run-<role>``. A replica
whose actor was lost is replaced by a fresh one, whose server starts on the stage's checkpoint. The
replicas' servers stop when :func:`run_servers` exits (each actor releases its pool, then is killed), and
what each did is in ``pool.replicas``.

Example:
    >>> with run_servers(serving) as pool:  # doctest: +SKIP
    ...     with pool.lease(Path("ckpt-1"), role="policy", serving=serving) as server:
    ...         ...  # generate from server.base_url as server.name
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rla_core.config import ServerLifetime
from rla_core.errors import ModelError
from rla_core.models.serving import ROLES, VllmServer, may_serve_with_vllm, start_identity
from rla_core.models.vllm_worker import weights_hash

if TYPE_CHECKING:
    from rla_core.config import ServingConfig

log = logging.getLogger(__name__)


class Action(StrEnum):
    """What a lease does to its role's server before the stage generates."""

    START = "start"
    RESTART = "restart"
    RELOAD = "reload"
    REUSE = "reuse"
    OWN = "own"  # the role's server is leased for other weights: a server for this lease alone


@dataclass(frozen=True)
class Held:
    """What a role's server holds: its start identity, its weights' hash, whether it runs, open leases."""

    identity: str
    weights: str
    alive: bool
    leases: int = 0


def decide(held: Held | None, *, identity: str, weights: str) -> Action:
    """What to do so that a server holds the checkpoint with ``identity`` and ``weights``.

    >>> decide(None, identity="i", weights="w")
    <Action.START: 'start'>
    >>> decide(Held("i", "w0", alive=True), identity="i", weights="w1")
    <Action.RELOAD: 'reload'>
    """
    if held is None:
        return Action.START
    same = held.identity == identity and held.weights == weights
    if held.leases > 0 and held.alive and not same:
        return Action.OWN
    if not held.alive or held.identity != identity:
        return Action.RESTART
    return Action.REUSE if same else Action.RELOAD


def pool_name(role: str) -> str:
    """The name a run's server of ``role`` is served under, whatever weights it holds."""
    if role not in ROLES:
        raise ModelError(f"role {role!r} is not one of {', '.join(ROLES)}")
    return f"rla-run-{role}"


@dataclass
class _Slot:
    server: VllmServer
    identity: str
    weights: str
    leases: int = 0

    def held(self) -> Held:
        return Held(self.identity, self.weights, alive=self.server.alive(), leases=self.leases)


@dataclass
class ServerPool:
    """The run's servers, one per role; counts what it did (``counts``: action → times), and, once the run's
    kept Ray replicas are released, what each of theirs did (``replicas``: "<role> replica <i>" → counts)."""

    runtime_dir: Path | None = None
    counts: dict[Action, int] = field(default_factory=dict)
    replicas: dict[str, dict[Action, int]] = field(default_factory=dict)
    _slots: dict[str, _Slot] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @contextmanager
    def lease(self, checkpoint: Path, *, role: str, serving: ServingConfig) -> Iterator[VllmServer]:
        """The role's server holding ``checkpoint``'s weights (checked by hash), until the block ends."""
        ckpt = Path(checkpoint)
        identity = start_identity(ckpt, role=role, serving=serving)
        weights = weights_hash(ckpt)
        with self._lock:
            current = self._slots.get(role)
            action = decide(current.held() if current else None, identity=identity, weights=weights)
            self.counts[action] = self.counts.get(action, 0) + 1
            if action is not Action.OWN:
                slot = self._ready(
                    current, action, ckpt, role=role, serving=serving, identity=identity, weights=weights
                )
                slot.leases += 1
        if action is Action.OWN:  # started outside the lock: the role's open lease is not delayed
            log.info("vLLM: %s's run server is in use for other weights; a server for this lease", role)
            with VllmServer.start(
                ckpt, name=pool_name(role), role=role, serving=serving, runtime_dir=self.runtime_dir
            ) as own:
                yield own
            return
        try:
            yield slot.server
        finally:
            with self._lock:
                slot.leases -= 1

    def _ready(
        self, slot: _Slot | None, action: Action, ckpt: Path, *, role: str, serving: ServingConfig, identity: str,
        weights: str,
    ) -> _Slot:  # fmt: skip
        """The role's slot after ``action``, its server proved to hold ``weights``."""
        if action is Action.RELOAD and slot is not None:
            try:
                took = slot.server.reload(ckpt, expected=weights)
                slot.weights = weights
                log.info("vLLM: %s reloaded with %s in %.1fs", slot.server.name, ckpt, took)
            except ModelError as err:  # a server that cannot reload is replaced, not trusted
                log.warning("vLLM: reloading %s failed (%s); restarting it", slot.server.name, err)
                self.counts[Action.RESTART] = self.counts.get(Action.RESTART, 0) + 1
                action = Action.RESTART
        if action in (Action.START, Action.RESTART):
            if slot is not None:
                slot.server.stop()
                del self._slots[role]
            server = VllmServer.start(
                ckpt, name=pool_name(role), role=role, serving=serving, runtime_dir=self.runtime_dir
            )
            slot = self._slots[role] = _Slot(server, identity=identity, weights=weights)
        assert slot is not None
        slot.server.require_weights(ckpt, expected=weights)
        return slot

    def summary(self) -> str:
        """What the run's servers did, here and in each kept Ray replica (a server start, reload, ...).

        >>> ServerPool(counts={Action.START: 1, Action.RELOAD: 2}).summary()
        'vLLM servers of the run: here reload=2 start=1'
        """

        def line(counts: dict[Action, int]) -> str:
            return " ".join(f"{action}={n}" for action, n in sorted(counts.items())) or "none"

        parts = [f"here {line(self.counts)}", *(f"{name} {line(c)}" for name, c in self.replicas.items())]
        return "vLLM servers of the run: " + "; ".join(parts)

    def close(self) -> None:
        """Stop every server (idempotent)."""
        with self._lock:
            for slot in self._slots.values():
                slot.server.stop()
            self._slots.clear()


_active: ServerPool | None = None
_active_lock = threading.Lock()


def active_pool() -> ServerPool | None:
    """The pool :func:`run_servers` (or, in a Ray replica, :func:`replica_servers`) opened in this process,
    if any (stages then lease from it)."""
    return _active


@contextmanager
def _opened(pool: ServerPool) -> Iterator[ServerPool]:
    """``pool`` as this process's active pool while the block runs, every server stopped at its end."""
    global _active
    with _active_lock:
        if _active is not None:
            raise ModelError("a run's vLLM server pool is already open in this process")
        _active = pool
    try:
        yield pool
    finally:
        with _active_lock:
            _active = None
        pool.close()


@contextmanager
def replica_servers() -> Iterator[dict[Action, int]]:
    """A Ray replica's own pool, held by its kept actor across stages (``ShardRequest.hold``); yields the
    pool's counts, which the actor's release hands back to the run."""
    with _opened(ServerPool()) as pool:
        yield pool.counts


def replica_hold(serving: ServingConfig) -> Callable[[], AbstractContextManager[Any]] | None:
    """What a Ray shard generating with ``serving`` holds across stages: a server pool of its own when
    the run keeps servers (:func:`run_servers` is open here) and the shard may serve with vLLM; else None
    (a per-stage actor, its generator opened and closed by the stage)."""
    return replica_servers if active_pool() is not None and may_serve_with_vllm(serving) else None


@contextmanager
def run_servers(serving: ServingConfig, *, runtime_dir: Path | None = None) -> Iterator[ServerPool | None]:
    """The run's server pool while the block runs (``lifetime: run``), every server stopped at its end;
    None with ``lifetime: stage`` (stages start their own servers).

    When the run may serve with vLLM, its Ray replicas are kept too
    (:func:`~rla_core.cluster.ray_session.keep_actors`): each shard actor of a generating stage holds its
    own pool (:func:`replica_servers`) across stages, released at the end with the run's; their counts
    land in ``pool.replicas``.
    """
    if serving.lifetime is ServerLifetime.STAGE:
        yield None
        return
    from rla_core.cluster.ray_session import keep_actors

    pool = ServerPool(runtime_dir=runtime_dir)
    with ExitStack() as stack:
        stack.enter_context(_opened(pool))
        kept = stack.enter_context(keep_actors()) if may_serve_with_vllm(serving) else None
        try:
            yield pool
        finally:
            if kept is not None:
                kept.close()  # the replicas' servers stop before this process's
                for request, index, counts in sorted(kept.released, key=lambda r: (str(r[0].role), r[1])):
                    merged = pool.replicas.setdefault(f"{request.role} replica {index + 1}", {})
                    for action, n in (counts or {}).items():  # a replica released early and started again
                        merged[action] = merged.get(action, 0) + n
    if pool.counts or pool.replicas:
        log.info("%s", pool.summary())
