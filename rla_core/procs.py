"""Process-group lifecycle shared by every helper process the project starts.

Browsers (GUI setting), per-stage vLLM servers and multi-process training workers are all started the
same way, so that nothing they spawn can outlive the stage that needed it:

* **start** — :meth:`ProcessGroup.start` runs the command in a NEW session (its own process group, the
  group id is the leader's pid), stdout and stderr to a log file, and records the group in a pidfile
  ``<kind>-<owner pid>-<nonce>.json`` under a runtime directory;
* **readiness** — :meth:`ProcessGroup.wait_ready` polls a probe (e.g. an HTTP health check) until it
  answers, failing fast with the log's tail when the leader dies first — no fixed sleeps;
* **stop** — :meth:`ProcessGroup.stop` (context manager exit, also on exceptions) SIGKILLs the whole
  group and waits until it is gone;
* **tether** (``tethered=True``: vLLM servers, training workers) — a small leader
  (:mod:`rla_core._tether`) ends the group, its scratch directory and pidfile as soon as the owner dies,
  however it dies (SIGKILL, the OOM killer);
* **reap** — when the owner was SIGKILLed, nothing above ran: :func:`reap_stale` (called by the next
  start on the same runtime directory) kills the groups of every pidfile whose owner is gone. A process
  that a library started inside the owner's own group (Prefect's ephemeral API server) is recorded by
  pid instead (:func:`record_process`) and reaped alone.

Why a group id recorded in a pidfile is safe to kill later: a process-group id stays taken while any
member lives, so if members of group ``g`` exist they are ours — unless the leader ``g`` itself is alive
with another start time, i.e. the whole group ended and its number was reused (then it is skipped).

Example:
    >>> with ProcessGroup.start(["sleep", "60"], kind="demo", runtime_dir=Path("/tmp/rla-demo")) as g:
    ...     g.alive()
    True
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rla_core.errors import ProcessError
from rla_core.store import publish_file

# Run as a module rather than imported (the leader of a tethered group): part of the code version.
CODE_RESOURCES = ("_tether.py",)


def default_runtime_dir(name: str) -> Path:
    """``$XDG_RUNTIME_DIR/rlanything-<name>``, else ``<tmp>/rlanything-<name>-<uid>``."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base:
        return Path(base) / f"rlanything-{name}"
    return Path(tempfile.gettempdir()) / f"rlanything-{name}-{os.getuid()}"


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3… of /proc/<pid>/stat (state, ppid, pgid, …), or None when the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def start_time(pid: int) -> str | None:
    """Field 22 of /proc/<pid>/stat (start time in ticks): tells a live process from a reused pid."""
    fields = _stat_fields(pid)
    return None if fields is None else fields[19]


def live_processes() -> list[dict[str, Any]]:
    """Every live (non-zombie) process on the machine: pid, ppid, pgid and name (from /proc/<pid>/stat)."""
    out: list[dict[str, Any]] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            out.append({"pid": int(entry.name), "ppid": int(fields[1]), "pgid": int(fields[2]), "name": name})
    return out


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) pids whose process group is ``pgid``."""
    return [p["pid"] for p in live_processes() if p["pgid"] == pgid]


def kill_group(
    pgid: int, *, leader_start: str | None = None, wait_s: float = 10.0, spare: int | None = None
) -> bool:
    """SIGKILL process group ``pgid`` and wait until its members are gone; True if anything was killed.

    ``leader_start`` (from :func:`start_time` at launch) guards against a reused group id: when the
    leader pid is alive with another start time, the group is someone else's and is left alone.
    ``spare``: a member left alive, killed by pid instead of by group (a tether ending its own group).
    SIGKILL is asynchronous; callers that check for leftovers right after must not race it, hence the wait.
    """
    if leader_start is not None:
        now = start_time(pgid)
        if now is not None and now != leader_start:
            return False

    def rest() -> list[int]:
        return [pid for pid in group_members(pgid) if pid != spare]

    def kill(members: list[int]) -> None:
        if spare is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
            return
        for pid in members:  # again while any is left: a member may fork before it dies
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    if not (members := rest()):
        return False
    kill(members)
    deadline = time.monotonic() + wait_s
    while (members := rest()) and time.monotonic() < deadline:
        if spare is not None:
            kill(members)
        time.sleep(0.02)
    return True


def is_running(pid: int, started: str) -> bool:
    """``pid`` is the process that started at ``started`` and has not exited (zombies have exited)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[19] == started and fields[0] != "Z"


