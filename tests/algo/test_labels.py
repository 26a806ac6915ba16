"""Integrated policy reward and RM consistency reward (spec §2.1, §2.2), hand-computed."""

from __future__ import annotations

import math

import polars as pl
import pytest

from rla_core.algo.labels import (
    group_normalize,
    integrated_rewards,
    policy_samples,
    reward_samples,
    step_scores,
    task_accuracy,
)
from rla_core.config import Band, RewardConfig
from rla_core.errors import ArtifactError
from rla_core.schemas import SCHEMAS
from tests.algo.builders import judgments, rollouts, uniform_judgments

OPEN = Band(low=0.0, high=1.0)


def _cfg(**kw: object) -> RewardConfig:
    base: dict[str, object] = {"policy_acc_band": OPEN, "rm_acc_band": OPEN}
    base.update(kw)
    return RewardConfig.model_validate(base)


# One task, rollout 0 succeeds in 2 steps, rollout 1 fails after 3 steps; m = 3.
R_A = rollouts({"a": [(1.0, 2), (-1.0, 3)]})
J_A = judgments(
    {
        ("a", 0, 0): [1.0, 1.0, 1.0],  # mean 3/3 = 1      -> R = +1 + 1 = 2
        ("a", 0, 1): [1.0, None, -1.0],  # mean 0/3 = 0      -> R = +1 + 0 = 1
        ("a", 1, 0): [-1.0, -1.0, 1.0],  # mean -1/3         -> R = -1 - 1/3 = -4/3
        ("a", 1, 1): [None, None, None],  # all invalid: 0  -> R = -1
        ("a", 1, 2): [1.0, 1.0],  # third row missing = null: 2/3 -> R = -1 + 2/3 = -1/3
    }
)


class TestTaskAccuracy:
    def test_one_outcome_per_rollout(self) -> None:
        r = rollouts({"a": [(1.0, 3), (-1.0, 1), (-1.0, 2), (1.0, 1), (-1.0, 4)], "b": [(-1.0, 1)] * 2})
        acc = task_accuracy(r)
        # a: 2 successes of 5 rollouts (not of 11 steps) = 0.4; b: 0/2 = 0
        assert acc.to_dicts() == [
            {"task_id": "a", "n_rollouts": 5, "acc": 0.4},
            {"task_id": "b", "n_rollouts": 2, "acc": 0.0},
        ]

    def test_one_fifth_is_exactly_the_threshold(self) -> None:
        r = rollouts({"t": [(1.0, 1)] + [(-1.0, 1)] * 4})
        assert task_accuracy(r)["acc"][0] == 0.2  # 1/5 == 0.2 exactly, so an inclusive band keeps it

    def test_inconsistent_outcome_is_rejected(self) -> None:
        r = rollouts({"a": [(1.0, 2)]}).with_columns(outcome=pl.Series([1.0, -1.0]))
        with pytest.raises(ArtifactError, match="same outcome"):
            task_accuracy(r)

    def test_outcome_must_be_plus_minus_one(self) -> None:
        with pytest.raises(ArtifactError, match=r"\+1 \(success\) or -1"):
            task_accuracy(rollouts({"a": [(0.5, 1)]}))


class TestStepScores:
    def test_mean_over_all_m_with_null_as_zero(self) -> None:
        s = step_scores(R_A, J_A, m=3)
        assert s["step"].to_list() == [0, 1, 0, 1, 2]
        # (1+1+1)/3, (1+0-1)/3, (-1-1+1)/3, 0/3, (1+1+missing)/3
        assert s["mean_score"].to_list() == pytest.approx([1.0, 0.0, -1 / 3, 0.0, 2 / 3])
        assert s["n_valid"].to_list() == [3, 2, 3, 0, 2]
        assert s["outcome"].to_list() == [1.0, 1.0, -1.0, -1.0, -1.0]

    def test_step_without_any_judgment_scores_zero(self) -> None:
        j = judgments({("a", 0, 0): [1.0, 1.0, 1.0]})
        s = step_scores(R_A, j, m=3)
        assert s["mean_score"].to_list() == [1.0, 0.0, 0.0, 0.0, 0.0]
        assert s["n_valid"].to_list() == [3, 0, 0, 0, 0]

    def test_judge_idx_beyond_m_is_rejected(self) -> None:
        with pytest.raises(ArtifactError, match=r"judge_idx spans 0..2 but m=2"):
            step_scores(R_A, J_A, m=2)

    def test_duplicate_judgment_rows_are_rejected(self) -> None:
        j = pl.concat([J_A, J_A.head(1)])
        with pytest.raises(ArtifactError, match="has 4 judgment rows but m=3"):
            step_scores(R_A, j, m=3)

    def test_scores_must_be_parsed(self) -> None:
        j = J_A.with_columns(score=pl.when(pl.col("judge_idx") == 0).then(0.0).otherwise(pl.col("score")))
        with pytest.raises(ArtifactError, match="parse_boxed_score"):
            step_scores(R_A, j, m=3)


