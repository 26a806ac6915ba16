"""The judge's ground truth, the noisy oracle's flips, and the balance of the judge's training rows."""

from __future__ import annotations

import math

import polars as pl
import torch

from rla_core.algo.judging import judge_step_metrics, optimal_steps, oracle_flips, oracle_judgments
from rla_core.algo.labels import outcome_balance_weights, reward_samples
from rla_core.algo.losses import ppo_k3_loss
from rla_core.config import Band, OracleFlip, RewardConfig
from tests.algo.builders import judgments, rollouts

FULL = Band(low=0.0, high=1.0)


def _labelled(tasks: dict[str, list[tuple[float, int]]], good: set[tuple[str, int, int]]) -> pl.DataFrame:
    """Rollouts whose step (task, rollout, step) is good (its action 'look' is the expert's) iff in ``good``."""
    frame = rollouts(tasks)
    expert = [
        '["look"]' if (t, r, s) in good else '["go east"]'
        for t, r, s in zip(frame["task_id"], frame["rollout_id"], frame["step"], strict=True)
    ]
    return frame.with_columns(expert_actions=pl.Series(expert, dtype=pl.String))


def _steps(n: int) -> pl.DataFrame:
    """n one-step rollouts of task 't' (rollout ids 0..n-1), every step good."""
    return _labelled({"t": [(-1.0, 1)] * n}, {("t", r, 0) for r in range(n)})


def test_balance_weights_give_each_outcome_equal_total_weight() -> None:
    # outcomes [+1, +1, -1, -1, -1, -1]: N = 6, N_won = 2, N_lost = 4
    w = outcome_balance_weights(pl.Series([1.0, 1.0, -1.0, -1.0, -1.0, -1.0])).to_list()
    # won rows: 6 / (2 * 2) = 1.5; lost rows: 6 / (2 * 4) = 0.75
    assert w == [1.5, 1.5, 0.75, 0.75, 0.75, 0.75]
    # totals: won 2 * 1.5 = 3 = lost 4 * 0.75 = 3; all together 6 = N
    assert sum(w[:2]) == sum(w[2:]) == 3.0
    # one outcome only: nothing to balance
    assert outcome_balance_weights(pl.Series([-1.0, -1.0])).to_list() == [1.0, 1.0]
    assert outcome_balance_weights(pl.Series([], dtype=pl.Float64)).to_list() == []


def test_balanced_reward_samples_scale_only_the_advantages_and_the_kl_term_stays_unweighted() -> None:
    # Task 'a': rollout 0 won (1 step), rollouts 1 and 2 lost (1 step each): acc 1/3, inside [0.2, 0.8].
    roll = _labelled({"a": [(1.0, 1), (-1.0, 1), (-1.0, 1)]}, {("a", 0, 0)})
    votes = judgments({("a", 0, 0): [1.0, -1.0], ("a", 1, 0): [1.0, -1.0], ("a", 2, 0): [-1.0, 1.0]})
    plain_cfg = RewardConfig(policy_acc_band=FULL)
    plain, stats = reward_samples(roll, votes, cfg=plain_cfg, m=2)
    # Each step: votes (+1, -1), mean 0, so R = O. raw = R·S: won step (+1, -1) → z-scores (+1, -1);
    # lost steps: (-1, +1) → z-scores (-1, +1). Six rows kept: 2 from the won episode, 4 from the lost.
    assert stats["rows_kept_won"] == 2 and stats["rows_kept_lost"] == 4
    assert stats["rows_kept_good_step"] == 2 and stats["rows_kept_bad_step"] == 4
    assert (
        stats["steps_judged"] == 3 and stats["steps_unanimous"] == 0 and stats["unanimous_step_share"] == 0.0
    )
    balanced, b_stats = reward_samples(
        roll, votes, cfg=plain_cfg.model_copy(update={"rm_outcome_balance": True}), m=2
    )
    # N = 6, won 2 → 6/(2·2) = 1.5, lost 4 → 6/(2·4) = 0.75
    assert (b_stats["balance_weight_won"], b_stats["balance_weight_lost"]) == (1.5, 0.75)
    assert balanced["reward"].to_list() == plain["reward"].to_list()  # raw rewards untouched
    ratio = [b / p for b, p in zip(balanced["advantage"], plain["advantage"], strict=True)]
    assert ratio == [1.5, 1.5, 0.75, 0.75, 0.75, 0.75]
    # Total |advantage| per outcome: won 1.5·(1 + 1) = 3, lost 0.75·4·1 = 3.
    adv = balanced["advantage"].abs()
    assert adv[:2].sum() == adv[2:].sum() == 3.0
    # In the update the advantage multiplies only the policy-gradient term: the KL term is the same.
    logps, old, mask = torch.tensor([[math.log(1.5)]]), torch.zeros(1, 1), torch.ones(1, 1)
    plain_loss = ppo_k3_loss(logps, old, torch.tensor([[1.0]]), mask, 0.2)
    scaled_loss = ppo_k3_loss(logps, old, torch.tensor([[1.5]]), mask, 0.2)
    assert torch.equal(plain_loss.kl, scaled_loss.kl)
    assert float(scaled_loss.pg) == 1.5 * float(plain_loss.pg)  # min(1.5, 1.2)·A: linear in A > 0


