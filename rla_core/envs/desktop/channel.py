"""Host side of a desktop's channel: TCP on the host's loopback, forwarded to a UNIX socket of the desktop.

A desktop runs in its own network namespace, so nothing on the host can connect to its ports and nothing in
it can connect out. Its server (and the ports it forwards, e.g. the browser's debugging port) are reachable
only through UNIX sockets in the desktop's channel directory. ``desktop_env`` speaks HTTP to ``ip:port``, so
each socket gets a :class:`Forward`: a listener on ``127.0.0.1:<free port>`` of the host that pipes every
connection to the socket. The forwarders are threads of the owning process: they end with it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path

# The desktop's server (standard library only, run by the desktop's own Python) declares the byte pipe both
# ends use.
from rla_core.envs.desktop.server import pipe


class Forward:
    """Listen on ``127.0.0.1:port`` (a free one when 0) and pipe each connection to UNIX socket ``target``."""

    def __init__(self, target: Path, *, port: int = 0) -> None:
        self.target = target
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(64)
        self.port: int = int(self._listener.getsockname()[1])
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._serve, name=f"forward-{self.port}", daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(str(self.target))
            except OSError:
                client.close()  # the desktop is (re)starting: the client sees a closed connection
                upstream.close()
                continue
            with self._lock:
                if self._closed:
                    client.close()
                    upstream.close()
                    return
                self._open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        pipe(a, b)
        with self._lock:
            for s in (a, b):
                self._open.discard(s)
                s.close()

    def close(self) -> None:
        """Stop listening and cut every open connection (idempotent)."""
        with self._lock:
            self._closed = True
            conns = list(self._open)
        with contextlib.suppress(OSError):
            self._listener.close()
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
