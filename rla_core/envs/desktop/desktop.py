"""One local desktop: Xvfb + jwm + our protocol server, one process group (:mod:`rla_core.procs`).

Start, readiness (the server answers ``/platform``), stop (kill the group) and reaping after SIGKILL of
the owner are :class:`rla_core.procs.ProcessGroup`'s. Not yet done (issue 28): bubblewrap sandbox, own
network namespace, private home from a template, the pool and the ``desktop_env`` provider.

Example:
    >>> with Desktop.start(runtime_dir=Path("/tmp/rla-desk")) as d:  # doctest: +SKIP
    ...     d.url
    'http://127.0.0.1:...'
"""

from __future__ import annotations

import shutil
import socket
import urllib.request
from pathlib import Path

from rla_core import procs
from rla_core.errors import ProcessError

PIDFILE_KIND = "desktop"
SERVER = Path(__file__).with_name("server.py")
DESKTOP_PYTHON = "/usr/bin/python3"  # Debian's: python3-pil (and later python3-pyatspi) are its packages
NEEDED = ("Xvfb", "jwm", DESKTOP_PYTHON)
# Xvfb first, then the window manager, then the server (it replaces the shell, so it leads the group).
_LAUNCH = (
    'Xvfb ":$1" -screen 0 "$2" -nolisten tcp & '
    'while [ ! -S "/tmp/.X11-unix/X$1" ]; do sleep 0.05; done; '
    'export DISPLAY=":$1"; jwm & exec "$3" "$4" --port "$5"'
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _free_display(first: int = 50) -> int:
    for n in range(first, first + 200):
        if not Path(f"/tmp/.X11-unix/X{n}").exists() and not Path(f"/tmp/.X{n}-lock").exists():
            return n
    raise ProcessError("no free X display number between :50 and :249")


class Desktop:
    """A running desktop and the URL of its server."""

    def __init__(self, group: procs.ProcessGroup, *, display: int, port: int) -> None:
        self.group = group
        self.display = display
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    @classmethod
    def start(
        cls, *, runtime_dir: Path | None = None, screen: str = "1280x720x24", timeout_s: float = 60.0
    ) -> Desktop:
        """Start a desktop and wait until its server answers; :class:`ProcessError` naming what is missing."""
        missing = [n for n in NEEDED if shutil.which(n) is None]
        if missing:
            raise ProcessError(f"desktop needs {missing} (Debian: apt-get install xvfb jwm python3-pil)")
        runtime = runtime_dir if runtime_dir is not None else procs.default_runtime_dir("desktop")
        display, port = _free_display(), _free_port()
        argv = [
            "/bin/sh",
            "-c",
            _LAUNCH,
            "desktop",
            str(display),
            screen,
            DESKTOP_PYTHON,
            str(SERVER),
            str(port),
        ]
        group = procs.ProcessGroup.start(
            argv, kind=PIDFILE_KIND, runtime_dir=runtime, what=f"desktop :{display}"
        )
        desktop = cls(group, display=display, port=port)
        group.wait_ready(desktop._answers, timeout_s=timeout_s, interval_s=0.1)
        return desktop

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/platform", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        """Kill every process of the desktop (idempotent)."""
        self.group.stop()

    def __enter__(self) -> Desktop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
