"""`rla study` and `rla report` end to end (issue 15): a real 2-arm × 1-seed study of test-preset runs,
its study.parquet and summary, HTML reports opened in headless Chromium (every figure holds its data),
continuing a finished study, and the specific errors for bad input."""

from __future__ import annotations

import io
from pathlib import Path

import polars as pl
import pytest

from flows.study import EVAL_RATE, STUDY_FRAME, SUMMARY_FILE, run_id_for
from rla_core.schemas import validate
from rla_core.store import ArtifactStore
from tests.flows.conftest import FlowEnv

ARMS = ("policy", "full")
STUDY = "st"


@pytest.fixture(scope="module")
def study_root(flow_env: FlowEnv) -> Path:
    """A finished study: arms policy and full, seed 1, one iteration of the test preset each.

    The first run may bootstrap the session's model cache (minutes on a loaded machine): a long timeout.
    """
    root = flow_env.base / "runs-study"
    flow_env.rla(
        "study", STUDY, "--preset", "test", "--arms", ",".join(ARMS), "--seeds", "1",
        *flow_env.settings(root), "--set", "iterations=1", timeout=1500,
    )  # fmt: skip
    return root


def evaluated_iterations(store: ArtifactStore, run_id: str) -> list[int]:
    return [it for it in store.list_iterations(run_id) if store.manifest(run_id, it, "evaluate") is not None]


def test_study_writes_runs_frame_and_summary(flow_env: FlowEnv, study_root: Path) -> None:
    store = ArtifactStore(str(study_root))
    runs = {run_id_for(STUDY, arm, 1) for arm in ARMS}
    assert runs <= set(store.list_runs())
    data = store.read_run_file(STUDY, STUDY_FRAME)
    assert data is not None
    frame = validate("study", pl.read_parquet(io.BytesIO(data)))
    assert set(frame["arm"].unique().to_list()) == set(ARMS)
    for arm in ARMS:
        run_id = run_id_for(STUDY, arm, 1)
        evals = frame.filter((pl.col("run_id") == run_id) & (pl.col("metric") == EVAL_RATE))
        # "Before" (iteration 0) and after the last iteration, each from the run's own eval artifact.
        assert evals["iteration"].to_list() == evaluated_iterations(store, run_id) == [0, 1]
        for row in evals.iter_rows(named=True):
            episodes = store.read_frame(run_id, row["iteration"], "evaluate", "eval")
            assert row["value"] == pytest.approx(float((episodes["outcome"] > 0).mean() or 0.0))
    # The full arm trains the reward model; the policy arm keeps it frozen.
    full_stages = frame.filter(pl.col("run_id") == run_id_for(STUDY, "full", 1))["metric"].to_list()
    policy_stages = frame.filter(pl.col("run_id") == run_id_for(STUDY, "policy", 1))["metric"].to_list()
    assert "timing_s/train_reward" in full_stages and "timing_s/train_reward" not in policy_stages
    summary = (store.read_run_file(STUDY, SUMMARY_FILE) or b"").decode()
    assert "| policy | 1 |" in summary and "| full | 1 |" in summary

    # Continuing a finished study runs nothing again.
    before = {r: store.manifest(r, 1, "evaluate") for r in runs}
    proc = flow_env.rla("study", STUDY, "--root", str(study_root))
    assert proc.stderr.count("is finished, skipped") == 2
    assert {r: store.manifest(r, 1, "evaluate") for r in runs} == before


def _figures(page: list[dict[str, object]]) -> dict[str, list[dict[str, object]]]:
    return {str(f["name"]): list(f["traces"]) for f in page if f["rendered"]}  # type: ignore[arg-type]


def test_reports_render_in_chromium_with_every_figure_holding_its_data(
    flow_env: FlowEnv, study_root: Path, tmp_path: Path
) -> None:
    from flows.report import browse

    store = ArtifactStore(str(study_root))
    run_id = run_id_for(STUDY, "full", 1)
    run_html, study_html = tmp_path / "run.html", tmp_path / "study.html"
    flow_env.rla("report", run_id, "--root", str(study_root), "--out", str(run_html))
    flow_env.rla("report", "--study", STUDY, "--root", str(study_root), "--out", str(study_html))

    page = browse(run_html, tmp_path / "run-png")
    assert (tmp_path / "run-png" / "page.png").stat().st_size > 10_000  # a real screenshot
    figures = _figures(page)
    assert set(figures) == {"learning", "reward_model", "update_health", "task_pool", "timing"}
    evaluated = evaluated_iterations(store, run_id)
    by_meta = {t["meta"]: t for t in figures["learning"]}
    assert by_meta["eval"]["x"] == evaluated  # one point per evaluated iteration
    assert by_meta["eval_clean"]["x"] == evaluated
    assert all(c <= e for c, e in zip(by_meta["eval_clean"]["y"], by_meta["eval"]["y"], strict=True))
    assert by_meta["train"]["x"] == [1]
    assert sum(1 for t in figures["learning"] if t["meta"] == "band") == 2  # Wilson band edges
    assert {t["name"] for t in figures["reward_model"]} == {"step accuracy", "outcome agreement"}
    health = {t["name"] for t in figures["update_health"]}
    assert {"policy kl", "policy clip_fraction", "policy rows_used", "reward_model kl"} <= health
    assert {t["name"] for t in figures["task_pool"]} >= {"active", "pending", "accepted", "rejected"}
    assert all(t["x"] for f in figures.values() for t in f)  # no empty trace anywhere

    page = browse(study_html, tmp_path / "study-png")
    figures = _figures(page)
    assert {"heldout", "heldout_clean", "train", "rm_step_accuracy", "accepted", "policy_kl"} <= set(figures)
    for panel in ("heldout", "heldout_clean"):
        lines = {t["meta"]: t for t in figures[panel] if t["meta"] in ARMS}
        assert set(lines) == set(ARMS)  # every arm present
        for arm in ARMS:
            assert lines[arm]["x"] == evaluated_iterations(store, run_id_for(STUDY, arm, 1))
    assert {t["meta"] for t in figures["train"]} == set(ARMS)
    html = study_html.read_text(encoding="utf-8")
    assert "id='summary'" in html and "id='summary-clean'" in html and "policy" in html and "full" in html


