"""The ALFWorld Environment adapter: admissible commands, expert labels at the current state (not the
initial plan), plans cached by state and reused along the plan, and batched rollouts."""

from __future__ import annotations

import json

import polars as pl

from rla_core.config import SamplingConfig
from rla_core.envs.alfworld.env import AlfworldEnv
from rla_core.envs.rollout import run_rollouts
from rla_core.stage_inputs import RolloutRequest
from tests.envs.alfworld.conftest import SPECS
from tests.recorded import RecordedGenerator


def test_labels_come_from_the_current_state_and_plans_are_cached(alfworld_env: AlfworldEnv) -> None:
    spec = SPECS["pick_clean_then_place_in_recep"]
    walkthrough = alfworld_env.demonstrations(spec, seed=0)[0]
    episode = alfworld_env.open(spec, seed=0)
    try:
        assert episode.instruction.rstrip(".") in {
            "put a clean mug in coffeemachine",
            "clean some mug and put it in coffeemachine",
        }
        assert "Welcome" not in episode.observation and "coffeemachine 1" in episode.observation
        assert episode.expert_actions() == walkthrough[:1]
        assert walkthrough[0] in episode.admissible_actions
        # Leave the plan: go somewhere the plan does not start with.
        detour = next(a for a in episode.admissible_actions if a.startswith("go to ") and a != walkthrough[0])
        episode.step(detour)
        before = alfworld_env.plans.stats.searches
        label = episode.expert_actions()
        assert alfworld_env.plans.stats.searches == before + 1  # a new state: one search
        assert label and label[0] in episode.admissible_actions
        # From the detour the expert still goes for the mug, not to the walkthrough's stale second step.
        assert label[0] != walkthrough[1]
        # Following the expert wins without any further search (the plan's tail is reused).
        searches = alfworld_env.plans.stats.searches
        for _ in range(len(walkthrough) + 2):
            if episode.done:
                break
            episode.step(episode.expert_actions()[0])
        assert episode.won and episode.expert_actions() == [] and episode.admissible_actions == []
        assert alfworld_env.plans.stats.searches == searches
    finally:
        episode.close()
    # A second episode of the same game: its start state is cached, no search.
    again = alfworld_env.open(spec, seed=1)
    try:
        searches = alfworld_env.plans.stats.searches
        assert again.expert_actions() == walkthrough[:1]
        assert alfworld_env.plans.stats.searches == searches
    finally:
        again.close()


def test_step_plans_nothing_unless_a_label_is_asked_for(alfworld_env: AlfworldEnv) -> None:
    spec = SPECS["pick_cool_then_place_in_recep"]
    alfworld_env.game(spec)
    episode = alfworld_env.open(spec, seed=0)
    try:
        searches = alfworld_env.plans.stats.searches
        episode.step(episode.admissible_actions[0])
        episode.step(episode.admissible_actions[-1])
        assert alfworld_env.plans.stats.searches == searches
    finally:
        episode.close()


def test_batched_rollouts_record_expert_labels(alfworld_env: AlfworldEnv) -> None:
    spec = SPECS["pick_and_place_simple"]
    walkthrough = alfworld_env.demonstrations(spec, seed=0)[0]
    # The recorded policy always answers index 0; three steps cannot win a game whose shortest plan is longer.
    generator = RecordedGenerator([r"\boxed{0}"] * 12)
    frame = run_rollouts(RolloutRequest(tasks=[("t0", "s0", False, spec)], n=2, max_steps=3, sampling=SamplingConfig(), seed=0, iteration=1, history_turns=2, env_retries=0), env=alfworld_env, generator=generator)  # fmt: skip
    assert frame.height == 6 and set(frame["rollout_id"].to_list()) == {0, 1}
    first = frame.filter(pl.col("step") == 0)
    assert [json.loads(e) for e in first["expert_actions"].to_list()] == [walkthrough[:1]] * 2
    assert len(walkthrough) > 3 and frame["outcome"].to_list() == [-1.0] * 6
