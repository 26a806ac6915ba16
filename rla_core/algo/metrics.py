"""Per-iteration metrics and evaluation rows computed from artifacts (pure; docs/architecture.md#the-design-contract).

Every function reads documented artifact columns and returns plain floats keyed by MLflow metric
names (``policy/…``, ``reward_model/…``, ``env/…``). A metric with no data is left out rather than
reported as a fabricated 0.
"""

from __future__ import annotations

from typing import cast

import polars as pl

from rla_core.algo.coding_rewards import coding_metrics
from rla_core.algo.episodes import env_error_rate, episode_status, played
from rla_core.config import Band
from rla_core.schemas import validate

_EPISODE = ["task_id", "rollout_id"]
# Shares of episodes whose environment failed (docs/environment-errors.md), shown beside the success rates.
ENV_ERROR_RATE = "env/env_error_rate"
EVAL_ENV_ERROR_RATE = "env/eval_env_error_rate"


def _mean(series: pl.Series) -> float:
    """Mean of a numeric or boolean series as a float (0 rows → nan; callers check emptiness first)."""
    value = series.cast(pl.Float64).mean()
    return float(cast(float, value)) if value is not None else float("nan")


def episodes(rollouts: pl.DataFrame) -> pl.DataFrame:
    """One row per rollout: task_id, rollout_id, pending, outcome, steps, invalid_actions, status,
    error_kind, error_message, attempt.

    Reads 'rollouts' task_id, rollout_id, pending, outcome, action_valid, step and, when present, the
    episode status columns (old rollouts: status derived from the outcome, attempt 0).
    """
    extra = [c for c in ("error_kind", "error_message", "attempt") if c in rollouts.columns]
    return (
        rollouts.with_columns(episode_status(rollouts))
        .group_by(_EPISODE)
        .agg(
            pending=pl.col("pending").first(),
            outcome=pl.col("outcome").first(),
            steps=pl.col("step").count().cast(pl.Int64),  # an env_error episode may have no step
            invalid_actions=(~pl.col("action_valid")).sum().cast(pl.Int64),
            status=pl.col("status").first(),
            **{c: pl.col(c).first() for c in extra},
        )
        .with_columns(
            *(pl.lit(None, pl.String).alias(c) for c in ("error_kind", "error_message") if c not in extra),
            attempt=pl.col("attempt").fill_null(0) if "attempt" in extra else pl.lit(0, pl.Int64),
        )
        .sort(_EPISODE)
    )


def rollout_metrics(rollouts: pl.DataFrame) -> dict[str, float]:
    """policy/success_rate, policy/mean_steps, policy/invalid_action_rate (won and lost episodes only),
    env/env_error_rate (share of episodes whose environment failed, after retries), env/tasks_played,
    env/pending_played.

    Example: two rollouts, one won in 1 step and one lost after 3 steps with one invalid action →
    success_rate 0.5, mean_steps 2.0, invalid_action_rate 1/4; a third in env_error changes none of
    these and makes env_error_rate 1/3.
    """
    if rollouts.height == 0:
        return {"env/tasks_played": 0.0}
    out = {
        ENV_ERROR_RATE: float(env_error_rate(rollouts) or 0.0),
        "env/tasks_played": float(rollouts["task_id"].n_unique()),
        "env/pending_played": float(rollouts.filter(pl.col("pending"))["task_id"].n_unique()),
    }
    kept = played(rollouts)
    if kept.height:
        eps = episodes(kept)
        out |= {
            "policy/success_rate": _mean(eps["outcome"] > 0),
            "policy/mean_steps": _mean(eps["steps"]),
            "policy/invalid_action_rate": _mean(~kept["action_valid"]),
        }
    return out


def band_share(acc: pl.DataFrame, band: Band) -> dict[str, float]:
    """env/share_in_band: share of played tasks whose acc lies in ``band`` (inclusive), and env/mean_task_acc
    (tasks without an accuracy, all of whose episodes were env_error, are left out)."""
    acc = acc.filter(pl.col("acc").is_not_null())
    if acc.height == 0:
        return {}
    inside = acc.filter((pl.col("acc") >= band.low) & (pl.col("acc") <= band.high)).height
    return {"env/share_in_band": inside / acc.height, "env/mean_task_acc": _mean(acc["acc"])}


