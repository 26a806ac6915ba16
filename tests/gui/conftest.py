"""Fixtures of the GUI tests: one real headless-Chromium MiniWoB environment per session."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rla_core.envs.miniwob.env import MiniWobEnv
from rla_core.envs.miniwob.pool import BrowserOptions
from tests.recorded import RecordedGenerator  # noqa: F401  (re-exported for the GUI tests)

DATA = Path(__file__).resolve().parents[2] / "data" / "gui"


def spec(task: str, seed: int = 3, hint_level: int = 0) -> dict[str, Any]:
    """A task spec."""
    return {"task": task, "seed": seed, "hint_level": hint_level}


@pytest.fixture(scope="session")
def gui_runtime(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runtime dir (pidfiles, profiles) shared by the session's pools."""
    return tmp_path_factory.mktemp("miniwob-runtime")


@pytest.fixture(scope="session")
def env(gui_runtime: Path) -> Iterator[MiniWobEnv]:
    """One browser for the whole session (page loads are ~0.1 s, a browser start ~1 s)."""
    with MiniWobEnv(
        browsers=BrowserOptions(size=1, runtime_dir=gui_runtime, call_timeout_s=10.0)
    ) as environment:
        yield environment


def train_specs() -> list[dict[str, Any]]:
    """The shipped training task specs."""
    return [json.loads(line) for line in (DATA / "train.jsonl").read_text().splitlines() if line.strip()]
