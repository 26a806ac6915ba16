"""Two desktops of a pool: isolated from each other and from the host; acquire/release/reset; no leftovers."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from rla_core import procs
from rla_core.envs.desktop.desktop import PIDFILE_KIND, Desktop, namespace_members
from rla_core.envs.desktop.pool import DesktopOptions, DesktopPool
from rla_core.errors import ProcessError
from tests.envs.desktop.conftest import post, requires_desktop, sh

pytestmark = requires_desktop

# Inside a desktop: try to connect to each "host:port" argument, print one JSON verdict per target.
PROBE = """python3 - {targets} <<'PY'
import json, socket, sys
out = {{}}
for t in sys.argv[1:]:
    host, port = t.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        out[t] = "connected"
    except OSError as exc:
        out[t] = type(exc).__name__
print(json.dumps(out))
PY"""


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DesktopPool]:
    runtime = tmp_path_factory.mktemp("desktop-pool")
    with DesktopPool(DesktopOptions(size=2, runtime_dir=runtime)) as p:
        yield p


def _wait(desktop: Desktop, script: str, timeout_s: float = 20) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while True:
        out = sh(desktop, script)
        if out["returncode"] == 0 or time.monotonic() > deadline:
            return out
        time.sleep(0.2)


def test_files_and_windows_of_one_desktop_are_invisible_on_the_other(pool: DesktopPool) -> None:
    a, b = pool.desktops()
    sh(a, "echo secret > ~/Desktop/only-a.txt; echo secret > /tmp/only-a")
    code, _ = post(
        a,
        "/setup/launch",
        {"command": ["python3", "-c", "import tkinter as t; r = t.Tk(); r.title('only-on-a'); r.mainloop()"]},
    )
    assert code == 200
    assert _wait(a, "wmctrl -l | grep only-on-a")["returncode"] == 0
    assert sh(b, "wmctrl -l | grep only-on-a")["returncode"] == 1
    assert sh(a, "cat ~/Desktop/only-a.txt /tmp/only-a")["output"] == "secret\nsecret\n"
    assert sh(b, "ls ~/Desktop/only-a.txt /tmp/only-a")["returncode"] != 0
    # nor do the desktops see each other's (or the host's) processes or state
    assert "only-on-a" not in sh(b, "ps -eo args")["output"]
    assert sh(a, "ls /work /root " + str(b.state))["returncode"] != 0


def test_a_desktop_reaches_neither_the_other_nor_the_host_nor_the_network(pool: DesktopPool) -> None:
    a, b = pool.desktops()
    # B runs something on its in-namespace browser debugging port 9222; the host reaches it via B's channel
    post(b, "/setup/launch", {"command": ["python3", "-m", "http.server", "9222", "--bind", "127.0.0.1"]})
    up = "python3 -c \"import socket; socket.create_connection(('127.0.0.1', 9222), 2)\""
    assert _wait(b, up)["returncode"] == 0
    with urllib.request.urlopen(f"http://127.0.0.1:{b.ports[9222].port}/", timeout=10) as r:
        assert r.status == 200
    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    host.listen(1)
    targets = {
        "b_server": f"127.0.0.1:{b.server.port}",
        "b_debug_port": f"127.0.0.1:{b.ports[9222].port}",
        "b_inside_port": "127.0.0.1:9222",
        "host_listener": f"127.0.0.1:{host.getsockname()[1]}",
        "internet": "1.1.1.1:443",
        "private_net": "10.0.0.1:80",
    }
    try:
        out = sh(a, PROBE.format(targets=" ".join(targets.values())))
    finally:
        host.close()
    verdicts = json.loads(out["output"])
    for name, target in targets.items():
        assert verdicts[target] != "connected", f"{name} ({target}) reachable from desktop A: {verdicts}"
    assert sh(a, "ls /run/rla")["output"].split() == sorted(
        ["server.sock", "port-9222.sock", "port-8080.sock"]
    )  # A's channel holds only A's own sockets


def test_google_chrome_is_chromium_with_its_debugging_port_only_behind_its_own_forward(
    pool: DesktopPool,
) -> None:
    a, b = pool.desktops()
    b.reset()  # a fresh B: nothing of the other tests on its port 9222
    version = sh(b, "google-chrome --version")
    assert version["returncode"] == 0 and version["output"].startswith("Chromium "), version
    code, _ = post(b, "/setup/launch", {"command": ["google-chrome", "about:blank"]})  # default port 9222
    assert code == 200
    deadline, info = time.monotonic() + 30, None
    while info is None:
        try:  # the host reaches Chromium's DevTools endpoint through B's forward, as desktop_env's getters do
            with urllib.request.urlopen(
                f"http://127.0.0.1:{b.ports[9222].port}/json/version", timeout=5
            ) as r:
                info = json.loads(r.read())
        except (OSError, ValueError):
            assert time.monotonic() < deadline, "Chromium's debugging port never answered through the forward"
            time.sleep(0.2)
    assert info["Browser"].startswith("Chrome/") and info["webSocketDebuggerUrl"].startswith("ws://")
    # its profile is where desktop_env's Chrome getters read it
    assert _wait(b, "test -d ~/.config/google-chrome/Default")["returncode"] == 0
    targets = [f"127.0.0.1:{b.ports[9222].port}", "127.0.0.1:9222"]  # B's forward, A's own namespace port
    verdicts = json.loads(sh(a, PROBE.format(targets=" ".join(targets)))["output"])
    assert all(v != "connected" for v in verdicts.values()), verdicts
    assert "Chromium" not in sh(a, "ps -eo args")["output"] + sh(a, "wmctrl -l")["output"]


def test_the_policy_cannot_write_outside_its_home(pool: DesktopPool) -> None:
    a, _ = pool.desktops()
    for path in ("/usr/x", "/etc/x", "/x", "/opt/rla/server/x", "/opt/rla/bin/x", "/home/x", "/var/x"):
        out = sh(a, f"echo pwned > {path}")
        assert out["returncode"] != 0, f"{path} was writable"
    assert sh(a, "echo mine > ~/Documents/ok.txt")["returncode"] == 0
    assert (a.home / "Documents" / "ok.txt").read_text() == "mine\n"  # the only host path it writes to


def test_pool_hands_out_each_desktop_once_and_resets_on_release(pool: DesktopPool) -> None:
    first = pool.acquire(timeout_s=5)
    second = pool.acquire(timeout_s=5)
    assert first is not second
    with pytest.raises(ProcessError, match="became free"):
        pool.acquire(timeout_s=0.2)
    sh(first, "echo used > ~/Desktop/used.txt")
    got: list[Desktop] = []
    waiter = threading.Thread(target=lambda: got.append(pool.acquire(timeout_s=30)))
    waiter.start()
    pool.release(first)  # resets: the next episode gets a fresh home
    waiter.join(timeout=30)
    assert got == [first]
    assert sh(first, "ls ~/Desktop/used.txt")["returncode"] != 0
    pool.release(first, reset=False)
    pool.release(second, reset=False)


def test_closing_the_pool_leaves_nothing(tmp_path: Path) -> None:
    pool = DesktopPool(DesktopOptions(size=1, runtime_dir=tmp_path))
    (d,) = pool.desktops()
    assert d.group is not None and d.pidns is not None
    pgid, pidns, state = d.group.pgid, d.pidns, d.state
    pool.close()
    assert procs.group_members(pgid) == [] and namespace_members(pidns) == [] and not state.exists()
    assert not list(tmp_path.glob(f"{PIDFILE_KIND}-*.json"))
    with pytest.raises(ProcessError, match="closed"):
        pool.acquire(timeout_s=1)
