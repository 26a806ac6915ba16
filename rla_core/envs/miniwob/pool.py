"""A pool of headless Chromium browsers for MiniWoB++ pages: offline flags, timeouts, no orphans.

Each :class:`Browser` is one chromedriver + Chromium pair started in its OWN process group (the
group id is the chromedriver pid), so one ``killpg`` ends the driver, the browser and every renderer.
Episodes get a tab of the least-loaded browser; at most ``size`` browsers run at once.

No orphaned processes:

* normal exit / exception: :meth:`BrowserPool.close` (context manager, plus an ``atexit`` hook) quits
  every driver and kills its process group;
* SIGKILL of the owner: the pool keeps a pidfile ``pool-<owner pid>.json`` in ``runtime_dir`` listing
  its process groups and profile dirs; the next pool started on the same ``runtime_dir`` reaps the
  groups of every pidfile whose owner is gone (pid dead, or reused: its start time differs) —
  the process-group lifecycle shared with vLLM servers and training workers, :mod:`rla_core.procs`.

Every browser call has a client-side timeout (``call_timeout_s``); a call that times out kills that
browser (a hung renderer cannot be trusted again) and raises :class:`BrowserError`.

Example:
    >>> with BrowserPool(BrowserOptions(size=1, runtime_dir=Path("/tmp/rla-mw"))) as pool:  # doctest: +SKIP
    ...     tab = pool.open_tab("file:///.../click-test.html")
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rla_core import procs
from rla_core.envs.browser import chrome_options, find_browser
from rla_core.errors import BrowserError, BrowserStartError, BrowserTimeoutError

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

T = TypeVar("T")

# Measured: ~200 MiB per extra browser; keep headroom for the policy model.
MIB_PER_BROWSER = 400
PIDFILE_KIND = "pool"  # pidfiles pool-<owner pid>-<nonce>.json (rla_core.procs)
POOL_FLAGS: tuple[str, ...] = ("--window-size=500,400",)  # on top of rla_core.envs.browser.CHROME_FLAGS


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def reap_stale(runtime_dir: Path) -> list[int]:
    """Kill the browser groups of pools whose owner process is gone (and their profiles); those groups."""
    reaped: list[int] = []
    for record in procs.reap_stale(runtime_dir, kind=PIDFILE_KIND):
        reaped.extend(int(pgid) for pgid, _ in record["groups"])
        for profile in record.get("profiles", []):
            shutil.rmtree(profile, ignore_errors=True)
    return reaped


@dataclass
class Browser:
    """One chromedriver session (its process group ``pgid``), a lock, and the tabs it serves."""

    driver: WebDriver
    pgid: int
    pgid_start: str | None  # the leader's start time: guards the reaper against a reused group id
    profile: Path
    call_timeout_s: float
    home: str  # the initial blank window, kept so the session survives closing every episode tab
    process: subprocess.Popen[bytes] | None = None  # our chromedriver child, reaped after a kill
    lock: threading.RLock = field(default_factory=threading.RLock)
    tabs: set[str] = field(default_factory=set)
    current: str | None = None
    dead: str | None = None  # why it was killed

    def call(self, handle: str, fn: Callable[[WebDriver], T]) -> T:
        """Run ``fn(driver)`` on tab ``handle``; a timeout or a lost driver kills this browser.

        Both raise :class:`BrowserError`; so does any other WebDriver error (the browser survives it).
        """
        from selenium.common.exceptions import TimeoutException, WebDriverException
        from urllib3.exceptions import HTTPError
        from urllib3.exceptions import TimeoutError as ReadTimeout

        with self.lock:
            if self.dead is not None:
                raise BrowserError(f"browser (pgid {self.pgid}) is dead: {self.dead}")
            try:
                if self.current != handle:
                    self.driver.switch_to.window(handle)
                    self.current = handle
                return fn(self.driver)
            except (
                TimeoutException,
                TimeoutError,
                ReadTimeout,
            ) as exc:  # ReadTimeout: the driver's HTTP call
                reason = _first_line(exc)
                self.kill(reason)
                raise BrowserTimeoutError(
                    f"browser call exceeded {self.call_timeout_s}s (pgid {self.pgid}): {reason}; the browser "
                    "was killed and its episodes end as environment errors"
                ) from exc
            except (HTTPError, OSError) as exc:
                reason = _first_line(exc)
                self.kill(reason)
                raise BrowserError(
                    f"browser call lost its driver (pgid {self.pgid}): {reason}; the browser was killed and "
                    "its episodes end as environment errors"
                ) from exc
            except WebDriverException as exc:
                raise BrowserError(f"browser call failed (pgid {self.pgid}): {_first_line(exc)}") from exc

    def kill(self, reason: str) -> None:
        """Kill the whole process group now (no polite quit: a hung driver would block it)."""
        self.dead = self.dead or reason
        procs.kill_group(self.pgid, leader_start=self.pgid_start)
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):  # reap our chromedriver child (no zombie)
                self.process.wait(timeout=5)
        shutil.rmtree(self.profile, ignore_errors=True)

    def quit(self) -> None:
        """Polite quit within the call timeout, then make sure the group is gone."""
        from selenium.common.exceptions import WebDriverException
        from urllib3.exceptions import HTTPError

        with self.lock:
            if self.dead is None:
                with contextlib.suppress(WebDriverException, HTTPError, TimeoutError, OSError):
                    self.driver.quit()
            self.kill(self.dead or "closed")


@dataclass(frozen=True)
class Tab:
    """An episode's tab: which browser, which window handle."""

    browser: Browser
    handle: str

    def call(self, fn: Callable[[WebDriver], T]) -> T:
        """Run ``fn(driver)`` on this tab (see :meth:`Browser.call`)."""
        return self.browser.call(self.handle, fn)


