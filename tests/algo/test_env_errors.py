"""Episodes whose environment failed (status env_error) are never trained on and never counted (hand-computed)."""

from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from rla_core.algo.curriculum import decide_pending, rewrite_targets
from rla_core.algo.episodes import check_env_error_share, env_error_rate, episode_status
from rla_core.algo.labels import policy_samples, reward_samples, task_accuracy
from rla_core.algo.metrics import band_share, rollout_metrics
from rla_core.algo.registry import TaskRegistry
from rla_core.config import AdaptationConfig, Band, RewardConfig
from rla_core.errors import EnvErrorShareError
from tests.algo.builders import judgments, rollouts

FULL = Band(low=0.0, high=1.0)
CFG = RewardConfig(policy_acc_band=FULL, rm_acc_band=FULL)


def _with_env_error(frame: pl.DataFrame, task_id: str, rollout_id: int) -> pl.DataFrame:
    """``frame`` with episode (task_id, rollout_id) turned into an env_error (null outcome, kind, message)."""
    hit = (pl.col("task_id") == task_id) & (pl.col("rollout_id") == rollout_id)
    return frame.with_columns(
        outcome=pl.when(hit).then(None).otherwise(pl.col("outcome")),
        status=pl.when(hit).then(pl.lit("env_error")).otherwise(pl.col("status")),
        error_kind=pl.when(hit).then(pl.lit("desktop")).otherwise(pl.col("error_kind")),
        error_message=pl.when(hit).then(pl.lit("X server died")).otherwise(pl.col("error_message")),
    )


def test_a_group_with_one_env_error_rollout_gets_the_advantages_it_has_without_it() -> None:
    # Task a, m = 2: rollout 0 won in 2 steps, rollout 1 lost in 1 step, rollout 2's desktop died after 2
    # steps (env_error; it would be a -1 "loss" if it were counted).
    base = rollouts({"a": [(1.0, 2), (-1.0, 1)]})
    broken = _with_env_error(rollouts({"a": [(1.0, 2), (-1.0, 1), (-1.0, 2)]}), "a", 2)
    scores = {
        ("a", 0, 0): [1.0, 1.0],  # mean 1 → R = +1 + 1 = 2
        ("a", 0, 1): [1.0, -1.0],  # mean 0 → R = +1 + 0 = 1
        ("a", 1, 0): [-1.0, 1.0],  # mean 0 → R = -1 + 0 = -1
    }
    judged = {**scores, ("a", 2, 0): [1.0, 1.0], ("a", 2, 1): [-1.0, -1.0]}
    # Policy: step 0's group is {2, -1} (mean 0.5, population std 1.5) → advantages +1, -1; step 1's
    # group is rollout 0 alone → its raw reward 1 (a singleton keeps its value, spec §2.1).
    want = [("a", 0, 0, 1.0), ("a", 0, 1, 1.0), ("a", 1, 0, -1.0)]
    for frame, js in ((base, scores), (broken, judged)):
        got, stats = policy_samples(frame, judgments(js), cfg=CFG, m=2)
        assert got.select("task_id", "rollout_id", "step", "advantage").rows() == want
        assert stats["rows_total"] == 3  # the env_error rollout's 2 steps are not rows of the policy's
    clean, _ = policy_samples(base, judgments(scores), cfg=CFG, m=2)
    assert_frame_equal(policy_samples(broken, judgments(judged), cfg=CFG, m=2)[0], clean)
    # Reward model: step (0,0) has raw R·S = [2, 2] → std 0 → dropped; (0,1): R = 1, raw [1, -1] → ±1;
    # (1,0): R = -1, raw [(-1)(-1), (-1)(+1)] = [1, -1] → ±1. No row of rollout 2's judgments.
    rm, _ = reward_samples(broken, judgments(judged), cfg=CFG, m=2)
    assert rm.select("rollout_id", "step", "judge_idx", "advantage").rows() == [
        (0, 1, 0, 1.0),
        (0, 1, 1, -1.0),
        (1, 0, 0, 1.0),
        (1, 0, 1, -1.0),
    ]
    assert_frame_equal(rm, reward_samples(base, judgments(scores), cfg=CFG, m=2)[0])
    # Accuracy 1/2 over the won and lost rollouts (not 1/3).
    assert task_accuracy(broken).rows() == [("a", 2, 0.5)]


