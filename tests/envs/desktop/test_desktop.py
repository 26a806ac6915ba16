"""A real local desktop (Xvfb + jwm + our server): start, protocol answers, stop and reap with nothing left."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from rla_core import procs
from rla_core.envs.desktop.desktop import NEEDED, PIDFILE_KIND, Desktop

pytestmark = pytest.mark.skipif(
    any(shutil.which(n) is None for n in NEEDED),
    reason="needs Debian's xvfb, jwm and python3-pil (scripts/setup.sh)",
)


def _post(url: str, body: dict[str, object]) -> dict[str, object]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return dict(json.loads(r.read()))


def test_desktop_serves_protocol_and_stops_with_nothing_left(tmp_path: Path) -> None:
    with Desktop.start(runtime_dir=tmp_path) as d:
        pgid = d.group.pgid
        with urllib.request.urlopen(d.url + "/platform", timeout=30) as r:
            assert r.read() == b"Linux"
        with urllib.request.urlopen(d.url + "/screenshot", timeout=30) as r:
            assert r.read()[:4] == b"\x89PNG"
        out = _post(d.url + "/execute", {"command": ["python", "-c", "print(6 * 7)"], "shell": False})
        assert out["output"] == "42\n" and out["returncode"] == 0
        (tmp_path / "f.txt").write_text("hello")
        form = urllib.parse.urlencode({"file_path": str(tmp_path / "f.txt")}).encode()
        with urllib.request.urlopen(urllib.request.Request(d.url + "/file", data=form), timeout=30) as r:
            assert r.read() == b"hello"
    assert procs.group_members(pgid) == []
    assert not list(tmp_path.glob(f"{PIDFILE_KIND}-*.json"))


def test_desktop_of_a_sigkilled_owner_is_reaped(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from rla_core.envs.desktop.desktop import Desktop;"
        "d = Desktop.start(runtime_dir=Path(sys.argv[1])); print(d.group.pgid, flush=True);"
        "import time; time.sleep(600)"
    )
    owner = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    pgid = int(owner.stdout.readline())
    assert procs.group_members(pgid)
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait(timeout=30)
    assert procs.group_members(pgid)  # the owner's death alone leaves the desktop running
    procs.reap_stale(tmp_path, kind=PIDFILE_KIND)
    assert procs.group_members(pgid) == []
