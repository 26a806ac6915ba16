"""In-sandbox launcher: pid 1 of the run's pid namespace; forks the program with its rlimits and reaps.

``runner.py`` passes this file's text to the sandbox interpreter as ``python -S -I -B -c <text>
STATUS_FD CPU_S AS_BYTES FSIZE_BYTES NPROC NOFILE`` inside bubblewrap (``--as-pid-1``); it is never
imported. By then bwrap has built the filesystem view and the namespaces, and the process runs as the
unprivileged sandbox user with no capabilities, ``no_new_privs`` and the seccomp filter. What is left
here is what bwrap does not do:

* **rlimits** (in the forked child only, so they bound the program and not this init): CPU seconds,
  address space, file size (caps stdout, a host file, too), processes, open files, no core. A hard
  limit is only ever lowered, never set above the one inherited, and the program cannot raise it again
  (that needs CAP_SYS_RESOURCE).
* **running the program** in the child, in a fresh ``__main__`` namespace, as ``python main.py`` would
  (``__name__ == "__main__"``, ``__file__``, ``sys.argv``; an uncaught exception exits with status 1
  and a traceback on stderr; ``SystemExit`` sets the status). The child is a fork of this already
  started interpreter, so no second interpreter start-up is paid.
* **init duties**: as pid 1 it reaps orphans until the program exits, then reports ``exit CODE`` or
  ``signal SIGNUM`` on STATUS_FD (closed in the child before any program code runs, so the program
  cannot write there) and exits; the kernel then kills and reaps whatever the program left in the
  namespace, and bwrap (our parent) reaps us, so no process of a run outlives it. Signals from inside
  the namespace cannot kill pid 1 (the kernel drops those it has no handler for; SIGINT is reset to
  the default for that reason).

Stdlib only and nothing imported but ``os``, ``resource``, ``signal``, ``sys``, so it adds about a
millisecond.
"""

import os
import resource
import signal
import sys

PROGRAM = "/tmp/main.py"


def _lower(which: int, soft: int, hard: int) -> None:
    _, cur_hard = resource.getrlimit(which)
    if cur_hard != resource.RLIM_INFINITY:
        hard = min(hard, cur_hard)
    resource.setrlimit(which, (min(soft, hard), hard))


def _run_program(cpu_s: int, as_bytes: int, fsize_bytes: int, nproc: int, nofile: int) -> None:
    _lower(resource.RLIMIT_CPU, cpu_s, cpu_s + 1)  # SIGXCPU at the soft limit, SIGKILL a second later
    _lower(resource.RLIMIT_AS, as_bytes, as_bytes)
    _lower(resource.RLIMIT_FSIZE, fsize_bytes, fsize_bytes)
    _lower(resource.RLIMIT_NPROC, nproc, nproc)
    _lower(resource.RLIMIT_NOFILE, nofile, nofile)
    _lower(resource.RLIMIT_CORE, 0, 0)
    path = PROGRAM  # a local: the module globals are cleared below
    with open(path, "rb") as fh:
        code = compile(fh.read(), path, "exec", dont_inherit=True)
    sys.argv[:] = [path]
    namespace = sys.modules["__main__"].__dict__
    builtins = namespace["__builtins__"]
    namespace.clear()
    namespace.update(
        __name__="__main__",
        __file__=path,
        __cached__=None,
        __doc__=None,
        __builtins__=builtins,
        __loader__=None,
        __package__=None,
        __spec__=None,
    )
    exec(code, namespace)


def main() -> None:
    status_fd, cpu_s, as_bytes, fsize_bytes, nproc, nofile = (int(v) for v in sys.argv[1:7])
    pid = os.fork()
    if pid == 0:
        os.close(status_fd)
        # Returns into the interpreter's normal exit path: flushes stdout, exit status as for a script.
        _run_program(cpu_s, as_bytes, fsize_bytes, nproc, nofile)
        return
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    while True:
        reaped, status = os.waitpid(-1, 0)
        if reaped == pid:
            break
    if os.WIFSIGNALED(status):
        os.write(status_fd, f"signal {os.WTERMSIG(status)}\n".encode())
    else:
        os.write(status_fd, f"exit {os.WEXITSTATUS(status)}\n".encode())
    os._exit(0)


if __name__ == "__main__":
    main()