def test_a_task_with_only_env_error_rollouts_gets_no_accuracy_and_no_decision() -> None:
    reg = TaskRegistry.seed([("a", "textworld", {"q": 1}), ("b", "textworld", {"q": 2})])
    reg, b1 = reg.propose("b", {"q": 20}, "harder", 1.0, 1)
    reg, a1 = reg.propose("a", {"q": 10}, "easier", 0.0, 1)
    # Iteration 2: a1's two rollouts: one won, one lost → acc 0.5, decided (easier: 0.5 > 0 → accepted).
    # b1's two rollouts both hit a dead desktop → no accuracy → no decision: it stays pending.
    frame = rollouts({a1: [(1.0, 1), (-1.0, 1)], b1: [(-1.0, 1), (-1.0, 1)]}, pending=[a1, b1])
    frame = _with_env_error(_with_env_error(frame, b1, 0), b1, 1)
    acc = task_accuracy(frame)
    assert acc.sort("task_id").rows() == sorted([(a1, 2, 0.5), (b1, 0, None)])
    reg2, decisions = decide_pending(reg, acc, cfg=AdaptationConfig(), iteration=2)
    assert decisions["task_id"].to_list() == [a1]
    status = {r["task_id"]: r["status"] for r in reg2.snapshot().iter_rows(named=True)}
    assert status[b1] == "pending" and status["b-v0"] == "active"
    # Nor is a task without an accuracy a rewrite target, or part of the band share.
    assert rewrite_targets(reg2, acc, cfg=AdaptationConfig(), iteration=2) == []
    assert band_share(acc, FULL) == {"env/share_in_band": 1.0, "env/mean_task_acc": 0.5}
    # The policy's numbers count the two played episodes; 2 of 4 episodes were env_error.
    metrics = rollout_metrics(frame)
    assert metrics["policy/success_rate"] == 0.5 and metrics["env/env_error_rate"] == 0.5


def test_old_rows_derive_their_status_from_the_outcome() -> None:
    old = rollouts({"a": [(1.0, 1), (-1.0, 2)]}).drop("status", "error_kind", "error_message", "attempt")
    assert old.select(episode_status(old))["status"].to_list() == ["won", "lost", "lost"]
    assert env_error_rate(old) == 0.0
    assert task_accuracy(old).rows() == [("a", 2, 0.5)]


def test_the_share_bound_names_the_counts_and_the_first_errors() -> None:
    frame = rollouts({"a": [(1.0, 1), (-1.0, 1), (-1.0, 1), (-1.0, 1), (-1.0, 1)]})
    one = _with_env_error(frame, "a", 3)
    check_env_error_share(one, max_share=0.2, where="rollout")  # 1 of 5 = 0.2: not above the bound
    two = _with_env_error(one, "a", 1)
    with pytest.raises(EnvErrorShareError, match=r"2 of 5 episodes \(40%\).*a#1 desktop: X server died"):
        check_env_error_share(two, max_share=0.2, where="rollout")


def test_the_share_bound_blames_the_plugin_when_its_code_failed() -> None:
    frame = rollouts({"a": [(1.0, 1), (-1.0, 1)]})
    broken = frame.with_columns(
        status=pl.lit("env_error"),
        outcome=pl.lit(None, dtype=pl.Float64),
        error_kind=pl.lit("plugin"),
        error_message=pl.lit("plug-in 'x' raised in step: RuntimeError: boom (task 'a')"),
    )
    with pytest.raises(EnvErrorShareError) as raised:
        check_env_error_share(broken, max_share=0.2, where="rollout")
    assert "The environment plug-in's code is failing" in str(raised.value)
    assert "desktops, browsers, sandbox" not in str(raised.value)