def kill_process(pid: int, *, started: str | None, grace_s: float = 5.0) -> bool:
    """SIGTERM ``pid`` (SIGKILL after ``grace_s``) if it is still the process that started at ``started``.

    True if it was signalled; False when it is gone or its pid now belongs to another process.
    """
    if started is None or not is_running(pid, started):
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while is_running(pid, started):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.02)
    return True


def record_process(runtime_dir: Path, *, kind: str, pid: int, what: str) -> Path:
    """Record ``pid`` (a child that shares this process's group) so that :func:`reap_stale` of ``kind``
    stops it once this process is gone. Returns the pidfile; remove it once the child is stopped."""
    reap_stale(runtime_dir, kind=kind)
    path = runtime_dir / f"{kind}-{os.getpid()}-{uuid.uuid4().hex[:8]}.json"
    write_pidfile(path, owner_record([], pids=[[pid, start_time(pid)]], what=what))
    return path


def write_pidfile(path: Path, record: Mapping[str, Any]) -> None:
    """Write a pidfile atomically (a reaper never reads half a file)."""
    publish_file(path, json.dumps(dict(record)))


def owner_record(groups: Sequence[tuple[int, str | None]], **extra: Any) -> dict[str, Any]:
    """The pidfile record of this process owning ``groups`` ((pgid, leader start time) pairs)."""
    return {
        "owner_pid": os.getpid(),
        "owner_start": start_time(os.getpid()),
        "groups": [[pgid, started] for pgid, started in groups],
        **extra,
    }