class TestIntegratedRewards:
    def test_default_is_outcome_plus_mean(self) -> None:
        s = integrated_rewards(step_scores(R_A, J_A, m=3), cfg=RewardConfig())
        assert s["reward"].to_list() == pytest.approx([2.0, 1.0, -4 / 3, -1.0, -1 / 3])

    def test_lambda_and_ablations(self) -> None:
        s = step_scores(R_A, J_A, m=3)
        # λ = 0.5: O + 0.5·mean -> 1.5, 1, -1 - 1/6, -1, -1 + 1/3
        half = integrated_rewards(s, cfg=RewardConfig(lam=0.5))["reward"].to_list()
        assert half == pytest.approx([1.5, 1.0, -7 / 6, -1.0, -2 / 3])
        # step-wise only (O := 0, spec §8.1): the mean alone
        step_only = integrated_rewards(s, cfg=RewardConfig(use_outcome=False))["reward"].to_list()
        assert step_only == pytest.approx([1.0, 0.0, -1 / 3, 0.0, 2 / 3])
        # outcome only
        outcome_only = integrated_rewards(s, cfg=RewardConfig(use_stepwise=False))["reward"].to_list()
        assert outcome_only == [1.0, 1.0, -1.0, -1.0, -1.0]


class TestGroupNormalize:
    def test_per_step_index_groups(self) -> None:
        df = integrated_rewards(step_scores(R_A, J_A, m=3), cfg=RewardConfig())
        out = group_normalize(df, value="reward", by=["task_id"], step_col="step", eps=1e-8)
        # step 0: {2, -4/3}: mean 1/3, pop std (10/3)/2 = 5/3 -> (2-1/3)/(5/3) = 1, (-4/3-1/3)/(5/3) = -1
        # step 1: {1, -1}: mean 0, std 1 -> 1, -1
        # step 2: only rollout 1 reaches it -> raw value -1/3 kept
        assert out["advantage"].to_list() == pytest.approx([1.0, 1.0, -1.0, -1.0, -1 / 3])

    def test_equal_values_give_zero_and_singleton_rule(self) -> None:
        df = pl.DataFrame({"g": ["x", "x", "y"], "v": [0.5, 0.5, 2.0]})
        keep = group_normalize(df, value="v", by=["g"], step_col=None, eps=1e-8)
        assert keep["advantage"].to_list() == [0.0, 0.0, 2.0]  # std 0 -> 0; singleton keeps raw 2
        zero = group_normalize(df, value="v", by=["g"], step_col=None, eps=1e-8, keep_singleton_raw=False)
        assert zero["advantage"].to_list() == [0.0, 0.0, 0.0]


