"""One iteration of the coding and GUI settings through the real `rla` CLI, at tiny sizes.

The coding run has no rewrite target (alpha_low = 0 with coding's strict lower bound, alpha_high = 1):
the adapt stage must write an empty proposal set without opening the environment model (it crashed
with "set models.environment" before). Real sandbox, real headless Chromium, real tiny models.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import polars as pl
import pytest

from flows.report import SCREEN_STEPS, run_report, screens_html
from flows.runs import load_run_config
from rla_core.algo.metrics import CODING_EVAL_LABELS, EVAL_CODE_ACC, coding_eval_metrics
from rla_core.errors import ArtifactError
from rla_core.stage_inputs import Role, StageName
from rla_core.store import ArtifactStore
from tasks.context import RunContext
from tasks.stage import STAGES, StageContext, StageRef, all_stages, train_checkpoint
from tests.coding import benchmark_fixtures as fx
from tests.flows.conftest import CODING_ITERATION, ITERATION, REPO, FlowEnv, planned

TINY = ["--set", "iterations=1", "--set", "rollout.tasks_per_iter=2", "--set", "rollout.rollouts_per_task=2",
        "--set", "evaluation.rollouts_per_task=1", "--set", "models.warm_start_epochs=2"]  # fmt: skip


def committed(store: ArtifactStore, run_id: str) -> set[tuple[int, str]]:
    return set(store.committed(run_id))


def coding_run(flow_env: FlowEnv, root: Path, run_id: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """A tiny seeded coding run (trains on our problems) evaluating on the LiveCodeBench fixture release."""
    return flow_env.rla(
        "run", "--preset", "coding", *flow_env.settings(root), "--run-id", run_id, *TINY,
        "--set", "coding.unit_tests_per_task=2", "--set", "rollout.sampling.max_new_tokens=48",
        "--set", "evaluation.sampling.max_new_tokens=48",
        "--set", "adaptation.alpha_low=0.0", "--set", "adaptation.alpha_high=1.0",
        "--set", f"coding.eval_problems={fx.LCB_FILE}", "--set", "coding.eval_format=livecodebench",
        *extra, timeout=1800,
    )  # fmt: skip


def coding_eval_is_consistent(store: ArtifactStore, run_id: str, iteration: int) -> dict[str, float]:
    """The evaluate stage's three coding metrics are those of its own artifacts (a metric is present iff it
    has a denominator: UT accuracy needs a right program, detection a task with right and wrong ones)."""
    metrics = store.manifest(run_id, iteration, "evaluate").extra["metrics"]
    frames = {
        name: store.read_frame(run_id, iteration, "evaluate", name)
        for name in ("rollouts", "executions", "unit_tests")
    }
    assert frames["unit_tests"].height == 3 * 2  # the 3 fixture problems × K = 2 tests of the reward model
    assert set(frames["executions"]["test_kind"]) <= {"gt", "generated"}
    coding = {k: v for k, v in metrics.items() if k in CODING_EVAL_LABELS}
    assert coding == pytest.approx(coding_eval_metrics(**frames)) and EVAL_CODE_ACC in coding
    assert coding[EVAL_CODE_ACC] == pytest.approx(metrics["policy/eval_success_rate"])
    return coding


def test_one_coding_iteration_without_rewrite_targets(flow_env: FlowEnv) -> None:
    root = flow_env.base / "runs-coding"
    proc = coding_run(flow_env, root, "c1", "--set", "training.policy.micro_batch_size=4")
    store = ArtifactStore(str(root))
    # One key of a section set: its siblings keep their values (the lr stays the documented 1e-4).
    stored = store.read_run_info("c1").config["training"]
    assert (stored["policy"]["micro_batch_size"], stored["policy"]["lr"], stored["reward"]["lr"]) == (
        4,
        1e-4,
        1e-4,
    )
    said = [line for line in proc.stderr.splitlines() if line.startswith("config: ")]
    assert len(said) == 1 and "training.policy.micro_batch_size=4 (--set)" in said[0], proc.stderr
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
    # Evaluated on the LiveCodeBench fixture (stdin and functional problems, packed private tests): the
    # policy's programs, the reward model's tests on them, and the paper's three coding metrics.
    played = store.read_frame("c1", 1, "evaluate", "rollouts")
    assert set(played["task_id"]) == {"lcb-abc900_a", "lcb-3999", "lcb-4000"}
    for iteration in (0, 1):
        coding_eval_is_consistent(store, "c1", iteration)
    status = flow_env.rla("status", "c1", "--root", str(root)).stdout
    assert "code acc" in status and "UT acc" in status and "detect" in status, status
    report = run_report(store, "c1")
    # Only the metrics with a denominator are drawn: code accuracy always; UT accuracy and detection once a
    # held-out program is right (the tiny policy rarely writes one).
    assert "coding" in report.figures and "<th>code acc</th>" in report.sections_html[0]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fmt", "path", "ids"),
    [
        ("livebench", fx.LIVEBENCH_FILE, 3),
        ("codecontests", fx.CODECONTESTS_FILE, 2),
    ],
)
def test_rla_eval_on_the_other_benchmark_fixtures(flow_env: FlowEnv, fmt: str, path: Path, ids: int) -> None:
    """`rla eval --tasks FILE --format F`: a run's checkpoints on LiveBench's and CodeContests' layouts."""
    root = flow_env.base / f"runs-coding-{fmt}"
    coding_run(flow_env, root, "ce", "--set", "evaluation.every=1")
    out = flow_env.rla("eval", "ce", "--root", str(root), "--tasks", str(path), "--format", fmt).stdout
    # All three coding metrics, one without a denominator as n/a with its reason (never a made-up 0).
    assert all(m in out for m in ("code acc", "UT acc", "detect")) and out.count("\n│ ") >= ids, out


