"""The run lock: one process works on a run at a time (docs/architecture.md#the-design-contract).

Local roots use an exclusive ``flock`` on ``<root>/<run_id>/lock.json``. The kernel drops the lock
when its process dies, so a killed holder can never block a run; the holder's record (host, pid,
start time) is left in the file and reported as the stale holder that was taken over. A clean
release deletes the file. ``flock`` is reliable on local filesystems; on network filesystems
(NFS) it depends on the server.

``s3://`` roots are best-effort: S3 has no lock primitive, so the lock is an object holding the
owner record, written after checking that none exists and read back to detect a racing writer. A
lock left by a dead process on the same host is taken over; one left by another host is reported and
must be deleted by hand once that process is known to be gone (the error names the object).

Example:
    >>> store = ArtifactStore("/tmp/runs")  # doctest: +SKIP
    >>> with store.lock("run-1") as lock:  # doctest: +SKIP
    ...     lock.took_over  # the stale holder, if a dead process had left one
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Self

from rla_core.errors import ArtifactError, RunLockedError
from rla_core.store.manifest import this_host, utc_now

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem


@dataclass(frozen=True)
class LockHolder:
    """Who holds (or held) a run lock."""

    host: str
    pid: int
    started_at: str
    token: str

    def describe(self) -> str:
        """One line for error messages: ``pid 123 on host h since 2026-...``."""
        return f"pid {self.pid} on host {self.host} since {self.started_at}"

    @classmethod
    def parse(cls, data: bytes) -> LockHolder | None:
        """The holder recorded in a lock file, or None if the bytes are empty or not a record."""
        try:
            raw = json.loads(data)
            return cls(host=str(raw["host"]), pid=int(raw["pid"]), started_at=str(raw["started_at"]),
                       token=str(raw["token"]))  # fmt: skip
        except (ValueError, KeyError, TypeError):
            return None


def pid_alive(pid: int) -> bool:
    """Whether a process with ``pid`` exists on this host (signal 0 probes without sending)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    """An exclusive lock on one run; use as a context manager or call acquire/release.

    ``acquire`` raises :class:`RunLockedError` naming the live holder; after it returns,
    ``took_over`` is the stale holder that was replaced (a dead process), or None.
    """

    def __init__(self, fs: AbstractFileSystem, path: str, *, uri: str, run_id: str, local: bool) -> None:
        self._fs = fs
        self._path = path
        self.uri = uri
        self.run_id = run_id
        self._local = local
        self._fd: int | None = None
        self._held = False
        self.holder = LockHolder(host=this_host(), pid=os.getpid(), started_at="", token=uuid.uuid4().hex)
        self.took_over: LockHolder | None = None

    @property
    def held(self) -> bool:
        """Whether this object currently holds the lock."""
        return self._held

    def acquire(self) -> Self:
        """Take the lock or fail fast with RunLockedError (never waits)."""
        if self._held:
            return self
        self.holder = LockHolder(self.holder.host, self.holder.pid, utc_now(), self.holder.token)
        try:
            if self._local:
                self._acquire_local()
            else:
                self._acquire_remote()
        except OSError as exc:
            raise ArtifactError(
                f"cannot create the run lock '{self.uri}': {exc}; check that the artifact root is writable"
            ) from exc
        self._held = True
        return self

    def release(self) -> None:
        """Give the lock back (deletes the lock file). Releasing a lock not held does nothing."""
        if not self._held:
            return
        self._held = False
        if self._local:
            assert self._fd is not None
            try:
                # Unlink while still holding the flock, so a waiter that opened the old file notices
                # the inode changed and retries on the new one.
                os.unlink(self._path)
            finally:
                os.close(self._fd)
                self._fd = None
        else:
            current = self._read_remote()
            if current is not None and current.token == self.holder.token:
                self._fs.rm_file(self._path)

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def _locked_error(self, holder: LockHolder | None) -> RunLockedError:
        who = holder.describe() if holder else "another process (its record is not written yet)"
        hint = "wait for it to finish or stop that process"
        if not self._local:
            hint += f"; if it is gone, delete the lock object '{self.uri}' (S3 locks are best-effort)"
        return RunLockedError(f"run '{self.run_id}' is locked by {who} (lock '{self.uri}'); {hint}")

    def _acquire_local(self) -> None:
        import fcntl

        os.makedirs(os.path.dirname(self._path), exist_ok=True)
        while True:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = LockHolder.parse(os.pread(fd, 4096, 0))
                os.close(fd)
                raise self._locked_error(holder) from None
            try:
                same_file = os.stat(self._path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same_file = False
            if not same_file:
                # The previous holder released (unlinked) between our open and flock: retry.
                os.close(fd)
                continue
            # A record left in the file means its writer died without releasing: a stale lock.
            self.took_over = LockHolder.parse(os.pread(fd, 4096, 0))
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(asdict(self.holder)).encode("utf-8"), 0)
            os.fsync(fd)
            self._fd = fd
            return

    def _read_remote(self) -> LockHolder | None:
        try:
            return LockHolder.parse(self._fs.cat_file(self._path))
        except FileNotFoundError:
            return None

    def _acquire_remote(self) -> None:
        self._fs.invalidate_cache(self._path)
        existing = self._read_remote()
        if existing is not None:
            if existing.host == this_host() and not pid_alive(existing.pid):
                self.took_over = existing
            else:
                raise self._locked_error(existing)
        self._fs.pipe_file(self._path, json.dumps(asdict(self.holder)).encode("utf-8"))
        current = self._read_remote()
        if current is None or current.token != self.holder.token:
            raise self._locked_error(current)
