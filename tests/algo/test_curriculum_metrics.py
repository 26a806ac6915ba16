"""Hand-computed tests of the task-set side of a step (curriculum) and of the per-iteration metrics."""

from __future__ import annotations

import json

import polars as pl
import pytest

from rla_core.algo.curriculum import (
    NO_ROLLOUTS,
    accepted_pending,
    decide_pending,
    register_chosen,
    rewrite_targets,
    tasks_to_play,
)
from rla_core.algo.metrics import (
    band_share,
    clean_wins,
    eval_metrics,
    eval_rows,
    judgment_metrics,
    rollout_metrics,
)
from rla_core.algo.registry import TaskRegistry
from rla_core.config import AdaptationConfig, Band
from rla_core.errors import RegistryError
from tests.algo.builders import rollouts

CFG = AdaptationConfig()


def _registry() -> TaskRegistry:
    return TaskRegistry.seed(
        [("a", "textworld", {"q": 1}), ("b", "textworld", {"q": 2}), ("c", "textworld", {"q": 3})]
    )


def _acc(**values: float) -> pl.DataFrame:
    return pl.DataFrame({"task_id": list(values), "acc": list(values.values())})


def test_tasks_to_play_excludes_slots_with_a_pending_rewrite_and_adds_the_pending_task() -> None:
    reg, pending_id = _registry().propose("b", {"q": 20}, "harder", 1.0, 1)
    play = tasks_to_play(reg, k=3, seed=0)
    # k=3 but slot b is busy: the two eligible actives a-v0, c-v0, then b's pending b-v1.
    assert [(t.task_id, t.pending) for t in play] == [("a-v0", False), ("c-v0", False), (pending_id, True)]
    assert play[-1].spec == {"q": 20}
    # Same registry and seed → same draw.
    assert [t.task_id for t in tasks_to_play(reg, k=1, seed=7)] == [
        t.task_id for t in tasks_to_play(reg, k=1, seed=7)
    ]


def test_decide_pending_accepts_rejects_and_rejects_a_variant_without_rollouts() -> None:
    reg, b1 = _registry().propose("b", {"q": 20}, "harder", 1.0, 1)
    reg, c1 = reg.propose("c", {"q": 30}, "easier", 0.0, 1)
    reg, a1 = reg.propose("a", {"q": 10}, "harder", 0.875, 1)
    # b1: harder, 0.5 < 1.0 and 0.5 ≥ 0.2 → accepted; c1: easier but new acc 0 → rejected;
    # a1 was played but produced no rollouts (absent from acc) → rejected 'no_rollouts', acc unknown.
    reg, decisions = decide_pending(reg, _acc(**{b1: 0.5, c1: 0.0}), cfg=CFG, iteration=2)
    assert decisions.select("slot_id", "task_id", "accepted", "acc_after").rows() == [
        ("a", a1, False, None),
        ("b", b1, True, 0.5),
        ("c", c1, False, 0.0),
    ]
    assert decisions.filter(pl.col("task_id") == a1)["reason"][0] == NO_ROLLOUTS
    assert "new_acc=0" in decisions.filter(pl.col("task_id") == c1)["reason"][0]
    snap = {r["task_id"]: r["status"] for r in reg.snapshot().iter_rows(named=True)}
    assert snap[b1] == "active" and snap["b-v0"] == "retired"
    assert snap[c1] == "rejected" and snap["c-v0"] == "active"
    assert snap[a1] == "rejected" and snap["a-v0"] == "active"  # slot a is free again…
    assert accepted_pending(decisions) == {b1}
    # …so a-v0 (still too easy at 1.0) can be rewritten in the same step.
    targets = rewrite_targets(reg, _acc(**{"a-v0": 1.0}), cfg=CFG, iteration=2)
    assert [(t.slot_id, t.task_id, t.goal.value) for t in targets] == [("a", "a-v0", "harder")]


def test_a_variant_accepted_this_step_is_not_rewritten_in_the_same_step() -> None:
    reg, b1 = _registry().propose("b", {"q": 20}, "harder", 1.0, 1)
    # Iteration 2: b1 played as pending with acc 0.8 → accepted (0.8 < 1.0, ≥ 0.2). Its acc 0.8 = α_high
    # would ask for a harder variant, but it was not in the dataset when iteration 2 began.
    reg, decisions = decide_pending(reg, _acc(**{b1: 0.8, "a-v0": 0.9}), cfg=CFG, iteration=2)
    assert accepted_pending(decisions) == {b1}
    targets = rewrite_targets(reg, _acc(**{b1: 0.8, "a-v0": 0.9}), cfg=CFG, iteration=2)
    assert [(t.slot_id, t.task_id) for t in targets] == [("a", "a-v0")]
    # One step later it is an ordinary active task of the dataset.
    later = rewrite_targets(reg, _acc(**{b1: 0.8}), cfg=CFG, iteration=3)
    assert [(t.slot_id, t.task_id, t.goal.value, t.prev_acc) for t in later] == [("b", b1, "harder", 0.8)]


