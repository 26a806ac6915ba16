"""One tiny model bootstrapped for the whole test session (offline: HF_HUB_OFFLINE=1)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from rla_core.models.bootstrap import ensure_tiny_model

# Environment-like text the tokenizer is trained on (the caller's corpus in real runs).
CORPUS: list[str] = [
    "You are in a kitchen. There is a fridge and a counter here. Exits: north, east.",
    "Goal: take the key and open the chest. Admissible actions: 0. go north 1. take key 2. open chest",
    "Action: \\boxed{1}. You take the key.",
    "Is the step good for reaching the goal? Answer \\boxed{1} for good or \\boxed{-1} for bad.",
    "You are in a bedroom. There is a chest here. The chest is locked.",
] * 4


@pytest.fixture(scope="session", autouse=True)
def _offline() -> Iterator[None]:
    """Tests never touch the hub."""
    previous = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    yield
    if previous is None:
        del os.environ["HF_HUB_OFFLINE"]
    else:
        os.environ["HF_HUB_OFFLINE"] = previous


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(scope="session")
def tiny_model(model_cache: Path, _offline: None) -> Path:
    """The session's tiny policy checkpoint (bootstrapped once from nothing)."""
    return ensure_tiny_model("policy", corpus=CORPUS, cache_dir=model_cache)
