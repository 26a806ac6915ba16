"""Sandboxed execution of untrusted Python programs (spec §1.1 step 3 "execute").

Each run gets, in this order of defence:

* an unprivileged user (``rla-sandbox``): the host runs as root, and root ignores RLIMIT_NPROC and
  may signal any process, so untrusted code never runs as root;
* fresh namespaces via ``unshare``: network (no interface but a down loopback), pid (the program
  tree dies with the namespace's init), mount (private ``/tmp`` tmpfs, ``/`` read-only), ipc, uts;
* a pids cgroup per run (``pids.max``), so a fork bomb cannot starve sibling runs of the shared
  sandbox user's process count;
* rlimits: CPU seconds, address space, file size (caps stdout too), processes, open files, no core;
* a fresh host working directory for program/stdin/stdout/stderr, removed afterwards;
* a scrubbed environment (no host variable reaches the program);
* a wall-time timeout that SIGKILLs the process group; ``unshare --kill-child`` then kills the
  namespace init and with it every process of the run;
* a check that the run's cgroup is empty afterwards (no surviving process).

If the host cannot provide one of these (not root, no ``unshare``, no sandbox user, no pids
cgroup, namespaces refused) :class:`Sandbox` raises :class:`~rla_core.errors.SandboxError` at
set-up. It never falls back to running code unsandboxed.

Example:
    >>> sb = Sandbox()                                   # doctest: +SKIP
    >>> sb.run_program("print(int(input()) * 2)", "21\\n", limits=Limits()).stdout  # doctest: +SKIP
    '42\\n'
"""

from __future__ import annotations

import marshal
import math
import os
import pwd
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from rla_core.errors import SandboxError

SANDBOX_USER = "rla-sandbox"
PIDS_CGROUP_ROOT = Path("/sys/fs/cgroup/pids")
_LAUNCHER = Path(__file__).with_name("_launcher.py")
_LAUNCHER_SETUP_FAILED = 125
# What the program sees as its environment: nothing from the host.
_SANDBOX_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
_STDERR_KEEP_BYTES = 8192
_CGROUP_DRAIN_S = 2.0


class ErrorKind(StrEnum):
    """Why an execution did (not) pass; the ``error_kind`` column of 'executions'."""

    OK = "ok"
    WRONG_ANSWER = "wrong_answer"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    MEMORY = "memory"
    OUTPUT_LIMIT = "output_limit"
    INVALID_TEST = "invalid_test"
    INVALID_PROGRAM = "invalid_program"


@dataclass(frozen=True)
class Limits:
    """Resource limits of one execution.

    ``wall_s`` is the wall-clock budget of the whole run including interpreter start; ``cpu_s`` the
    RLIMIT_CPU soft limit (SIGXCPU; SIGKILL one second later).
    """

    wall_s: float = 2.0
    cpu_s: int = 2
    memory_mb: int = 256
    output_kb: int = 256
    tmpfs_kb: int = 8192
    max_processes: int = 32
    max_open_files: int = 64

    def __post_init__(self) -> None:
        if self.wall_s <= 0 or self.cpu_s < 1 or self.memory_mb < 16 or self.output_kb < 1:
            raise SandboxError(
                f"invalid sandbox limits {self}: need wall_s > 0, cpu_s >= 1, memory_mb >= 16 "
                "(the interpreter itself needs that much), output_kb >= 1"
            )
        if self.max_processes < 1 or self.max_open_files < 8 or self.tmpfs_kb < 64:
            raise SandboxError(
                f"invalid sandbox limits {self}: need max_processes >= 1, max_open_files >= 8, tmpfs_kb >= 64"
            )

    @staticmethod
    def for_test(time_limit_s: float, *, memory_mb: int, output_kb: int, grace_s: float = 0.5) -> Limits:
        """Limits for one test with the spec's per-test time limit (spec §1.1 step 3: 1 s seed, 4 s env).

        ``grace_s`` covers interpreter start-up, which is not the program's fault.
        """
        return Limits(
            wall_s=time_limit_s + grace_s,
            cpu_s=max(1, math.ceil(time_limit_s)),
            memory_mb=memory_mb,
            output_kb=output_kb,
        )


@dataclass(frozen=True)
class ExecResult:
    """Outcome of one sandboxed run. ``error_kind`` is OK when the program exited with status 0."""

    exit_code: int | None
    signal: int | None
    stdout: str
    stderr: str
    error_kind: ErrorKind
    wall_s: float
    detail: str = ""


@dataclass(frozen=True)
class Job:
    """One program run: source code, stdin text and limits."""

    code: str
    stdin: str
    limits: Limits = field(default_factory=Limits)


def sandbox_user_processes(user: str = SANDBOX_USER) -> list[int]:
    """Host pids of processes currently owned by the sandbox user (should be empty when idle)."""
    try:
        uid = pwd.getpwnam(user).pw_uid
    except KeyError:
        return []
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid == uid:
                found.append(int(entry))
        except FileNotFoundError:
            continue
    return found


def _find_python() -> str:
    # The program interpreter must be fully readable by the sandbox user; a venv under /root is not.
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return sys.executable