def first_lines(src: Path, dst: Path, n: int) -> Path:
    dst.write_text("".join(src.read_text(encoding="utf-8").splitlines(keepends=True)[:n]), encoding="utf-8")
    return dst


def test_one_gui_iteration_with_screens_in_the_prompts(flow_env: FlowEnv) -> None:
    """The gui preset: tiny vision-language policy and judge that see the screenshots."""
    root = flow_env.base / "runs-gui"
    # 4 of the 13 shipped forms each: the warm start records demonstrations on every training form in a
    # browser (most of this test's time), and 2 tasks per iteration are played anyway.
    train = first_lines(REPO / "data/gui/train.jsonl", flow_env.base / "gui-train.jsonl", 4)
    held_out = first_lines(REPO / "data/gui/eval.jsonl", flow_env.base / "gui-eval.jsonl", 4)
    flow_env.rla(
        "run", "--preset", "gui", *flow_env.settings(root), "--run-id", "g1", *TINY,
        "--set", f"gui.tasks={train}", "--set", f"gui.eval_tasks={held_out}",
        "--set", "rollout.max_steps=2", "--set", "evaluation.max_steps=2", "--set", "judge.m=2",
        "--set", "models.images.policy=2", timeout=1800,  # the policy sees its last 2 screens
    )  # fmt: skip
    store = ArtifactStore(str(root))
    done = committed(store, "g1")
    assert set(done) == planned(store, "g1")
    assert {s for it, s in done if it == 1} == set(ITERATION)
    rollouts = store.read_frame("g1", 1, "rollout", "rollouts")
    judgments = store.read_frame("g1", 1, "judge", "judgments")
    assert rollouts.height > 0 and judgments.height == 2 * rollouts.height
    assert store.read_frame("g1", 1, "evaluate", "eval").height > 0
    # Every step has the screen it was played on and the screen after it, and the run's report shows a
    # rollout's first steps with both, read back from the artifacts.
    assert (
        rollouts["observation_ref"].null_count() == 0 and rollouts["next_observation_ref"].null_count() == 0
    )
    shown = screens_html(store, "g1")
    assert "What the agent saw (iteration 1" in shown
    assert shown.count("<img class='screen'") == 2 * min(SCREEN_STEPS, rollouts.filter(
        (pl.col("task_id") == rollouts["task_id"][0]) & (pl.col("rollout_id") == rollouts["rollout_id"][0])
    ).height)  # fmt: skip
    assert "data:image/png;base64,iVBORw0KGgo" in shown  # inline PNGs
    # Each policy prompt showed the episode's last 2 screens (1 at its first step), this step's last, one
    # image slot each; each judge prompt the step's screen and the one after it.
    slot = "<|vision_start|><|image_pad|><|vision_end|>"
    earlier: dict[tuple[str, int], str] = {}
    for row in rollouts.sort("task_id", "rollout_id", "step").iter_rows(named=True):
        episode = (row["task_id"], row["rollout_id"])
        want = [earlier[episode], row["observation_ref"]] if row["step"] else [row["observation_ref"]]
        assert row["images"] == want and row["prompt"].count(slot) == len(want), row
        assert all(store.read_file("g1", 1, "rollout", ref).startswith(b"\x89PNG") for ref in want)
        earlier[episode] = row["observation_ref"]
    steps = rollouts.select("task_id", "rollout_id", "step", "observation_ref", "next_observation_ref")
    seen = judgments.join(steps, on=["task_id", "rollout_id", "step"])
    assert seen.height == judgments.height
    for row in seen.iter_rows(named=True):
        assert row["images"] == [row["observation_ref"], row["next_observation_ref"]]
        assert row["prompt"].count(slot) == 2
    # The warm start trained both models on demonstrations with screenshots; the samples carry the
    # references of the rows they came from.
    warm = store.manifest("g1", 0, "bootstrap").extra["metrics"]  # type: ignore[union-attr]
    assert warm["policy/warm_start_rows_used"] > 0 and warm["reward_model/warm_start_rows_used"] > 0
    for frame in ("policy_samples", "reward_samples"):
        assert store.read_frame("g1", 1, "label", frame)["images"].null_count() == 0
    # Whether this run's tiny models left rows with a nonzero advantage is up to their samples, so the
    # update from the recorded references is checked on two of the run's own image prompts.
    assert _train_policy_on(store, "g1", rollouts.head(2), flow_env.base / "replay") == 2


