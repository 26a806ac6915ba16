"""One iteration of the coding and GUI settings through the real `rla` CLI (issue 10), at tiny sizes.

The coding run has no rewrite target (alpha_low = 0 with coding's strict lower bound, alpha_high = 1):
the adapt stage must write an empty proposal set without opening the environment model (it crashed
with "set models.environment" before). Real sandbox, real headless Chromium, real tiny models.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from flows.report import SCREEN_STEPS, screens_html
from rla_core.store import ArtifactStore
from tests.flows.conftest import CODING_ITERATION, ITERATION, REPO, FlowEnv, planned

TINY = ["--set", "iterations=1", "--set", "rollout.tasks_per_iter=2", "--set", "rollout.rollouts_per_task=2",
        "--set", "evaluation.rollouts_per_task=1", "--set", "models.warm_start_epochs=2"]  # fmt: skip


def committed(store: ArtifactStore, run_id: str) -> set[tuple[int, str]]:
    return {
        (it, stage)
        for it in store.list_iterations(run_id)
        for stage in store.list_stages(run_id, it)
        if store.manifest(run_id, it, stage) is not None
    }


def test_one_coding_iteration_without_rewrite_targets(flow_env: FlowEnv) -> None:
    root = flow_env.base / "runs-coding"
    flow_env.rla(
        "run", "--preset", "coding", *flow_env.settings(root), "--run-id", "c1", *TINY,
        "--set", "coding.unit_tests_per_task=2", "--set", "rollout.sampling.max_new_tokens=48",
        "--set", "evaluation.sampling.max_new_tokens=48",
        "--set", "adaptation.alpha_low=0.0", "--set", "adaptation.alpha_high=1.0", timeout=1800,
    )  # fmt: skip
    store = ArtifactStore(str(root))
    done = committed(store, "c1")
    assert set(done) == planned(store, "c1")
    assert {s for it, s in done if it == 1} == set(CODING_ITERATION)
    rollouts = store.read_frame("c1", 1, "rollout", "rollouts")
    assert rollouts.height == 4 and set(rollouts["outcome"].to_list()) <= {1.0, -1.0}
    # Every program's score is its GT pass ratio and its outcome says whether it passed them all.
    assert rollouts.filter((pl.col("outcome") > 0) != (pl.col("score") == 1.0)).height == 0
    assert store.read_frame("c1", 1, "write_tests", "unit_tests").height == 2 * 2
    adapt = store.manifest("c1", 1, "adapt")
    assert adapt is not None and adapt.extra["metrics"]["env/rewrite_targets"] == 0.0
    assert store.read_frame("c1", 1, "adapt", "proposals").height == 0


def first_lines(src: Path, dst: Path, n: int) -> Path:
    dst.write_text("".join(src.read_text(encoding="utf-8").splitlines(keepends=True)[:n]), encoding="utf-8")
    return dst


def test_one_gui_iteration(flow_env: FlowEnv) -> None:
    root = flow_env.base / "runs-gui"
    # 4 of the 13 shipped forms each: the warm start records demonstrations on every training form in a
    # browser (most of this test's time), and 2 tasks per iteration are played anyway.
    train = first_lines(REPO / "data/gui/train.jsonl", flow_env.base / "gui-train.jsonl", 4)
    held_out = first_lines(REPO / "data/gui/eval.jsonl", flow_env.base / "gui-eval.jsonl", 4)
    flow_env.rla(
        "run", "--preset", "gui", *flow_env.settings(root), "--run-id", "g1", *TINY,
        "--set", f"gui.tasks={train}", "--set", f"gui.eval_tasks={held_out}",
        "--set", "rollout.max_steps=2", "--set", "evaluation.max_steps=2", "--set", "judge.m=2", timeout=1800,
    )  # fmt: skip
    store = ArtifactStore(str(root))
    done = committed(store, "g1")
    assert set(done) == planned(store, "g1")
    assert {s for it, s in done if it == 1} == set(ITERATION)
    rollouts = store.read_frame("g1", 1, "rollout", "rollouts")
    judgments = store.read_frame("g1", 1, "judge", "judgments")
    assert rollouts.height > 0 and judgments.height == 2 * rollouts.height
    assert store.read_frame("g1", 1, "evaluate", "eval").height > 0
    # Every step has the screen it was played on and the screen after it (issue 31), and the run's report
    # shows a rollout's first steps with both, read back from the artifacts.
    assert (
        rollouts["observation_ref"].null_count() == 0 and rollouts["next_observation_ref"].null_count() == 0
    )
    shown = screens_html(store, "g1")
    assert "What the agent saw (iteration 1" in shown
    assert shown.count("<img class='screen'") == 2 * min(SCREEN_STEPS, rollouts.filter(
        (pl.col("task_id") == rollouts["task_id"][0]) & (pl.col("rollout_id") == rollouts["rollout_id"][0])
    ).height)  # fmt: skip
    assert "data:image/png;base64,iVBORw0KGgo" in shown  # inline PNGs