def reap_stale(runtime_dir: Path, *, kind: str) -> list[dict[str, Any]]:
    """Kill the groups and processes recorded in ``<kind>-*.json`` pidfiles whose owner is gone; return
    those records."""
    reaped: list[dict[str, Any]] = []
    if not runtime_dir.is_dir():
        return reaped
    for pidfile in sorted(runtime_dir.glob(f"{kind}-*.json")):
        try:
            record = json.loads(pidfile.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # removed meanwhile (writes are atomic, so never half-written)
        if start_time(int(record["owner_pid"])) == record["owner_start"]:
            continue  # owner still alive
        for pgid, started in record.get("groups", []):
            kill_group(int(pgid), leader_start=started)
        for pid, started in record.get("pids", []):
            kill_process(int(pid), started=started)
        if record.get("scratch"):
            remove_scratch(Path(record["scratch"]))
        reaped.append(record)
        pidfile.unlink(missing_ok=True)
    return reaped


def remove_scratch(path: Path) -> None:
    """Remove a stopped group's scratch directory (its sockets and temporary files), if still there."""
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(path)


class ProcessGroup:
    """One command running in its own process group, recorded in a pidfile until it is stopped.

    ``scratch``: a directory that belongs to the group alone (e.g. its ``TMPDIR``), removed when the
    group is stopped or reaped, so a server's sockets and temporary files do not outlive it.
    """

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        *,
        pidfile: Path,
        log_path: Path,
        what: str,
        scratch: Path | None = None,
    ) -> None:
        self.proc = proc
        self.pgid = proc.pid
        self.leader_start = start_time(proc.pid)
        self.pidfile = pidfile
        self.log_path = log_path
        self.what = what
        self.scratch = scratch
        extra = {"scratch": str(scratch)} if scratch is not None else {}
        write_pidfile(pidfile, owner_record([(self.pgid, self.leader_start)], what=what, **extra))

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        *,
        kind: str,
        runtime_dir: Path,
        log_path: Path | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        what: str | None = None,
        scratch: Path | None = None,
        tethered: bool = False,
    ) -> ProcessGroup:
        """Reap leftovers of dead owners of ``kind``, then start ``argv`` as a new process group
        (``scratch``: its own directory, removed with it). ``tethered``: the group also ends, scratch and
        pidfile removed, as soon as this process dies, however it dies (:mod:`rla_core._tether` leads it)."""
        runtime_dir.mkdir(parents=True, exist_ok=True)
        reap_stale(runtime_dir, kind=kind)
        owner, nonce = os.getpid(), uuid.uuid4().hex[:8]
        log = log_path or runtime_dir / f"{kind}-{owner}-{nonce}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        label = what or " ".join(argv[:3])
        pidfile = runtime_dir / f"{kind}-{owner}-{nonce}.json"
        if tethered:
            argv = [
                sys.executable, "-m", "rla_core._tether", str(owner), start_time(owner) or "", str(pidfile),
                str(scratch or ""), "--", *argv,
            ]  # fmt: skip
        with open(log, "wb") as out:
            try:
                proc = subprocess.Popen(
                    list(argv),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=dict(env) if env is not None else None,
                    cwd=cwd,
                    start_new_session=True,
                )
            except OSError as exc:
                if scratch is not None:
                    remove_scratch(scratch)
                raise ProcessError(f"could not start {label}: {exc}") from exc
        return cls(proc, pidfile=pidfile, log_path=log, what=label, scratch=scratch)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, probe: Callable[[], bool], *, timeout_s: float, interval_s: float = 0.25) -> float:
        """Poll ``probe`` until it returns True; seconds it took. Raises if the leader dies or time runs out."""
        start = time.monotonic()
        while True:
            if probe():
                return time.monotonic() - start
            if not self.alive():
                self.stop()
                raise ProcessError(
                    f"{self.what} exited with code {self.proc.returncode} before it was ready; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            if time.monotonic() - start > timeout_s:
                self.stop()
                raise ProcessError(
                    f"{self.what} was not ready after {timeout_s:.0f}s; log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(interval_s)

    def wait(self, timeout_s: float | None = None) -> int:
        """Wait for the leader to exit (then kill what it left in its group); its exit code."""
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            self.stop()
            raise ProcessError(f"{self.what} did not finish within {timeout_s}s; killed its group") from exc
        self.stop()
        return code

    def stop(self) -> None:
        """Kill the whole group, reap the leader, remove the pidfile (idempotent)."""
        kill_group(self.pgid, leader_start=self.leader_start)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        if self.scratch is not None:
            remove_scratch(self.scratch)
        self.pidfile.unlink(missing_ok=True)

    def __enter__(self) -> ProcessGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def machine_slots(mib_each: int) -> int:
    """How many helpers of ``mib_each`` MiB the machine holds: min(CPU cores, available memory / ``mib_each``),
    at least 1 (the default size of the browser and desktop pools). Without ``/proc/meminfo`` the cores decide."""
    cores = os.cpu_count() or 1
    avail_mib = cores * mib_each
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail_mib = int(line.split()[1]) // 1024
    return max(1, min(cores, avail_mib // mib_each))


@dataclass(frozen=True, kw_only=True)
class PoolOptions:
    """The options every pool of local helpers takes (the MiniWoB++ browser pool, the desktop pool): how
    many members run at most and where their pidfiles live. Each pool's own options extend it.

    Example:
        >>> PoolOptions(size=2).members(mib_each=400)
        2
    """

    size: int | None = None  # None: as many as the machine holds (machine_slots of one member's MiB)
    runtime_dir: Path | None = None  # pidfiles (and browser profiles); None: default_runtime_dir(<kind>)

    def __post_init__(self) -> None:
        if self.size is not None and self.size < 1:
            raise ValueError(f"pool size {self.size} must be at least 1 (None: as many as the machine holds)")

    def members(self, *, mib_each: int) -> int:
        """``size``, or :func:`machine_slots` of ``mib_each`` MiB when it is None."""
        return self.size if self.size is not None else machine_slots(mib_each)

    def directory(self, kind: str) -> Path:
        """``runtime_dir``, or :func:`default_runtime_dir` of ``kind`` when it is None."""
        return self.runtime_dir if self.runtime_dir is not None else default_runtime_dir(kind)
