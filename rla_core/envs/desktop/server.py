"""Our implementation of OSWorld's in-desktop HTTP server protocol (stdlib + Debian packages only).

Runs INSIDE a desktop's sandbox (``DISPLAY``, ``DBUS_SESSION_BUS_ADDRESS`` set) under Debian's
``/usr/bin/python3``: screenshots through ``PIL.ImageGrab`` (``python3-pil``), the accessibility tree through
AT-SPI (``python3-pyatspi``), windows through ``wmctrl``. It listens on a UNIX socket (the sandbox has its
own network namespace, so the host reaches it only through that socket, see ``desktop.py``) and forwards
``--forward PORT`` sockets ``<dir>/port-PORT.sock`` to ``127.0.0.1:PORT`` inside the namespace (the browser's
debugging port 9222, VLC's 8080) so that the host side can offer them too.

The request and answer shapes are the ones ``desktop_env`` 1.0.2's ``PythonController``,
``SetupController`` and getters send and read (learned from the OSWorld server protocol; this is our own
code). Endpoints:

* ``GET /platform`` ``/screenshot`` (PNG, no cursor drawn) ``/accessibility`` (``{"AT": xml}``)
  ``/terminal`` (``{"output": text|null}``) ``/cursor_position``;
* ``POST /execute`` ``/setup/execute`` (``{"command", "shell"}`` -> ``{"status","output","error","returncode"}``),
  ``/setup/launch``, ``/setup/open_file``, ``/setup/activate_window``, ``/setup/close_window``,
  ``/setup/upload`` (multipart ``file_path`` + ``file_data``), ``/setup/execute_with_verification``,
  ``/file`` (form ``file_path``), ``/screen_size``, ``/window_size``, ``/desktop_path``, ``/list_directory``,
  ``/run_python``, ``/run_bash_script``.

Anything else (wallpaper, screen recording, in-desktop downloads) answers 404 naming the path — never a
made-up value.
"""

from __future__ import annotations

import argparse
import contextlib
import email.parser
import email.policy
import io
import json
import os
import shlex
import shutil
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler
from typing import Any

EXECUTE_TIMEOUT_S = 120
# XML namespaces of OSWorld's Ubuntu accessibility tree (attribute prefixes st:, attr:, cp:, …).
NS = {
    "st": "https://accessibility.ubuntu.example.org/ns/state",
    "attr": "https://accessibility.ubuntu.example.org/ns/attributes",
    "cp": "https://accessibility.ubuntu.example.org/ns/component",
    "doc": "https://accessibility.ubuntu.example.org/ns/document",
    "docattr": "https://accessibility.ubuntu.example.org/ns/document/attributes",
    "txt": "https://accessibility.ubuntu.example.org/ns/text",
    "val": "https://accessibility.ubuntu.example.org/ns/value",
    "act": "https://accessibility.ubuntu.example.org/ns/action",
}
for _prefix, _uri in NS.items():
    ET.register_namespace(_prefix, _uri)
TREE_MAX_DEPTH = 50
TREE_MAX_CHILDREN = 1024
# `google-chrome` is Debian's Chromium here (desktop.py), which names its AT-SPI application "Chromium";
# desktop_env's Chrome getters find the address bar under `application[name="Google Chrome"]` (the name on the
# OSWorld image), so the application node is reported under that name. Only the application node is renamed.
APP_NAMES = {"Chromium": "Google Chrome"}


class HttpError(Exception):
    """An answer other than 200: ``code`` and a message that says what was wrong."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _expand(path: str) -> str:
    return os.path.expandvars(os.path.expanduser(path))


def _command(body: dict[str, Any]) -> tuple[list[str] | str, bool]:
    """``command``/``shell`` of a request, normalised like OSWorld's server: a string without ``shell`` is
    split with shell rules; ``~/`` arguments are expanded; ``python`` is the desktop's interpreter."""
    shell = bool(body.get("shell", False))
    command = body.get("command")
    if not command or not isinstance(command, str | list):
        raise HttpError(400, f"'command' must be a non-empty string or list, got {command!r}")
    if isinstance(command, str):
        return (command, True) if shell else (shlex.split(command), False)
    argv = [os.path.expanduser(a) if a.startswith("~/") else a for a in map(str, command)]
    if argv and argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    return (" ".join(argv) if shell else argv), shell


