"""In-namespace launcher of the code sandbox. Runs as root, as pid 1 of a fresh pid namespace.

``runner.py`` starts it through ``unshare --net --pid --fork --mount --ipc --uts --kill-child
--mount-proc``; it is never imported. It (1) joins the run's pids cgroup, (2) hides the host's
writable directories behind private tmpfs mounts and remounts ``/`` read-only (mount namespace only),
(3) forks the program as the unprivileged sandbox user with rlimits and a scrubbed environment, and
(4) reaps children like an init until the program exits. When it exits, the kernel kills every process
left in the pid namespace, so daemons the program leaves behind die with it.

Its one argument is a hex-encoded ``marshal`` dict (see ``runner._launch_config``). It
reports to a status file descriptor, not to
stdout/stderr (those belong to the program): one line ``exit CODE``, ``signal SIGNUM`` or
``setup_error MESSAGE``. Stdlib only, so it starts fast under ``python -S -I``.
"""

import ctypes
import marshal
import os
import resource
import sys
from typing import Any

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
PR_SET_NO_NEW_PRIVS = 38
EXIT_SETUP_FAILED = 125


def _mount(libc: ctypes.CDLL, source: str, target: str, fstype: str, flags: int, data: str) -> None:
    rc = libc.mount(
        source.encode(),
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {fstype or source} on {target} failed: {os.strerror(err)}")


def _write_status(fd: int, payload: dict[str, Any]) -> None:
    # One "key value" line; json would import re, which costs more start-up than all the rest.
    ((key, value),) = payload.items()
    os.write(fd, f"{key} {value}".replace("\n", " ").encode() + b"\n")


def _setup(cfg: dict[str, Any]) -> ctypes.CDLL:
    if cfg["cgroup"]:
        # "0" = the writing process; children inherit the cgroup, so pids.max bounds the whole tree.
        with open(os.path.join(cfg["cgroup"], "cgroup.procs"), "w") as fh:
            fh.write("0")
    with open(cfg["program"], "rb") as fh:
        program = fh.read()
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = cfg["uid"], cfg["gid"]
    # The program's only writable place: a size-capped tmpfs owned by the sandbox user (disk fill is
    # bounded by its size, and it vanishes with the mount namespace).
    _mount(
        libc,
        "tmpfs",
        "/tmp",
        "tmpfs",
        MS_NOSUID | MS_NODEV,
        f"size={cfg['tmpfs_kb']}k,mode=0700,uid={uid},gid={gid}",
    )
    for path in ("/var/tmp", "/dev/shm", "/run/lock"):
        if os.path.isdir(path):
            # Root-owned and tiny: the sandbox user cannot write to the host's world-writable dirs.
            _mount(libc, "tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "size=16k,mode=0755")
    _mount(libc, "none", "/", "", MS_REMOUNT | MS_BIND | MS_RDONLY, "")
    main_path = "/tmp/main.py"
    with open(main_path, "wb") as fh:
        fh.write(program)
    os.chmod(main_path, 0o644)
    return libc


def _child(cfg: dict[str, Any], libc: ctypes.CDLL) -> None:
    lim = cfg["limits"]
    pairs = [
        (resource.RLIMIT_CPU, lim["cpu_s"], lim["cpu_s"] + 1),
        (resource.RLIMIT_AS, lim["memory_bytes"], lim["memory_bytes"]),
        (resource.RLIMIT_FSIZE, lim["file_size_bytes"], lim["file_size_bytes"]),
        (resource.RLIMIT_NPROC, lim["nproc"], lim["nproc"]),
        (resource.RLIMIT_NOFILE, lim["nofile"], lim["nofile"]),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    for which, soft, hard in pairs:
        resource.setrlimit(which, (soft, hard))
    os.setgroups([])
    os.setgid(cfg["gid"])
    os.setuid(cfg["uid"])
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    os.chdir("/tmp")
    python = cfg["python"]
    os.execve(python, [python, "-S", "-I", "-B", "/tmp/main.py"], cfg["env"])


def main() -> None:
    cfg = marshal.loads(bytes.fromhex(sys.argv[1]))
    # Opened by the host before unshare: a file opened here would pin the mount copy writable and
    # make the read-only remount of / fail with EBUSY.
    status_fd = cfg["status_fd"]
    os.set_inheritable(status_fd, False)
    try:
        libc = _setup(cfg)
        pid = os.fork()
    except OSError as exc:
        _write_status(status_fd, {"setup_error": f"launcher set-up: {exc}"})
        os._exit(EXIT_SETUP_FAILED)
    if pid == 0:
        try:
            _child(cfg, libc)
        except OSError as exc:
            _write_status(status_fd, {"setup_error": f"dropping privileges / exec: {exc}"})
        os._exit(EXIT_SETUP_FAILED)
    while True:
        # As pid 1 we inherit orphans; reap them until the program itself exits.
        reaped, status = os.waitpid(-1, 0)
        if reaped == pid:
            break
    if os.WIFSIGNALED(status):
        _write_status(status_fd, {"signal": os.WTERMSIG(status)})
    else:
        _write_status(status_fd, {"exit": os.WEXITSTATUS(status)})
    os._exit(0)


if __name__ == "__main__":
    main()
