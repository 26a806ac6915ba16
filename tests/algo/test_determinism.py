"""The label functions return bit-identical frames on repeated calls with the same inputs.

The trainer reads the label rows in file order, so a row order or a last-bit difference changes the
run. The sizes here are ones where `policy_samples` differed between calls before the fix (its joins
do not keep row order and the per-(task, step) z-score sums floats in row order): 20 of 20 calls.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from rla_core.algo import coding_rewards, labels
from rla_core.config import RewardConfig

CALLS = 20
CFG = RewardConfig(policy_acc_band={"low": 0, "high": 1}, rm_acc_band={"low": 0, "high": 1})


def text_game_frames(
    n_tasks: int = 8, n_rollouts: int = 16, max_steps: int = 20, m: int = 3
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Rollouts with varied lengths and outcomes, and m judgments per step (10% unparsable)."""
    rng = np.random.default_rng(0)
    cols: dict[str, list[object]] = {"task_id": [], "rollout_id": [], "step": [], "outcome": []}
    for t in range(n_tasks):
        p = rng.uniform(0.2, 0.8)
        for r in range(n_rollouts):
            outcome = 1.0 if rng.random() < p else -1.0
            for s in range(int(rng.integers(1, max_steps + 1))):
                for key, value in zip(cols, (f"t{t:03d}", r, s, outcome), strict=True):
                    cols[key].append(value)
    rollouts = pl.DataFrame(cols).with_columns(
        iteration=pl.lit(1, pl.Int64), pending=pl.lit(False), prompt=pl.lit("p"), response=pl.lit("r")
    )
    judged = rollouts.select("task_id", "rollout_id", "step").join(
        pl.DataFrame({"judge_idx": list(range(m))}), how="cross"
    )
    scores = rng.choice(np.array([1.0, -1.0, np.nan]), size=judged.height, p=[0.5, 0.4, 0.1])
    judgments = judged.with_columns(
        score=pl.Series(scores).fill_nan(None), prompt=pl.lit("jp"), response=pl.lit("jr"),
        iteration=pl.lit(1, pl.Int64),
    )  # fmt: skip
    return rollouts, judgments


def coding_frames(
    n_tasks: int = 32, n_codes: int = 16, n_gt: int = 7, k: int = 8
) -> tuple[pl.DataFrame, ...]:
    rng = np.random.default_rng(1)
    ids = [f"t{t:03d}" for t in range(n_tasks)]
    rollouts = pl.DataFrame(
        {"task_id": [t for t in ids for _ in range(n_codes)], "rollout_id": list(range(n_codes)) * n_tasks}
    ).with_columns(
        step=pl.lit(0, pl.Int64), iteration=pl.lit(1, pl.Int64), pending=pl.lit(False), prompt=pl.lit("p"),
        response=pl.lit("r"),
    )  # fmt: skip
    rows = []
    for t in ids:
        p = rng.uniform(0.3, 1.0)
        for r in range(n_codes):
            good = bool(rng.random() < p)
            rows += [(t, r, "gt", g, good or bool(rng.random() < 0.5)) for g in range(n_gt)]
            rows += [(t, r, "generated", j, bool(rng.random() < 0.6)) for j in range(k)]
    executions = pl.DataFrame(
        rows, schema=["task_id", "rollout_id", "test_kind", "test_idx", "passed"], orient="row"
    )
    unit_tests = pl.DataFrame(
        {"task_id": [t for t in ids for _ in range(k)], "test_idx": list(range(k)) * n_tasks}
    ).with_columns(
        valid=pl.lit(True), prompt=pl.lit("up"), response=pl.lit("ur"), iteration=pl.lit(1, pl.Int64)
    )
    return rollouts, executions, unit_tests


def assert_bit_identical(frames: list[pl.DataFrame]) -> None:
    first = frames[0]
    assert first.height > 0
    differing = sum(not f.equals(first) for f in frames[1:])
    assert differing == 0, f"{differing} of {len(frames) - 1} repeated calls returned a different frame"


@pytest.mark.parametrize("fn", ["policy_samples", "reward_samples"])
def test_text_game_labels_are_bit_identical_across_calls(fn: str) -> None:
    rollouts, judgments = text_game_frames()
    label = getattr(labels, fn)
    assert_bit_identical([label(rollouts, judgments, cfg=CFG, m=3)[0] for _ in range(CALLS)])


def test_step_scores_and_task_accuracy_are_bit_identical_across_calls() -> None:
    rollouts, judgments = text_game_frames()
    assert_bit_identical([labels.step_scores(rollouts, judgments, m=3) for _ in range(CALLS)])
    assert_bit_identical([labels.task_accuracy(rollouts) for _ in range(CALLS)])


def test_coding_labels_are_bit_identical_across_calls() -> None:
    rollouts, executions, unit_tests = coding_frames()
    assert_bit_identical(
        [coding_rewards.coding_policy_samples(rollouts, executions, cfg=CFG)[0] for _ in range(CALLS)]
    )
    assert_bit_identical(
        [
            coding_rewards.coding_reward_samples(rollouts, executions, unit_tests, cfg=CFG)[0]
            for _ in range(CALLS)
        ]
    )
