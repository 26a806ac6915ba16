"""Prefect's result cache is machine-wide, yet a run only ever gets its own stages back.

Every run here has the same config and seed, so every content key is shared; the session's Prefect
home (and so its result storage) is shared too. Before the fix a done stage was answered with the
reference cached by whichever run wrote that key last, and an extended run failed with
``no run 'three'`` / ``no run 'other'`` under its own root (or, had that run existed there, silently
trained on its checkpoint and task registry).

One scenario (one-iteration runs of the test preset, in this order): root X run ``two``; root Y run
``other`` (a: the same run in another directory, after it); root X run ``three`` (c: a second run id
in the same root, the last to cache every shared key); ``three`` is deleted; ``two`` is extended by
an iteration.
"""

from __future__ import annotations

import shutil

import pytest

from rla_core.store import ArtifactStore
from tests.flows.conftest import FlowEnv, planned

ONE_ITERATION = ["--preset", "test", "--set", "iterations=1"]


def in_use(store: ArtifactStore, run_id: str) -> dict[tuple[int, str], tuple[int, str]]:
    """(iteration, stage) → (attempt in use, content key)."""
    return {where: (m.attempt, m.content_key) for where, m in store.committed(run_id).items()}


@pytest.mark.slow  # four runs, ~130 s: the default suite's 15-minute budget (README, Tests)
def test_extending_a_run_uses_only_its_own_results_beside_same_config_runs(flow_env: FlowEnv) -> None:
    root_x, root_y = flow_env.base / "iso-x", flow_env.base / "iso-y"
    for root, run_id in ((root_x, "two"), (root_y, "other"), (root_x, "three")):
        flow_env.rla("run", *ONE_ITERATION, *flow_env.settings(root), "--run-id", run_id, timeout=1800)
    x, y = ArtifactStore(str(root_x)), ArtifactStore(str(root_y))
    keys = {
        run_id: {k: v[1] for k, v in in_use(s, run_id).items()}
        for s, run_id in ((x, "two"), (y, "other"), (x, "three"))
    }
    assert keys["two"] == keys["other"] == keys["three"]  # same config and seed: every content key is shared
    shutil.rmtree(root_x / "three")
    before, other_before = in_use(x, "two"), in_use(y, "other")

    flow_env.rla("resume", "two", "--root", str(root_x), "--iterations", "2", timeout=1800)

    after = in_use(x, "two")
    assert {k: v for k, v in after.items() if k[0] < 2} == before  # nothing that was done ran again
    assert {(it, s) for it, s in planned(x, "two") if it == 2} <= set(after)  # iteration 2 ran every stage
    # …fed from this run's own iteration 1 (a manifest records its inputs' content keys).
    rollout = x.manifest("two", 2, "rollout")
    assert rollout is not None
    assert rollout.inputs == {"tasks": after[(1, "adapt")][1], "policy": after[(1, "train_policy")][1]}
    assert in_use(y, "other") == other_before  # the other directory was not written to