class Sandbox:
    """Runs programs in isolation. Construct once; it checks the host and probes one real run.

    ``python`` is the interpreter for programs (default: the system python3, which the sandbox user
    can read). ``max_parallel`` bounds concurrent runs in :meth:`run_many` (0 = number of cores).
    """

    def __init__(
        self,
        *,
        user: str = SANDBOX_USER,
        python: str | None = None,
        max_parallel: int = 0,
        work_root: str | None = None,
    ) -> None:
        self.python = python or _find_python()
        self.max_parallel = max_parallel or (os.cpu_count() or 1)
        self.work_root = work_root
        self._unshare = shutil.which("unshare")
        self._check_host(user)
        pw = pwd.getpwnam(user)
        self.uid, self.gid = pw.pw_uid, pw.pw_gid
        self._cgroup_parent = PIDS_CGROUP_ROOT / "rla-sandbox"
        self._cgroup_parent.mkdir(exist_ok=True)
        self._probe()

    def _check_host(self, user: str) -> None:
        missing = []
        if os.geteuid() != 0:
            missing.append("root (needed to switch to the sandbox user and mount private /tmp); run as root")
        if self._unshare is None:
            missing.append("the 'unshare' binary (util-linux); apt-get install util-linux")
        try:
            pwd.getpwnam(user)
        except KeyError:
            missing.append(
                f"the unprivileged user '{user}'; run scripts/setup.sh as root or "
                f"'useradd --system --no-create-home --shell /usr/sbin/nologin {user}'"
            )
        if not (PIDS_CGROUP_ROOT / "cgroup.procs").exists() or not os.access(PIDS_CGROUP_ROOT, os.W_OK):
            missing.append(f"a writable cgroup-v1 pids hierarchy at {PIDS_CGROUP_ROOT} (fork-bomb isolation)")
        if not os.access(self.python, os.X_OK):
            missing.append(f"an executable program interpreter at {self.python}")
        if missing:
            raise SandboxError("cannot set up the code sandbox; missing: " + "; ".join(missing))

    def _probe(self) -> None:
        probe = "import json, math, sys\nprint(sys.version_info[0], input())"
        res = self.run_program(probe, "probe\n", limits=Limits(wall_s=10.0, cpu_s=5))
        if res.error_kind is not ErrorKind.OK or res.stdout.split() != ["3", "probe"]:
            raise SandboxError(
                f"sandbox probe run failed with {self.python} as '{SANDBOX_USER}': kind={res.error_kind}, "
                f"exit={res.exit_code}, signal={res.signal}, stderr={res.stderr[-500:]!r}, detail={res.detail!r}. "
                "Check that the interpreter and its stdlib are readable by the sandbox user "
                "(pass python=... to Sandbox)"
            )

    def _launch_config(self, workdir: Path, cgroup: Path, limits: Limits, status_fd: int) -> dict[str, Any]:
        return {
            "program": str(workdir / "main.py"),
            "status_fd": status_fd,
            "cgroup": str(cgroup),
            "uid": self.uid,
            "gid": self.gid,
            "python": self.python,
            "env": _SANDBOX_ENV,
            "tmpfs_kb": limits.tmpfs_kb,
            "limits": {
                "cpu_s": limits.cpu_s,
                "memory_bytes": limits.memory_mb * 1024 * 1024,
                # One byte more than allowed, so an over-long stdout is detectable by its size.
                "file_size_bytes": limits.output_kb * 1024 + 1,
                # Shared by all runs of the user; per-run isolation comes from the cgroup's pids.max.
                "nproc": limits.max_processes * self.max_parallel + 16,
                "nofile": limits.max_open_files,
            },
        }

    def run_program(self, code: str, stdin: str, *, limits: Limits) -> ExecResult:
        """Run ``code`` with ``stdin`` under ``limits``; never raises for program misbehaviour.

        Raises SandboxError only when the sandbox itself fails (launcher set-up, leaked processes).
        """
        workdir = Path(tempfile.mkdtemp(prefix="rla-sbx-", dir=self.work_root))
        cgroup = self._cgroup_parent / f"run-{uuid.uuid4().hex}"
        try:
            (workdir / "main.py").write_text(code, encoding="utf-8")
            (workdir / "stdin.txt").write_text(stdin, encoding="utf-8")
            cgroup.mkdir()
            (cgroup / "pids.max").write_text(str(limits.max_processes))
            return self._execute(workdir, cgroup, limits)
        finally:
            self._drain_cgroup(cgroup)
            shutil.rmtree(workdir, ignore_errors=False)

    def _execute(self, workdir: Path, cgroup: Path, limits: Limits) -> ExecResult:
        assert self._unshare is not None  # checked in _check_host
        cmd = [
            self._unshare,
            "--net",
            "--pid",
            "--fork",
            "--mount",
            "--ipc",
            "--uts",
            "--kill-child",
            "--mount-proc",
            sys.executable,
            "-S",
            "-I",
            "-B",
            str(_LAUNCHER),
        ]
        timed_out = False
        start = time.perf_counter()
        with (
            open(workdir / "stdin.txt", "rb") as fin,
            open(workdir / "stdout", "wb") as fout,
            open(workdir / "stderr", "wb") as ferr,
            open(workdir / "status.txt", "wb") as fstatus,
        ):
            # pass_fds keeps the descriptor's number; the launcher is told which one it is.
            cmd.append(marshal.dumps(self._launch_config(workdir, cgroup, limits, fstatus.fileno())).hex())
            proc = subprocess.Popen(
                cmd,
                stdin=fin,
                stdout=fout,
                stderr=ferr,
                env={},
                cwd=workdir,
                start_new_session=True,
                pass_fds=(fstatus.fileno(),),
            )
            # Popen.wait(timeout=) polls with sleeps of up to 50 ms; a pidfd wakes us at the exit itself.
            pidfd = os.pidfd_open(proc.pid)
            try:
                ready, _, _ = select.select([pidfd], [], [], limits.wall_s)
            finally:
                os.close(pidfd)
            if not ready:
                timed_out = True
                # unshare leads the session's process group; its --kill-child takes the namespace down.
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        wall = time.perf_counter() - start
        status = self._read_status(workdir / "status.txt")
        if "setup_error" in status:
            raise SandboxError(f"sandbox launcher failed: {status['setup_error']}")
        if not timed_out and proc.returncode != 0 and not status:
            raise SandboxError(
                f"unshare exited with {proc.returncode} before the program ran: "
                f"{(workdir / 'stderr').read_bytes()[-500:]!r}; are namespaces allowed on this host?"
            )
        out_limit = limits.output_kb * 1024
        stdout_raw = _read_head(workdir / "stdout", out_limit + 1)
        stderr_raw = _read_head(workdir / "stderr", _STDERR_KEEP_BYTES)
        exit_code = status.get("exit")
        sig = status.get("signal")
        kind, detail = _classify(
            timed_out=timed_out,
            exit_code=exit_code,
            sig=sig,
            stdout_len=len(stdout_raw),
            out_limit=out_limit,
            stderr=stderr_raw,
        )
        return ExecResult(
            exit_code=exit_code,
            signal=sig,
            stdout=stdout_raw[:out_limit].decode("utf-8", errors="replace"),
            stderr=stderr_raw.decode("utf-8", errors="replace"),
            error_kind=kind,
            wall_s=wall,
            detail=detail,
        )

    @staticmethod
    def _read_status(path: Path) -> dict[str, Any]:
        """The launcher's first status line as {key: value} (empty when it was killed first)."""
        text = path.read_text(encoding="utf-8").strip()
        if not text:
            return {}
        key, _, value = text.splitlines()[0].partition(" ")
        return {key: int(value) if key in ("exit", "signal") else value}

    def _drain_cgroup(self, cgroup: Path) -> None:
        """Wait until no process of the run is left, then remove its cgroup (SandboxError otherwise)."""
        if not cgroup.exists():
            return
        deadline = time.monotonic() + _CGROUP_DRAIN_S
        procs_file = cgroup / "cgroup.procs"
        while True:
            left = procs_file.read_text().split()
            if not left:
                break
            if time.monotonic() > deadline:
                for pid in left:
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except ProcessLookupError:
                        continue
                time.sleep(0.05)
                if procs_file.read_text().split():
                    raise SandboxError(f"processes {left} of a sandbox run survived SIGKILL in {cgroup}")
                break
            time.sleep(0.002)
        # rmdir may briefly fail with EBUSY while the kernel finishes tearing the tasks down.
        for _ in range(500):
            try:
                cgroup.rmdir()
                return
            except OSError:
                time.sleep(0.002)
        raise SandboxError(f"could not remove the sandbox cgroup {cgroup}")

    def run_many(self, jobs: Sequence[Job]) -> list[ExecResult]:
        """Run jobs concurrently (at most ``max_parallel`` at once); results in input order."""
        if not jobs:
            return []
        with ThreadPoolExecutor(max_workers=min(self.max_parallel, len(jobs))) as pool:
            return list(pool.map(lambda j: self.run_program(j.code, j.stdin, limits=j.limits), jobs))


def _read_head(path: Path, n: int) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(n)


def _classify(
    *, timed_out: bool, exit_code: int | None, sig: int | None, stdout_len: int, out_limit: int, stderr: bytes
) -> tuple[ErrorKind, str]:
    if timed_out:
        return ErrorKind.TIMEOUT, "wall-time limit exceeded"
    if sig in (signal.SIGXCPU, signal.SIGKILL):
        # SIGKILL that we did not send: the CPU hard limit (one second past SIGXCPU).
        return ErrorKind.TIMEOUT, f"CPU-time limit exceeded (signal {sig})"
    if stdout_len > out_limit or sig == signal.SIGXFSZ:
        return ErrorKind.OUTPUT_LIMIT, f"output over {out_limit} bytes"
    if exit_code == 0:
        return ErrorKind.OK, ""
    if b"MemoryError" in stderr:
        return ErrorKind.MEMORY, "address-space limit exceeded"
    if sig is not None:
        return ErrorKind.RUNTIME_ERROR, f"killed by signal {sig}"
    return ErrorKind.RUNTIME_ERROR, f"exit status {exit_code}"