def test_rewrite_targets_use_thresholds_inclusively_and_skip_busy_slots() -> None:
    reg, _ = _registry().propose("c", {"q": 30}, "easier", 0.0, 1)
    # a: 0.8 = α_high → harder; b: 0.2 = α_low → easier (inclusive); c-v0 has a pending rewrite → skipped.
    targets = rewrite_targets(reg, _acc(**{"a-v0": 0.8, "b-v0": 0.2, "c-v0": 1.0}), cfg=CFG, iteration=1)
    assert [(t.slot_id, t.goal.value, t.prev_acc) for t in targets] == [
        ("a", "harder", 0.8),
        ("b", "easier", 0.2),
    ]
    assert targets[0].root_spec == {"q": 1}
    # Coding's strict lower bound: 0.2 is not "too hard" there.
    strict = rewrite_targets(
        _registry(), _acc(**{"b-v0": 0.2}), cfg=AdaptationConfig(low_inclusive=False), iteration=1
    )
    assert strict == []


def test_register_chosen_makes_one_pending_task_per_slot() -> None:
    proposals = pl.DataFrame(
        {
            "slot_id": ["a", "a"],
            "chosen": [False, True],
            "spec": [json.dumps({"q": 9}), json.dumps({"q": 11})],
            "goal": ["harder", "harder"],
            "prev_acc": [1.0, 1.0],
        }
    )
    reg, created = register_chosen(_registry(), proposals, iteration=3)
    assert created == ["a-v1"]
    assert reg.task("a-v1")["spec"] == {"q": 11}
    with pytest.raises(RegistryError, match="already has pending"):
        register_chosen(reg, proposals, iteration=4)


def test_rollout_metrics_hand_computed() -> None:
    # t: rollout 0 won in 1 step, rollout 1 lost after 3 steps with one invalid action.
    df = rollouts({"t-v0": [(1.0, 1), (-1.0, 3)]})
    df = df.with_columns(action_valid=pl.Series([True, True, False, True]))
    m = rollout_metrics(df)
    assert m["policy/success_rate"] == 0.5  # 1 of 2 episodes
    assert m["policy/mean_steps"] == 2.0  # (1 + 3) / 2
    assert m["policy/invalid_action_rate"] == 0.25  # 1 of 4 steps
    assert m["env/tasks_played"] == 1.0 and m["env/pending_played"] == 0.0


def test_band_share_and_judgment_metrics() -> None:
    # acc 0.1, 0.2, 0.8, 0.9 → 0.2 and 0.8 are inside [0.2, 0.8] → share 2/4; mean (0.1+0.2+0.8+0.9)/4 = 0.5.
    m = band_share(_acc(a=0.1, b=0.2, c=0.8, d=0.9), Band(low=0.2, high=0.8))
    assert m == {"env/share_in_band": 0.5, "env/mean_task_acc": 0.5}
    judgments = pl.DataFrame({"score": [1.0, -1.0, None, 1.0]})
    # 1 of 4 unparsable → 0.25; of the 3 parsed, 2 positive → 2/3.
    jm = judgment_metrics(judgments)
    assert jm["reward_model/parse_failure_rate"] == 0.25
    assert jm["reward_model/positive_rate"] == pytest.approx(2 / 3)


def test_eval_rows_one_row_per_episode() -> None:
    df = rollouts({"e-v0": [(1.0, 2), (-1.0, 1)]}, iteration=3)
    out = eval_rows(df, iteration=3)
    assert out.select("rollout_id", "outcome", "steps", "invalid_actions").rows() == [
        (0, 1.0, 2, 0),
        (1, -1.0, 1, 0),
    ]
    assert out["iteration"].to_list() == [3, 3]


def test_eval_metrics_count_a_win_with_an_invalid_answer_as_success_but_not_clean() -> None:
    # four episodes: a clean win, a win with one invalid answer, a loss, a loss with invalid answers
    evals = pl.DataFrame(
        {"task_id": ["t"] * 4, "rollout_id": [0, 1, 2, 3], "outcome": [1.0, 1.0, -1.0, -1.0],
         "steps": [2, 3, 6, 6], "invalid_actions": [0, 1, 0, 2]}
    )  # fmt: skip
    assert clean_wins(evals).to_list() == [True, False, False, False]
    expected = {
        "env/eval_env_error_rate": 0.0,
        "policy/eval_success_rate": 0.5,
        "policy/eval_clean_success_rate": 0.25,
        "policy/eval_mean_steps": 4.25,
    }
    assert eval_metrics(evals) == expected
    # A fifth episode whose desktop died: the policy's numbers are those of the four, and 1/5 is reported.
    broken = pl.DataFrame(
        {"task_id": ["t"], "rollout_id": [4], "outcome": [None], "steps": [1], "invalid_actions": [0],
         "status": ["env_error"]}
    )  # fmt: skip
    with_error = pl.concat(
        [evals.with_columns(status=pl.lit(None, pl.String)), broken], how="vertical_relaxed"
    )
    assert eval_metrics(with_error) == {**expected, "env/eval_env_error_rate": 0.2}
