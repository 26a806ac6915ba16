"""Coding rewards and metrics (spec §2.3-2.5), hand-computed."""

from __future__ import annotations

import math

import polars as pl
import pytest

from rla_core.algo.coding_rewards import (
    code_table,
    coding_metrics,
    coding_policy_samples,
    coding_reward_samples,
    score_programs,
)
from rla_core.config import Band, RewardConfig, load_config
from rla_core.errors import ArtifactError
from rla_core.schemas import SCHEMAS, get_schema, validate

# Policy filter [0.2, 0.8] on pass-all acc; an open RM band so the RM reward cases can be shown on any
# acc (the coding default RM band is [0.2, 0.8]: test_rm_band_of_the_coding_defaults).
CODING = RewardConfig(policy_acc_band=Band(low=0.2, high=0.8), rm_acc_band=Band(low=0.0, high=1.0))


def _rollouts(
    codes: dict[str, int], *, pending: tuple[str, ...] = (), tokens: dict[tuple[str, int], int] | None = None
) -> pl.DataFrame:
    rows = [
        {
            "iteration": 3,
            "task_id": t,
            "slot_id": t,
            "pending": t in pending,
            "rollout_id": i,
            "step": 0,
            "prompt": f"solve {t}",
            "response": f"code {t}/{i}",
            "action": None,
            "action_valid": True,
            "invalid_reason": None,
            "next_observation": None,
            "expert_actions": None,
            "observation_ref": None,
            "next_observation_ref": None,
            "done": True,
            "outcome": None,
            "score": None,
            "prompt_tokens": 10,
            "response_tokens": (tokens or {}).get((t, i), 50),
        }
        for t, n in codes.items()
        for i in range(n)
    ]
    return validate("rollouts", pl.DataFrame(rows, schema=pl.Schema(get_schema("rollouts").columns)))


def _executions(task_id: str, kind: str, matrix: list[list[bool]]) -> pl.DataFrame:
    """``matrix[code][test]`` = passed."""
    rows = [
        {
            "iteration": 3,
            "task_id": task_id,
            "rollout_id": c,
            "test_kind": kind,
            "test_idx": k,
            "passed": p,
            "error_kind": None if p else "wrong_answer",
            "wall_s": 0.01,
        }
        for c, row in enumerate(matrix)
        for k, p in enumerate(row)
    ]
    return validate("executions", pl.DataFrame(rows, schema=pl.Schema(get_schema("executions").columns)))


def _unit_tests(task_id: str, valid: list[bool]) -> pl.DataFrame:
    rows = [
        {
            "iteration": 3,
            "task_id": task_id,
            "test_idx": k,
            "prompt": f"write a test for {task_id}",
            "response": f"test {k}",
            "test_input": "1" if v else "",
            "test_output": "2" if v else "",
            "valid": v,
            "invalid_reason": None if v else "the **Test Input:** block is empty",
        }
        for k, v in enumerate(valid)
    ]
    return validate("unit_tests", pl.DataFrame(rows, schema=pl.Schema(get_schema("unit_tests").columns)))


T, F = True, False
# Task t: 4 codes × 2 GT tests. Pass ratios 1, 1, 1/2, 0 -> GT codes {0, 1}, non-GT {2, 3}; acc 2/4.
GT_T = _executions("t", "gt", [[T, T], [T, T], [T, F], [F, F]])
# Generated tests of t (columns = tests 0..3), rows = codes 0..3. Test 3 is invalid; its
# execution rows claim "passed" for code 0 to show they are ignored.
GEN_T = _executions("t", "generated", [[T, T, T, T], [T, F, T, F], [T, T, F, F], [F, T, F, F]])
UT_T = _unit_tests("t", [T, T, T, F])
R_T = _rollouts({"t": 4})


