"""OSWorld's own, unmodified ``desktop_env.DesktopEnv`` (PyPI 1.0.2) driving a local desktop through our
provider hook and our server: task config types, getters, metrics, ``step`` with pyautogui code."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rla_core.envs.desktop.desktop import Desktop
from tests.envs.desktop.conftest import requires_desktop

pytestmark = requires_desktop
desktop_env = pytest.importorskip("desktop_env", reason="needs desktop-env (scripts/setup.sh, extra osworld)")

from rla_core.envs.desktop import provider  # noqa: E402  (after the skip: importing it needs desktop_env)

TERMINAL = [
    {"type": "launch", "parameters": {"command": ["gnome-terminal"]}},
    {"type": "execute", "parameters": {"command": "wmctrl -l | grep -q Terminal", "shell": True, "until": {"returncode": 0}}},
    {"type": "activate_window", "parameters": {"window_name": "Terminal"}},
]  # fmt: skip


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    runtime = tmp_path_factory.mktemp("desktop-env")
    desktop = Desktop.start(runtime_dir=runtime)
    e = provider.make_env(
        desktop, action_space="pyautogui", cache_dir=str(runtime / "cache"), require_terminal=True
    )
    yield e
    e.close()
    assert desktop.processes() == [] and not desktop.state.exists()


def test_setup_getters_and_metrics_of_a_task(env: Any, tmp_path: Path) -> None:
    (tmp_path / "expected.txt").write_text("hello\n")
    handler = (
        "mkdir -p ~/.local/share/applications && printf '[Desktop Entry]\\nType=Application\\nName=Marker\\n"
        "Exec=cp %%f /home/user/opened.txt\\nMimeType=text/plain;\\n' > ~/.local/share/applications/marker.desktop"
        " && printf '[Default Applications]\\ntext/plain=marker.desktop\\n' > ~/.config/mimeapps.list"
    )
    task = {
        "id": "local-setup",
        "instruction": "(set-up only)",
        "config": [
            {"type": "execute", "parameters": {"command": ["bash", "-c", "echo hello > ~/Desktop/a.txt"]}},
            {"type": "command", "parameters": {"command": "mkdir -p ~/Documents/made", "shell": True}},
            {"type": "upload_file", "parameters": {"files": [{"local_path": str(tmp_path / "expected.txt"), "path": "/home/user/Documents/expected.txt"}]}},
            {"type": "execute", "parameters": {"command": handler, "shell": True}},
            {"type": "open", "parameters": {"path": "/home/user/Documents/expected.txt"}},
            {"type": "execute", "parameters": {"command": "test -f ~/opened.txt", "shell": True, "until": {"returncode": 0}}},
            {"type": "sleep", "parameters": {"seconds": 0.1}},
            *TERMINAL,
        ],
        "evaluator": {
            "func": ["exact_match", "check_include_exclude", "check_direct_json_object", "compare_text_file", "check_include_exclude"],
            "result": [
                {"type": "vm_command_line", "command": "cat ~/Desktop/a.txt ~/opened.txt; ls ~/Documents", "shell": True},
                {"type": "accessibility_tree"},
                {"type": "vm_command_line", "command": ["python", "-c", "import json; print(json.dumps({'a': 1, 'b': 'x'}))"]},
                {"type": "vm_file", "path": "/home/user/Desktop/a.txt", "dest": "a.txt"},
                {"type": "vm_terminal_output"},
            ],
            "expected": [
                {"type": "rule", "rules": {"expected": "hello\nhello\nexpected.txt\nmade\n"}},
                {"type": "rule", "rules": {"include": ["gnome-terminal-server", 'name="Terminal"'], "exclude": ["no-such-app"]}},
                {"type": "rule", "rules": {"expected": {"a": 1, "b": "x"}}},
                {"type": "vm_file", "path": "/home/user/Documents/expected.txt", "dest": "expected.txt"},
                {"type": "rule", "rules": {"include": ["user@desktop:~$"], "exclude": []}},
            ],
        },
    }  # fmt: skip
    obs = env.reset(task_config=task)
    assert obs["screenshot"][:8] == b"\x89PNG\r\n\x1a\n"
    lxml_etree = pytest.importorskip("lxml.etree")
    tree = lxml_etree.fromstring(obs["accessibility_tree"].encode())
    st = "https://accessibility.ubuntu.example.org/ns/state"
    frames = tree.xpath(
        '//application[@name="gnome-terminal-server"]/frame[@st:active="true"]', namespaces={"st": st}
    )
    assert len(frames) == 1  # OSWorld's XML: role tags, st:/cp: attributes, the active frame
    assert obs["terminal"].startswith("user@desktop:~$")
    assert env.evaluate() == 1.0
    # a wrong expectation scores 0 (the getters really read the desktop)
    task["evaluator"]["expected"][0] = {"type": "rule", "rules": {"expected": "something else"}}
    env._set_evaluator_info(task)
    assert env.evaluate() == 0


def test_step_runs_pyautogui_and_no_action_scores_0(env: Any) -> None:
    task = {
        "id": "local-step",
        "instruction": "Create ~/Desktop/done.txt containing ok, using the terminal.",
        "config": TERMINAL,
        "evaluator": {
            "func": "exact_match",
            "result": {"type": "vm_command_line", "command": "cat ~/Desktop/done.txt", "shell": True},
            "expected": {"type": "rule", "rules": {"expected": "ok\n"}},
        },
    }
    env.reset(task_config=task)
    assert env.evaluate() == 0  # the used desktop was reverted: no done.txt, and none from the last task
    obs, _, done, _ = env.step("pyautogui.typewrite('echo ok > ~/Desktop/done.txt\\n')", pause=0.3)
    assert not done and "echo ok" in obs["terminal"]
    assert env.evaluate() == 1.0


def test_close_window_config(env: Any) -> None:
    task = {
        "id": "local-close",
        "instruction": "(set-up only)",
        "config": [
            *TERMINAL,
            {"type": "close_window", "parameters": {"window_name": "Terminal"}},
            {"type": "execute", "parameters": {"command": "! wmctrl -l | grep -q Terminal", "shell": True, "until": {"returncode": 0}}},
        ],
        "evaluator": {
            "func": "check_include_exclude",
            "result": {"type": "vm_command_line", "command": "wmctrl -l; ls ~/Desktop", "shell": True},
            "expected": {"type": "rule", "rules": {"include": [], "exclude": ["Terminal", "done.txt"]}},
        },
    }  # fmt: skip
    env.reset(task_config=task)
    assert env.evaluate() == 1.0


def test_the_hook_delegates_other_providers_and_placeholders_name_their_package() -> None:
    import desktop_env.desktop_env as de

    provider.install()
    provider.install()  # idempotent: wraps upstream once
    with pytest.raises(NotImplementedError, match="no-such-provider"):
        de.create_vm_manager_and_provider("no-such-provider", None)  # upstream's own answer
    import easyocr  # a placeholder: desktop_env.evaluators.metrics.docs imports it at import time

    with pytest.raises(provider.DependencyUnavailable, match="'easyocr' is not installed"):
        easyocr.Reader(["en"])
