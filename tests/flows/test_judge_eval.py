"""The judge's yardstick (``evaluation.judge_steps``): a finished run resumed with one measures its warm-started
and its last judge on the same steps (stage judge_eval) and re-runs nothing else; a bad yardstick is refused
before anything is written."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rla_core.store import ArtifactStore
from tests.flows.conftest import FlowEnv, copy_run


def test_a_run_resumed_with_a_yardstick_measures_its_first_and_last_judge_on_it(
    flow_env: FlowEnv, base_run: tuple[Path, str], tmp_path: Path
) -> None:
    run_id = base_run[1]
    copy = tmp_path / "runs"
    store = copy_run(base_run, copy)  # the session's base run stays untouched
    # The yardstick: the run's own iteration-1 rollouts (text-game steps labelled by the engine).
    yardstick = tmp_path / "yardstick.parquet"
    steps = store.read_frame(run_id, 1, "rollout", "rollouts")
    steps.write_parquet(yardstick)
    before = {key: manifest.attempt for key, manifest in store.committed(run_id).items()}
    last = max(it for it, _ in before)
    flow_env.rla(
        "run", "--preset", "test", *flow_env.settings(copy), "--run-id", run_id, "--reconfigure",
        "--set", f"evaluation.judge_steps={yardstick}",
        "--set", f"tracking.mlflow_uri=sqlite:///{tmp_path / 'mlflow.db'}",  # the base run's MLflow run stays as is
    )  # fmt: skip
    after = store.committed(run_id)
    new = sorted(set(after) - set(before))
    assert new == [(0, "judge_eval"), (last, "judge_eval")]  # the start and the end, nothing else re-ran
    assert all(after[k].attempt == attempt for k, attempt in before.items())
    m = store.manifest(run_id, last, "judge_eval")
    assert m is not None
    metrics = m.extra["metrics"]
    good = steps.filter(pl.col("step").is_not_null())
    assert set(metrics) >= {
        "reward_model/yardstick_step_accuracy",
        "reward_model/yardstick_good_verdict_share",
        "reward_model/yardstick_good_step_share",
    }
    shares = {k: v for k, v in metrics.items() if k.startswith("reward_model/")}  # not timing_s/…: seconds
    assert all(0.0 <= v <= 1.0 for v in shares.values()) and len(shares) >= 3, sorted(metrics.items())
    judgments = store.read_frame(run_id, last, "judge_eval", "judgments")
    m_votes = judgments.group_by("task_id", "rollout_id", "step").len()["len"].unique().to_list()
    assert (
        judgments.height == good.height * m_votes[0] and len(m_votes) == 1
    )  # m judgments per yardstick step


def test_a_yardstick_without_expert_labels_is_refused_before_anything_is_written(
    flow_env: FlowEnv, base_run: tuple[Path, str], tmp_path: Path
) -> None:
    root, run_id = base_run
    unlabelled = tmp_path / "unlabelled.parquet"
    ArtifactStore(str(root)).read_frame(run_id, 1, "rollout", "rollouts").with_columns(
        expert_actions=pl.lit("[]")
    ).write_parquet(unlabelled)
    runs = tmp_path / "runs"
    for path, says in (
        (unlabelled, "none names the engine's expert actions"),
        (tmp_path / "nope.parquet", "no file"),
    ):
        proc = flow_env.rla(
            "run", "--preset", "test", *flow_env.settings(runs), "--run-id", "y",
            "--set", f"evaluation.judge_steps={path}", check=False,
        )  # fmt: skip
        assert (
            proc.returncode != 0
            and "evaluation.judge_steps" in proc.stderr + proc.stdout
            and says in proc.stderr + proc.stdout
        )
        assert not (runs / "y").exists()
