"""The headless Chromium of this project: where its binaries are, and the flags it always runs with.

One place for both users of a browser: the GUI setting's pool (:mod:`rla_core.envs.miniwob.pool`) and
the report's screenshots (``rla report --png-dir``, :func:`flows.report.browse`). Importing this module
is cheap (no selenium); :func:`chrome_options` imports selenium when it is called.

:func:`find_browser` takes paths given by the caller as they are (checked), and otherwise looks at
Debian's locations (``/usr/bin/chromium``, ``/usr/bin/chromedriver``, from the packages ``chromium`` and
``chromium-driver`` that ``scripts/setup.sh`` installs) and then on ``PATH``.

Example:
    >>> paths = find_browser()  # doctest: +SKIP
    >>> paths.chrome, paths.chromedriver  # doctest: +SKIP
    ('/usr/bin/chromium', '/usr/bin/chromedriver')
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rla_core.errors import BrowserStartError

if TYPE_CHECKING:
    from selenium.webdriver.chrome.options import Options

DEFAULT_CHROME = "/usr/bin/chromium"
DEFAULT_CHROMEDRIVER = "/usr/bin/chromedriver"
# (what, Debian package, default path, names to try on PATH)
_WANTED = (
    ("Chromium", "chromium", DEFAULT_CHROME, ("chromium", "chromium-browser")),
    ("chromedriver", "chromium-driver", DEFAULT_CHROMEDRIVER, ("chromedriver",)),
)
INSTALL_HINT = (
    "install Debian's packages 'chromium' and 'chromium-driver' (`apt-get install chromium chromium-driver`, "
    "or scripts/setup.sh)"
)

# Headless, and nothing leaves the machine: no sync, updates, metrics, crash uploads, DNS prefetch;
# every non-loopback URL goes to a proxy on a closed local port (file:// pages need none).
CHROME_FLAGS: tuple[str, ...] = (
    "--headless=new",
    "--no-sandbox",  # we run as root in containers; the pages are our own local files
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-sync",
    "--disable-extensions",
    "--disable-component-update",
    "--disable-background-networking",
    "--disable-default-apps",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--disable-breakpad",
    "--disable-crash-reporter",
    "--metrics-recording-only",
    "--no-pings",
    "--dns-prefetch-disable",
    "--proxy-server=127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
    "--disable-features=OptimizationHints,MediaRouter,Translate,AutofillServerCommunication",
    # background tabs must keep running their timers (several episodes share one browser)
    "--disable-background-timer-throttling",
    "--disable-backgrounding-occluded-windows",
    "--disable-renderer-backgrounding",
)


@dataclass(frozen=True)
class BrowserPaths:
    """A Chromium binary and the chromedriver that drives it."""

    chrome: str
    chromedriver: str


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_browser(chrome: str | None = None, chromedriver: str | None = None) -> BrowserPaths:
    """The Chromium and chromedriver to use; :class:`BrowserStartError` naming the package otherwise.

    A path given here must be an executable file. Without one: the Debian default path, then the
    usual names on ``PATH``.
    """
    found: list[str] = []
    for given, (what, package, default, names) in zip((chrome, chromedriver), _WANTED, strict=True):
        if given is not None:
            if not _executable(given):
                raise BrowserStartError(
                    f"{what} binary '{given}' does not exist or is not executable; {INSTALL_HINT} or pass "
                    f"the path of a working {what}"
                )
            found.append(given)
            continue
        hits = [default] if _executable(default) else [p for n in names if (p := shutil.which(n))]
        if not hits:
            raise BrowserStartError(
                f"no {what} found (not at {default}, none of {', '.join(names)} on PATH); install the Debian "
                f"package '{package}' ({INSTALL_HINT}) or pass the path of a working {what}"
            )
        found.append(hits[0])
    return BrowserPaths(chrome=found[0], chromedriver=found[1])


def chrome_options(chrome: str, profile: str, *extra: str) -> Options:
    """selenium Chrome options: :data:`CHROME_FLAGS`, a private profile dir, ``extra`` flags, the binary."""
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    for flag in (*CHROME_FLAGS, f"--user-data-dir={profile}", *extra):
        options.add_argument(flag)
    options.binary_location = chrome
    return options
