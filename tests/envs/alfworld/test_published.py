"""The loader of published ALFWorld games, on a hand-made file in the published layout (mangled names)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rla_core.envs.alfworld.env import AlfworldEnv
from rla_core.envs.alfworld.published import published_specs
from rla_core.errors import EnvironmentSpecError
from tests.envs.alfworld.conftest import FIXTURES, PUBLISHED


def test_published_fixture_loads_demangles_and_is_won_by_its_plan(alfworld_env: AlfworldEnv) -> None:
    spec = {"game_file": str(PUBLISHED)}
    episode = alfworld_env.open(spec, seed=0)
    try:
        assert episode.instruction == "put a clean mug in coffeemachine."
        # AlfredDemangler's names, sink basin included: no mangled ids reach the agent.
        for name in ("cabinet 1", "coffeemachine 1", "countertop 1", "fridge 1", "sinkbasin 1"):
            assert name in episode.observation
        assert "_bar_" not in " ".join(episode.admissible_actions)
        plan = alfworld_env.demonstrations(spec, seed=0)[0]
        assert "clean mug 1 with sinkbasin 1" in plan or "clean mug 2 with sinkbasin 1" in plan
        for action in plan:
            episode.step(action)
        assert episode.won
    finally:
        episode.close()


def test_an_unclean_mug_in_the_coffee_machine_does_not_win(alfworld_env: AlfworldEnv) -> None:
    episode = alfworld_env.open({"game_file": str(PUBLISHED)}, seed=0)
    try:
        mug = next(a for a in ["go to countertop 1"] if a in episode.admissible_actions)
        episode.step(mug)
        take = next(a for a in episode.admissible_actions if a.startswith("take mug"))
        episode.step(take)
        episode.step("go to coffeemachine 1")
        put = next(a for a in episode.admissible_actions if a.startswith("move mug"))
        result = episode.step(put)
        assert result.won is False and not episode.done
    finally:
        episode.close()


def test_a_two_token_rewrite_of_a_published_game(alfworld_env: AlfworldEnv) -> None:
    spec = {"game_file": str(PUBLISHED), "goal": {"target": "Apple", "place": "Fridge"}}
    episode = alfworld_env.open(spec, seed=0)
    try:
        assert episode.instruction == "put a clean apple in fridge."
        for action in alfworld_env.demonstrations(spec, seed=0)[0]:
            episode.step(action)
        assert episode.won
    finally:
        episode.close()
    with pytest.raises(EnvironmentSpecError, match=r"canContain\(CoffeeMachine, Apple\) does not hold"):
        alfworld_env.game(
            {"game_file": str(PUBLISHED), "goal": {"target": "Apple", "place": "CoffeeMachine"}}
        )


def test_published_specs_list_a_split_and_bad_files_get_specific_errors(tmp_path: Path) -> None:
    rows = published_specs(FIXTURES / "json_2.1.1", split="valid_unseen")
    assert rows == [
        {
            "slot_id": "alfworld-valid_unseen-pick_clean_then_place_in_recep-Mug-None-CoffeeMachine-1-"
            "trial_T20190909_000000_000001",
            "spec": {"game_file": str(PUBLISHED)},
        }
    ]
    with pytest.raises(EnvironmentSpecError, match=r"no game\.tw-pddl under"):
        published_specs(FIXTURES / "json_2.1.1", split="train")
    env = AlfworldEnv(tmp_path / "cache")
    with pytest.raises(EnvironmentSpecError, match="does not exist"):
        env.game({"game_file": str(tmp_path / "missing.tw-pddl")})
    broken = tmp_path / "game.tw-pddl"
    broken.write_text(json.dumps({"pddl_domain": "(define)", "grammar": ""}), encoding="utf-8")
    with pytest.raises(EnvironmentSpecError, match=r"lacks non-empty \['grammar', 'pddl_problem'\]"):
        env.game({"game_file": str(broken)})
    with pytest.raises(EnvironmentSpecError, match="unknown keys"):
        env.validate_spec({"game_file": str(PUBLISHED), "seed": 1})
