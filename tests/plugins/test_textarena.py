"""The TextArena plug-in (plugins/textarena): the library's own single-player games and registered variants,
played through the real rollout runner and rewrite validation (recorded policy answers)."""

from __future__ import annotations

import importlib.metadata
import json

import pytest
from rla_textarena import GAMES, TextArena, TextArenaOptions, registered, space_of

from rla_core.algo.adaptation import Goal
from rla_core.algo.curriculum import PlayTask
from rla_core.config import SamplingConfig, load_config
from rla_core.envs.plugin_env import GuardedPlugin, PluginRewriter, check_variant
from rla_core.envs.rewriter import RewriteRequest, rewrite_tasks
from rla_core.envs.rollout import play_rollouts
from rla_core.errors import ConfigError
from rla_core.plugins import load_plugin
from rla_core.stage_inputs import RolloutRequest
from tasks.stage import all_stages
from tests.recorded import RecordedGenerator


def plugin(**options: object) -> TextArena:
    return TextArena(TextArenaOptions.model_validate(options))


def test_the_rewrite_space_is_the_librarys_registered_variants() -> None:
    hanoi = registered("TowerOfHanoi")
    assert hanoi["TowerOfHanoi-v0-medium"] == {"num_disks": 4, "max_turns": 30}
    assert "TowerOfHanoi-v0-raw" not in hanoi  # wrapper-only aliases are not variants
    disks = [v["num_disks"] for v in hanoi.values()]
    assert space_of("TowerOfHanoi").bounds["num_disks"] == (min(disks), max(disks))
    guess = plugin(game="GuessTheNumber")
    assert guess.rewrite_space.bounds == {"max_number": (20, 50)}  # min_number and max_turns never vary


@pytest.mark.parametrize("game", list(GAMES))
def test_the_expert_wins_every_seed_task_through_the_librarys_own_rules(game: str) -> None:
    ta = plugin(game=game, train_tasks=3)
    for task in ta.tasks("train"):
        state, obs = ta.reset(task.spec, seed=0)
        assert obs.actions and not obs.done
        for move in ta.demonstration(task.spec):
            assert move in obs.actions and move in ta.expert_actions(state)
            state, obs = ta.step(state, move)
        assert obs.done and ta.score(state) == 1.0 and "Congratulations" in obs.text


def test_hanoi_offers_only_legal_moves_and_the_expert_is_optimal() -> None:
    ta = plugin(variant="TowerOfHanoi-v0-medium")
    spec = ta.tasks("train")[0].spec
    assert len(ta.demonstration(spec)) == 2**4 - 1
    state, obs = ta.reset(spec, seed=0)
    assert set(obs.actions) == {"[A B]", "[A C]"}
    state, obs = ta.step(state, "[A B]")  # off the optimal path: the expert still finds the way
    assert "[B C]" in obs.actions and ta.expert_actions(state)
    while not obs.done:
        state, obs = ta.step(state, ta.expert_actions(state)[0])
    assert ta.score(state) == 1.0


def test_the_policy_plays_it_through_the_rollout_runner() -> None:
    env = GuardedPlugin(load_plugin("textarena", {"train_tasks": 1}))
    spec = env.tasks("train")[0].spec
    request = RolloutRequest(
        tasks=(PlayTask("t0", "t0", False, spec),), n=1, max_steps=3, sampling=SamplingConfig(), seed=1,
        iteration=1, history_turns=2, env_retries=1,
    )  # fmt: skip
    gen = RecordedGenerator(["\\boxed{0}"] * 8)
    rollouts = play_rollouts(request, env=env, generator=gen)["rollouts"]
    assert rollouts.height == 3 and set(rollouts["status"]) == {"lost"}  # the turn cap, not the game's end
    assert "Current Board" in rollouts["next_observation"][0]
    assert json.loads(rollouts["expert_actions"][0]) == ["[A C]"]


def test_rewrites_are_the_librarys_neighbouring_variants() -> None:
    env = GuardedPlugin(load_plugin("textarena", {"variant": "TowerOfHanoi-v0-medium", "train_tasks": 1}))
    root = env.tasks("train")[0].spec
    for goal, disks in ((Goal.HARDER, 5), (Goal.EASIER, 3)):
        request = RewriteRequest("t", "t", root, root, goal, prev_acc=1.0 if goal is Goal.HARDER else 0.0)
        proposals = rewrite_tasks([request], rewriter=PluginRewriter(env), env=env, k=4, seed=0, iteration=1,
                                  check=lambda spec, req: check_variant(env, spec, req))  # fmt: skip
        chosen = json.loads(proposals.filter(proposals["chosen"])["spec"][0])
        assert chosen["num_disks"] == disks and chosen["seed"] == root["seed"]
    made_up = {**root, "num_disks": 5, "max_turns": 20}  # in bounds, but no variant the library registers
    assert env.plugin.rewrite_space.problem(made_up) is None
    assert env.plugin.check_variant(made_up).startswith("not a registered TextArena TowerOfHanoi variant")  # type: ignore[union-attr]


def test_bad_options_name_the_key_and_the_stage_keys_carry_the_library_version() -> None:
    with pytest.raises(
        ConfigError, match=r"plugin.options.game: .*'Wordle' is not a TextArena game .*TowerOfHanoi"
    ):
        load_plugin("textarena", {"game": "Wordle"})
    with pytest.raises(ConfigError, match=r"plugin.options.variant: .*TowerOfHanoi-v0-medium"):
        load_plugin("textarena", {"variant": "TowerOfHanoi-v9"})
    cfg = load_config(preset="textarena")
    for name in ("seed_tasks", "rollout", "adapt", "evaluate"):
        key = all_stages()[name].slice(cfg).key_json()["plugin"]
        assert key["requires"] == {"textarena": importlib.metadata.version("textarena")}, name