class TestPolicySamples:
    def test_hand_computed_rows(self) -> None:
        samples, stats = policy_samples(R_A, J_A, cfg=RewardConfig(), m=3)
        assert samples.columns == list(SCHEMAS["policy_samples"].columns)
        # acc = 1/2 lies in [1/8, 7/8]; advantages from TestGroupNormalize; none is 0, all 5 kept
        assert samples["advantage"].to_list() == pytest.approx([1.0, 1.0, -1.0, -1.0, -1 / 3])
        assert samples["reward"].to_list() == pytest.approx([2.0, 1.0, -4 / 3, -1.0, -1 / 3])
        assert samples["prompt"].to_list()[0] == "prompt a/0/0"
        assert samples["iteration"].to_list() == [1] * 5
        assert stats == {
            "tasks_total": 1,
            "rows_total": 5,
            "tasks_pending_not_accepted": 0,
            "rows_pending_not_accepted": 0,
            "tasks_out_of_band": 0,
            "rows_out_of_band": 0,
            "tasks_kept": 1,
            "rows_zero_advantage": 0,
            "rows_kept": 5,
        }

    def test_all_equal_rewards_are_dropped(self) -> None:
        # two failing rollouts with identical judgments: every group has std 0 -> A = 0 -> dropped
        r = rollouts({"a": [(-1.0, 2), (-1.0, 2)]})
        j = judgments(uniform_judgments(r, -1.0, 3))
        samples, stats = policy_samples(r, j, cfg=_cfg(), m=3)
        assert samples.height == 0
        assert stats["rows_zero_advantage"] == 4

    def test_single_rollout_reaching_a_step_keeps_raw_reward(self) -> None:
        # rollout 0 wins at step 0; rollout 1 fails after 2 steps. Step 1 is reached by rollout 1 only.
        r = rollouts({"a": [(1.0, 1), (-1.0, 2)]})
        j = judgments({("a", 0, 0): [1.0], ("a", 1, 0): [1.0], ("a", 1, 1): [1.0]})
        samples, _ = policy_samples(r, j, cfg=_cfg(), m=1)
        # step 0: R = {1+1, -1+1} = {2, 0}: mean 1, std 1 -> +1, -1
        # step 1: singleton, R = -1 + 1 = 0 -> raw 0 -> dropped (A == 0)
        assert samples.select("rollout_id", "step", "advantage").rows() == [(0, 0, 1.0), (1, 0, -1.0)]

    def test_all_judgments_invalid_leaves_outcome_only(self) -> None:
        r = rollouts({"a": [(1.0, 1), (-1.0, 1)]})
        j = judgments({("a", 0, 0): [None] * 3, ("a", 1, 0): [None] * 3})
        samples, _ = policy_samples(r, j, cfg=_cfg(), m=3)
        # R = {1 + 0, -1 + 0}: mean 0, std 1 -> +1, -1
        assert samples["reward"].to_list() == [1.0, -1.0]
        assert samples["advantage"].to_list() == [1.0, -1.0]

    @pytest.mark.parametrize(
        ("n_success", "kept"),
        [(0, False), (1, True), (4, True), (7, True), (8, False)],  # acc 0, 1/8, 1/2, 7/8, 1
    )
    def test_policy_band_is_inclusive_at_one_and_seven_eighths(self, n_success: int, kept: bool) -> None:
        runs = [(1.0, 1)] * n_success + [(-1.0, 1)] * (8 - n_success)
        r = rollouts({"t": runs})
        j = judgments(
            {
                (t, ro, st): [1.0, -1.0, 1.0]
                for t, ro, st in r.select("task_id", "rollout_id", "step").iter_rows()
            }
        )
        _, stats = policy_samples(r, j, cfg=RewardConfig(), m=3)  # default band [1/8, 7/8]
        assert stats["tasks_kept"] == int(kept)
        assert stats["tasks_out_of_band"] == int(not kept)

    def test_pending_task_contributes_only_if_accepted(self) -> None:
        r = rollouts({"s0-v0": [(1.0, 1), (-1.0, 1)], "s1-v1": [(1.0, 1), (-1.0, 1)]}, pending=["s1-v1"])
        j = judgments(uniform_judgments(r, 1.0, 3))
        samples, stats = policy_samples(r, j, cfg=RewardConfig(), m=3)
        assert samples["task_id"].unique().to_list() == ["s0-v0"]
        assert stats["tasks_pending_not_accepted"] == 1 and stats["rows_pending_not_accepted"] == 2
        samples, stats = policy_samples(r, j, cfg=RewardConfig(), m=3, accepted_pending={"s1-v1"})
        assert sorted(samples["task_id"].unique().to_list()) == ["s0-v0", "s1-v1"]
        assert stats["tasks_pending_not_accepted"] == 0

    def test_rollout_without_steps_counts_for_acc_only(self) -> None:
        # A rollout with no action at all: one row with a null step, outcome -1 (spec §2.1).
        r = rollouts({"a": [(1.0, 1), (-1.0, 1)]})
        empty = r.head(1).with_columns(rollout_id=pl.lit(2, dtype=pl.Int64), step=None, outcome=pl.lit(-1.0))
        r = pl.concat([r, empty])
        assert task_accuracy(r)["acc"].to_list() == [pytest.approx(1 / 3)]
        j = judgments(uniform_judgments(r.filter(pl.col("step").is_not_null()), 1.0, 1))
        samples, stats = policy_samples(r, j, cfg=_cfg(), m=1)
        assert samples.height == 2 and stats["rows_total"] == 2