@dataclass(frozen=True, kw_only=True)
class BrowserOptions(procs.PoolOptions):
    """A browser pool's options: the pool's size and runtime directory (:class:`rla_core.procs.PoolOptions`,
    default size: the browsers of MIB_PER_BROWSER the machine holds), then the browser's own."""

    # None: found on first use by rla_core.envs.browser.find_browser (Debian's paths, then PATH)
    chrome_binary: str | None = None
    chromedriver: str | None = None
    call_timeout_s: float = 10.0  # every browser call's client-side timeout
    start_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.call_timeout_s <= 0:
            raise ValueError(f"call_timeout_s={self.call_timeout_s} must be positive")


class BrowserPool:
    """Up to ``size`` headless Chromium browsers, started lazily, reused, always shut down."""

    def __init__(self, options: BrowserOptions | None = None) -> None:
        options = options if options is not None else BrowserOptions()
        self.size = options.members(mib_each=MIB_PER_BROWSER)
        self.runtime_dir = options.directory("miniwob")
        self.chrome_binary = options.chrome_binary  # the paths find_browser settles on at the first start
        self.chromedriver = options.chromedriver
        self.call_timeout_s = options.call_timeout_s
        self.start_timeout_s = options.start_timeout_s
        self.browsers: list[Browser] = []
        self._lock = threading.Lock()
        self._closed = False
        self.runtime_dir.mkdir(parents=True, exist_ok=True)
        self.reaped = reap_stale(self.runtime_dir)
        self.pidfile = self.runtime_dir / f"{PIDFILE_KIND}-{os.getpid()}-{uuid.uuid4().hex[:8]}.json"
        self._write_pidfile()
        atexit.register(self.close)

    def __enter__(self) -> BrowserPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write_pidfile(self) -> None:
        live = [b for b in self.browsers if b.dead is None]
        record = procs.owner_record(
            [(b.pgid, b.pgid_start) for b in live], profiles=[str(b.profile) for b in live]
        )
        procs.write_pidfile(self.pidfile, record)

    def pgids(self) -> list[int]:
        """Process groups of the live browsers (for tests and the pidfile)."""
        return [b.pgid for b in self.browsers if b.dead is None]

    def _start_browser(self) -> Browser:
        from selenium import webdriver
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.chrome.service import Service

        found = find_browser(self.chrome_binary, self.chromedriver)  # BrowserStartError naming the package
        self.chrome_binary, self.chromedriver = found.chrome, found.chromedriver
        profile = self.runtime_dir / "profiles" / uuid.uuid4().hex
        profile.mkdir(parents=True)
        options = chrome_options(self.chrome_binary, str(profile), *POOL_FLAGS)
        # a fresh session = a fresh process group we can kill as one (driver, browser, renderers)
        service = Service(self.chromedriver, popen_kw={"start_new_session": True})
        try:
            driver = webdriver.Chrome(service=service, options=options)
        except WebDriverException as exc:
            proc = service.process
            if proc is not None:
                procs.kill_group(proc.pid)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
            shutil.rmtree(profile, ignore_errors=True)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BrowserStartError(
                f"Chromium '{self.chrome_binary}' failed to start through '{self.chromedriver}': {first}; "
                "check that both come from the same release (chromium --version, chromedriver --version)"
            ) from exc
        from selenium.webdriver.remote.remote_connection import RemoteConnection

        executor = driver.command_executor
        assert isinstance(executor, RemoteConnection)  # Chrome() always builds one
        executor.client_config.timeout = self.call_timeout_s  # every HTTP call to the driver is bounded
        driver.set_page_load_timeout(self.call_timeout_s)
        driver.set_script_timeout(self.call_timeout_s)
        proc = driver.service.process
        assert proc is not None  # a started service has its process
        home = str(driver.current_window_handle)
        return Browser(
            driver=driver,
            pgid=proc.pid,
            pgid_start=procs.start_time(proc.pid),
            profile=profile,
            call_timeout_s=self.call_timeout_s,
            home=home,
            current=home,
            process=proc,
        )

    def open_tab(self, url: str) -> Tab:
        """A new tab showing ``url`` on the least-loaded browser (starting one while below ``size``)."""
        with self._lock:
            if self._closed:
                raise BrowserError("the browser pool is closed; open a new BrowserPool")
            self.browsers = [b for b in self.browsers if b.dead is None]
            idle = [b for b in self.browsers if not b.tabs]
            if idle:
                browser = idle[0]
            elif len(self.browsers) < self.size:
                browser = self._start_browser()
                self.browsers.append(browser)
                self._write_pidfile()
            else:
                browser = min(self.browsers, key=lambda b: len(b.tabs))

        def new_tab(driver: WebDriver) -> str:
            driver.switch_to.new_window("tab")
            handle = str(driver.current_window_handle)
            driver.get(url)
            return handle

        with browser.lock:
            handle = browser.call(browser.home, new_tab)
            browser.current = handle
            browser.tabs.add(handle)
        return Tab(browser=browser, handle=handle)

    def close_tab(self, tab: Tab) -> None:
        """Close an episode's tab (a dead browser's tabs are already gone)."""
        browser = tab.browser
        with browser.lock:
            browser.tabs.discard(tab.handle)
            if browser.dead is not None:
                return
            with contextlib.suppress(BrowserError):
                browser.call(tab.handle, lambda d: d.close())
                browser.current = None

    def close(self) -> None:
        """Quit every browser, kill their process groups, remove the pidfile (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for browser in self.browsers:
                browser.quit()
            self.browsers = []
            self.pidfile.unlink(missing_ok=True)
        atexit.unregister(self.close)

    @contextlib.contextmanager
    def tab(self, url: str) -> Iterator[Tab]:
        """A tab for the duration of a ``with`` block."""
        tab = self.open_tab(url)
        try:
            yield tab
        finally:
            self.close_tab(tab)


def chrome_processes() -> list[dict[str, Any]]:
    """Every live Chromium/chromedriver process on the machine: pid, pgid, name (tests, benchmarks)."""
    return [p for p in procs.live_processes() if "chrom" in p["name"]]