def test_unanimous_steps_are_counted_and_give_no_rows() -> None:
    roll = _labelled({"a": [(1.0, 1), (-1.0, 2)]}, set())
    # step (a,1,0): all -1 → raw all equal → advantage 0 (unanimous); (a,1,1) mixed; (a,0,0) all +1 (unanimous)
    votes = judgments({("a", 0, 0): [1.0, 1.0], ("a", 1, 0): [-1.0, -1.0], ("a", 1, 1): [1.0, -1.0]})
    _, stats = reward_samples(roll, votes, cfg=RewardConfig(policy_acc_band=FULL, rm_acc_band=FULL), m=2)
    assert stats["steps_judged"] == 3 and stats["steps_unanimous"] == 2
    assert stats["unanimous_step_share"] == 2 / 3
    assert stats["rows_kept_lost"] == 2 and stats["rows_kept_won"] == 0
    # every step bad: 2 kept rows, both of a bad step
    assert stats["rows_kept_bad_step"] == 2 and stats["rows_kept_good_step"] == 0


def test_rows_without_expert_labels_report_no_label_balance() -> None:
    roll = rollouts({"a": [(1.0, 1), (-1.0, 1)]})  # expert_actions "[]" everywhere: a plug-in without labels
    votes = judgments({("a", 0, 0): [1.0, -1.0], ("a", 1, 0): [1.0, -1.0]})
    _, stats = reward_samples(roll, votes, cfg=RewardConfig(policy_acc_band=FULL, rm_acc_band=FULL), m=2)
    assert "rows_kept_good_step" not in stats and stats["rows_kept_won"] == 2


def test_oracle_flips_depend_only_on_each_steps_key_and_the_seed() -> None:
    steps = _steps(200)
    good = optimal_steps(steps)
    flip = OracleFlip(good=0.3, bad=0.3)
    base = steps.with_columns(flip=oracle_flips(steps, good, flip=flip, seed=5))
    shuffled = steps.sample(fraction=1.0, shuffle=True, seed=1)
    again = shuffled.with_columns(flip=oracle_flips(shuffled, optimal_steps(shuffled), flip=flip, seed=5))
    key = ["task_id", "rollout_id", "step"]
    assert base.select(*key, "flip").sort(key).equals(again.select(*key, "flip").sort(key))
    # Another row's presence changes nothing: the first 50 steps alone flip as they did among 200.
    head = steps.head(50)
    assert oracle_flips(head, optimal_steps(head), flip=flip, seed=5).equals(base["flip"].head(50))
    # Another seed draws other coins.
    assert not oracle_flips(steps, good, flip=flip, seed=6).equals(base["flip"])


def test_oracle_flip_rates_match_their_probabilities() -> None:
    n = 10_000
    steps = _steps(n)
    for p in (0.1, 0.25, 0.45):
        share = float(oracle_flips(steps, optimal_steps(steps), flip=OracleFlip(good=p), seed=3).mean())
        sigma = math.sqrt(p * (1 - p) / n)  # binomial share's standard error
        assert abs(share - p) < 3 * sigma, (p, share)
    # The asymmetric oracle (good → bad only) never turns a bad step good.
    bad = _labelled({"t": [(-1.0, 1)] * 500}, set())
    assert not oracle_flips(bad, optimal_steps(bad), flip=OracleFlip(good=0.8), seed=3).any()


def test_noisy_oracle_votes_have_the_balanced_accuracy_they_were_built_with() -> None:
    # 2000 good and 2000 bad one-step rollouts; good flips with 0.2, bad with 0.4
    good_ids = {("t", r, 0) for r in range(2000)}
    roll = _labelled({"t": [(-1.0, 1)] * 4000}, good_ids)
    votes = oracle_judgments(roll, m=3, flip=OracleFlip(good=0.2, bad=0.4), seed=11)
    # all m votes of a step agree
    assert votes.group_by("task_id", "rollout_id", "step").agg(pl.col("score").n_unique())["score"].max() == 1
    metrics = judge_step_metrics(roll, votes)
    # expected balanced accuracy 1 - (0.2 + 0.4) / 2 = 0.7; each recall's error ~ sqrt(0.2·0.8/2000) ≈ 0.009
    assert abs(metrics["reward_model/step_balanced_accuracy"] - 0.7) < 0.03
    # no flips: the perfect oracle
    perfect = judge_step_metrics(roll, oracle_judgments(roll, m=3))
    assert perfect["reward_model/step_balanced_accuracy"] == 1.0