class TestCodeTable:
    def test_pass_ratio_and_pass_all(self) -> None:
        codes = code_table(R_T, GT_T)
        assert codes["pass_ratio"].to_list() == [1.0, 1.0, 0.5, 0.0]  # 2/2, 2/2, 1/2, 0/2
        assert codes["pass_all"].to_list() == [T, T, F, F]
        assert codes["gt_code"].to_list() == [T, T, F, F]

    def test_missing_execution_rows_count_as_failures(self) -> None:
        codes = code_table(R_T, GT_T.filter(~((pl.col("rollout_id") == 1) & (pl.col("test_idx") == 1))))
        assert codes["pass_ratio"].to_list() == [1.0, 0.5, 0.5, 0.0]  # code 1: 1 of the task's 2 tests

    def test_truncation_penalty(self) -> None:
        # limit 100 -> truncated at >= 95 tokens: code 0 (95) truncated, code 1 (94) not
        r = _rollouts({"t": 4}, tokens={("t", 0): 95, ("t", 1): 94})
        codes = code_table(r, GT_T, truncation_limit=100)
        assert codes["truncated"].to_list() == [T, F, F, F]
        assert codes["pass_ratio"].to_list() == [0.0, 1.0, 0.5, 0.0]
        assert codes["pass_all"].to_list() == [T, T, F, F]  # acc ignores the penalty (reference order)
        assert codes["gt_code"].to_list() == [F, T, F, F]
        assert code_table(r, GT_T)["truncated"].to_list() == [F] * 4  # off by default

    def test_task_without_gt_tests_is_an_error(self) -> None:
        with pytest.raises(ArtifactError, match=r"tasks \['u'\] have no GT executions"):
            code_table(_rollouts({"t": 4, "u": 1}), GT_T)

    def test_unknown_test_kind(self) -> None:
        with pytest.raises(ArtifactError, match="only 'gt' and 'generated'"):
            code_table(R_T, GT_T.with_columns(test_kind=pl.lit("synthetic")))


class TestScorePrograms:
    def test_outcome_score_and_observation_of_each_program(self) -> None:
        # The rows come in reverse order: the output keeps the input's row order.
        rollouts = R_T.reverse()
        scored = score_programs(rollouts, pl.concat([GT_T, GEN_T]))  # generated runs do not count
        assert scored.columns == rollouts.columns
        assert scored["rollout_id"].to_list() == [3, 2, 1, 0]
        # GT pass ratios 0/2, 1/2, 2/2, 2/2 → outcome +1 only when all GT tests pass.
        assert scored["outcome"].to_list() == [-1.0, -1.0, 1.0, 1.0]
        assert scored["score"].to_list() == [0.0, 0.5, 1.0, 1.0]
        assert scored["next_observation"].to_list() == [
            "passed 0/2 GT tests", "passed 1/2 GT tests", "passed 2/2 GT tests", "passed 2/2 GT tests",
        ]  # fmt: skip


