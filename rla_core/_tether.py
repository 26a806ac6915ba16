"""Leader of a tethered process group: runs a command and ends the group when its owner dies.

``python -m rla_core._tether OWNER_PID OWNER_START PIDFILE SCRATCH -- ARGV...`` (what
:meth:`rla_core.procs.ProcessGroup.start` runs with ``tethered=True``; ``SCRATCH`` may be empty). It
starts ``ARGV`` as a child in the group it leads and waits, on two pidfds, for whichever comes first:

* **the command exits**: its exit code is ours (``128 + n`` when a signal ``n`` ended it);
* **the owner exits** (SIGKILLed, OOM-killed, an actor killed by Ray: no cleanup of its own ran): every
  other member of the group is SIGKILLed, the group's scratch directory and pidfile are removed, and we
  exit 137. A server whose owner is gone serves no one, and its GPU memory is someone else's next.

A stop by the owner (:meth:`~rla_core.procs.ProcessGroup.stop`) SIGKILLs the whole group, us included,
and cleans up after it; SIGTERM sent to us alone is passed on to the command.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

from rla_core import procs


def _end_group(pidfile: Path, scratch: Path | None) -> None:
    """SIGKILL every other member of our group, wait until they are gone, then remove the group's files."""
    procs.kill_group(os.getpid(), spare=os.getpid())
    if scratch is not None:
        procs.remove_scratch(scratch)
    pidfile.unlink(missing_ok=True)


def main(argv: list[str]) -> int:
    owner_arg, owner_start, pidfile_arg, scratch_arg, sep, *command = argv
    if sep != "--" or not command:
        print(f"usage: {__doc__.splitlines()[2]}", file=sys.stderr)
        return 2
    owner, pidfile, scratch = int(owner_arg), Path(pidfile_arg), Path(scratch_arg) if scratch_arg else None
    try:
        owner_fd = os.pidfd_open(owner)
    except ProcessLookupError:
        owner_fd = None
    if owner_fd is None or not procs.is_running(owner, owner_start):
        _end_group(pidfile, scratch)  # the owner died before we could watch it
        return 137
    child = subprocess.Popen(command)  # stdin/stdout/stderr and the process group are ours
    signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
    child_fd = os.pidfd_open(child.pid)
    while True:
        ready, _, _ = select.select([owner_fd, child_fd], [], [])
        if child_fd in ready:
            code = child.wait()
            return code if code >= 0 else 128 - code
        if owner_fd in ready:
            _end_group(pidfile, scratch)
            return 137


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
