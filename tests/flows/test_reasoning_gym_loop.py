"""Reasoning Gym through the plug-in API: the `reasoning-gym` preset runs two iterations through the real `rla`
CLI offline (real Prefect, MLflow, tiny models, the library's own generators and scorer), and a variant chosen
in iteration 1 lies in the generator's declared ranges and is decided in iteration 2.
"""

from __future__ import annotations

import json

import polars as pl
import pytest
from rla_reasoning_gym import attributes

from tests.flows.conftest import FlowEnv, run_preset_two_iterations


@pytest.mark.slow  # 50-165 s here (2 iterations, tiny models); the plug-in's unit tests run by default
def test_the_reasoning_gym_preset_runs_two_iterations_with_a_chosen_rewrite_in_its_declared_ranges(
    flow_env: FlowEnv,
) -> None:
    store = run_preset_two_iterations(flow_env, "reasoning-gym", "rg", timeout=1200)
    rollouts = store.read_frame("rg", 1, "rollout", "rollouts")
    assert set(rollouts["slot_id"]) == {"chain_sum-0", "chain_sum-1"}
    assert set(rollouts["status"]) <= {"won", "lost"}
    assert rollouts.filter(pl.col("action_valid"))["done"].all()  # single-turn: an answer ends the episode
    assert store.read_frame("rg", 1, "judge", "judgments").height == rollouts.height * 2  # judge.m = 2
    assert store.read_frame("rg", 1, "label", "policy_samples").height > 0
    proposals = store.read_frame("rg", 1, "adapt", "proposals")
    chosen = proposals.filter(pl.col("chosen"))
    assert chosen.height >= 1 and chosen["valid"].all()
    for spec in map(json.loads, chosen["spec"]):
        for attr in attributes("chain_sum").values():
            low, high = spec[attr.lower_field_name], spec[attr.upper_field_name]
            assert min(attr.levels) <= low <= high <= max(attr.levels), spec
    decisions = store.read_frame("rg", 2, "label", "decisions")
    assert set(chosen["slot_id"]) <= set(decisions["slot_id"])
    assert store.manifest("rg", 1, "rollout").extra["metrics"]["env/env_error_rate"] == 0.0
    assert store.read_frame("rg", 2, "evaluate", "eval").height == 2  # 2 held-out items x 1 rollout


@pytest.mark.slow  # ~40 s here: the same preset with free-form answers, as the library intends
def test_the_reasoning_gym_preset_runs_free_form_for_two_iterations(flow_env: FlowEnv) -> None:
    store = run_preset_two_iterations(
        flow_env, "reasoning-gym", "rgf", "plugin.options.answer=free", timeout=1200
    )
    rollouts = store.read_frame("rgf", 1, "rollout", "rollouts")
    assert rollouts["done"].all() and set(rollouts["status"]) <= {"won", "lost"}  # one free-form turn each
    assert rollouts["expert_actions"].to_list() == ["[]"] * rollouts.height  # free text has no expert labels
    assert rollouts["score"].is_not_null().all()  # the library's score_answer, kept raw
    assert store.read_frame("rgf", 1, "judge", "judgments").height == rollouts.height * 2  # judge.m = 2
    chosen = store.read_frame("rgf", 1, "adapt", "proposals").filter(pl.col("chosen"))
    for spec in map(json.loads, chosen["spec"]):  # the rewrite still moves a difficulty field in range
        for attr in attributes("chain_sum").values():
            low, high = spec[attr.lower_field_name], spec[attr.upper_field_name]
            assert min(attr.levels) <= low <= high <= max(attr.levels), spec
    assert chosen.height >= 1