class TestCodingPolicySamples:
    def test_z_score_of_pass_ratio(self) -> None:
        samples, stats = coding_policy_samples(R_T, GT_T, cfg=CODING)
        assert samples.columns == list(SCHEMAS["policy_samples"].columns)
        # ratios 1, 1, 1/2, 0: mean 5/8; deviations 3/8, 3/8, -1/8, -5/8
        # var = (9+9+1+25)/64/4 = 11/64; std = √11/8 -> A = 3/√11, 3/√11, -1/√11, -5/√11
        s = math.sqrt(11)
        assert samples["advantage"].to_list() == pytest.approx([3 / s, 3 / s, -1 / s, -5 / s])
        assert samples["reward"].to_list() == [1.0, 1.0, 0.5, 0.0]
        assert samples["response"].to_list() == ["code t/0", "code t/1", "code t/2", "code t/3"]
        assert stats["tasks_kept"] == 1 and stats["rows_kept"] == 4

    def test_zero_advantage_rows_are_kept(self) -> None:
        # 5 codes, 1 passes all (acc 1/5 = 0.2, kept by the inclusive band); the other 4 all score 0
        gt = _executions("t", "gt", [[T]] + [[F]] * 4)
        samples, _ = coding_policy_samples(_rollouts({"t": 5}), gt, cfg=CODING)
        # ratios 1, 0, 0, 0, 0: mean 1/5, pop std = √(1/5·4/5) = 2/5 -> A = 2, -1/2 ×4
        assert samples["advantage"].to_list() == pytest.approx([2.0, -0.5, -0.5, -0.5, -0.5])
        assert samples.height == 5

    def test_equal_ratios_give_all_zeros_and_are_kept(self) -> None:
        # every code passes 1 of 2 tests: acc 0 is outside [0.2, 0.8]; widen the band to see the rows
        gt = _executions("t", "gt", [[T, F]] * 3)
        cfg = CODING.model_copy(update={"policy_acc_band": CODING.rm_acc_band})
        samples, _ = coding_policy_samples(_rollouts({"t": 3}), gt, cfg=cfg)
        assert samples["advantage"].to_list() == [0.0, 0.0, 0.0]

    @pytest.mark.parametrize(("n_pass", "kept"), [(0, False), (1, True), (2, True), (4, True), (5, False)])
    def test_band_edges(self, n_pass: int, kept: bool) -> None:
        # acc = n_pass / 5: 0, 0.2 (edge), 0.4, 0.8 (edge), 1.0
        gt = _executions("t", "gt", [[T]] * n_pass + [[F]] * (5 - n_pass))
        _, stats = coding_policy_samples(_rollouts({"t": 5}), gt, cfg=CODING)
        assert stats["tasks_kept"] == int(kept)

    def test_pending_needs_acceptance(self) -> None:
        r = _rollouts({"t": 4}, pending=("t",))
        assert coding_policy_samples(r, GT_T, cfg=CODING)[1]["tasks_pending_not_accepted"] == 1
        assert coding_policy_samples(r, GT_T, cfg=CODING, accepted_pending=["t"])[0].height == 4


