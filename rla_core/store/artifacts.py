"""The artifact store: Parquet frames and checkpoints per run, iteration, stage and attempt (docs/architecture.md#the-design-contract).

Layout under ``root`` (a local path or an ``s3://`` URI)::

    <root>/<run_id>/run.json                                   config snapshot, hash, code version
    <root>/<run_id>/lock.json                                  the run lock while a process works
    <root>/<run_id>/iter-0003/<stage>/attempt-0002/_begun.json who started the attempt, when
    <root>/<run_id>/iter-0003/<stage>/attempt-0002/<name>.parquet
    <root>/<run_id>/iter-0003/<stage>/attempt-0002/<relpath>   checkpoint files (put_dir)
    <root>/<run_id>/iter-0003/<stage>/attempt-0002/_manifest.json   written LAST: the commit
    <root>/<run_id>/iter-0003/<stage>/attempt-0002/_invalidated.json  forced re-run marker
    <root>/<run_id>/iter-0003/<stage>/attempt-0002/_pruned.json  checkpoints deleted by retention

Which attempt is in use: the highest-numbered attempt that has a manifest, unless that attempt
carries an ``_invalidated.json`` marker, in which case the stage is not done (no attempt is in use)
until a newer attempt commits. Attempts without a manifest (a crash before commit) are invisible.
Nothing is ever overwritten: every attempt gets a fresh directory. The one deletion is checkpoint
retention (:meth:`ArtifactStore.prune`, off by default): it records what it deletes in ``_pruned.json``
first, and the manifest stays as committed.

The manifest is committed atomically: locally by :func:`~rla_core.store.atomic.publish_file` (a
temporary sibling, fsync, rename); on S3 by a single PUT of the manifest object (S3 makes each PUT
visible whole or not at all).

Example:
    >>> store = ArtifactStore("/tmp/runs")  # doctest: +SKIP
    >>> with store.begin("run-1", 1, "rollout") as w:  # doctest: +SKIP
    ...     w.write_frame("rollouts", df)
    ...     w.commit("key123", inputs={"tasks": "abc"})
    >>> store.read_frame("run-1", 1, "rollout", "rollouts")  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import io
import os
import re
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Final, Self

from rla_core.errors import ArtifactError, RunNotFoundError
from rla_core.schemas import SCHEMA_VERSION, get_schema, validate
from rla_core.store.atomic import publish_file
from rla_core.store.lock import RunLock
from rla_core.store.manifest import (
    ArtifactEntry,
    EntryKind,
    Manifest,
    PruneRecord,
    RunInfo,
    this_host,
    utc_now,
)
from rla_core.store.uri import check_name, check_relpath, filesystem, is_remote, join

if TYPE_CHECKING:
    import polars as pl
    from fsspec import AbstractFileSystem

MANIFEST_NAME = "_manifest.json"
INVALIDATED_NAME = "_invalidated.json"
PRUNED_NAME = "_pruned.json"
BEGUN_NAME = "_begun.json"
RUN_INFO_NAME = "run.json"
LOCK_NAME = "lock.json"

# Parquet settings, chosen with benchmarks/bench_parquet.py: zstd level 1 compresses prompt-heavy
# rollouts ~3-5x at close to snappy's speed; 128k-row groups keep memory bounded on read.
PARQUET_COMPRESSION: Final = "zstd"
PARQUET_COMPRESSION_LEVEL = 1
PARQUET_ROW_GROUP_SIZE = 131_072
_CHUNK = 8 * 1024 * 1024

_ITER = re.compile(r"^iter-(\d+)$")
_ATTEMPT = re.compile(r"^attempt-(\d+)$")


def iteration_dir(iteration: int) -> str:
    """Directory name of an iteration: ``iter-0003``."""
    if iteration < 0:
        raise ArtifactError(f"iteration {iteration} is negative; iterations count from 0 (warm start)")
    return f"iter-{iteration:04d}"


def attempt_dir(attempt: int) -> str:
    """Directory name of an attempt: ``attempt-0002``."""
    return f"attempt-{attempt:04d}"


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


class _HashingWriter:
    """A write-only file wrapper that hashes and counts every byte on its way to the file."""

    def __init__(self, fh: IO[bytes]) -> None:
        self._fh = fh
        self.hasher = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.hasher.update(data)
        self.size += len(data)
        written = self._fh.write(data)
        return len(data) if written is None else written

    def flush(self) -> None:
        self._fh.flush()


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


class StageWriter:
    """Writes one fresh attempt of a stage; nothing is visible until :meth:`commit`.

    Used as a context manager, an exception inside the block leaves the attempt uncommitted (and so
    invisible); the previous committed attempt stays in use.
    """

    def __init__(self, store: ArtifactStore, run_id: str, iteration: int, stage: str, attempt: int) -> None:
        self._store = store
        self.run_id = run_id
        self.iteration = iteration
        self.stage = stage
        self.attempt = attempt
        self.uri = store.attempt_location(run_id, iteration, stage, attempt)
        self._path = store._fs_path(run_id, iteration_dir(iteration), stage, attempt_dir(attempt))
        self._entries: dict[str, ArtifactEntry] = {}
        self._committed: Manifest | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # An uncommitted attempt is simply left invisible; there is nothing to undo.
        return None

    def _new_path(self, relpath: str) -> tuple[str, str]:
        if self._committed is not None:
            raise ArtifactError(
                f"attempt {self.uri} is already committed; begin a new attempt to write more outputs"
            )
        rel = check_relpath(relpath)
        if rel.split("/")[0].startswith("_"):
            raise ArtifactError(
                f"'{relpath}': names starting with '_' are reserved for store records; rename the file"
            )
        if rel in self._entries:
            raise ArtifactError(f"'{rel}' was already written in attempt {self.uri}; each output once")
        return rel, join(self._path, rel)

    def _stream(self, rel: str, path: str, fill: Any) -> tuple[int, str]:
        fs = self._store._fs
        try:
            if not self._store.remote:
                os.makedirs(os.path.dirname(path), exist_ok=True)
            with fs.open(path, "wb") as fh:
                writer = _HashingWriter(fh)
                fill(writer)
        except OSError as exc:
            raise self._store._write_error(path, exc) from exc
        return writer.size, writer.hasher.hexdigest()

    def write_frame(self, name: str, df: pl.DataFrame, *, schema: str | None = None) -> ArtifactEntry:
        """Validate ``df`` against artifact schema ``schema`` (default: ``name``), write ``<name>.parquet``.

        Columns: exactly those of ``rla_core.schemas.SCHEMAS[schema]`` (docs/architecture.md#the-design-contract); a SchemaError
        lists missing, extra and mistyped ones.
        """
        schema_name = schema or name
        rel, path = self._new_path(f"{check_name(name, what='frame name')}.parquet")
        frame = validate(schema_name, df, where=self.uri)

        def fill(writer: _HashingWriter) -> None:
            frame.write_parquet(
                writer,  # type: ignore[arg-type]
                compression=PARQUET_COMPRESSION,
                compression_level=PARQUET_COMPRESSION_LEVEL,
                row_group_size=PARQUET_ROW_GROUP_SIZE,
            )

        size, digest = self._stream(rel, path, fill)
        entry = ArtifactEntry(
            path=rel,
            kind=EntryKind.FRAME,
            bytes=size,
            sha256=digest,
            schema=schema_name,
            rows=frame.height,
            fingerprint=get_schema(schema_name).fingerprint(),
        )
        self._entries[rel] = entry
        return entry

    def write_file(self, relpath: str, data: bytes) -> ArtifactEntry:
        """Write an opaque file (e.g. a small JSON sidecar) at ``relpath`` inside the attempt."""
        rel, path = self._new_path(relpath)
        size, digest = self._stream(rel, path, lambda w: w.write(data))
        entry = ArtifactEntry(path=rel, kind=EntryKind.FILE, bytes=size, sha256=digest)
        self._entries[rel] = entry
        return entry

    def put_dir(self, local_dir: str | Path, relpath: str) -> list[ArtifactEntry]:
        """Copy every file below ``local_dir`` (e.g. a Hugging Face model dir) to ``relpath/`` in the attempt.

        Files are streamed in 8 MiB chunks and hashed on the way.
        """
        root = Path(local_dir)
        if not root.is_dir():
            raise ArtifactError(f"checkpoint directory '{root}' does not exist or is not a directory")
        files = sorted(p for p in root.rglob("*") if p.is_file())
        if not files:
            raise ArtifactError(f"checkpoint directory '{root}' holds no files; nothing to store")
        base = check_relpath(relpath)
        entries = []
        for file in files:
            rel, path = self._new_path(f"{base}/{file.relative_to(root).as_posix()}")

            def fill(writer: _HashingWriter, src: Path = file) -> None:
                with src.open("rb") as fh:
                    while chunk := fh.read(_CHUNK):
                        writer.write(chunk)

            size, digest = self._stream(rel, path, fill)
            entry = ArtifactEntry(path=rel, kind=EntryKind.FILE, bytes=size, sha256=digest)
            self._entries[rel] = entry
            entries.append(entry)
        return entries

    def commit(self, stage_key: str, inputs: dict[str, str], extra: dict[str, Any] | None = None) -> Manifest:
        """Commit the attempt: write its manifest last and atomically; from now on it is in use.

        ``stage_key`` is the content key of the stage (config slice, inputs, code version, seed);
        ``inputs`` maps input names to their content keys; ``extra`` is free JSON (metrics, counts).
        """
        if self._committed is not None:
            raise ArtifactError(f"attempt {self.uri} is already committed")
        manifest = Manifest(
            run_id=self.run_id,
            iteration=self.iteration,
            stage=self.stage,
            attempt=self.attempt,
            stage_key=stage_key,
            inputs=dict(inputs),
            extra=dict(extra or {}),
            schema_version=SCHEMA_VERSION,
            created_at=utc_now(),
            host=this_host(),
            pid=os.getpid(),
            artifacts=tuple(self._entries[k] for k in sorted(self._entries)),
        )
        self._store._write_atomic(join(self._path, MANIFEST_NAME), manifest.to_json())
        self._committed = manifest
        return manifest


class ArtifactStore:
    """Runs, iterations, stage attempts and their artifacts under one root (local path or ``s3://``).

    ``storage_options`` go to fsspec (s3fs: ``key``, ``secret``, ``client_kwargs``). Creating a store
    touches nothing; the first write reports an unwritable root as ArtifactError.
    """

    def __init__(self, root: str | Path, *, storage_options: dict[str, Any] | None = None) -> None:
        self.root = str(root)
        self.storage_options = dict(storage_options or {})
        self.remote = is_remote(self.root)
        self._fs: AbstractFileSystem
        self._fs, self._base = filesystem(self.root, self.storage_options)

    def __repr__(self) -> str:
        return f"ArtifactStore({self.root!r})"

    # ---- locations -------------------------------------------------------------------------------

    def _fs_path(self, *parts: str) -> str:
        return join(self._base, *parts)

    def run_location(self, run_id: str) -> str:
        """URI (or local path) of a run's directory."""
        return join(self.root, check_name(run_id, what="run id"))

    def stage_location(self, run_id: str, iteration: int, stage: str) -> str:
        """URI (or local path) of a stage's directory within an iteration."""
        return join(self.run_location(run_id), iteration_dir(iteration), check_name(stage, what="stage"))

    def attempt_location(self, run_id: str, iteration: int, stage: str, attempt: int) -> str:
        """URI (or local path) of one attempt's directory."""
        return join(self.stage_location(run_id, iteration, stage), attempt_dir(attempt))

    def _write_error(self, path: str, exc: OSError) -> ArtifactError:
        return ArtifactError(
            f"cannot write '{path}' under artifact root '{self.root}': {exc}; check that the root is a "
            "writable directory (for s3://, that the bucket exists and the credentials may write)"
        )

    # ---- low-level I/O ---------------------------------------------------------------------------

    def _write_atomic(self, path: str, data: bytes) -> None:
        try:
            if self.remote:
                # One PUT: S3 shows the whole object or nothing.
                self._fs.pipe_file(path, data)
                return
            publish_file(path, data, fsync=True)
        except OSError as exc:
            raise self._write_error(path, exc) from exc

    def _read_bytes(self, path: str) -> bytes | None:
        try:
            data: bytes = self._fs.cat_file(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return data

    def _listdir(self, path: str) -> list[str]:
        """Base names of the entries directly under ``path`` (empty if it does not exist)."""
        self._fs.invalidate_cache(path)
        try:
            return sorted(_basename(p) for p in self._fs.ls(path, detail=False))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def _attempts(self, run_id: str, iteration: int, stage: str) -> list[int]:
        names = self._listdir(self._fs_path(run_id, iteration_dir(iteration), stage))
        return sorted(int(m.group(1)) for n in names if (m := _ATTEMPT.match(n)))

    def _run_exists(self, run_id: str) -> bool:
        path = self._fs_path(check_name(run_id, what="run id"))
        self._fs.invalidate_cache(path)
        return bool(self._fs.exists(path))

    def _require_run(self, run_id: str) -> None:
        if not self._run_exists(run_id):
            known = self.list_runs()
            raise RunNotFoundError(
                f"no run '{run_id}' under artifact root '{self.root}'; known runs: "
                f"{', '.join(known) if known else '(none)'}"
            )

    # ---- writing ---------------------------------------------------------------------------------

    def begin(self, run_id: str, iteration: int, stage: str) -> StageWriter:
        """Start a fresh attempt of ``stage`` (number = highest existing attempt + 1).

        Earlier attempts, committed or not, are never touched.
        """
        check_name(run_id, what="run id")
        check_name(stage, what="stage")
        attempt = max(self._attempts(run_id, iteration, stage), default=0) + 1
        while True:
            path = self._fs_path(run_id, iteration_dir(iteration), stage, attempt_dir(attempt))
            try:
                if self.remote:
                    self._fs.pipe_file(join(path, BEGUN_NAME), _begun_record())
                    break
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.mkdir(path)  # fails if it exists: claims the number atomically on local disks
                with open(join(path, BEGUN_NAME), "wb") as fh:
                    fh.write(_begun_record())
                break
            except FileExistsError:
                if not os.path.isdir(path):
                    raise self._write_error(path, FileExistsError(f"'{path}' is a file")) from None
                attempt += 1
            except OSError as exc:
                raise self._write_error(path, exc) from exc
        return StageWriter(self, run_id, iteration, stage, attempt)

    def invalidate(self, run_id: str, iteration: int, stage: str) -> int | None:
        """Force a re-run: mark the attempt in use as invalidated, so the stage reads as not done.

        Returns the attempt number marked, or None if no attempt was in use. Its data stays on disk.
        """
        manifest = self.manifest(run_id, iteration, stage)
        if manifest is None:
            return None
        path = self._fs_path(
            run_id, iteration_dir(iteration), stage, attempt_dir(manifest.attempt), INVALIDATED_NAME
        )
        self._write_atomic(path, _begun_record())
        return manifest.attempt

    def pruned(self, manifest: Manifest) -> PruneRecord | None:
        """What retention deleted from a committed attempt (its ``_pruned.json``), or None."""
        path = self._attempt_path(manifest, PRUNED_NAME)
        data = self._read_bytes(path)
        return None if data is None else PruneRecord.from_json(data, where=path)

    def prune(
        self, manifest: Manifest, dirs: Sequence[str], *, setting: dict[str, Any]
    ) -> PruneRecord | None:
        """Delete directories ``dirs`` (checkpoint roles) of a committed attempt; the record, or None if
        nothing new was pruned.

        The record (``_pruned.json``) is written atomically *before* anything is deleted, so a crash in
        between leaves files the record calls pruned (harmless; a later prune deletes them), never
        missing files the store cannot explain. The manifest is not touched. Idempotent.
        """
        before = self.pruned(manifest)
        done = set(before.dirs) if before is not None else set()
        held = {e.path.split("/", 1)[0] for e in manifest.artifacts if "/" in e.path}
        new = sorted(d for d in dirs if d in held and d not in done)
        record = None
        if new:
            gone = done | set(new)
            entries = [e for e in manifest.artifacts if "/" in e.path and e.path.split("/", 1)[0] in gone]
            record = PruneRecord(
                dirs=tuple(sorted(gone)), paths=tuple(e.path for e in entries),
                pruned_bytes=sum(e.bytes for e in entries), setting=dict(setting),
            )  # fmt: skip
            self._write_atomic(self._attempt_path(manifest, PRUNED_NAME), record.to_json())
        # Every recorded directory, so a prune that crashed after its record is finished by the next one.
        for name in sorted(done | set(new)):
            path = self._attempt_path(manifest, name)
            if self._fs.exists(path):
                self._fs.rm(path, recursive=True)
        return record

    def write_run_info(
        self, run_id: str, *, config: dict[str, Any], config_hash: str, code_version: str
    ) -> RunInfo:
        """Write ``<run_id>/run.json`` (atomically). A rewrite keeps the original ``created_at``."""
        from rla_core import __version__

        path = self._fs_path(check_name(run_id, what="run id"), RUN_INFO_NAME)
        now = utc_now()
        old = self._read_bytes(path)
        created = RunInfo.from_json(old, where=path).created_at if old is not None else now
        info = RunInfo(
            run_id=run_id,
            config=config,
            config_hash=config_hash,
            code_version=code_version,
            package_version=__version__,
            created_at=created,
            updated_at=now,
        )
        self._write_atomic(path, info.to_json())
        return info

    def _run_file_path(self, run_id: str, relpath: str) -> str:
        rel = check_relpath(relpath)
        top = rel.split("/")[0]
        if _ITER.match(top) or top in (RUN_INFO_NAME, LOCK_NAME):
            raise ArtifactError(
                f"'{relpath}' would land in a stage or run record of run '{run_id}'; run files live in "
                "their own area (e.g. 'evals/…', 'progress.json')"
            )
        return self._fs_path(check_name(run_id, what="run id"), rel)

    def write_run_file(self, run_id: str, relpath: str, data: bytes) -> str:
        """Atomically write a file of the run outside its iterations (progress record, saved evals).

        Returns its location. Never inside ``iter-*`` directories, ``run.json`` or the lock.
        """
        self._write_atomic(self._run_file_path(run_id, relpath), data)
        return join(self.run_location(run_id), check_relpath(relpath))

    def read_run_file(self, run_id: str, relpath: str) -> bytes | None:
        """The bytes of a run file written by :meth:`write_run_file`, or None if it does not exist."""
        return self._read_bytes(self._run_file_path(run_id, relpath))

    def list_run_files(self, run_id: str, relpath: str) -> list[str]:
        """Base names directly under a run-file directory (empty if it does not exist)."""
        return self._listdir(self._run_file_path(run_id, relpath))

    def lock(self, run_id: str) -> RunLock:
        """The run's lock (not yet acquired); ``with store.lock(run_id):`` holds it for the block."""
        path = self._fs_path(check_name(run_id, what="run id"), LOCK_NAME)
        return RunLock(
            self._fs,
            path,
            uri=join(self.run_location(run_id), LOCK_NAME),
            run_id=run_id,
            local=not self.remote,
        )

    # ---- reading ---------------------------------------------------------------------------------

    def read_run_info(self, run_id: str) -> RunInfo:
        """Read ``<run_id>/run.json``; RunNotFoundError if the run has none."""
        path = self._fs_path(check_name(run_id, what="run id"), RUN_INFO_NAME)
        data = self._read_bytes(path)
        if data is None:
            self._require_run(run_id)
            raise RunNotFoundError(
                f"run '{run_id}' under '{self.root}' has no run.json (it was never started properly); "
                "start it again with `rla run --run-id ...`"
            )
        return RunInfo.from_json(data, where=path)

    def list_runs(self) -> list[str]:
        """Run ids under the root (directories that hold a run.json), sorted."""
        runs = []
        for name in self._listdir(self._base):
            if self._fs.exists(self._fs_path(name, RUN_INFO_NAME)):
                runs.append(name)
        return runs

    def list_iterations(self, run_id: str) -> list[int]:
        """Iteration numbers that have a directory in the run, sorted."""
        self._require_run(run_id)
        names = self._listdir(self._fs_path(run_id))
        return sorted(int(m.group(1)) for n in names if (m := _ITER.match(n)))

    def list_stages(self, run_id: str, iteration: int) -> list[str]:
        """Stage names with at least one attempt (committed or not) in an iteration, sorted."""
        self._require_run(run_id)
        return self._listdir(self._fs_path(run_id, iteration_dir(iteration)))

    def manifest(self, run_id: str, iteration: int, stage: str) -> Manifest | None:
        """The manifest of the attempt in use, or None if no committed, non-invalidated attempt exists."""
        check_name(run_id, what="run id")
        check_name(stage, what="stage")
        for attempt in reversed(self._attempts(run_id, iteration, stage)):
            base = self._fs_path(run_id, iteration_dir(iteration), stage, attempt_dir(attempt))
            data = self._read_bytes(join(base, MANIFEST_NAME))
            if data is None:
                continue  # uncommitted (crashed or in progress): invisible
            if self._fs.exists(join(base, INVALIDATED_NAME)):
                return None
            return Manifest.from_json(data, where=join(base, MANIFEST_NAME))
        return None

    def committed(self, run_id: str, iteration: int | None = None) -> dict[tuple[int, str], Manifest]:
        """(iteration, stage) → the manifest in use, for every committed stage of the run (or of one
        ``iteration``), by iteration then stage name. Uncommitted and invalidated stages are left out."""
        iterations = self.list_iterations(run_id) if iteration is None else [iteration]
        return {
            (it, stage): manifest
            for it in iterations
            for stage in self.list_stages(run_id, it)
            if (manifest := self.manifest(run_id, it, stage)) is not None
        }

    def _require_manifest(self, run_id: str, iteration: int, stage: str) -> Manifest:
        manifest = self.manifest(run_id, iteration, stage)
        if manifest is None:
            self._require_run(run_id)
            raise ArtifactError(
                f"stage '{stage}' of iteration {iteration} in run '{run_id}' has no committed attempt "
                f"under '{self.root}'; run (or resume) that stage first"
            )
        return manifest

    def _attempt_path(self, manifest: Manifest, relpath: str) -> str:
        return self._fs_path(
            manifest.run_id, iteration_dir(manifest.iteration), manifest.stage, attempt_dir(manifest.attempt),
            relpath,
        )  # fmt: skip

    def _entry_path(self, manifest: Manifest, entry: ArtifactEntry) -> str:
        return self._attempt_path(manifest, entry.path)

    def require_kept(self, manifest: Manifest, relpath: str) -> None:
        """ArtifactError if retention deleted ``relpath`` (a file or a directory) of the attempt."""
        record = self.pruned(manifest)
        top = relpath.split("/", 1)[0]
        if record is not None and (top in record.dirs or relpath in record.paths):
            setting = ", ".join(f"{k}={v}" for k, v in sorted(record.setting.items()))
            raise ArtifactError(
                f"'{relpath}' of stage '{manifest.stage}' of iteration {manifest.iteration} in run "
                f"'{manifest.run_id}' was pruned on {record.at} by checkpoint retention ({setting}); "
                "see docs/operations.md#checkpoint-retention"
            )

    def problems(self, manifest: Manifest, *, verify_hashes: bool = False) -> list[str]:
        """What is wrong with a committed attempt's files: missing, wrong size, (optionally) wrong hash.

        Files deleted by checkpoint retention (:meth:`prune`) are gone on purpose, not wrong. Sizes cost
        one metadata call per file; hashes read every byte.
        """
        found = []
        record = self.pruned(manifest)
        gone = set(record.paths) if record is not None else set()
        for entry in manifest.artifacts:
            if entry.path in gone:
                continue
            path = self._entry_path(manifest, entry)
            try:
                size = int(self._fs.info(path)["size"])
            except FileNotFoundError:
                found.append(f"{entry.path}: missing")
                continue
            if size != entry.bytes:
                found.append(f"{entry.path}: {size} bytes, manifest says {entry.bytes}")
            elif verify_hashes and self._hash_file(path) != entry.sha256:
                found.append(f"{entry.path}: content hash differs from the manifest")
        return found

    def _hash_file(self, path: str) -> str:
        hasher = hashlib.sha256()
        with self._fs.open(path, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                hasher.update(chunk)
        return hasher.hexdigest()

    def is_done(
        self, run_id: str, iteration: int, stage: str, stage_key: str, *, verify_hashes: bool = False
    ) -> bool:
        """Whether the attempt in use has ``stage_key`` and intact outputs (the skip rule, docs/architecture.md#the-design-contract)."""
        manifest = self.manifest(run_id, iteration, stage)
        if manifest is None or manifest.stage_key != stage_key:
            return False
        return not self.problems(manifest, verify_hashes=verify_hashes)

    def _read_entry(self, manifest: Manifest, entry: ArtifactEntry, *, verify: bool) -> bytes:
        if "/" in entry.path:  # only directories (checkpoints) are ever pruned: frames skip the read
            self.require_kept(manifest, entry.path)
        path = self._entry_path(manifest, entry)
        data = self._read_bytes(path)
        if data is None:
            raise ArtifactError(
                f"artifact '{path}' listed in the manifest is missing; invalidate stage "
                f"'{manifest.stage}' of iteration {manifest.iteration} and run it again"
            )
        if verify and (len(data) != entry.bytes or sha256_bytes(data) != entry.sha256):
            raise ArtifactError(
                f"artifact '{path}' is corrupt: its content hash does not match the manifest; invalidate "
                f"stage '{manifest.stage}' of iteration {manifest.iteration} and run it again"
            )
        return data

    def read_frame(
        self, run_id: str, iteration: int, stage: str, name: str, *, verify: bool = True
    ) -> pl.DataFrame:
        """Read frame ``name`` of the attempt in use, check its hash (``verify``) and schema.

        Columns: those of its artifact schema (``rla_core.schemas``, docs/architecture.md#the-design-contract); a SchemaError lists
        missing, extra and mistyped columns.
        """
        import polars as pl

        manifest = self._require_manifest(run_id, iteration, stage)
        entry = manifest.entry(f"{check_name(name, what='frame name')}.parquet")
        if entry is None:
            raise ArtifactError(
                f"stage '{stage}' of iteration {iteration} in run '{run_id}' has no frame '{name}'; "
                f"it has: {', '.join(manifest.frames) or '(no frames)'}"
            )
        data = self._read_entry(manifest, entry, verify=verify)
        where = self._entry_path(manifest, entry)
        try:
            df = pl.read_parquet(io.BytesIO(data))
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise ArtifactError(f"artifact '{where}' is not readable Parquet ({exc})") from exc
        return validate(entry.schema or name, df, where=where, written_before=True)

    def read_file(self, run_id: str, iteration: int, stage: str, relpath: str) -> bytes:
        """The bytes of one file of the attempt in use, hash-checked."""
        manifest = self._require_manifest(run_id, iteration, stage)
        entry = manifest.entry(check_relpath(relpath))
        if entry is None:
            raise ArtifactError(
                f"stage '{stage}' of iteration {iteration} in run '{run_id}' has no file '{relpath}'"
            )
        return self._read_entry(manifest, entry, verify=True)

    def get_dir(self, run_id: str, iteration: int, stage: str, relpath: str, local_dir: str | Path) -> Path:
        """Materialise directory ``relpath`` of the attempt in use (a checkpoint) under ``local_dir``.

        Every file is hash-checked while it streams; returns ``Path(local_dir)``.
        """
        manifest = self._require_manifest(run_id, iteration, stage)
        prefix = check_relpath(relpath) + "/"
        self.require_kept(manifest, relpath)
        entries = [e for e in manifest.artifacts if e.path.startswith(prefix)]
        if not entries:
            raise ArtifactError(
                f"stage '{stage}' of iteration {iteration} in run '{run_id}' has no directory '{relpath}'"
            )
        out = Path(local_dir)
        for entry in entries:
            target = out.joinpath(*entry.path[len(prefix) :].split("/"))
            target.parent.mkdir(parents=True, exist_ok=True)
            src = self._entry_path(manifest, entry)
            hasher = hashlib.sha256()
            with self._fs.open(src, "rb") as fh, target.open("wb") as dst:
                while chunk := fh.read(_CHUNK):
                    hasher.update(chunk)
                    dst.write(chunk)
            if hasher.hexdigest() != entry.sha256:
                target.unlink()
                raise ArtifactError(
                    f"checkpoint file '{src}' is corrupt: its content hash does not match the manifest; "
                    f"invalidate stage '{stage}' of iteration {iteration} and run it again"
                )
        return out


def _begun_record() -> bytes:
    import json

    return json.dumps({"host": this_host(), "pid": os.getpid(), "at": utc_now()}).encode("utf-8")
