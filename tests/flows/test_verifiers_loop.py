"""A verifiers environment through `rla run` (real Prefect, MLflow, tiny models, verifiers itself): a taskset
written as a user writes one runs two seeded iterations, played by verifiers against the stage's recording
endpoint; its outcome is the reward verifiers computes for the recorded completions, the judge judges every
assistant turn, the policy trains on the recorded tokens, and the same seed gives the same artifacts."""

from __future__ import annotations

import polars as pl
import pytest
from rla_vf_sum import expected_reward

from rla_core.store import ArtifactStore
from tests.flows.conftest import FlowEnv

SETTINGS = [
    "setting=plugin", "plugin.name=verifiers",
    "plugin.options={environment: rla-vf-sum, train: {limit: 2}, eval: {skip: 2, limit: 2}, success_score: 0.25}",
    "iterations=2", "adaptation.enabled=false", "rollout.tasks_per_iter=2", "rollout.rollouts_per_task=4",
    "rollout.max_steps=2", "rollout.sampling.max_new_tokens=12", "judge.m=2",
    "reward.policy_acc_band={low: 0.0, high: 1.0}", "evaluation.rollouts_per_task=1",
]  # fmt: skip
ANSWERS = {"sum-0-0-0": "0", "sum-1-3-1": "4"}


def _run(flow_env: FlowEnv, run_id: str) -> ArtifactStore:
    root = flow_env.base / f"runs-{run_id}"
    sets = [arg for s in SETTINGS for arg in ("--set", s)]
    flow_env.rla("run", *flow_env.settings(root), *sets, "--run-id", run_id, timeout=1200)
    return ArtifactStore(str(root))


@pytest.mark.slow  # ~2 x 60 s here: two runs of two iterations, verifiers' harness in a subprocess per episode
def test_a_verifiers_taskset_runs_two_seeded_iterations_through_rla_run(flow_env: FlowEnv) -> None:
    store = _run(flow_env, "vf")
    trained = 0
    for it in (1, 2):
        rollouts = store.read_frame("vf", it, "rollout", "rollouts")
        assert rollouts.height == 8 and set(rollouts["status"]) <= {"won", "lost"}
        for row in rollouts.iter_rows(named=True):
            assert row["score"] == pytest.approx(expected_reward(row["response"], ANSWERS[row["slot_id"]]))
        judgments = store.read_frame("vf", it, "judge", "judgments")
        per_turn = judgments.group_by("task_id", "rollout_id", "step").len()
        assert per_turn.height == rollouts.height and (per_turn["len"] == 2).all()  # m = 2 per assistant turn
        samples = store.read_frame("vf", it, "label", "policy_samples")
        kept = samples.join(rollouts, on=["task_id", "rollout_id", "step"], suffix="_rollout")
        assert kept["response_ids"].equals(kept["response_ids_rollout"])  # trained on the recorded tokens
        trained += store.manifest("vf", it, "train_policy").extra["metrics"]["policy/optimizer_steps"]
    assert trained > 0  # the policy checkpoint changed
    again = _run(flow_env, "vf-again")
    for it in (1, 2):
        ours, theirs = (
            s.read_frame(r, it, "rollout", "rollouts") for s, r in ((store, "vf"), (again, "vf-again"))
        )
        assert ours.equals(theirs), it
    assert pl.Series(store.read_frame("vf", 2, "evaluate", "eval").columns).len() > 0
