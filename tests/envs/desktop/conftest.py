"""Shared helpers of the local-desktop tests: skip without the Debian packages, tiny HTTP client."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rla_core.envs.desktop.desktop import HOST_USER, NEEDED, Desktop


def _has_sandbox_user() -> bool:
    if os.getuid() != 0:
        return True  # desktops run as the current (unprivileged) user
    try:
        pwd.getpwnam(HOST_USER)
    except KeyError:
        return False
    return True


requires_desktop = pytest.mark.skipif(
    any(shutil.which(n) is None for n in NEEDED) or not _has_sandbox_user(),
    reason="needs Debian's xvfb, jwm, bubblewrap, dbus, wmctrl, python3-pil/pyatspi and, as root, the "
    f"user {HOST_USER} (scripts/setup.sh)",
)


def post(desktop: Desktop, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
    """POST JSON to the desktop's server; (status, body) also for error statuses."""
    req = urllib.request.Request(
        desktop.url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


def sh(desktop: Desktop, script: str) -> dict[str, Any]:
    """Run a shell script inside the desktop through ``/execute``; OSWorld's answer."""
    code, body = post(desktop, "/execute", {"command": script, "shell": True})
    assert code == 200, body
    return dict(json.loads(body))


@pytest.fixture
def state_root() -> Iterator[Path]:
    """A state root the sandbox user can reach (pytest's tmp_path is private to root), removed after."""
    root = Path(tempfile.mkdtemp(prefix="rla-desktop-test-", dir="/tmp"))
    root.chmod(0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)