def test_bad_input_gets_specific_errors(flow_env: FlowEnv, study_root: Path, tmp_path: Path) -> None:
    root = str(study_root)
    proc = flow_env.rla("study", "other", "--arms", "policy,bogus", "--root", root, check=False)
    assert proc.returncode != 0 and "unknown arm(s) 'bogus'" in proc.stderr and "stepwise-only" in proc.stderr
    clash = run_id_for(STUDY, "full", 1)
    proc = flow_env.rla("study", clash, "--root", root, check=False)
    assert proc.returncode != 0 and "clashes with an existing run" in proc.stderr
    proc = flow_env.rla("report", "nope", "--root", root, "--no-mlflow", check=False)
    assert proc.returncode != 0 and "no run 'nope'" in proc.stderr
    proc = flow_env.rla("report", "--study", "nope", "--root", root, "--no-mlflow", check=False)
    assert proc.returncode != 0 and "no study 'nope'" in proc.stderr

    # A run that has started but not evaluated yet: the report renders and says what is missing.
    store = ArtifactStore(root)
    cfg = store.read_run_info(clash).config
    store.write_run_info("fresh", config=cfg, config_hash="0" * 64, code_version="test")
    out = tmp_path / "fresh.html"
    proc = flow_env.rla("report", "fresh", "--root", root, "--no-mlflow", "--out", str(out))
    assert "missing:" in proc.stderr and "no evaluation yet" in proc.stderr
    assert "id='missing'" in out.read_text(encoding="utf-8")


def test_arms_set_exactly_their_ablation_switches() -> None:
    from flows.study import ARMS, arm_config
    from rla_core.config import load_config

    base = load_config(preset="bench").model_dump(mode="json")
    switches = {
        arm: (
            (c := arm_config(base, arm, 7)).reward.use_outcome,
            c.reward.use_stepwise,
            c.training.reward.enabled,
            c.adaptation.enabled,
            c.seed,
        )
        for arm in ARMS
    }
    assert switches == {
        "outcome-only": (True, False, False, False, 7),
        "policy": (True, True, False, False, 7),
        "reward": (True, True, True, False, 7),
        "full": (True, True, True, True, 7),
        "stepwise-only": (False, True, True, False, 7),
    }


def test_bench_preset_evaluates_on_at_least_100_held_out_episodes() -> None:
    from rla_core.config import load_config
    from rla_core.settings import read_jsonl

    cfg = load_config(preset="bench")
    train = read_jsonl(cfg.textgame.tasks, what="training task")
    held_out = read_jsonl(cfg.textgame.eval_tasks, what="evaluation task")
    assert len(held_out) * cfg.evaluation.rollouts_per_task >= 100
    seeds = {r["spec"]["seed"] for r in train}
    assert not seeds & {r["spec"]["seed"] for r in held_out}  # no held-out game is trained on
    assert cfg.models.reward_label_noise > 0 and cfg.models.warm_start_seed is not None


def test_flip_judge_labels_flips_the_requested_share() -> None:
    from rla_core.envs.prompts import judge_demo_response
    from rla_core.errors import ConfigError
    from rla_core.settings.warm_start import flip_judge_labels

    goods = [True, False, True, False, True, True, False, False]
    rows = pl.DataFrame(
        {"prompt": [f"p{i}" for i in range(8)], "response": [judge_demo_response("x", good=g) for g in goods]}
    )
    flipped = flip_judge_labels(rows, share=0.25, seed=3)["response"].to_list()
    changed = [i for i, (a, b) in enumerate(zip(rows["response"], flipped, strict=True)) if a != b]
    assert len(changed) == 2  # round(0.25 · 8)
    for i in changed:
        assert flipped[i] == judge_demo_response("x", good=not goods[i])
    assert flip_judge_labels(rows, share=0.25, seed=3)["response"].to_list() == flipped  # seeded
    with pytest.raises(ConfigError, match="not a step verdict"):
        flip_judge_labels(pl.DataFrame({"prompt": ["p"], "response": ["def f(): pass"]}), share=1.0, seed=0)