class TestCodingRewardSamples:
    def test_three_case_reward(self) -> None:
        samples, stats = coding_reward_samples(R_T, pl.concat([GT_T, GEN_T]), UT_T, cfg=CODING)
        assert samples.columns == list(SCHEMAS["reward_samples"].columns)
        # GT codes {0, 1}, non-GT {2, 3}
        # test 0: passed by 0, 1 -> GT-UT; non-GT failing it: code 3 -> r = +1
        # test 1: code 1 fails -> wrong UT; non-GT passing it: codes 2, 3 -> r = -2
        # test 2: passed by 0, 1 -> GT-UT; fails both 2 and 3 -> r = +2
        # test 3: invalid -> fails every code -> wrong UT; no non-GT passes -> r = -0 = 0
        assert samples["reward"].to_list() == [1.0, -2.0, 2.0, 0.0]
        # mean 1/4; deviations 3/4, -9/4, 7/4, -1/4; var = (9+81+49+1)/16/4 = 140/64; std = √140/8
        s = math.sqrt(140)
        assert samples["advantage"].to_list() == pytest.approx([6 / s, -18 / s, 14 / s, -2 / s])
        assert samples["step"].to_list() == [0, 1, 2, 3]
        assert samples["rollout_id"].null_count() == 4 and samples["judge_idx"].null_count() == 4
        assert samples["response"].to_list() == ["test 0", "test 1", "test 2", "test 3"]
        assert stats["tasks_kept"] == 1 and stats["rows_kept"] == 4

    def test_no_wrong_codes(self) -> None:
        gt = _executions("u", "gt", [[T], [T]])
        gen = _executions("u", "generated", [[T, T, F], [T, F, F]])
        samples, _ = coding_reward_samples(
            _rollouts({"u": 2}), pl.concat([gt, gen]), _unit_tests("u", [T, T, T]), cfg=CODING
        )
        # no non-GT codes: +1 if every GT code passes else -1 -> [+1, -1, -1]
        assert samples["reward"].to_list() == [1.0, -1.0, -1.0]
        # mean -1/3; deviations 4/3, -2/3, -2/3; var = (16+4+4)/9/3 = 8/9; std = 2√2/3
        assert samples["advantage"].to_list() == pytest.approx(
            [math.sqrt(2), -1 / math.sqrt(2), -1 / math.sqrt(2)]
        )

    def test_task_without_gt_code_is_skipped(self) -> None:
        gt = _executions("w", "gt", [[F], [F]])
        gen = _executions("w", "generated", [[T], [F]])
        samples, stats = coding_reward_samples(
            _rollouts({"w": 2}), pl.concat([gt, gen]), _unit_tests("w", [T]), cfg=CODING
        )
        assert samples.height == 0
        assert stats["tasks_no_gt_code"] == 1 and stats["rows_no_gt_code"] == 1

    def test_rm_band_of_the_coding_defaults(self) -> None:
        cfg = load_config(overrides=["setting=coding"]).reward
        # Pass-all acc per task: lo 1/5 = 0.2 and hi 4/5 = 0.8 (band edges, inclusive) are kept;
        # all 2/2 = 1.0 (has GT codes, kept under the old [0, 1] band) and few 1/10 = 0.1 are dropped.
        shapes = {"lo": (5, 1), "hi": (5, 4), "all": (2, 2), "few": (10, 1)}
        gt = [_executions(t, "gt", [[i < good] for i in range(n)]) for t, (n, good) in shapes.items()]
        gen = [
            _executions(t, "generated", [[i == 0, True] for i in range(n)]) for t, (n, _g) in shapes.items()
        ]
        uts = pl.concat([_unit_tests(t, [T, T]) for t in shapes])
        rollouts = _rollouts({t: n for t, (n, _g) in shapes.items()})
        samples, stats = coding_reward_samples(rollouts, pl.concat([*gt, *gen]), uts, cfg=cfg)
        assert sorted(set(samples["task_id"].to_list())) == ["hi", "lo"]
        assert stats["tasks_out_of_band"] == 2 and stats["rows_out_of_band"] == 4  # 2 tests each
        assert stats["tasks_kept"] == 2 and stats["rows_kept"] == 4
        # lo: GT code 0; non-GT 1..4. Test 0 is passed only by code 0 → GT-UT catching all 4 → +4;
        # test 1 is passed by every code → GT-UT catching none → 0. z-scores over {4, 0}: +1, -1.
        lo = samples.filter(pl.col("task_id") == "lo")
        assert lo["reward"].to_list() == [4.0, 0.0] and lo["advantage"].to_list() == [1.0, -1.0]
        # The policy uses the same band: the same two tasks are kept.
        policy, _ = coding_policy_samples(rollouts, pl.concat(gt), cfg=cfg)
        assert sorted(set(policy["task_id"].to_list())) == ["hi", "lo"]

    def test_a_test_whose_run_died_in_its_sandbox_is_left_out_of_the_consistency_targets(self) -> None:
        # Task s: 3 codes x 1 GT test; code 0 passes it (the GT code), codes 1 and 2 do not (non-GT).
        # Generated tests (rows = codes):
        #   test 0: [T, F, F] -> GT-UT; non-GT codes failing it: 1, 2 -> r = 2
        #   test 1: [T, T, F] -> GT-UT; non-GT failing it: code 2 -> r = 1
        #   test 2: [T, T, ?] -> code 2's run died in its sandbox after its retries: whether it passes is
        #     unknown. Counted as a failure (as before) it was a GT-UT with r = 1 -> r = [2, 1, 1] and
        #     advantages [√2, -1/√2, -1/√2]. Left out: r = [2, 1], mean 3/2, population std 1/2 -> [+1, -1].
        gt = _executions("s", "gt", [[T], [F], [F]])
        gen = _executions("s", "generated", [[T, T, T], [F, T, T], [F, F, F]])
        died = (pl.col("rollout_id") == 2) & (pl.col("test_idx") == 2)
        gen = gen.with_columns(error_kind=pl.when(died).then(pl.lit("sandbox")).otherwise("error_kind"))
        rollouts = _rollouts({"s": 3})
        samples, stats = coding_reward_samples(
            rollouts, pl.concat([gt, gen]), _unit_tests("s", [T, T, T]), cfg=CODING
        )
        assert samples.select("step", "reward", "advantage").rows() == [(0, 2.0, 1.0), (1, 1.0, -1.0)]
        assert stats["rows_sandbox_died"] == 1 and stats["rows_kept"] == 2
        # The same targets as if test 2 had never been written.
        without = coding_reward_samples(
            rollouts,
            pl.concat([gt, gen.filter(pl.col("test_idx") < 2)]),
            _unit_tests("s", [T, T]),
            cfg=CODING,
        )[0]
        assert samples.equals(without)
        # Metrics over the known tests 0 and 1: both are GT-UTs -> syn_ut_acc 2/2; only test 0 is failed by
        # every non-GT code -> perfect_ut_rate 1/2 (counting test 2 as failed by code 2: 1/3).
        metrics = coding_metrics(rollouts, pl.concat([gt, gen]), _unit_tests("s", [T, T, T]))
        assert metrics == {"acc": 1 / 3, "syn_ut_acc": 1.0, "perfect_ut_rate": 0.5}

    def test_all_equal_rewards_give_zero_advantage_and_are_kept(self) -> None:
        gt = _executions("u", "gt", [[T], [T]])
        gen = _executions("u", "generated", [[T, T], [T, T]])
        samples, _ = coding_reward_samples(
            _rollouts({"u": 2}), pl.concat([gt, gen]), _unit_tests("u", [T, T]), cfg=CODING
        )
        assert samples["reward"].to_list() == [1.0, 1.0]
        assert samples["advantage"].to_list() == [0.0, 0.0]


