"""TextArena through the plug-in API: the `textarena` preset (Tower of Hanoi, seed tasks at the library's
`-medium` variant) runs two iterations through the real `rla` CLI offline (real Prefect, MLflow, tiny models,
the library's own game), and a variant chosen in iteration 1 is one the library registers and is decided in
iteration 2.
"""

from __future__ import annotations

import json

import polars as pl
import pytest
from rla_textarena import registered

from tests.flows.conftest import FlowEnv, run_preset_two_iterations


@pytest.mark.slow  # ~3 min here (a 15-move game, 2 iterations); the plug-in's unit tests run by default
@pytest.mark.timeout(1800)
def test_the_textarena_preset_runs_two_iterations_with_a_chosen_registered_variant(flow_env: FlowEnv) -> None:
    store = run_preset_two_iterations(flow_env, "textarena", "ta", timeout=1500)
    rollouts = store.read_frame("ta", 1, "rollout", "rollouts")
    assert set(rollouts["slot_id"]) == {"TowerOfHanoi-0", "TowerOfHanoi-1"}
    assert set(rollouts["status"]) <= {"won", "lost"}
    assert store.read_frame("ta", 1, "judge", "judgments").height == rollouts.height * 2  # judge.m = 2
    # Labels for both slots (the samples may be empty: a group the tiny policy lost throughout has no advantage).
    assert set(store.read_frame("ta", 1, "label", "tasks")["slot_id"]) == {"TowerOfHanoi-0", "TowerOfHanoi-1"}
    proposals = store.read_frame("ta", 1, "adapt", "proposals")
    chosen = proposals.filter(pl.col("chosen"))
    assert chosen.height >= 1 and chosen["valid"].all()
    library = list(registered("TowerOfHanoi").values())
    for spec in map(json.loads, chosen["spec"]):
        assert {k: v for k, v in spec.items() if k != "seed"} in library, spec
    decisions = store.read_frame("ta", 2, "label", "decisions")
    assert set(chosen["slot_id"]) <= set(decisions["slot_id"])
    assert store.manifest("ta", 1, "rollout").extra["metrics"]["env/env_error_rate"] == 0.0
    assert store.read_frame("ta", 2, "evaluate", "eval").height == 1  # 1 held-out game x 1 rollout