def _run(body: dict[str, Any], timeout_s: float = EXECUTE_TIMEOUT_S) -> dict[str, Any]:
    command, shell = _command(body)
    try:
        proc = subprocess.run(command, shell=shell, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError as exc:
        return {"status": "error", "output": "", "error": str(exc), "returncode": 127, "message": str(exc)}
    return {"status": "success", "output": proc.stdout, "error": proc.stderr, "returncode": proc.returncode}


def _launch(argv: list[str] | str, shell: bool = False) -> None:
    """Start a command detached from the request (its output goes to the desktop's log)."""
    subprocess.Popen(argv, shell=shell, stdin=subprocess.DEVNULL, start_new_session=True)


# ------------------------------------------------------------------------------------------- windows


def _wmctrl(action: str, body: dict[str, Any]) -> str:
    """``wmctrl -a``/``-c`` a window by title (substring, or exact with ``strict``) or by WM_CLASS."""
    name = body.get("window_name")
    if not name:
        raise HttpError(400, "window_name required")
    if shutil.which("wmctrl") is None:
        raise HttpError(500, "wmctrl is not installed in the desktop (Debian: apt-get install wmctrl)")
    flags = "-" + ("x" if body.get("by_class") else "") + ("F" if body.get("strict") else "") + action
    proc = subprocess.run(["wmctrl", flags, str(name)], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise HttpError(404, f"window {name!r} not found (wmctrl {flags})")
    return f"window {name!r}: done"


def _window_size(app_class: str) -> dict[str, int]:
    out = subprocess.run(["wmctrl", "-lxG"], capture_output=True, text=True, timeout=30).stdout
    for line in out.splitlines():
        parts = line.split(None, 7)  # id desktop x y w h class host title
        if len(parts) >= 7 and app_class.lower() in parts[6].lower():
            return {"width": int(parts[4]), "height": int(parts[5])}
    raise HttpError(404, f"no window of class {app_class!r}")


# ------------------------------------------------------------------------------------- accessibility


def _q(prefix: str, name: str) -> str:
    return f"{{{NS[prefix]}}}{name}"


def _atspi_node(node: Any, depth: int, pyatspi: Any) -> ET.Element:
    """One AT-SPI accessible as an element of OSWorld's tree: tag = role, ``name``, ``st:*`` states,
    ``attr:*`` attributes, ``cp:screencoord``/``cp:size`` of shown components, text, value, actions."""
    attrs: dict[str, str] = {"name": node.name or ""}
    states = node.getState().get_states()
    for st in states:
        state = pyatspi.StateType._enum_lookup[st].split("_", 1)[1].lower()
        if state:
            attrs[_q("st", state)] = "true"
    try:
        for key, value in node.get_attributes().items():
            if key:
                attrs[_q("attr", key)] = str(value)
    except Exception:  # an app may answer attributes with an error; the node stays. Kept broad: this runs in
        pass  # the desktop's own interpreter (pyatspi raises anything) and has nothing to record an error in
    if attrs.get(_q("st", "visible")) == "true" and attrs.get(_q("st", "showing")) == "true":
        try:
            x, y, w, h = node.queryComponent().getExtents(pyatspi.XY_SCREEN)
            attrs[_q("cp", "screencoord")] = str((x, y))
            attrs[_q("cp", "size")] = str((w, h))
        except NotImplementedError:
            pass
    text = ""
    try:
        t = node.queryText()
        text = t.getText(0, t.characterCount).replace("\ufffc", "").replace("\ufffd", "")
    except NotImplementedError:
        pass
    for probe, flag in (("queryImage", "image"), ("querySelection", "selection")):
        try:
            getattr(node, probe)()
            attrs[flag] = "true"
        except NotImplementedError:
            pass
    try:
        v = node.queryValue()
        for key, getter in (
            ("value", "currentValue"),
            ("min", "minimumValue"),
            ("max", "maximumValue"),
            ("step", "minimumIncrement"),
        ):
            with contextlib.suppress(Exception):
                attrs[_q("val", key)] = str(getattr(v, getter))
    except NotImplementedError:
        pass
    try:
        a = node.queryAction()
        for i in range(a.nActions):
            act = a.getName(i).replace(" ", "-")
            attrs[_q("act", f"{act}_desc")] = a.getDescription(i)
            attrs[_q("act", f"{act}_kb")] = a.getKeyBinding(i)
    except NotImplementedError:
        pass
    role = (node.getRoleName().strip() or "unknown").replace(" ", "-")
    element = ET.Element(role, attrs)
    if text:
        element.text = text
    if depth < TREE_MAX_DEPTH:
        try:
            for i, child in enumerate(node):
                if i == TREE_MAX_CHILDREN:
                    break
                if child is not None:
                    element.append(_atspi_node(child, depth + 1, pyatspi))
        except Exception:  # an application that quits mid-walk: keep what was read (kept broad: the desktop's
            pass  # own interpreter, which cannot record an environment error; the host sees the tree it gets)
    return element


def _desktop_tree() -> ET.Element:
    import pyatspi

    root = ET.Element("desktop-frame")
    for app in pyatspi.Registry.getDesktop(0):
        if app is not None:
            node = _atspi_node(app, 1, pyatspi)
            node.set("name", APP_NAMES.get(node.get("name", ""), node.get("name", "")))
            root.append(node)
    return root


def accessibility_xml() -> str:
    return ET.tostring(_desktop_tree(), encoding="unicode")


def terminal_output() -> str | None:
    """Text of the focused terminal of the active gnome-terminal window (None when there is none)."""
    import pyatspi

    for app in pyatspi.Registry.getDesktop(0):
        if app is None or app.name != "gnome-terminal-server":
            continue
        for frame in app:
            if frame is None or frame.getRoleName() != "frame":
                continue
            if not frame.getState().contains(pyatspi.STATE_ACTIVE):
                continue
            found = pyatspi.findAllDescendants(
                frame,
                lambda n: n.getRoleName() == "terminal" and n.getState().contains(pyatspi.STATE_FOCUSED),
            )
            if len(found) == 1:
                t = found[0].queryText()
                return str(t.getText(0, t.characterCount)).rstrip()
    return None


# ---------------------------------------------------------------------------------------- handlers


def _list_dir(path: str) -> dict[str, Any]:
    tree: dict[str, Any] = {"type": "directory", "name": os.path.basename(path), "children": []}
    try:
        for entry in sorted(os.listdir(path)):
            full = os.path.join(path, entry)
            if os.path.isdir(full) and not os.path.islink(full):
                tree["children"].append(_list_dir(full))
            else:
                tree["children"].append({"type": "file", "name": entry})
    except OSError as exc:
        return {"error": str(exc)}
    return tree


def _screen_size() -> tuple[int, int]:
    from PIL import ImageGrab

    size = ImageGrab.grab(xdisplay=os.environ["DISPLAY"]).size
    return int(size[0]), int(size[1])


def _verify(body: dict[str, Any]) -> dict[str, Any]:
    """Run the command, then poll ``verification`` (``window_exists`` / ``command_success``) until it holds."""
    result = _run(body)
    verification = body.get("verification") or {}
    deadline = time.monotonic() + float(body.get("max_wait_time", 10))
    interval = float(body.get("check_interval", 1.0))
    while True:
        ok = True
        if "window_exists" in verification:
            titles = subprocess.run(["wmctrl", "-l"], capture_output=True, text=True, timeout=30).stdout
            ok = str(verification["window_exists"]).lower() in titles.lower()
        if ok and "command_success" in verification:
            check = verification["command_success"]
            ok = _run({"command": check, "shell": isinstance(check, str)})["returncode"] == 0
        if ok:
            return {**result, "verification": "passed"}
        if time.monotonic() > deadline:
            raise HttpError(
                500, f"verification {verification} did not hold within {body.get('max_wait_time', 10)}s"
            )
        time.sleep(interval)


class Handler(BaseHTTPRequestHandler):
    """One request of the protocol."""

    protocol_version = "HTTP/1.1"

    def address_string(self) -> str:
        return "unix"  # requests come over a UNIX socket: there is no client address

    def _send(
        self, code: int, payload: bytes, content_type: str, extra: dict[str, str] | None = None
    ) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(payload)

    def _json(self, code: int, obj: Any) -> None:
        self._send(code, json.dumps(obj).encode(), "application/json")

    def _text(self, text: str) -> None:
        self._send(200, text.encode(), "text/plain; charset=utf-8")

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _dispatch(self, method: str) -> None:
        path = urllib.parse.urlsplit(self.path).path
        try:
            raw = self._body() if method == "POST" else b""
            route = ROUTES.get((method, path))
            if route is None:
                raise HttpError(404, f"{method} {path} is not implemented by the rlanything desktop server")
            route(self, raw)
        except HttpError as exc:
            self._json(exc.code, {"status": "error", "message": str(exc), "error": str(exc)})
        except (ValueError, KeyError, OSError, subprocess.SubprocessError) as exc:
            msg = f"{type(exc).__name__}: {exc}"
            self._json(500, {"status": "error", "message": msg, "error": msg})

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"server: {format % args}\n")

    # --- routes: each reads the raw body and answers ------------------------------------------

    def platform(self, raw: bytes) -> None:
        self._text("Linux")

    def screenshot(self, raw: bytes) -> None:
        from PIL import ImageGrab

        buf = io.BytesIO()
        ImageGrab.grab(xdisplay=os.environ["DISPLAY"]).save(buf, format="PNG")
        self._send(200, buf.getvalue(), "image/png")

    def accessibility(self, raw: bytes) -> None:
        self._json(200, {"AT": accessibility_xml()})

    def terminal(self, raw: bytes) -> None:
        self._json(200, {"output": terminal_output(), "status": "success"})

    def cursor_position(self, raw: bytes) -> None:
        out = subprocess.run(["xdotool", "getmouselocation", "--shell"], capture_output=True, text=True)
        pos = dict(line.split("=", 1) for line in out.stdout.split() if "=" in line)
        self._json(200, [int(pos["X"]), int(pos["Y"])])

    def execute(self, raw: bytes) -> None:
        self._json(200, _run(json.loads(raw or b"{}")))

    def launch(self, raw: bytes) -> None:
        command, shell = _command(json.loads(raw or b"{}"))
        _launch(command, shell)
        self._text(f"{command} launched successfully")

    def open_file(self, raw: bytes) -> None:
        path = _expand(str(json.loads(raw or b"{}").get("path") or ""))
        if not path:
            raise HttpError(400, "path not supplied")
        if not os.path.exists(path):
            raise HttpError(404, f"file not found: {path}")
        if shutil.which("xdg-open") is None:
            raise HttpError(
                500, "xdg-open is not installed in the desktop (Debian: apt-get install xdg-utils)"
            )
        _launch(["xdg-open", path])
        self._text(f"{path} opened")

    def activate_window(self, raw: bytes) -> None:
        self._text(_wmctrl("a", json.loads(raw or b"{}")))

    def close_window(self, raw: bytes) -> None:
        self._text(_wmctrl("c", json.loads(raw or b"{}")))

    def upload(self, raw: bytes) -> None:
        header = f"Content-Type: {self.headers.get('Content-Type', '')}\r\n\r\n".encode()
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(header + raw)
        fields: dict[str, bytes] = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            if name:
                payload = part.get_payload(decode=True)
                fields[str(name)] = payload if isinstance(payload, bytes) else b""
        if "file_path" not in fields or "file_data" not in fields:
            raise HttpError(400, "file_path and file_data are required (multipart/form-data)")
        path = _expand(fields["file_path"].decode())
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "wb") as f:
            f.write(fields["file_data"])
        self._text("File Uploaded")

    def verify(self, raw: bytes) -> None:
        self._json(200, _verify(json.loads(raw or b"{}")))

    def file(self, raw: bytes) -> None:
        form = urllib.parse.parse_qs(raw.decode())
        if "file_path" not in form:
            raise HttpError(400, "file_path is required")
        path = _expand(form["file_path"][0])
        if not os.path.isfile(path):
            raise HttpError(404, f"file not found: {path}")
        with open(path, "rb") as f:
            data = f.read()
        disposition = f'attachment; filename="{os.path.basename(path)}"'
        self._send(200, data, "application/octet-stream", {"Content-Disposition": disposition})

    def screen_size(self, raw: bytes) -> None:
        width, height = _screen_size()
        self._json(200, {"width": width, "height": height})

    def window_size(self, raw: bytes) -> None:
        form = urllib.parse.parse_qs(raw.decode())
        if "app_class_name" not in form:
            raise HttpError(400, "app_class_name is required")
        self._json(200, _window_size(form["app_class_name"][0]))

    def desktop_path(self, raw: bytes) -> None:
        self._json(200, {"desktop_path": os.path.expanduser("~/Desktop")})

    def list_directory(self, raw: bytes) -> None:
        path = json.loads(raw or b"{}").get("path")
        if not path:
            raise HttpError(400, "Missing 'path' parameter")
        path = _expand(str(path))
        if not os.path.isdir(path):
            raise HttpError(400, f"{path} is not a directory")
        self._json(200, {"directory_tree": _list_dir(path)})

    def run_python(self, raw: bytes) -> None:
        code = json.loads(raw or b"{}").get("code")
        if not code:
            raise HttpError(400, "'code' is required")
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(code)
        try:
            result = _run({"command": [sys.executable, f.name]})
        finally:
            os.unlink(f.name)
        status = "success" if result["returncode"] == 0 else "error"
        self._json(200, {**result, "status": status, "message": f"exit code {result['returncode']}"})

    def run_bash_script(self, raw: bytes) -> None:
        body = json.loads(raw or b"{}")
        script = body.get("script")
        if not script:
            raise HttpError(400, "'script' is required")
        cwd = _expand(body.get("working_dir") or "~")
        try:
            proc = subprocess.run(
                ["bash", "-c", script], cwd=cwd, capture_output=True, text=True,
                timeout=float(body.get("timeout", 30)),
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            self._json(200, {"status": "error", "output": "", "error": "timed out", "returncode": -1})
            return
        status = "success" if proc.returncode == 0 else "error"
        self._json(
            200,
            {"status": status, "output": proc.stdout, "error": proc.stderr, "returncode": proc.returncode},
        )


ROUTES = {
    ("GET", "/platform"): Handler.platform,
    ("GET", "/screenshot"): Handler.screenshot,
    ("GET", "/accessibility"): Handler.accessibility,
    ("GET", "/terminal"): Handler.terminal,
    ("GET", "/cursor_position"): Handler.cursor_position,
    ("POST", "/execute"): Handler.execute,
    ("POST", "/setup/execute"): Handler.execute,
    ("POST", "/setup/launch"): Handler.launch,
    ("POST", "/setup/open_file"): Handler.open_file,
    ("POST", "/setup/activate_window"): Handler.activate_window,
    ("POST", "/setup/close_window"): Handler.close_window,
    ("POST", "/setup/upload"): Handler.upload,
    ("POST", "/setup/execute_with_verification"): Handler.verify,
    ("POST", "/file"): Handler.file,
    ("POST", "/screen_size"): Handler.screen_size,
    ("POST", "/window_size"): Handler.window_size,
    ("POST", "/desktop_path"): Handler.desktop_path,
    ("POST", "/list_directory"): Handler.list_directory,
    ("POST", "/run_python"): Handler.run_python,
    ("POST", "/run_bash_script"): Handler.run_bash_script,
}


class UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def pipe(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` to ``dst`` until ``src`` ends, then shut both down (the host's forwarders use it too)."""
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def forward_port(path: str, port: int) -> None:
    """Accept on UNIX socket ``path`` and connect each client to ``127.0.0.1:port`` of this namespace."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path):
        os.unlink(path)  # left by the previous run of this desktop (reset kills without cleanup)
    listener.bind(path)
    listener.listen(64)

    def serve() -> None:
        while True:
            client, _ = listener.accept()
            try:
                upstream = socket.create_connection(("127.0.0.1", port), timeout=10)
            except OSError:
                client.close()  # nothing listens on that port (yet): the host side sees a closed stream
                continue
            upstream.settimeout(None)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pipe, args=(a, b), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()


def main(argv: list[str] | None = None) -> None:
    """``python server.py --socket PATH [--forward PORT ...]``: serve until killed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--socket", required=True, help="UNIX socket of the protocol server")
    parser.add_argument("--forward", type=int, action="append", default=[], help="in-namespace TCP port")
    args = parser.parse_args(argv)
    directory = os.path.dirname(args.socket)
    for port in args.forward:
        forward_port(os.path.join(directory, f"port-{port}.sock"), port)
    tmp = args.socket + ".tmp"
    server = UnixHTTPServer(tmp, Handler)
    os.replace(tmp, args.socket)  # the socket appears only once it accepts: readiness without races
    server.serve_forever()


if __name__ == "__main__":
    main()