def judgment_metrics(judgments: pl.DataFrame) -> dict[str, float]:
    """reward_model/parse_failure_rate and reward_model/positive_rate over all judgments."""
    if judgments.height == 0:
        return {}
    parsed = judgments.filter(pl.col("score").is_not_null())
    out = {"reward_model/parse_failure_rate": 1.0 - parsed.height / judgments.height}
    if parsed.height:
        out["reward_model/positive_rate"] = _mean(parsed["score"] > 0)
    return out


def eval_rows(rollouts: pl.DataFrame, *, iteration: int) -> pl.DataFrame:
    """Artifact 'eval' from evaluation rollouts: one row per episode (outcome, steps, invalid_actions)."""
    eps = episodes(rollouts).drop("pending").with_columns(iteration=pl.lit(iteration, dtype=pl.Int64))
    return validate("eval", eps, where="eval_rows")


def clean_wins(evals: pl.DataFrame) -> pl.Series:
    """Per episode: won without a single invalid answer.

    Under the spec's fallback (an invalid answer plays index 0 or the clamped index) a garbled answer can
    still win by luck; an episode that is won *cleanly* is exactly one that would also be won if an
    invalid answer ended the episode (``rollout.invalid_action=fail``), since up to the first invalid
    answer both rules play the same steps.
    """
    return (evals["outcome"] > 0) & (evals["invalid_actions"] == 0)


def eval_metrics(evals: pl.DataFrame) -> dict[str, float]:
    """policy/eval_success_rate, policy/eval_clean_success_rate (:func:`clean_wins`), policy/eval_mean_steps
    over won and lost episodes, and env/eval_env_error_rate (episodes whose environment failed)."""
    if evals.height == 0:
        return {}
    out = {EVAL_ENV_ERROR_RATE: float(env_error_rate(evals) or 0.0)}
    kept = played(evals)
    if kept.height:
        out |= {
            "policy/eval_success_rate": _mean(kept["outcome"] > 0),
            "policy/eval_clean_success_rate": _mean(clean_wins(kept)),
            "policy/eval_mean_steps": _mean(kept["steps"]),
        }
    return out


# The paper's coding evaluation columns (spec §2.5): code accuracy, unit-test accuracy and detection.
EVAL_CODE_ACC = "policy/eval_code_acc"
EVAL_UT_ACC = "reward_model/eval_ut_acc"
EVAL_DETECT = "reward_model/eval_detect"
# How status, report and `rla eval` name them (the paper's table: code acc / UT acc / detect).
CODING_EVAL_LABELS: dict[str, str] = {
    EVAL_CODE_ACC: "code acc",
    EVAL_UT_ACC: "UT acc",
    EVAL_DETECT: "detect",
}


def coding_eval_metrics(
    rollouts: pl.DataFrame, executions: pl.DataFrame, unit_tests: pl.DataFrame
) -> dict[str, float]:
    """Code accuracy, unit-test accuracy and detection of one evaluation (docs/method.md).

    The held-out programs (``rollouts``), their runs on the GT and the reward model's tests
    (``executions``, both kinds) and those tests (``unit_tests``) through
    :func:`rla_core.algo.coding_rewards.coding_metrics`: ``acc`` → :data:`EVAL_CODE_ACC`, ``syn_ut_acc``
    → :data:`EVAL_UT_ACC`, ``perfect_ut_rate`` → :data:`EVAL_DETECT`. A metric without a denominator
    (e.g. detection when every program is right) is left out, not reported as 0.

    Example: one task, a right and a wrong program, one test that only the right one passes →
    code accuracy 1/2, UT accuracy 1, detection 1.
    """
    names = {"acc": EVAL_CODE_ACC, "syn_ut_acc": EVAL_UT_ACC, "perfect_ut_rate": EVAL_DETECT}
    values = coding_metrics(rollouts, executions, unit_tests)
    return {names[k]: float(v) for k, v in values.items() if v is not None}
