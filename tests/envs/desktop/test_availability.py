"""Reasons an OSWorld task cannot run on a local desktop (no root, no network, missing apps/packages)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from rla_core.envs.desktop import availability
from rla_core.envs.desktop.availability import unavailable_reasons


def test_an_offline_task_with_installed_programs_is_available() -> None:
    task = {
        "id": "t",
        "config": [
            {"type": "launch", "parameters": {"command": ["sh", "-c", "true"]}},
            {"type": "execute", "parameters": {"command": "echo superb > ~/x", "shell": True}},
            {"type": "chrome_open_tabs", "parameters": {"urls_to_open": ["file:///home/user/a.html"]}},
        ],
        "evaluator": {"func": "exact_match", "result": {"type": "vm_command_line", "command": "cat ~/x"}},
    }
    assert unavailable_reasons(task) == []


def test_root_network_missing_programs_and_placeholder_metrics_are_reported() -> None:
    task = {
        "id": "t",
        "proxy": True,
        "config": [
            {"type": "execute", "parameters": {"command": "echo {CLIENT_PASSWORD} | sudo -S apt-get install x", "shell": True}},
            {"type": "command", "parameters": {"command": ["systemctl", "restart", "x"]}},
            {"type": "launch", "parameters": {"command": ["no-such-program-rla", "--flag"]}},
            {"type": "chrome_open_tabs", "parameters": {"urls_to_open": ["https://www.example.com"]}},
            {"type": "googledrive", "parameters": {}},
            {"type": "download", "parameters": {"files": [{"url": "https://drive.example/f", "path": "/home/user/f.docx"}]}},
        ],
        "evaluator": {
            "func": ["compare_image_text", "exact_match"],
            "result": [{"type": "info_from_website"}, {"type": "cloud_file", "path": "https://x/y", "dest": "y.txt"}],
            "expected": [{"type": "rule"}, {"type": "rule"}],
        },
    }  # fmt: skip
    name = f"{uuid.uuid5(uuid.NAMESPACE_URL, 'https://drive.example/f')}_f.docx"
    apt = "'echo {CLIENT_PASSWORD} | sudo -S apt-get install x'"
    # Hand-listed: every step, metric and getter in order, each with its category.
    assert [(r.category, r.text) for r in availability.reasons(task)] == [
        (availability.NETWORK, "runs through a network proxy (no network in a local desktop)"),
        (availability.ROOT, f"set-up step config[0] needs root (sudo is a stub that fails in a desktop): {apt}"),
        (availability.INSTALLING, f"set-up step config[0] installs software (no root and no network in a desktop): {apt}"),
        (availability.SYSTEMD, "set-up step config[1] needs systemd (no init system in a desktop): 'systemctl restart x'"),
        (availability.APPLICATION, "launches 'no-such-program-rla', which is not installed"),
        (availability.NETWORK, "set-up step config[3] 'chrome_open_tabs' opens live web pages ['https://www.example.com']"),
        (availability.NETWORK, "set-up step config[4] 'googledrive' uses a Google Drive account over the network"),
        (availability.NETWORK_FILES, f"downloads https://drive.example/f (not in the local cache as {name})"),
        (availability.OCR, "metric 'compare_image_text' needs easyocr (CUDA torch/torchvision), not installed here"),
        (availability.NETWORK, "getter 'info_from_website' reads a live web page"),
        (availability.NETWORK_FILES, "getter 'cloud_file' downloads 'y.txt' (not in the local cache)"),
    ]  # fmt: skip
    assert unavailable_reasons(task) == [r.text for r in availability.reasons(task)]


def test_downloads_found_in_desktop_envs_cache_are_available(tmp_path: Path) -> None:
    url, path = "https://drive.example/f", "/home/user/f.docx"
    task = {
        "id": "t1",
        "config": [{"type": "download", "parameters": {"files": [{"url": url, "path": path}]}}],
        "evaluator": {
            "func": "exact_match",
            "result": {"type": "cloud_file", "path": url, "dest": "gold.docx"},
        },
    }
    assert len(unavailable_reasons(task, tmp_path)) == 2
    (tmp_path / "t1").mkdir()
    (tmp_path / "t1" / f"{uuid.uuid5(uuid.NAMESPACE_URL, url)}_f.docx").write_bytes(b"x")
    (tmp_path / "t1" / "gold.docx").write_bytes(b"x")
    assert unavailable_reasons(task, tmp_path) == []


def test_google_chrome_is_the_sandboxs_chromium(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    task = {
        "id": "t",
        "config": [{"type": "launch", "parameters": {"command": ["google-chrome", "--remote-debugging-port=1337"]}}],
        "evaluator": {"func": "exact_match", "result": {"type": "open_tabs_info"}},
    }  # fmt: skip
    monkeypatch.setitem(availability.SANDBOX_COMMANDS, "google-chrome", str(tmp_path / "chromium"))
    assert unavailable_reasons(task) == [
        f"launches 'google-chrome', which is {tmp_path / 'chromium'} in a desktop: not installed"
    ]
    (tmp_path / "chromium").write_text("#!/bin/sh\n")
    assert unavailable_reasons(task) == []  # not on the host's PATH: the desktop provides it


def _task(*, config: list[dict[str, Any]] = (), post: list[dict[str, Any]] = (), getter: str | None = None,
          instruction: str = "Do it.", related_apps: list[str] = ()) -> dict[str, Any]:  # fmt: skip
    """A minimal OSWorld task JSON: the given set-up, postconfig, vm_command_line getter, instruction."""
    evaluator: dict[str, Any] = {"func": "exact_match", "postconfig": list(post)}
    if getter is not None:
        evaluator["result"] = {"type": "vm_command_line", "command": getter, "shell": True}
    return {"id": "t", "instruction": instruction, "config": list(config), "evaluator": evaluator,
            "related_apps": list(related_apps)}  # fmt: skip


def _execute(command: str | list[str]) -> dict[str, Any]:
    return {"type": "execute", "parameters": {"command": command, "shell": isinstance(command, str)}}


def _categories(task: dict[str, Any]) -> list[str]:
    return [r.category for r in availability.reasons(task)]


@pytest.fixture
def bare_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """PATH is one empty folder: no program is installed unless a test puts it there."""
    monkeypatch.setenv("PATH", str(tmp_path))
    return tmp_path


def _install(folder: Path, program: str) -> None:
    (folder / program).write_text("#!/bin/sh\n")
    (folder / program).chmod(0o755)


def test_hotkeys_are_read_from_pyautogui_calls_in_every_spelling() -> None:
    code = (
        "import pyautogui; pyautogui.click(960, 540); pyautogui.hotkey('ctrl', 'alt', 't'); "
        'pyautogui.hotkey("Alt","F10"); pyautogui.hotkey(["shift", "ctrl", "e"]); pyautogui.hotkey(key)'
    )
    # the last call's argument is a variable, not a key name: skipped
    assert availability.hotkeys(code) == ["ctrl+alt+t", "alt+f10", "shift+ctrl+e"]


SHORTCUT_STEP = _execute(["python", "-c", "import pyautogui; import time; pyautogui.click(960, 540); "
                          "time.sleep(0.5); pyautogui.hotkey('ctrl', 'alt', 't'); time.sleep(0.5)"])  # fmt: skip


@pytest.mark.parametrize("where", ["config", "post"])
def test_a_global_shortcut_the_desktop_does_not_bind_makes_a_task_unavailable(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = _task(**{where: [SHORTCUT_STEP]})  # type: ignore[arg-type]
    monkeypatch.delitem(availability.GLOBAL_SHORTCUTS, "ctrl+alt+t", raising=False)
    field = "set-up step config[0]" if where == "config" else "evaluator postconfig[0]"
    assert availability.unavailable_reasons(task) == [
        f"{field} presses ctrl+alt+t (on OSWorld's image it opens a terminal), which this desktop does not bind"
    ]
    monkeypatch.setitem(availability.GLOBAL_SHORTCUTS, "ctrl+alt+t", "gnome-terminal")
    assert availability.unavailable_reasons(task) == []  # bound: available
    # an application's own shortcut is never a reason, bound or not
    assert (
        _categories(_task(config=[_execute("python -c \"import pyautogui; pyautogui.hotkey('ctrl', 's')\"")]))
        == []
    )


@pytest.mark.parametrize(
    ("task", "category"),
    [
        (_task(config=[_execute("echo password | sudo -S su - charles")]), availability.ROOT),
        (_task(getter="timedatectl status"), availability.SYSTEMD),
        (_task(config=[{"type": "command", "parameters": {"command": "pip install pygame", "shell": True}}]),
         availability.INSTALLING),
        (_task(getter="which no-such-program-rla"), availability.INSTALLING),
        (_task(instruction="I want to install Spotify on my current system."), availability.INSTALLING),
        (_task(config=[_execute("gsettings set org.gnome.shell favorite-apps \"['vim.desktop']\"")]),
         availability.GNOME_SHELL),
        (_task(getter="pulseaudio --start\npactl list sinks | head -n 1"), availability.SOUND),
    ],
)  # fmt: skip
def test_each_need_is_one_reason_of_its_category(task: dict[str, Any], category: str) -> None:
    assert _categories(task) == [category]


def test_what_the_desktop_has_is_no_reason() -> None:
    for task in (
        _task(getter="gsettings get org.gnome.desktop.interface text-scaling-factor"),  # dconf, not the shell
        _task(getter="which sh"),  # installed
        _task(instruction="Could you help me install the unpacked extension at /to/path in Chrome?"),  # local
        _task(config=[_execute("gnome-terminal-server --version")]),  # not the program gnome-terminal
        _task(post=[_execute("mkdir -p ~/Desktop/service")]),  # a path, not the command
    ):
        assert availability.unavailable_reasons(task) == []


def test_programs_count_only_when_not_installed(bare_path: Path) -> None:
    conda = _task(getter="conda list")
    office = _task(post=[_execute("libreoffice --convert-to csv --outdir /home/user /home/user/a.xlsx")])
    about_gimp = _task(related_apps=["gimp", "os"])  # 'os' names no program
    assert [r.text for r in availability.reasons(conda)] == [
        "getter 'vm_command_line' runs 'conda', which is not installed: 'conda list'"
    ]
    assert _categories(office) == [availability.APPLICATION]
    assert availability.unavailable_reasons(about_gimp) == [
        "related_apps names 'gimp', whose program 'gimp' is not installed"
    ]
    for program in ("conda", "libreoffice", "gimp"):
        _install(bare_path, program)
    assert _categories(conda) == _categories(office) == _categories(about_gimp) == []
