"""Sandboxed execution of untrusted Python programs (spec §1.1 step 3 "execute").

A program sees a minimal, read-only filesystem: the interpreter, its standard library and the
shared libraries they need; a private, size-capped writable ``/tmp`` holding ``main.py``; ``/proc`` of
its own pid namespace; a read-only ``/dev`` with the usual character devices. Nothing else of the host
exists for it (no checkout, ground-truth tests, artifact root, model cache, ``/etc``, ``/home``, ...).
The namespace and mount plumbing is Debian's ``bubblewrap`` (``bwrap``, installed by
``scripts/setup.sh``); the steps bwrap does not do run around it in this order, one ``exec`` chain
per run started by :meth:`Sandbox.run_program`:

1. **join the run's pids cgroup** (``/bin/sh``, still root): the shell writes ``0`` (itself) to the
   run's ``cgroup.procs`` and then execs the rest, so every later process of the run, bwrap's
   included, is born inside the cgroup and ``pids.max`` bounds the whole tree. It is the host side
   (root) that writes, and before any untrusted ``exec``: the sandbox user can never move itself out.
2. **drop privileges** (``setpriv``): to the ``rla-sandbox`` user and group, no supplementary groups,
   ``no_new_privs``, empty inheritable and bounding capability sets. The host runs as root, and root
   would ignore RLIMIT_NPROC and could signal any process; bwrap itself therefore never runs as root
   (nor setuid): it builds its namespaces as an unprivileged user.
3. **namespaces, view, capabilities, seccomp** (``bwrap``): new user, pid, network (loopback only),
   ipc, uts and cgroup namespaces (``--unshare-all``), no nested user namespaces
   (``--disable-userns``), no capabilities (``--cap-drop ALL``), a new session (no ``TIOCSTI`` into a
   terminal), a cleared environment, ``--die-with-parent``, and the seccomp filter below.
   ``--json-status-fd`` reports an exit status only if the ``exec`` of the command happened, which
   tells bwrap's own set-up failure (a :class:`SandboxError`) from anything the program does.
4. **init, rlimits, program** (``_launcher.py``, pid 1 of the namespace via ``--as-pid-1``): it forks
   the program, which sets its rlimits (CPU seconds, address space, file size, which caps stdout too,
   processes, open files, no core; only ever lowered) and runs ``main.py`` as ``__main__``; pid 1
   reaps orphans and reports the exact exit status or signal on a descriptor the program never holds.
   When it exits, the kernel kills and reaps the rest of the namespace and bwrap reaps pid 1, so no
   zombie is left to the host's init (bwrap's own pid 1 would be: its monitor exits without reaping).
5. **wall timeout** (host): a pidfd wakes the host at bwrap's exit; past ``wall_s`` it SIGKILLs every
   process in the run's cgroup but bwrap's monitor, which then reaps pid 1 and exits (the namespace
   died with pid 1); bwrap's process group is SIGKILLed too if it does not.
6. **leftover check** (host): the run's cgroup must drain (no process left: daemons included) before
   it is removed; survivors are SIGKILLed and reported as a :class:`SandboxError`. The host working
   directory (program, stdin, stdout, stderr, statuses) is removed afterwards.

**Seccomp and capabilities.** bwrap already drops every capability and sets ``no_new_privs``, and a
program in a user namespace without capabilities cannot mount, and cannot see or signal processes of
other runs or of the host. What remains reachable as the sandbox user are kernel interfaces that do
not need capabilities but are shared across runs or large attack surface. Since bwrap loads a filter
from a file descriptor at no measurable cost, a small deny-list returns ``EPERM`` for: ``ptrace`` and
``process_vm_*`` (no tracing or reading other processes' memory), the ``mount`` family, ``unshare``
and ``setns``, the keyring calls (``add_key``, ``request_key``, ``keyctl``: the user keyring is shared
by every run of the sandbox user, a channel from one run to the next), ``bpf``, ``perf_event_open``,
``userfaultfd``, ``io_uring_*`` and module/kexec/swap/reboot/syslog/acct/quota calls; any other
architecture's calling convention (i386 ``int 0x80``, x32) is refused too. A deny-list keeps every
Python feature a program can legitimately use working; the namespaces and the view carry the
isolation, the filter only narrows the kernel surface. Syscall tables exist for x86-64 and aarch64
(numbers from the kernel's uapi headers); another architecture is a :class:`SandboxError` at set-up.

Known limit: the program runs as the same (namespaced) user as its pid 1, so a program that goes out
of its way (writing ``/proc/1/mem``) could tamper with pid 1. It gains nothing by that: the exit status
it could forge is one it can produce itself, and a missing status is recorded as the program's runtime
error, never as a sandbox failure; the view, namespaces, limits and cgroup do not depend on pid 1.

If the host cannot provide any of this (not root, no ``bwrap``/``setpriv``/``ldd``, no sandbox user,
no pids cgroup, user namespaces refused, the interpreter unreadable for the sandbox user) :class:`Sandbox`
raises :class:`~rla_core.errors.SandboxError` at set-up. It never falls back to running code unsandboxed.

Example:
    >>> sb = Sandbox()                                   # doctest: +SKIP
    >>> sb.run_program("print(int(input()) * 2)", "21\\n", limits=Limits()).stdout  # doctest: +SKIP
    '42\\n'
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import pwd
import select
import shutil
import signal
import struct
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from rla_core.config import ClusterBackend, ClusterConfig
from rla_core.errors import SandboxError
from rla_core.schemas import ErrorKind

log = logging.getLogger(__name__)
SANDBOX_USER = "rla-sandbox"
PIDS_CGROUP_ROOT = Path("/sys/fs/cgroup/pids")
# Files this module runs rather than imports: part of the code version of every stage that uses it.
CODE_RESOURCES = ("_launcher.py",)
_LAUNCHER = Path(__file__).with_name("_launcher.py")
# Processes of a run that are not the program's: bwrap's monitor and the launcher (pid 1); in pids.max.
_BWRAP_PROCESSES = 2
# What the program sees as its environment: nothing from the host.
_SANDBOX_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
_STDERR_KEEP_BYTES = 8192
_CGROUP_DRAIN_S = 2.0
# After a timeout kill of the namespace, how long bwrap's monitor gets to reap pid 1 and exit.
_MONITOR_EXIT_S = 1.0
# Joins the run's cgroup as root, then becomes the rest of the command line (setpriv ... bwrap ...).
_JOIN_CGROUP = 'echo 0 > "$0/cgroup.procs" && exec "$@"'
# Extension modules the probe imports when the interpreter has them: their shared libraries must be
# inside the view (a missing one fails at set-up, not in the middle of a run).
_PROBE_MODULES = ("_ctypes", "_decimal", "_hashlib", "_bz2", "_lzma", "zlib", "_sqlite3", "_ssl", "_json")

# seccomp: syscalls answered with EPERM (see the module docstring), per architecture.
_DENIED_SYSCALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev",
    "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr", "unshare", "setns",
    "add_key", "request_key", "keyctl",
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "swapon", "swapoff", "reboot", "acct", "quotactl", "syslog", "iopl", "ioperm",
    "name_to_handle_at", "open_by_handle_at",
)  # fmt: skip
# (AUDIT_ARCH_*, {name: number}); numbers from asm/unistd_64.h (x86-64) and asm-generic/unistd.h.
_SYSCALL_TABLES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, {
        "ptrace": 101, "syslog": 103, "pivot_root": 155, "chroot": 161, "acct": 163, "mount": 165,
        "umount2": 166, "swapon": 167, "swapoff": 168, "reboot": 169, "iopl": 172, "ioperm": 173,
        "init_module": 175, "delete_module": 176, "quotactl": 179, "kexec_load": 246, "add_key": 248,
        "request_key": 249, "keyctl": 250, "unshare": 272, "perf_event_open": 298,
        "name_to_handle_at": 303, "open_by_handle_at": 304, "setns": 308, "process_vm_readv": 310,
        "process_vm_writev": 311, "finit_module": 313, "kexec_file_load": 320, "bpf": 321,
        "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442,
    }),
    "aarch64": (0xC00000B7, {
        "umount2": 39, "mount": 40, "pivot_root": 41, "chroot": 51, "quotactl": 60, "acct": 89,
        "unshare": 97, "kexec_load": 104, "init_module": 105, "delete_module": 106, "syslog": 116,
        "ptrace": 117, "reboot": 142, "add_key": 217, "request_key": 218, "keyctl": 219, "swapon": 224,
        "swapoff": 225, "perf_event_open": 241, "name_to_handle_at": 264, "open_by_handle_at": 265,
        "setns": 268, "process_vm_readv": 270, "process_vm_writev": 271, "finit_module": 273,
        "bpf": 280, "userfaultfd": 282, "kexec_file_load": 294, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428, "move_mount": 429,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
    }),
}  # fmt: skip


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
    # What the program wrote to the job's output_file (at most the output limit); None: the job named none.
    file_output: str | None = None


@dataclass(frozen=True)
class Job:
    """One program run: source code, stdin text and limits; ``input_file`` (the stdin text, read-only) and
    ``output_file`` (read back as :attr:`ExecResult.file_output`): plain names in the program's working
    directory, for problems that read or answer through files ("" = none)."""

    code: str
    stdin: str
    limits: Limits = field(default_factory=Limits)
    input_file: str = ""
    output_file: str = ""


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


def seccomp_filter(machine: str | None = None) -> bytes:
    """The seccomp program for ``bwrap --seccomp``: classic BPF answering the denied syscalls with EPERM.

    ``machine`` is ``platform.machine()``'s name (default: this host's). Layout: refuse any other
    architecture's calling convention, refuse x32 numbers, compare the syscall number with each denied
    one, allow the rest.

    Example:
        >>> len(seccomp_filter("x86_64")) % 8, len(seccomp_filter("x86_64")) // 8
        (0, 47)
    """
    machine = machine or platform.machine()
    if machine not in _SYSCALL_TABLES:
        raise SandboxError(
            f"no seccomp syscall table for architecture {machine!r} (have {sorted(_SYSCALL_TABLES)}); "
            "add its numbers from the kernel's uapi unistd headers to rla_core.sandbox.runner._SYSCALL_TABLES"
        )
    audit_arch, numbers = _SYSCALL_TABLES[machine]
    nrs = sorted({numbers[name] for name in _DENIED_SYSCALLS if name in numbers})
    ld_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    allow, deny = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    n = len(nrs)
    # (code, jump-if-true, jump-if-false, k); a jump skips that many following instructions.
    prog = [
        (ld_abs, 0, 0, 4),  # A = seccomp_data.arch
        (jeq, 1, 0, audit_arch),
        (ret, 0, 0, deny),
        (ld_abs, 0, 0, 0),  # A = seccomp_data.nr
        (jge, n + 1, 0, 0x40000000),  # x32 ABI bit set -> deny
        *((jeq, n - k, 0, nr) for k, nr in enumerate(nrs)),
        (ret, 0, 0, allow),
        (ret, 0, 0, deny),
    ]
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


def _view_args(paths: Iterable[str]) -> list[str]:
    """bwrap arguments exposing ``paths`` read-only at their host locations, symlinks included.

    Each path is walked component by component: a symlink on the way is recreated in the view (and
    its target exposed in turn), the resolved file or directory is bound read-only. A bind inside
    another bound directory is dropped, and so is a symlink that such a bind already contains.
    """
    binds: set[str] = set()
    links: dict[str, str] = {}

    def expose(path: str, depth: int) -> None:
        if depth > 40:
            raise SandboxError(f"too many levels of symbolic links while exposing {path} to the sandbox")
        parts = Path(path).parts
        cur = parts[0]
        for i, comp in enumerate(parts[1:], start=1):
            nxt = os.path.join(cur, comp)
            if os.path.islink(nxt):
                target = os.readlink(nxt)
                links[nxt] = target
                expose(os.path.join(os.path.normpath(os.path.join(cur, target)), *parts[i + 1 :]), depth + 1)
                return
            cur = nxt
        if not os.path.exists(cur):
            raise SandboxError(f"{cur} (needed by the sandbox interpreter) does not exist")
        binds.add(cur)

    for p in paths:
        expose(os.path.abspath(p), 0)

    def inside(p: str, dirs: Iterable[str]) -> bool:
        return any(p.startswith(d.rstrip("/") + "/") for d in dirs)

    kept = sorted(b for b in binds if not inside(b, binds))
    args: list[str] = []
    for b in kept:
        args += ["--ro-bind", b, b]
    for link in sorted(links):
        if not inside(link, kept):
            args += ["--symlink", links[link], link]
    return args


def _interpreter_paths(python: str, ldd: str) -> list[str]:
    """Host paths the interpreter needs: itself, its module search path, its shared libraries' dirs."""
    try:
        query = subprocess.run(
            [python, "-S", "-I", "-c", "import json, sys; print(json.dumps(sys.path))"],
            capture_output=True,
            text=True,
            env={},
            timeout=30,
            check=True,
        )
        libs = subprocess.run([ldd, python], capture_output=True, text=True, env={}, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxError(f"cannot inspect the sandbox interpreter {python}: {exc}") from exc
    paths = [python, *(p for p in json.loads(query.stdout) if os.path.exists(p))]
    for line in libs.stdout.splitlines():
        # "\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x...)" or "\t/lib64/ld-linux-x86-64.so.2 (0x...)"
        words = line.split()
        lib = words[2] if len(words) > 2 and words[1] == "=>" else words[0] if words else ""
        if lib.startswith("/"):
            # The whole directory: extension modules of the stdlib load their libraries from it too.
            paths += [lib, os.path.dirname(lib)]
    return paths


@dataclass(frozen=True)
class SandboxSpec:
    """What opens a :class:`Sandbox` (its constructor's arguments, as given): sent to a Ray worker, which
    opens a sandbox of its own on its machine (its own host check, cgroups, cores for ``max_parallel=0``)."""

    user: str = SANDBOX_USER
    python: str | None = None
    max_parallel: int = 0
    work_root: str | None = None
    bwrap: str | None = None

    def open(self) -> Sandbox:
        return Sandbox(
            user=self.user, python=self.python, max_parallel=self.max_parallel, work_root=self.work_root,
            bwrap=self.bwrap,
        )  # fmt: skip


class Sandbox:
    """Runs programs in isolation. Construct once; it checks the host and probes one real run.

    ``python`` is the interpreter for programs (default: the system python3, which the sandbox user
    can read). ``max_parallel`` bounds concurrent runs in :meth:`run_many` (0 = number of cores).
    ``bwrap`` is the bubblewrap binary (default: ``bwrap`` on ``PATH``). ``cluster`` with
    ``backend=ray`` makes :meth:`run_many` fan its jobs out over ``cluster.workers`` Ray workers
    (docs/cluster.md); it changes where programs run, never their results.
    """

    def __init__(
        self,
        *,
        user: str = SANDBOX_USER,
        python: str | None = None,
        max_parallel: int = 0,
        work_root: str | None = None,
        bwrap: str | None = None,
        cluster: ClusterConfig | None = None,
    ) -> None:
        self.spec = SandboxSpec(user, python, max_parallel, work_root, bwrap)
        self.cluster = cluster
        self.python = python or _find_python()
        self.max_parallel = max_parallel or (os.cpu_count() or 1)
        self.work_root = work_root
        self._bwrap = bwrap or shutil.which("bwrap")
        self._setpriv = shutil.which("setpriv")
        self._ldd = shutil.which("ldd")
        self._check_host(user)
        pw = pwd.getpwnam(user)
        self.uid, self.gid = pw.pw_uid, pw.pw_gid
        assert self._ldd is not None
        self._seccomp = seccomp_filter()
        self._launcher = _LAUNCHER.read_text(encoding="utf-8")
        self._prefix = self._command_prefix(_view_args(_interpreter_paths(self.python, self._ldd)))
        self._cgroup_parent = PIDS_CGROUP_ROOT / "rla-sandbox"
        self._cgroup_parent.mkdir(exist_ok=True)
        self._probe()

    def _check_host(self, user: str) -> None:
        missing = []
        if os.geteuid() != 0:
            missing.append(
                "root (needed to join per-run cgroups and switch to the sandbox user); run as root"
            )
        if self._bwrap is None or not os.access(self._bwrap, os.X_OK):
            missing.append(
                "bubblewrap (the 'bwrap' binary, the sandbox's namespace and filesystem isolation); "
                "apt-get install bubblewrap (scripts/setup.sh does)"
            )
        if self._setpriv is None:
            missing.append("the 'setpriv' binary (util-linux); apt-get install util-linux")
        if self._ldd is None:
            missing.append("the 'ldd' binary (libc-bin), used to find the interpreter's shared libraries")
        if not os.access("/bin/sh", os.X_OK):
            missing.append("/bin/sh")
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

    def _command_prefix(self, view: list[str]) -> list[str]:
        """The per-run command up to (not including) the per-run parts; see the module docstring."""
        assert self._bwrap is not None and self._setpriv is not None
        env: list[str] = []
        for key, value in _SANDBOX_ENV.items():
            env += ["--setenv", key, value]
        return [
            self._setpriv,
            f"--reuid={self.uid}",
            f"--regid={self.gid}",
            "--clear-groups",
            "--no-new-privs",
            "--inh-caps=-all",
            "--bounding-set=-all",
            self._bwrap,
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--cap-drop",
            "ALL",
            "--die-with-parent",
            "--as-pid-1",
            "--new-session",
            "--hostname",
            "sandbox",
            "--clearenv",
            *env,
            *view,
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--remount-ro",
            "/dev",
        ]

    def _probe(self) -> None:
        probe = (
            "import importlib, importlib.util, sys\n"
            "bad = []\n"
            f"for name in {list(_PROBE_MODULES)!r}:\n"
            "    try:\n"
            "        if importlib.util.find_spec(name) is not None:\n"
            "            importlib.import_module(name)\n"
            "    except ImportError as exc:\n"
            "        bad.append(f'{name}: {exc}')\n"
            "print(sys.version_info[0], input(), *bad, sep='|')\n"
        )
        res = self.run_program(probe, "probe\n", limits=Limits(wall_s=10.0, cpu_s=5))
        if res.error_kind is not ErrorKind.OK or res.stdout.strip().split("|") != ["3", "probe"]:
            raise SandboxError(
                f"sandbox probe run failed with {self.python} as '{SANDBOX_USER}': kind={res.error_kind}, "
                f"exit={res.exit_code}, signal={res.signal}, stdout={res.stdout[-500:]!r}, "
                f"stderr={res.stderr[-500:]!r}, detail={res.detail!r}. Check that the interpreter, its "
                "stdlib and its shared libraries are readable by the sandbox user (pass python=... to Sandbox)"
            )

    def _command(
        self, cgroup: Path, limits: Limits, files: list[str], *, program_fd: int, seccomp_fd: int, **fds: int
    ) -> list[str]:
        """The run's command line; ``files``: bwrap's binds of the job's input and output files."""
        json_fd, status_fd = fds["json_fd"], fds["status_fd"]
        lim = [
            status_fd,
            limits.cpu_s,
            limits.memory_mb * 1024 * 1024,
            # One byte more than allowed, so an over-long stdout is detectable by its size.
            limits.output_kb * 1024 + 1,
            # Per user namespace on current kernels; the per-run bound is the cgroup's pids.max.
            (limits.max_processes + _BWRAP_PROCESSES) * self.max_parallel + 16,
            limits.max_open_files,
        ]
        return [
            "/bin/sh",
            "-c",
            _JOIN_CGROUP,
            str(cgroup),
            *self._prefix,
            "--size",
            str(limits.tmpfs_kb * 1024),
            "--perms",
            "0700",
            "--tmpfs",
            "/tmp",
            "--file",
            str(program_fd),
            "/tmp/main.py",
            *files,
            "--remount-ro",
            "/",
            "--chdir",
            "/tmp",
            "--seccomp",
            str(seccomp_fd),
            "--json-status-fd",
            str(json_fd),
            "--",
            self.python,
            "-S",
            "-I",
            "-B",
            "-c",
            self._launcher,
            *map(str, lim),
        ]

    def run_program(
        self, code: str, stdin: str, *, limits: Limits, input_file: str = "", output_file: str = ""
    ) -> ExecResult:
        """Run ``code`` with ``stdin`` under ``limits``; never raises for program misbehaviour.

        ``input_file`` / ``output_file``: as in :class:`Job`. Raises SandboxError only when the sandbox itself
        fails (bwrap set-up, leaked processes).
        """
        if any(
            n and (os.path.basename(n) != n or n in (".", "..", "main.py")) for n in (input_file, output_file)
        ):
            raise SandboxError(f"a job's files must be plain file names, got {input_file!r}, {output_file!r}")
        workdir = Path(tempfile.mkdtemp(prefix="rla-sbx-", dir=self.work_root))
        cgroup = self._cgroup_parent / f"run-{uuid.uuid4().hex}"
        try:
            (workdir / "main.py").write_text(code, encoding="utf-8")
            (workdir / "stdin.txt").write_text(stdin, encoding="utf-8")
            # bwrap binds these by name as the sandbox user: the work directory becomes searchable, not listable.
            # The output file is the sandbox user's and read back here (ExecResult.file_output).
            files = ["--ro-bind", str(workdir / "stdin.txt"), f"/tmp/{input_file}"] if input_file else []
            if output_file:
                (workdir / "output_file").touch(mode=0o600)
                os.chown(workdir / "output_file", self.uid, self.gid)
                files += ["--bind", str(workdir / "output_file"), f"/tmp/{output_file}"]
            workdir.chmod(0o711 if files else 0o700)
            cgroup.mkdir()
            (cgroup / "pids.max").write_text(str(limits.max_processes + _BWRAP_PROCESSES))
            return self._execute(workdir, cgroup, limits, files)
        finally:
            self._drain_cgroup(cgroup)
            shutil.rmtree(workdir, ignore_errors=False)

    def _execute(self, workdir: Path, cgroup: Path, limits: Limits, files: list[str]) -> ExecResult:
        timed_out = False
        start = time.perf_counter()
        seccomp_fd = os.memfd_create("rla-sandbox-seccomp")
        try:
            os.write(seccomp_fd, self._seccomp)
            os.lseek(seccomp_fd, 0, os.SEEK_SET)
            with (
                open(workdir / "stdin.txt", "rb") as fin,
                open(workdir / "stdout", "wb") as fout,
                open(workdir / "stderr", "wb") as ferr,
                open(workdir / "bwrap-status.json", "wb") as fjson,
                open(workdir / "status.txt", "wb") as fstatus,
                open(workdir / "main.py", "rb") as fprog,
            ):
                fds = {
                    "program_fd": fprog.fileno(),
                    "seccomp_fd": seccomp_fd,
                    "json_fd": fjson.fileno(),
                    "status_fd": fstatus.fileno(),
                }
                proc = subprocess.Popen(
                    self._command(cgroup, limits, files, **fds),
                    stdin=fin,
                    stdout=fout,
                    stderr=ferr,
                    env={},
                    cwd=workdir,
                    start_new_session=True,
                    pass_fds=tuple(fds.values()),  # kept at their numbers, which the command line names
                )
                # Popen.wait(timeout=) polls with sleeps of up to 50 ms; a pidfd wakes us at the exit itself.
                pidfd = os.pidfd_open(proc.pid)
                try:
                    if not select.select([pidfd], [], [], limits.wall_s)[0]:
                        timed_out = True
                        # Everything but bwrap's monitor: pid 1 dies, the namespace with it, and the
                        # monitor reaps pid 1 and exits. Should it not, its process group goes too.
                        _kill_all(cgroup, spare=proc.pid)
                        if not select.select([pidfd], [], [], _MONITOR_EXIT_S)[0]:
                            os.killpg(proc.pid, signal.SIGKILL)
                finally:
                    os.close(pidfd)
                proc.wait()
        finally:
            os.close(seccomp_fd)
        wall = time.perf_counter() - start
        bwrap_status = _read_json_status(workdir / "bwrap-status.json")
        if (
            not timed_out
            and "exit-code" not in bwrap_status
            and "child-pid" in bwrap_status
            and proc.returncode < 0
        ):
            # The program had started (bwrap reported its child) and bwrap's monitor died of a signal that
            # neither the program (other namespaces, another user) nor our timeout sent: the host killed it.
            return ExecResult(
                exit_code=None, signal=None, stdout="", stderr="", error_kind=ErrorKind.SANDBOX,
                wall_s=time.perf_counter() - start,
                detail=f"the sandbox (bwrap pid {proc.pid}) died of signal {-proc.returncode} under the program",
            )  # fmt: skip
        if not timed_out and "exit-code" not in bwrap_status:
            # No exit status from bwrap: the launcher was never exec'd, so bwrap's own set-up failed.
            raise SandboxError(
                f"bwrap exited with {proc.returncode} before the program ran: "
                f"{(workdir / 'stderr').read_bytes()[-500:]!r}; are unprivileged user namespaces allowed "
                "on this host? (sysctl user.max_user_namespaces > 0; on Ubuntu >= 23.10 also "
                "kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap)"
            )
        key, _, value = (workdir / "status.txt").read_text(encoding="utf-8").partition(" ")
        exit_code = int(value) if key == "exit" else None
        sig = int(value) if key == "signal" else None
        out_limit = limits.output_kb * 1024
        stdout_raw = _read_head(workdir / "stdout", out_limit + 1)
        stderr_raw = _read_head(workdir / "stderr", _STDERR_KEEP_BYTES)
        answer = workdir / "output_file"
        file_raw = _read_head(answer, out_limit + 1) if answer.exists() else None
        if not timed_out and exit_code is None and sig is None:
            kind, detail = (
                ErrorKind.NO_STATUS,
                "the sandbox's pid 1 reported no status (killed from inside, or from outside)",
            )
        else:
            kind, detail = _classify(
                timed_out=timed_out,
                exit_code=exit_code,
                sig=sig,
                stdout_len=max(len(stdout_raw), len(file_raw or b"")),
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
            file_output=None if file_raw is None else file_raw[:out_limit].decode("utf-8", errors="replace"),
        )

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
                _kill_all(cgroup)
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

    def run_many(self, jobs: Sequence[Job], *, retries: int = 0) -> list[ExecResult]:
        """Run jobs concurrently; results in input (job id) order.

        Here: a thread pool of at most ``max_parallel`` runs. With ``cluster.backend=ray`` and more
        than one job: contiguous batches of the jobs, one per Ray worker (each opens its own sandbox
        from :attr:`spec` and runs its batch in its own thread pool), concatenated in batch order.
        A run's result depends only on its job, so both give the same results but for ``wall_s``.
        A run whose sandbox died (:attr:`ErrorKind.SANDBOX`) runs again in a fresh sandbox, up to
        ``retries`` times; each failed attempt is logged, and one still failing keeps that kind.
        """
        results = self._run_once(jobs)
        for attempt in range(1, retries + 1):
            again = [i for i, r in enumerate(results) if r.error_kind is ErrorKind.SANDBOX]
            if not again:
                break
            for i in again:
                log.warning(
                    "sandbox run %d failed (attempt %d): %s; running it again",
                    i,
                    attempt - 1,
                    results[i].detail,
                )
            for i, result in zip(again, self._run_once([jobs[i] for i in again]), strict=True):
                results[i] = result
        return results

    def _run_once(self, jobs: Sequence[Job]) -> list[ExecResult]:
        if not jobs:
            return []
        if self.cluster is not None and self.cluster.backend is ClusterBackend.RAY and len(jobs) > 1:
            from rla_core.cluster.ray_session import run_batches

            return run_batches(self.cluster, partial(_run_batch, self.spec), jobs, what="sandbox batch")
        with ThreadPoolExecutor(max_workers=min(self.max_parallel, len(jobs))) as pool:
            return list(pool.map(self._run_job, jobs))

    def _run_job(self, job: Job) -> ExecResult:
        return self.run_program(
            job.code, job.stdin, limits=job.limits, input_file=job.input_file, output_file=job.output_file
        )


def _run_batch(spec: SandboxSpec, jobs: list[Job]) -> list[ExecResult]:
    """One Ray worker's batch: a sandbox of this machine's own, its thread pool, results in job order."""
    return spec.open().run_many(jobs)


def _find_python() -> str:
    # The program interpreter must be fully readable by the sandbox user; a venv under /root is not.
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    raise SandboxError(
        "no system python3 at /usr/bin/python3 or /usr/local/bin/python3 for sandboxed programs; "
        "install one (apt-get install python3) or pass python=... to Sandbox"
    )


def _kill_all(cgroup: Path, *, spare: int | None = None) -> None:
    """SIGKILL every process in the run's cgroup but ``spare`` (host pids; the sandbox user cannot leave it)."""
    try:
        pids = [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]
    except FileNotFoundError:
        return
    for pid in pids:
        if pid == spare:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue


def _read_json_status(path: Path) -> dict[str, int]:
    """bwrap's --json-status-fd output, merged: ``child-pid`` at start, ``exit-code`` if the program ran."""
    merged: dict[str, int] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            merged.update(json.loads(line))
    return merged


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
