"""Checkpoint retention after each iteration (docs/operations.md#checkpoint-retention).

Not a stage: it writes no artifact and commits no manifest, so it has no content key and nothing
downstream depends on it. It deletes the checkpoints ``storage.keep_last`` / ``storage.keep_every`` no longer
keep (the decision is :func:`rla_core.store.retention.prunable_iterations`), each attempt's deletion recorded
first in its ``_pruned.json`` (:meth:`rla_core.store.ArtifactStore.prune`). Only this run's attempts are
touched: iteration 0, the shared model cache and other runs never are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rla_core.stage_inputs import Role
from rla_core.store.retention import prunable_iterations
from tasks.context import RunContext
from tasks.stage import is_planning

CHECKPOINT_DIRS: tuple[str, ...] = tuple(str(role) for role in Role)  # what put_dir writes checkpoints as


@dataclass(frozen=True)
class Pruned:
    """Checkpoints one call deleted from one stage attempt."""

    iteration: int
    stage: str
    dirs: tuple[str, ...]
    bytes: int  # everything this attempt has had pruned so far


def prune_checkpoints(
    run: RunContext, iteration: int, *, log: Callable[[str], None] | None = None
) -> list[Pruned]:
    """Delete the checkpoints the run's retention setting no longer keeps once ``iteration`` has committed.

    A no-op with the default setting (``storage.keep_last`` null) and under planning (``rla status``).
    Idempotent: a resume that passes old iterations deletes only what is still there.
    """
    storage = run.config.storage
    if is_planning() or storage.keep_last is None:
        return []
    store = run.store
    setting = {f"storage.{key}": value for key, value in storage.model_dump().items()}
    on_disk = set(store.list_iterations(run.run_id))
    done: list[Pruned] = []
    for it in prunable_iterations(
        current=iteration, keep_last=storage.keep_last, keep_every=storage.keep_every
    ):
        if it not in on_disk:
            continue
        for (_, stage), manifest in store.committed(run.run_id, it).items():
            record = store.prune(manifest, CHECKPOINT_DIRS, setting=setting)
            if record is not None:
                done.append(Pruned(it, stage, record.dirs, record.pruned_bytes))
    if done:
        say = log or _run_logger()
        freed = ", ".join(f"{p.iteration}/{p.stage} ({'+'.join(p.dirs)})" for p in done)
        say(f"retention ({storage.describe()}) after iteration {iteration}: pruned {freed}")
    return done


def _run_logger() -> Callable[[str], None]:
    from prefect import get_run_logger

    return get_run_logger().info
