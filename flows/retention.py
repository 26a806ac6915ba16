"""What the CLI says about checkpoint retention (docs/operations.md#checkpoint-retention): the clear error
when a command needs a pruned checkpoint — raised before anything is written — and the bytes per iteration
`rla status` shows.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from rla_core.config import RunConfig
from rla_core.errors import CheckpointPrunedError
from rla_core.store import ArtifactStore, Manifest, PruneRecord
from tasks.retention import CHECKPOINT_DIRS


def pruned_error(
    store: ArtifactStore, manifest: Manifest, record: PruneRecord, *, doing: str
) -> CheckpointPrunedError:
    """The error naming the pruned iteration, the retention setting that pruned it and how to keep it."""
    setting = ", ".join(f"{k}={'null' if v is None else v}" for k, v in sorted(record.setting.items()))
    return CheckpointPrunedError(
        f"{doing} needs the {'+'.join(record.dirs)} checkpoint of iteration {manifest.iteration} (stage "
        f"{manifest.stage}) of run '{manifest.run_id}', which checkpoint retention ({setting}) deleted on "
        f"{record.at}; nothing was written. Pick a later iteration whose checkpoints are kept (`rla status "
        f"{manifest.run_id} --root {store.root}` lists them), or keep more in a new run: raise storage.keep_last, "
        "set storage.keep_every to keep every n-th iteration, or leave both null to keep every checkpoint "
        "(docs/operations.md#checkpoint-retention)"
    )


def require_kept_checkpoint(
    store: ArtifactStore, run_id: str, iteration: int, stage: str, role: str, *, doing: str
) -> None:
    """CheckpointPrunedError (with :func:`pruned_error`'s advice) if retention deleted checkpoint ``role``
    of ``stage`` in ``iteration``."""
    manifest = store.manifest(run_id, iteration, stage)
    record = store.pruned(manifest) if manifest is not None else None
    if manifest is not None and record is not None and str(role) in record.dirs:
        raise pruned_error(store, manifest, record, doing=doing)


def require_kept_inputs(
    store: ArtifactStore, cfg: RunConfig, run_id: str, *, rerun: Collection[tuple[int, str]] = (), doing: str
) -> None:
    """CheckpointPrunedError if a stage the flow would run reads a pruned checkpoint.

    The stages to run are those the flow's plan (:func:`flows.loop.plan`) does not find done, plus
    ``rerun`` (``(iteration, stage)`` about to be forced by ``--from-stage``); an input of theirs that one of
    them rewrites is fine, one read from a pruned attempt is not. Costs one small read per committed
    stage, and the plan only when something was pruned.
    """
    again = {(it, str(stage)) for it, stage in rerun}
    pruned: dict[tuple[int, str], tuple[Manifest, PruneRecord]] = {}
    for (it, stage), manifest in store.committed(run_id).items():
        record = store.pruned(manifest)
        if record is not None and (it, stage) not in again:
            pruned[(it, stage)] = (manifest, record)
    if not pruned:
        return
    from flows.loop import plan
    from tasks.stage import PLANNED_PREFIX, RunContext

    run = RunContext(run_id=run_id, config=cfg, storage_options=store.storage_options)
    for planned in plan(run, store=store):
        if planned.done and (planned.iteration, str(planned.stage)) not in again:
            continue
        for name, source in planned.sources.items():
            if source in pruned and not planned.inputs[name].startswith(PLANNED_PREFIX):
                manifest, record = pruned[source]
                raise pruned_error(
                    store,
                    manifest,
                    record,
                    doing=f"{doing} (stage {planned.stage} of iteration {planned.iteration})",
                )


@dataclass(frozen=True)
class IterationBytes:
    """Bytes of one iteration's attempts in use: all files, checkpoints, and checkpoints pruned."""

    iteration: int
    total: int
    checkpoints: int
    pruned: int
    setting: str  # the retention setting that pruned, or ""

    @property
    def on_disk(self) -> int:
        return self.total - self.pruned


def iteration_bytes(store: ArtifactStore, run_id: str) -> list[IterationBytes]:
    """Per iteration, from the manifests in use and their prune records (older attempts not counted)."""
    rows: dict[int, list[Any]] = {}
    for (it, _), manifest in store.committed(run_id).items():
        row = rows.setdefault(it, [0, 0, 0, ""])
        row[0] += sum(e.bytes for e in manifest.artifacts)
        row[1] += sum(e.bytes for e in manifest.artifacts if e.path.split("/", 1)[0] in CHECKPOINT_DIRS)
        record = store.pruned(manifest)
        if record is not None:
            row[2] += record.pruned_bytes
            row[3] = ", ".join(f"{k}={'null' if v is None else v}" for k, v in sorted(record.setting.items()))
    return [IterationBytes(it, *rows[it]) for it in sorted(rows)]


def format_bytes(n: int) -> str:
    """Binary units, three significant digits: 1536 → '1.5 KiB', 28e9 → '26.1 GiB'."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.3g} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def bytes_table(store: ArtifactStore, run_id: str) -> Any:
    """`rla status RUN_ID`'s second table: bytes per iteration, checkpoints, and what retention pruned."""
    from rich import box
    from rich.table import Column, Table

    # A lighter box than the stage table's, so a reader (or a script splitting rows on '│') tells them apart.
    table = Table(
        Column("iter", no_wrap=True), *(Column(c, justify="right", no_wrap=True) for c in
        ("on disk", "checkpoints", "pruned")), Column("pruned by", no_wrap=True),
        title="bytes per iteration (attempts in use)", title_justify="left", box=box.SIMPLE_HEAD,
    )  # fmt: skip
    for row in iteration_bytes(store, run_id):
        table.add_row(
            str(row.iteration), format_bytes(row.on_disk), format_bytes(row.checkpoints - row.pruned),
            format_bytes(row.pruned) if row.pruned else "-", row.setting or "-",
        )  # fmt: skip
    return table
