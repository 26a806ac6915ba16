"""Finding the browser (rla_core.envs.browser): one helper for the GUI pool and the report's screenshots."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rla_core.envs import browser
from rla_core.envs.browser import find_browser
from rla_core.errors import BrowserStartError


def _fake(path: Path) -> str:
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return str(path)


def test_found_paths_are_executables() -> None:
    found = find_browser()  # the machine's Chromium (scripts/setup.sh installs it for the GUI tests)
    for path in (found.chrome, found.chromedriver):
        assert os.path.isfile(path) and os.access(path, os.X_OK)


def test_given_paths_are_taken_as_they_are_and_checked(tmp_path: Path) -> None:
    chrome, driver = _fake(tmp_path / "my-chromium"), _fake(tmp_path / "my-driver")
    assert find_browser(chrome, driver) == browser.BrowserPaths(chrome=chrome, chromedriver=driver)
    with pytest.raises(
        BrowserStartError, match=r"chromedriver binary '.*nope' does not exist .*'chromium-driver'"
    ):
        find_browser(chrome, str(tmp_path / "nope"))


def test_without_defaults_it_searches_path_then_names_the_debian_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = str(tmp_path / "absent")
    wanted = tuple((what, pkg, missing, names) for what, pkg, _default, names in browser._WANTED)
    monkeypatch.setattr(browser, "_WANTED", wanted)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(BrowserStartError, match=r"no Chromium found .*install the Debian package 'chromium'"):
        find_browser()
    chrome = _fake(bin_dir / "chromium")
    with pytest.raises(BrowserStartError, match=r"no chromedriver found .*Debian package 'chromium-driver'"):
        find_browser()
    driver = _fake(bin_dir / "chromedriver")
    assert find_browser() == browser.BrowserPaths(chrome=chrome, chromedriver=driver)
