"""An environment plug-in from its own package runs the whole loop through the real `rla` CLI, at tiny sizes.

The example package (examples/numberline, installed editable by `make setup`) is found through its
entry point; nothing in rla_core names it. Real Prefect, MLflow and tiny models.
"""

from __future__ import annotations

import importlib.metadata

import polars as pl

from rla_core.plugins import ENTRY_POINT_GROUP
from rla_core.store import ArtifactStore
from tests.flows.conftest import ITERATION, FlowEnv, planned

PLUGIN = [
    "--set",
    "setting=plugin",
    "--set",
    "plugin.name=numberline",
    "--set",
    "plugin.options={train_tasks: 2}",
]


def test_the_example_plugin_runs_two_iterations_with_a_chosen_rewrite_and_its_decision(
    flow_env: FlowEnv,
) -> None:
    (entry,) = [
        ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == "numberline"
    ]
    assert entry.value == "rla_numberline:NumberLine" and entry.dist is not None
    root = flow_env.base / "runs-plugin"
    flow_env.rla(
        "run", "--preset", "test", *flow_env.settings(root), "--run-id", "nl", *PLUGIN,
        "--set", "evaluation.every=2", timeout=1200,
    )  # fmt: skip
    store = ArtifactStore(str(root))
    done = set(store.committed("nl"))
    assert done == planned(store, "nl")
    for it in (1, 2):  # evaluation.every=2: held-out evaluation in iteration 2 (and 0) only
        assert {s for i, s in done if i == it} == set(ITERATION) - ({"evaluate"} if it == 1 else set())
    rollouts = store.read_frame("nl", 1, "rollout", "rollouts")
    assert set(rollouts["slot_id"]) == {"line-0", "line-1"}  # the plug-in's own stable ids
    assert set(rollouts["status"]) <= {"won", "lost"}
    assert store.read_frame("nl", 1, "judge", "judgments").height == rollouts.height * 2  # judge.m = 2
    proposals = store.read_frame("nl", 1, "adapt", "proposals")
    chosen = proposals.filter(pl.col("chosen"))
    assert chosen.height >= 1 and chosen["valid"].all()
    # The decision on iteration 1's chosen variants is taken in iteration 2 (accepted or rejected by accuracy).
    decisions = store.read_frame("nl", 2, "label", "decisions")
    assert set(chosen["slot_id"]) <= set(decisions["slot_id"])
    manifest = store.manifest("nl", 1, "rollout")
    assert manifest.extra["metrics"]["env/env_error_rate"] == 0.0
