"""Reasons an OSWorld task cannot run on a local desktop (no root, no network, missing apps/packages)."""

from __future__ import annotations

import uuid
from pathlib import Path

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
    text = "\n".join(unavailable_reasons(task))
    for expected in (
        "network proxy",
        "root or system services: 'echo {CLIENT_PASSWORD} | sudo",
        "root or system services: 'systemctl restart x'",
        "'no-such-program-rla', which is not installed",
        "live web pages ['https://www.example.com']",
        "'googledrive' uses a Google Drive account",
        "downloads https://drive.example/f",
        "'compare_image_text' needs easyocr",
        "'info_from_website' reads a live web page",
        "'cloud_file' downloads 'y.txt'",
    ):
        assert expected in text, f"{expected!r} missing from:\n{text}"


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
