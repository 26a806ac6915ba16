"""The desktop behaves like OSWorld's Ubuntu image where official tasks depend on it (docs/osworld.md).

A click on the empty desktop (the first set-up step of 39 official tasks) leaves the keyboard alone, Ctrl+Alt+T
opens a terminal that gets the keystrokes, Alt+F10 maximises the active window: on a real desktop, through
its ``/execute`` endpoint as OSWorld's set-up drives it. The window-manager configuration binds exactly the
declared shortcuts and has no root menu.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from rla_core.envs.desktop.desktop import Desktop, jwm_key, jwmrc
from rla_core.envs.desktop.parity import GLOBAL_SHORTCUTS
from tests.envs.desktop.conftest import requires_desktop, sh


def test_window_manager_configuration_binds_the_shortcuts_and_has_no_root_menu(tmp_path: Path) -> None:
    config = jwmrc()
    assert "RootMenu" not in config and 'context="root"' not in config and "<Tray" not in config
    assert "<FocusModel>click</FocusModel>" in config
    assert config.count("<Key ") == len(GLOBAL_SHORTCUTS)
    assert '<Key mask="CA" key="t">exec:gnome-terminal</Key>' in config
    assert jwm_key("alt+f10") == 'mask="A" key="F10"'
    assert "exec:a &amp; b" in jwmrc({"ctrl+alt+t": "a & b"})  # commands are XML-escaped
    with pytest.raises(ValueError, match="modifiers \\['hyper'\\]"):
        jwm_key("hyper+t")
    (tmp_path / "jwmrc").write_text(config)
    parsed = subprocess.run(["jwm", "-p", "-f", str(tmp_path / "jwmrc")], capture_output=True, text=True)
    assert parsed.returncode == 0 and parsed.stderr == "", parsed.stderr


def _until(desktop: Desktop, script: str, timeout_s: float = 20.0) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        out = sh(desktop, script)
        if out["returncode"] == 0 or time.monotonic() > deadline:
            return str(out["output"])
        time.sleep(0.3)


@requires_desktop
def test_a_desktop_click_keeps_the_keyboard_and_ctrl_alt_t_opens_a_terminal(state_root: Path) -> None:
    with Desktop.start(state_root=state_root, runtime_dir=state_root / "rt", screen=(1920, 1080)) as d:
        gui = 'python3 -c "import pyautogui, time; {}"'
        sh(d, gui.format("pyautogui.click(960, 540); time.sleep(0.5); pyautogui.hotkey('ctrl', 'alt', 't')"))
        assert "Terminal" in _until(d, "wmctrl -l | grep Terminal")
        time.sleep(1.0)  # the shell's prompt
        sh(d, gui.format("pyautogui.write('echo typed > ~/parity.txt'); pyautogui.press('enter')"))
        assert _until(d, "cat ~/parity.txt") == "typed\n"
        sh(d, gui.format("pyautogui.hotkey('alt', 'f10')"))
        width = "xdotool getactivewindow getwindowgeometry | sed -n 's/.*Geometry: \\([0-9]*\\)x.*/\\1/p'"
        assert int(_until(d, f"test $({width}) -gt 1800 && {width}")) > 1800  # maximised on 1920 px
