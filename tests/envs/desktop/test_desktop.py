"""One real sandboxed desktop: protocol answers, reset to the template, stop and reap with nothing left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

from rla_core import procs
from rla_core.envs.desktop.desktop import PIDFILE_KIND, Desktop, namespace_members, reap_stale_desktops
from tests.envs.desktop.conftest import post, requires_desktop, sh

pytestmark = requires_desktop


def test_desktop_serves_protocol_resets_and_stops_with_nothing_left(tmp_path: Path, state_root: Path) -> None:
    with Desktop.start(runtime_dir=tmp_path, state_root=state_root) as d:
        assert d.group is not None and d.pidns is not None
        pgid, pidns = d.group.pgid, d.pidns
        with urllib.request.urlopen(d.url + "/platform", timeout=30) as r:
            assert r.read() == b"Linux"
        with urllib.request.urlopen(d.url + "/screenshot", timeout=30) as r:
            assert r.read()[:8] == b"\x89PNG\r\n\x1a\n"
        code, body = post(d, "/screen_size", {})
        assert code == 200 and json.loads(body) == {"width": 1280, "height": 720}
        out = json.loads(
            post(d, "/execute", {"command": ["python", "-c", "print(6 * 7)"], "shell": False})[1]
        )
        assert out["output"] == "42\n" and out["returncode"] == 0
        # who and where: user `user` in /home/user; the OSWorld-image settings of the template
        out = sh(d, "id -un; echo $HOME; gsettings get org.gnome.desktop.screensaver lock-enabled")
        assert out["output"].split() == ["user", "/home/user", "false"]
        # sudo is a stub that fails loudly: root-needing tasks are unavailable, never half-run
        out = sh(d, "echo password | sudo -S true")
        assert out["returncode"] == 1 and "not available" in out["error"]
        # pyautogui under the desktop's python (what DesktopEnv.step runs), screenshots included
        out = sh(
            d, "python3 -c 'import pyautogui; print(pyautogui.size()); print(pyautogui.screenshot().size)'"
        )
        assert out["output"].split("\n")[:2] == ["Size(width=1280, height=720)", "(1280, 720)"], out
        # /file reads what the desktop wrote; a missing file and an unknown path are 404s that say so
        sh(d, "echo hello > ~/Desktop/f.txt")
        form = urllib.parse.urlencode({"file_path": "~/Desktop/f.txt"}).encode()
        with urllib.request.urlopen(urllib.request.Request(d.url + "/file", data=form), timeout=30) as r:
            assert r.read() == b"hello\n"
        code, body = post(d, "/setup/open_file", {"path": "~/nope.txt"})
        assert code == 404 and b"/home/user/nope.txt" in body
        code, body = post(d, "/setup/change_wallpaper", {"path": "x"})
        assert code == 404 and b"/setup/change_wallpaper" in body
        # reset: a fresh home from the template, the same host address
        address = d.address
        assert (d.home / "Desktop" / "f.txt").exists()
        d.reset()
        assert d.address == address and not (d.home / "Desktop" / "f.txt").exists()
        out = sh(d, "ls ~/Desktop/f.txt; ls -d ~/Desktop ~/Documents ~/Downloads")
        assert "No such file" in out["error"] and out["output"].split() == [
            "/home/user/Desktop",
            "/home/user/Documents",
            "/home/user/Downloads",
        ]
        assert d.pidns != pidns and d.group.pgid != pgid
        pgid, pidns, state = d.group.pgid, d.pidns, d.state
    assert procs.group_members(pgid) == []
    assert namespace_members(pidns) == []
    assert not state.exists()
    assert not list(tmp_path.glob(f"{PIDFILE_KIND}-*.json"))


def test_desktop_of_a_sigkilled_owner_is_reaped(tmp_path: Path, state_root: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from rla_core.envs.desktop.desktop import Desktop;"
        "d = Desktop.start(runtime_dir=Path(sys.argv[1]), state_root=Path(sys.argv[2]));"
        "print(d.group.pgid, d.pidns, d.state, flush=True);"
        "import time; time.sleep(600)"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path), str(state_root)], stdout=subprocess.PIPE, text=True
    )
    assert owner.stdout is not None
    pgid_s, pidns, state = owner.stdout.readline().split()
    pgid = int(pgid_s)
    assert procs.group_members(pgid) and namespace_members(pidns) and Path(state).is_dir()
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait(timeout=30)
    assert procs.group_members(pgid)  # the owner's death alone leaves the desktop running
    reap_stale_desktops(tmp_path, state_root)
    assert procs.group_members(pgid) == []
    assert namespace_members(pidns) == []
    assert not Path(state).exists()
    assert not list(tmp_path.glob(f"{PIDFILE_KIND}-*.json"))