class TestRewardSamples:
    R = rollouts({"a": [(1.0, 2), (-1.0, 2)]})
    J = judgments(
        {
            ("a", 0, 0): [1.0, 1.0, -1.0],
            ("a", 0, 1): [1.0],  # a single judgment row -> advantage 0 -> dropped
            ("a", 1, 0): [1.0, None, -1.0],
            ("a", 1, 1): [None, None, None],  # all invalid: raw -2 ×3, std 0 -> dropped
        }
    )

    def test_hand_computed_consistency_reward(self) -> None:
        samples, stats = reward_samples(self.R, self.J, cfg=RewardConfig(), m=3)
        assert samples.columns == list(SCHEMAS["reward_samples"].columns)
        got = {
            (ro, st, j): (rw, a)
            for ro, st, j, rw, a in samples.select(
                "rollout_id", "step", "judge_idx", "reward", "advantage"
            ).iter_rows()
        }
        # (a,0,0): mean S = 1/3, R = 1 + 1/3 = 4/3; raw = R·S = [4/3, 4/3, -4/3]
        #   mean 4/9; deviations 8/9, 8/9, -16/9; var = (64+64+256)/81/3 = 128/81; std = 8√2/9
        #   A = (8/9)/(8√2/9) = 1/√2, 1/√2, (-16/9)/(8√2/9) = -√2
        # (a,1,0): mean S = 0, R = -1; raw = [-1·1, penalty -2, -1·-1] = [-1, -2, 1]
        #   mean -2/3; deviations -1/3, -4/3, 5/3; var = (1+16+25)/9/3 = 14/9; std = √14/3
        #   A = -1/√14, -4/√14, 5/√14
        expected = {
            (0, 0, 0): (4 / 3, 1 / math.sqrt(2)),
            (0, 0, 1): (4 / 3, 1 / math.sqrt(2)),
            (0, 0, 2): (-4 / 3, -math.sqrt(2)),
            (1, 0, 0): (-1.0, -1 / math.sqrt(14)),
            (1, 0, 1): (-2.0, -4 / math.sqrt(14)),
            (1, 0, 2): (1.0, 5 / math.sqrt(14)),
        }
        assert got.keys() == expected.keys()
        for key, (reward, adv) in expected.items():
            assert got[key][0] == pytest.approx(reward) and got[key][1] == pytest.approx(adv)
        assert stats["judgments_invalid"] == 4  # one in (a,1,0), three in (a,1,1)
        assert stats["rows_zero_advantage"] == 4  # single judgment (1) + all-invalid step (3)
        assert stats["rows_kept"] == 6 and stats["rows_total"] == 10
        assert samples.filter(pl.col("judge_idx") == 0)["prompt"][0] == "judge a/0/0"

    def test_same_switches_as_the_policy_reward(self) -> None:
        samples, _ = reward_samples(self.R, self.J, cfg=RewardConfig(use_outcome=False), m=3)
        first = samples.filter((pl.col("rollout_id") == 0) & (pl.col("step") == 0))
        # O := 0 -> R = mean S = 1/3; raw = [1/3, 1/3, -1/3]; z-scores are scale-invariant
        assert first["reward"].to_list() == pytest.approx([1 / 3, 1 / 3, -1 / 3])
        assert first["advantage"].to_list() == pytest.approx(
            [1 / math.sqrt(2), 1 / math.sqrt(2), -math.sqrt(2)]
        )

    def test_some_judgments_invalid_get_the_configured_penalty(self) -> None:
        samples, _ = reward_samples(self.R, self.J, cfg=RewardConfig(invalid_judgment_penalty=-1.0), m=3)
        step = samples.filter((pl.col("rollout_id") == 1) & (pl.col("step") == 0))
        # raw = [-1, -1 (penalty), 1]: mean -1/3; deviations -2/3, -2/3, 4/3; var 24/27 = 8/9; std 2√2/3
        assert step["reward"].to_list() == [-1.0, -1.0, 1.0]
        assert step["advantage"].to_list() == pytest.approx(
            [-1 / math.sqrt(2), -1 / math.sqrt(2), math.sqrt(2)]
        )

    @pytest.mark.parametrize(
        ("n_success", "n_rollouts", "nested", "kept"),
        [
            (1, 5, True, True),  # acc 1/5 = 0.2: inside [0.2, 0.8] ∩ [1/8, 7/8]
            (4, 5, True, True),  # acc 4/5 = 0.8: upper edge, inclusive
            (1, 8, True, False),  # acc 1/8 < 0.2: in the policy band only
            (7, 8, True, False),  # acc 7/8 > 0.8
            (0, 5, False, False),  # acc 0 outside [0.2, 0.8] even without nesting
        ],
    )
    def test_rm_band(self, n_success: int, n_rollouts: int, nested: bool, kept: bool) -> None:
        r = rollouts({"t": [(1.0, 1)] * n_success + [(-1.0, 1)] * (n_rollouts - n_success)})
        j = judgments(uniform_judgments(r, 1.0, 3))
        _, stats = reward_samples(r, j, cfg=RewardConfig(), m=3, nested_in_policy_band=nested)
        assert stats["tasks_kept"] == int(kept)

    def test_nesting_in_the_policy_band(self) -> None:
        # acc 0 with an RM band of [0, 1]: kept without nesting, dropped by the policy band [1/8, 7/8]
        r = rollouts({"t": [(-1.0, 1)] * 4})
        j = judgments(
            {(t, ro, st): [1.0, -1.0] for t, ro, st in r.select("task_id", "rollout_id", "step").iter_rows()}
        )
        cfg = RewardConfig(rm_acc_band=OPEN)
        assert reward_samples(r, j, cfg=cfg, m=2, nested_in_policy_band=True)[1]["tasks_kept"] == 0
        samples, stats = reward_samples(r, j, cfg=cfg, m=2, nested_in_policy_band=False)
        assert stats["tasks_kept"] == 1
        # each step: R = -1 + 0 = -1; raw = [-1, 1] -> A = [-1, 1]
        assert samples["advantage"].to_list() == [-1.0, 1.0] * 4

    def test_pending_and_orphan_judgments(self) -> None:
        r = rollouts({"s0-v0": [(1.0, 1), (-1.0, 1)], "s1-v1": [(1.0, 1), (-1.0, 1)]}, pending=["s1-v1"])
        scores = uniform_judgments(r, None, 2)
        scores[("s0-v0", 0, 0)] = [1.0, -1.0]
        scores[("s0-v0", 0, 5)] = [1.0, -1.0]  # a step the rollouts do not have
        scores[("zz", 0, 0)] = [1.0, -1.0]  # a task the rollouts do not have
        _, stats = reward_samples(r, judgments(scores), cfg=RewardConfig(), m=2)
        assert stats["tasks_pending_not_accepted"] == 1 and stats["rows_pending_not_accepted"] == 4
        assert stats["judgments_without_step"] == 4
        assert stats["rows_kept"] == 2  # only (s0-v0, 0, 0) has two different raw values


def test_empty_inputs_give_empty_artifacts() -> None:
    from rla_core.schemas import empty_frame

    r, j = empty_frame("rollouts"), empty_frame("judgments")
    pol, pol_stats = policy_samples(r, j, cfg=RewardConfig(), m=3)
    rm, rm_stats = reward_samples(r, j, cfg=RewardConfig(), m=3)
    assert pol.height == 0 and pol.columns == list(SCHEMAS["policy_samples"].columns)
    assert rm.height == 0 and rm.columns == list(SCHEMAS["reward_samples"].columns)
    assert pol_stats["tasks_total"] == 0 and rm_stats["rows_kept"] == 0
    assert step_scores(r, j, m=3).height == 0