def _train_policy_on(store: ArtifactStore, run_id: str, steps: pl.DataFrame, scratch: Path) -> float:
    """Iteration 1's policy update, replayed into a scratch store on ``steps`` (advantages +1, -1) with the
    run's rollout stage as the screens: the rows used. Without the screens, the stage refuses the rows."""
    cfg = load_run_config(store, run_id)
    run = RunContext(run_id=run_id, config=cfg)
    refs = {}
    for it, name in ((0, StageName.BOOTSTRAP), (1, StageName.ROLLOUT)):
        m = store.manifest(run_id, it, name)
        assert m is not None
        refs[name] = StageRef(run_id, it, name, m.attempt, m.content_key, {})
    rows = steps.select(
        "iteration", "task_id", "rollout_id", "step", "prompt", "images", "response",
        reward=pl.Series([1.0, -1.0]), advantage=pl.Series([1.0, -1.0]),
    )  # fmt: skip
    all_stages()
    stage = STAGES[StageName.TRAIN_POLICY]
    with ArtifactStore(str(scratch)).begin(run_id, 1, StageName.TRAIN_POLICY) as writer:
        ctx = StageContext(
            _run=run, iteration=1, stage=StageName.TRAIN_POLICY, seed=1, run_seed=cfg.seed,
            inputs=stage.slice(cfg), writer=writer,
        )  # fmt: skip
        args = {"rows": rows, "base": refs[StageName.BOOTSTRAP], "role": Role.POLICY, "cfg": cfg.training.policy,
                "placement": cfg.training, "threads": cfg.threads, "cluster": cfg.cluster, "prefix": "policy"}  # fmt: skip
        try:
            with pytest.raises(ArtifactError, match="rows carry images but no rollout stage was given"):
                train_checkpoint(ctx, **args)
            return train_checkpoint(ctx, **args, screens=refs[StageName.ROLLOUT])["policy/rows_used"]
        finally:
            ctx.cleanup()
