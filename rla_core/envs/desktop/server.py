"""Our implementation of part of OSWorld's in-desktop HTTP server protocol (stdlib only).

Runs INSIDE a desktop (``DISPLAY`` set) under Debian's ``/usr/bin/python3``, which has Debian's
``python3-pil`` (screenshots through X11 with ``PIL.ImageGrab``). Endpoints implemented so far, with the
request and answer shapes that ``desktop_env``'s ``PythonController`` / ``SetupController`` use:

* ``GET /platform`` -> ``Linux``;
* ``GET /screenshot`` -> PNG bytes of the whole screen;
* ``POST /execute`` and ``POST /setup/execute`` with JSON ``{"command": [...] | str, "shell": bool}``
  -> JSON ``{"status", "output", "error", "returncode"}``;
* ``POST /setup/launch`` (same body) -> starts the command detached, answers at once;
* ``POST /file`` with form field ``file_path`` -> the file's bytes, 404 when missing.

Not implemented yet (answered 404, never a made-up value): ``/accessibility``, ``/terminal``, the window
endpoints and the rest of ``/setup/*``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

EXECUTE_TIMEOUT_S = 120


def _run(body: dict[str, Any]) -> dict[str, Any]:
    """Run ``body["command"]`` to completion; OSWorld's answer shape."""
    command = body.get("command")
    shell = bool(body.get("shell", False))
    if not command or not isinstance(command, str | list):
        raise ValueError(f"'command' must be a non-empty string or list, got {command!r}")
    if isinstance(command, list) and command and command[0] == "python":
        command = [sys.executable, *command[1:]]  # the desktop's interpreter plays OSWorld's `python`
    proc = subprocess.run(command, shell=shell, capture_output=True, text=True, timeout=EXECUTE_TIMEOUT_S)
    return {"status": "success", "output": proc.stdout, "error": proc.stderr, "returncode": proc.returncode}


class Handler(BaseHTTPRequestHandler):
    """One request of the protocol."""

    def _send(self, code: int, payload: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _json(self, code: int, obj: Any) -> None:
        self._send(code, json.dumps(obj).encode(), "application/json")

    def do_GET(self) -> None:
        """``/platform``, ``/screenshot``."""
        if self.path == "/platform":
            self._send(200, b"Linux", "text/plain")
        elif self.path == "/screenshot":
            from PIL import ImageGrab

            image = ImageGrab.grab(xdisplay=os.environ["DISPLAY"])
            buf = io.BytesIO()
            image.save(buf, format="PNG")
            self._send(200, buf.getvalue(), "image/png")
        else:
            self._json(404, {"status": "error", "message": f"{self.path} is not implemented by this server"})

    def do_POST(self) -> None:
        """``/execute``, ``/setup/execute``, ``/setup/launch``, ``/file``."""
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            if self.path in ("/execute", "/setup/execute"):
                self._json(200, _run(json.loads(raw or b"{}")))
            elif self.path == "/setup/launch":
                body = json.loads(raw or b"{}")
                subprocess.Popen(
                    body["command"], shell=bool(body.get("shell", False)), start_new_session=False,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                )  # fmt: skip
                self._send(200, b"launched", "text/plain")
            elif self.path == "/file":
                form = urllib.parse.parse_qs(raw.decode())
                path = form.get("file_path", [""])[0]
                if not os.path.isfile(path):
                    self._json(404, {"status": "error", "message": f"no file {path!r}"})
                    return
                with open(path, "rb") as f:
                    self._send(200, f.read(), "application/octet-stream")
            else:
                self._json(
                    404, {"status": "error", "message": f"{self.path} is not implemented by this server"}
                )
        except (ValueError, KeyError, OSError, subprocess.SubprocessError) as exc:
            self._json(500, {"status": "error", "message": f"{type(exc).__name__}: {exc}"})

    def log_message(self, format: str, *args: Any) -> None:
        """Requests go to stderr (the desktop's log) with the default format."""
        sys.stderr.write(f"{self.address_string()} - {format % args}\n")


def main(argv: list[str] | None = None) -> None:
    """``python server.py --port P``: serve on 127.0.0.1:P until killed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
