"""The Reasoning Gym plug-in (plugins/reasoning_gym): the library's generators, scorer and declared ranges,
played through the real rollout runner and rewrite validation (recorded policy answers)."""

from __future__ import annotations

import importlib.metadata
import json

import pytest
import reasoning_gym
from rla_reasoning_gym import ReasoningGym, ReasoningGymOptions, attributes, space_of

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


def plugin(**options: object) -> ReasoningGym:
    return ReasoningGym(ReasoningGymOptions.model_validate(options))


def test_the_rewrite_space_is_the_generators_declared_curriculum_ranges() -> None:
    space = space_of("chain_sum")
    for attr in attributes("chain_sum").values():
        for name in (attr.lower_field_name, attr.upper_field_name):
            assert space.bounds[name] == (min(attr.levels), max(attr.levels))
    assert set(space.difficulty) == set(space.bounds)
    # Another generator, another space, set per instance from the options.
    gcd = plugin(dataset="gcd")
    assert gcd.rewrite_space == space_of("gcd") and "max_value" in gcd.rewrite_space.bounds


def test_an_episode_is_one_question_scored_by_the_library() -> None:
    rg = plugin(choices=4)
    (task, *_) = rg.tasks("train")
    state, obs = rg.reset(task.spec, seed=3)
    entry = reasoning_gym.create_dataset("chain_sum", size=1, seed=task.spec["seed"], **{
        k: v for k, v in task.spec.items() if k != "seed"})[0]  # fmt: skip
    assert obs.text == entry["question"] and len(obs.actions) == 4 and entry["answer"] in obs.actions
    assert rg.demonstration(task.spec) == [entry["answer"]] == rg.expert_actions(state)
    won, end = rg.step(state, entry["answer"])
    assert end.done and end.actions == () and rg.score(won) == 1.0
    for wrong in (a for a in obs.actions if a != entry["answer"]):
        assert rg.score(rg.step(state, wrong)[0]) < 1.0  # no distractor the library would accept
    # The episode seed shuffles the choices; the question is the task's.
    orders = {rg.reset(task.spec, seed=s)[1].actions for s in range(8)}
    assert len(orders) > 1 and {rg.reset(task.spec, seed=s)[1].text for s in range(8)} == {obs.text}


def test_the_policy_plays_it_through_the_rollout_runner() -> None:
    env = GuardedPlugin(load_plugin("reasoning-gym", {"train_tasks": 1}))
    spec = env.tasks("train")[0].spec
    request = RolloutRequest(
        tasks=(PlayTask("t0", "t0", False, spec),), n=2, max_steps=2, sampling=SamplingConfig(), seed=1,
        iteration=1, history_turns=2, env_retries=1,
    )  # fmt: skip
    answer = env.plugin.demonstration(spec)[0]  # type: ignore[index]
    index = env.plugin.reset(spec, seed=0)[1].actions.index(answer)
    gen = RecordedGenerator([f"\\boxed{{{index}}}"] * 8)
    rollouts = play_rollouts(request, env=env, generator=gen)["rollouts"]
    assert rollouts.height == 2 and rollouts["done"].all() and set(rollouts["status"]) <= {"won", "lost"}
    assert rollouts["expert_actions"][0] == json.dumps([answer])


def test_free_form_answers_are_read_and_scored_by_the_library() -> None:
    env = GuardedPlugin(load_plugin("reasoning-gym", {"train_tasks": 1, "answer": "free"}))
    spec = env.tasks("train")[0].spec
    request = RolloutRequest(
        tasks=(PlayTask("t0", "t0", False, spec),), n=3, max_steps=2, sampling=SamplingConfig(), seed=1,
        iteration=1, history_turns=2, env_retries=0,
    )  # fmt: skip
    entry = reasoning_gym.create_dataset("chain_sum", size=1, seed=spec["seed"], **{
        k: v for k, v in spec.items() if k != "seed"
    })[0]  # fmt: skip
    right = f"Thinking... <answer>{entry['answer']}</answer>"
    gen = RecordedGenerator([right, str(entry["answer"]), "<answer>0.5</answer>"])
    rollouts = play_rollouts(request, env=env, generator=gen)["rollouts"]
    assert rollouts["action"].to_list() == [right, str(entry["answer"]), "<answer>0.5</answer>"]
    assert rollouts["status"].to_list() == ["won", "lost", "lost"]  # no tags: the library finds no answer
    assert rollouts["score"].to_list() == [1.0, 0.0, reasoning_gym.create_dataset("chain_sum", size=1, seed=0)
                                             .score_answer("0.5", entry)]  # fmt: skip
    assert rollouts["next_observation"][1] == "You answered: no answer in <answer></answer> tags"
    assert rollouts["prompt"][0].startswith(env.plugin.system_prompt)  # type: ignore[arg-type]


def test_rewrites_move_along_the_levels_and_are_validated_by_generating() -> None:
    env = GuardedPlugin(load_plugin("reasoning-gym", {"train_tasks": 1}))
    root = env.tasks("train")[0].spec
    for goal in (Goal.HARDER, Goal.EASIER):
        request = RewriteRequest("t", "t", root, root, goal, prev_acc=1.0 if goal is Goal.HARDER else 0.0)
        proposals = rewrite_tasks([request], rewriter=PluginRewriter(env), env=env, k=4, seed=0, iteration=1,
                                  check=lambda spec, req: check_variant(env, spec, req))  # fmt: skip
        assert proposals["valid"].any() and proposals.filter(proposals["chosen"]).height == 1
        for spec in map(json.loads, proposals.filter(proposals["valid"])["spec"]):
            assert env.plugin.rewrite_space.problem(spec) is None and env.plugin.check_variant(spec) is None
    rg = plugin()
    assert rg.check_variant({**root, "min_terms": 5, "max_terms": 3}) == "min_terms=5 is above max_terms=3"
    # The top of every range has no harder variant.
    top = {**root, **{k: hi for k, (_, hi) in rg.rewrite_space.bounds.items()}}
    assert rg.variants(top, harder=True) == []


def test_bad_options_name_the_key_and_the_stage_keys_carry_the_library_version() -> None:
    with pytest.raises(
        ConfigError, match=r"plugin.options.dataset: .*'nope' is not a Reasoning Gym .*chain_sum"
    ):
        load_plugin("reasoning-gym", {"dataset": "nope"})
    cfg = load_config(preset="reasoning-gym")
    for name in ("seed_tasks", "rollout", "adapt", "evaluate"):
        key = all_stages()[name].slice(cfg).key_json()["plugin"]
        assert key["requires"] == {"reasoning-gym": importlib.metadata.version("reasoning-gym")}, name
        assert key["version"] == importlib.metadata.version("rla-reasoning-gym")
