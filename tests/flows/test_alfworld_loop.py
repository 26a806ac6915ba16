"""`rla run --preset alfworld` end to end at test size: ALFWorld-style games through every stage
of the real CLI (Prefect, MLflow, tiny models), sharing the session's Prefect home and model cache."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from rla_core.store import ArtifactStore
from tests.flows.conftest import ITERATION, FlowEnv, planned

REPO = Path(__file__).resolve().parents[2]
# One iteration, two tasks, two rollouts of two steps, evaluation on one held-out game, untrained tiny
# models with short answers: the preset's every stage at the smallest size (SFT is what takes minutes).
TINY = [
    "--set", "iterations=1", "--set", "rollout.tasks_per_iter=2", "--set", "rollout.rollouts_per_task=2",
    "--set", "rollout.max_steps=2", "--set", "judge.m=2", "--set", "evaluation.every=1",
    "--set", "evaluation.rollouts_per_task=1", "--set", "evaluation.max_steps=2",
    "--set", "models.warm_start=false", "--set", "rollout.sampling.max_new_tokens=8",
    "--set", "judge.sampling.max_new_tokens=8", "--set", "evaluation.sampling.max_new_tokens=8",
]  # fmt: skip


def _first_rows(src: str, n: int, dest: Path) -> str:
    lines = (REPO / src).read_text(encoding="utf-8").splitlines()[:n]
    dest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(dest)


def test_alfworld_preset_runs_every_stage(flow_env: FlowEnv) -> None:
    root = flow_env.base / "alfworld-runs"
    root.mkdir()
    train = _first_rows("data/alfworld/train.jsonl", 2, root / "train.jsonl")  # pick-and-place, pick-two
    held_out = _first_rows("data/alfworld/eval.jsonl", 1, root / "eval.jsonl")
    tasks_files = ["--set", f"textgame.tasks={train}", "--set", f"textgame.eval_tasks={held_out}"]
    flow_env.rla(
        "run", "--preset", "alfworld", *TINY, *tasks_files, *flow_env.settings(root), "--run-id", "alfw"
    )
    store = ArtifactStore(str(root))
    done = set(store.committed("alfw"))
    # Set-up stages and the baseline evaluation at iteration 0, then one iteration.
    assert done == planned(store, "alfw")
    assert {s for it, s in done if it == 1} == set(ITERATION)
    tasks = store.read_frame("alfw", 0, "seed_tasks", "tasks")
    assert set(tasks["env"].to_list()) == {"alfworld"} and tasks.height == 2
    rollouts = store.read_frame("alfw", 1, "rollout", "rollouts")
    assert rollouts.height > 0
    # Every step carries the planner's next action at that state (one action, or none once won).
    labels = [json.loads(e) for e in rollouts["expert_actions"].to_list()]
    assert all(len(label) <= 1 for label in labels) and any(labels)
    assert rollouts.filter(pl.col("step") == 0)["prompt"].str.contains("go to ").all()  # admissible commands
    assert store.read_frame("alfw", 1, "evaluate", "eval").height == 1  # 1 held-out game x 1 rollout
    # Two steps cannot win these games (plans of 4+ steps): acc 0 asks for easier variants, which the
    # parametric rewriter proposes and the planner validates.
    proposals = store.read_frame("alfw", 1, "adapt", "proposals")
    assert set(proposals["goal"].to_list()) == {"easier"} and proposals.filter(pl.col("chosen")).height == 2