class TestCodingMetrics:
    def test_hand_computed_metrics(self) -> None:
        metrics = coding_metrics(R_T, pl.concat([GT_T, GEN_T]), UT_T)
        # acc: 2 of 4 codes pass all GT tests
        # syn_ut_acc: tests passed by every GT code: 0 and 2 -> 2/4
        # perfect_ut_rate: passed by every GT code and failed by every non-GT code: test 2 only -> 1/4
        assert metrics == {"acc": 0.5, "syn_ut_acc": 0.5, "perfect_ut_rate": 0.25}

    def test_eligibility_of_tasks(self) -> None:
        # task u: all codes correct (GT codes only) -> counts for syn_ut_acc but not perfect_ut_rate
        # task w: no GT code -> counts for neither
        ex = pl.concat(
            [
                GT_T,
                GEN_T,
                _executions("u", "gt", [[T], [T]]),
                _executions("u", "generated", [[T, F], [T, T]]),
                _executions("w", "gt", [[F]]),
                _executions("w", "generated", [[T]]),
            ]
        )
        uts = pl.concat([UT_T, _unit_tests("u", [T, T]), _unit_tests("w", [T])])
        metrics = coding_metrics(_rollouts({"t": 4, "u": 2, "w": 1}), ex, uts)
        # acc = (2 + 2 + 0) / 7 codes
        # syn_ut_acc over t and u: (2 + 1) / (4 + 2) = 1/2   (u's test 1 is failed by GT code 0)
        # perfect_ut_rate over t only: 1/4
        assert metrics["acc"] == pytest.approx(4 / 7)
        assert metrics["syn_ut_acc"] == pytest.approx(0.5)
        assert metrics["perfect_ut_rate"] == pytest.approx(0.25)

    def test_empty_denominators_are_none(self) -> None:
        metrics = coding_metrics(_rollouts({"w": 1}), _executions("w", "gt", [[F]]), _unit_tests("w", [T]))
        assert metrics == {"acc": 0.0, "syn_ut_acc": None, "perfect_ut_rate": None}
