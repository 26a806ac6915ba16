"""Shared fixtures: small TextWorld games compiled once per test session, an ALFWorld environment (its
games compiled once per session too) and a tiny policy model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rla_core.envs.alfworld.env import AlfworldEnv
from rla_core.envs.textworld_env import TextWorldEnv

# quest_length 1 (walkthrough: 'open box') and quest_length 2 in two rooms ('go east', 'close safe').
ONE_STEP: dict[str, Any] = {"world_size": 1, "nb_objects": 3, "quest_length": 1, "seed": 11}
TWO_STEP: dict[str, Any] = {"world_size": 2, "nb_objects": 4, "quest_length": 2, "seed": 14}


@pytest.fixture(scope="session")
def game_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("games")


@pytest.fixture(scope="session")
def env(game_cache: Path) -> TextWorldEnv:
    tw = TextWorldEnv(game_cache)
    for spec in (ONE_STEP, TWO_STEP):
        tw.game_file(spec)  # compile once for the whole session
    return tw


@pytest.fixture(scope="session")
def tiny_policy_dir(env: TextWorldEnv, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rla_core.envs.demos import corpus_texts
    from rla_core.models.bootstrap import ensure_tiny_model

    corpus = corpus_texts(env, [ONE_STEP, TWO_STEP])
    return ensure_tiny_model("policy", corpus=corpus, cache_dir=tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def alfworld_env(tmp_path_factory: pytest.TempPathFactory) -> AlfworldEnv:
    return AlfworldEnv(tmp_path_factory.mktemp("alfworld-games"))
