"""Real TextWorld games: generation, caching, winning by the walkthrough, losing by bad actions."""

from __future__ import annotations

from pathlib import Path

import pytest

from rla_core.envs.textworld_env import TextLimits, TextWorldEnv, compact_text, spec_hash
from rla_core.errors import EnvironmentSpecError
from tests.envs.conftest import ONE_STEP, TWO_STEP


def test_walkthrough_wins_and_expert_actions_follow_it(env: TextWorldEnv) -> None:
    [walkthrough] = env.demonstrations(TWO_STEP, seed=0)
    assert walkthrough == ["go east", "close safe"]
    episode = env.open(TWO_STEP, seed=0)
    try:
        assert episode.admissible_actions == sorted(episode.admissible_actions)
        # policy_commands from the start = the whole optimal plan; its first item is the next action
        assert episode.expert_actions() == walkthrough
        first = episode.step("go east")
        assert (first.done, first.won) == (False, False)
        assert episode.expert_actions() == ["close safe"]
        last = episode.step("close safe")
        assert (last.done, last.won) == (True, True)
        assert episode.admissible_actions == [] and episode.expert_actions() == []
    finally:
        episode.close()


def test_bad_actions_never_win(env: TextWorldEnv) -> None:
    episode = env.open(TWO_STEP, seed=0)
    try:
        for _ in range(4):
            result = episode.step("look")  # never advances the quest
            assert not result.won
        assert not episode.done
        assert episode.expert_actions() == ["go east", "close safe"]
    finally:
        episode.close()


def test_observations_are_compact(env: TextWorldEnv) -> None:
    episode = env.open(ONE_STEP, seed=0)
    try:
        assert "$$" not in episode.observation and "\n" not in episode.observation
        assert len(episode.observation) <= env.limits.observation_chars + 4  # + " ..."
        assert episode.instruction and episode.instruction not in episode.observation
    finally:
        episode.close()


def test_compact_text_strips_banner_status_and_end() -> None:
    raw = "  ____  \n | $$$$ |\n\nYou take the key.\n\n>   -= Hall =-0/1\n*** The End ***\n"
    assert compact_text(raw, max_chars=100) == "You take the key."
    # 'aaa bbb ccc'[:8] = 'aaa bbb ' -> cut at the last space -> 'aaa bbb' -> + ' ...'
    assert compact_text("aaa bbb ccc", max_chars=8) == "aaa bbb ..."
    # [:6] = 'aaa bb' -> cut at the last space drops the partial word 'bb' -> 'aaa' + ' ...'
    assert compact_text("aaa bbb ccc", max_chars=6) == "aaa ..."


def test_games_are_cached_by_spec_hash(env: TextWorldEnv, game_cache: Path) -> None:
    path = env.game_file(ONE_STEP)
    assert path.parent == game_cache / spec_hash(ONE_STEP)
    mtime = path.stat().st_mtime_ns
    assert env.game_file(ONE_STEP).stat().st_mtime_ns == mtime  # cache hit: not recompiled
    assert not [p for p in game_cache.iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({**ONE_STEP, "quest_length": 0}, "'quest_length'=0 is outside [1, 5]"),
        ({**ONE_STEP, "theme": "house"}, "unknown keys ['theme']"),
        ({"world_size": 1, "nb_objects": 3, "seed": 1}, "missing keys ['quest_length']"),
        ({**ONE_STEP, "nb_objects": "3"}, "'nb_objects' must be an integer"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_bad_specs_raise_with_how_to_fix(env: TextWorldEnv, spec: object, fragment: str) -> None:
    with pytest.raises(EnvironmentSpecError) as info:
        env.game_file(spec)  # type: ignore[arg-type]
    assert fragment in str(info.value)


def test_check_winnable_reports_invalid_spec(env: TextWorldEnv) -> None:
    assert env.check_winnable(ONE_STEP) is None
    reason = env.check_winnable({**ONE_STEP, "world_size": 9})
    assert reason is not None and "outside [1, 6]" in reason


def test_text_limits_cap_observation_and_instruction_separately() -> None:
    limits = TextLimits(observation_chars=8, instruction_chars=6)
    assert limits.observation("aaa bbb ccc") == compact_text("aaa bbb ccc", max_chars=8) == "aaa bbb ..."
    assert limits.instruction("aaa bbb ccc") == compact_text("aaa bbb ccc", max_chars=6) == "aaa ..."
