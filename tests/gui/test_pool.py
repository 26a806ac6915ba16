"""Browser lifecycle: no orphaned processes (normal exit, exception, SIGKILL), bad binaries, hung pages."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rla_core.algo.curriculum import PlayTask
from rla_core.envs.miniwob.env import MiniWobEnv
from rla_core.envs.miniwob.pool import BrowserOptions, BrowserPool, chrome_processes
from rla_core.envs.miniwob.tasks import default_html_dir
from rla_core.envs.rollout import run_rollouts
from rla_core.errors import BrowserError, BrowserStartError
from tests.gui.conftest import RecordedGenerator, spec
from tests.recorded import rollout_request

CLICK_TEST = (default_html_dir() / "miniwob" / "click-test.html").as_uri()


def alive(pgid: int) -> list[int]:
    """Live Chromium/chromedriver pids of a process group."""
    return [p["pid"] for p in chrome_processes() if p["pgid"] == pgid]


def test_normal_exit_and_exception_leave_no_process(tmp_path: Path) -> None:
    with BrowserPool(BrowserOptions(size=2, runtime_dir=tmp_path)) as pool:
        first, second = pool.open_tab(CLICK_TEST), pool.open_tab(CLICK_TEST)
        groups = pool.pgids()
        assert len(groups) == 2 and first.browser is not second.browser  # least-loaded placement
        assert all(alive(g) for g in groups)
    assert [alive(g) for g in groups] == [[], []]
    assert list(tmp_path.glob("pool-*.json")) == []
    with (
        pytest.raises(RuntimeError, match="boom"),
        BrowserPool(BrowserOptions(size=1, runtime_dir=tmp_path)) as pool,
    ):
        pool.open_tab(CLICK_TEST)
        groups = pool.pgids()
        raise RuntimeError("boom")
    assert alive(groups[0]) == []


_OWNER = """
import sys, time
from pathlib import Path
from rla_core.envs.miniwob.pool import BrowserOptions, BrowserPool
pool = BrowserPool(BrowserOptions(size=1, runtime_dir=Path(sys.argv[1])))
pool.open_tab(sys.argv[2])
print(pool.pgids()[0], flush=True)
time.sleep(600)
"""


def test_sigkilled_owner_is_reaped_by_the_next_pool(tmp_path: Path) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(tmp_path), CLICK_TEST], stdout=subprocess.PIPE, text=True
    )
    assert owner.stdout is not None
    pgid = int(owner.stdout.readline())
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait(timeout=10)
    # nothing ran the owner's cleanup: its browser is orphaned and its pidfile remains
    assert alive(pgid) and len(list(tmp_path.glob("pool-*.json"))) == 1
    with BrowserPool(BrowserOptions(size=1, runtime_dir=tmp_path)) as pool:
        assert pool.reaped == [pgid]
        assert alive(pgid) == []
    assert list(tmp_path.glob("pool-*.json")) == []


def test_bogus_browser_binary_is_a_specific_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-chromium")
    with (
        BrowserPool(BrowserOptions(size=1, runtime_dir=tmp_path, chrome_binary=missing)) as pool,
        pytest.raises(BrowserStartError, match=r"Chromium binary '.*no-chromium' does not exist"),
    ):
        pool.open_tab(CLICK_TEST)
    fake = tmp_path / "fake-chromium"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    with (
        BrowserPool(BrowserOptions(size=1, runtime_dir=tmp_path, chrome_binary=str(fake))) as pool,
        pytest.raises(BrowserStartError, match=r"Chromium '.*fake-chromium' failed to start"),
    ):
        pool.open_tab(CLICK_TEST)
    assert [p for p in chrome_processes() if "fake" in p["name"]] == []


_HANG = """<!DOCTYPE html><html><head>
<link rel="stylesheet" type="text/css" href="../core/core.css">
<script src="../core/core.js"></script><script src="../core/d3.v3.min.js"></script>
<script>
var genProblem = function() {
  d3.select('#subbtn').on('click', function(){ while (true) {} });  // the page hangs on click
}
window.onload = function() { core.startEpisode(); }
</script></head><body><div id="wrap"><div id="query">Click the button.</div>
<div id="area"><button id="subbtn">Click Me!</button></div></div></body></html>
"""


def test_hung_page_ends_the_episode_as_an_env_error_within_the_timeout(tmp_path: Path) -> None:
    html = tmp_path / "html"
    (html / "miniwob").mkdir(parents=True)
    (html / "core").symlink_to(default_html_dir() / "core")
    (html / "miniwob" / "hang.html").write_text(_HANG)
    with MiniWobEnv(
        html_dir=html, browsers=BrowserOptions(size=1, runtime_dir=tmp_path / "rt", call_timeout_s=2.0)
    ) as env:
        started = time.perf_counter()
        frame = run_rollouts(
            rollout_request([PlayTask("hang", "s", False, spec("hang", seed=0))], n=1, max_steps=3, seed=0),
            env=env,
            generator=RecordedGenerator([r"\boxed{0}"]),
        )
        elapsed = time.perf_counter() - started
        groups = [b.pgid for b in env.pool.browsers]
    # one step: the click hangs the page, the next browser call times out (2 s), the browser is
    # killed and the rollout is recorded as an environment error instead of hanging the stage
    assert frame["outcome"].to_list() == [None] and frame["done"].to_list() == [True]
    assert frame["status"].to_list() == ["env_error"] and frame["error_kind"].to_list() == ["browser_timeout"]
    assert "exceeded 2.0s" in frame["error_message"][0]
    assert elapsed < 30
    assert all(alive(g) == [] for g in groups)


def test_dead_browser_calls_raise(tmp_path: Path) -> None:
    with BrowserPool(BrowserOptions(size=1, runtime_dir=tmp_path)) as pool:
        tab = pool.open_tab(CLICK_TEST)
        tab.browser.kill("test")
        with pytest.raises(BrowserError, match="is dead: test"):
            tab.call(lambda d: d.title)
