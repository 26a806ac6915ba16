"""How good a step judge is, and the oracle judge: the ground truth of a good step and the rules built on it.

Pure polars over 'rollouts' (one row per agent step) and 'judgments' (m rows per step) frames.

* :func:`optimal_steps` — a step is good iff its played ``action`` is one of its ``expert_actions`` (the
  engine's optimal next commands); every measure here is against that label.
* :func:`step_votes`, :func:`judge_step_metrics`, :func:`judge_outcome_agreement` — the judge's step and
  outcome accuracy (spec §7 "Process Acc", "Outcome Acc"), balanced accuracy and its share of "good" verdicts.
* :func:`oracle_judgments` — the votes a perfect judge would cast (``judge.source=oracle``), optionally
  turned over with the probabilities of ``judge.oracle_flip`` (:func:`oracle_flips`): a judge of known
  quality, to measure how good a judge must be for the step-wise reward to pay.

Example:
    >>> import polars as pl
    >>> r = pl.DataFrame({"iteration": [1, 1], "task_id": ["t", "t"], "rollout_id": [0, 0], "step": [0, 1],
    ...                   "action": ["look", "go east"], "expert_actions": ['["go east"]', '["go east"]'],
    ...                   "outcome": [-1.0, -1.0]})
    >>> optimal_steps(r).to_list()
    [False, True]
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import polars as pl

from rla_core.algo.episodes import played
from rla_core.algo.seeds import derive_uniform
from rla_core.schemas import get_schema, validate

if TYPE_CHECKING:
    from rla_core.config import OracleFlip

STEP_KEY = ["task_id", "rollout_id", "step"]


def optimal_steps(rollouts: pl.DataFrame) -> pl.Series:
    """Per 'rollouts' row: the played ``action`` is one of its ``expert_actions`` (the engine's optimal
    next commands, a JSON list; null counts as none) — the ground truth of a good step."""
    return pl.Series(
        "good",
        [
            action in json.loads(expert or "[]")
            for action, expert in zip(
                rollouts["action"].to_list(), rollouts["expert_actions"].to_list(), strict=True
            )
        ],
        dtype=pl.Boolean,
    )


def has_expert_labels(steps: pl.DataFrame) -> bool:
    """Whether any step names the engine's optimal actions (text games do; a plug-in without
    ``expert_actions``, or with free-form turns, does not: its steps have no good/bad label)."""
    if "expert_actions" not in steps.columns or "action" not in steps.columns:
        return False
    listed = steps["expert_actions"].drop_nulls()
    return bool(listed.len()) and bool((listed != "[]").any())


def step_votes(rollouts: pl.DataFrame, judgments: pl.DataFrame) -> pl.DataFrame:
    """Per step: the judge's mean vote (null scores count 0, spec §2.1) and whether the step was good.

    Reads 'rollouts' task_id, rollout_id, step, action, expert_actions, outcome and 'judgments'
    task_id, rollout_id, step, score. Returns task_id, rollout_id, step, outcome, good (action is one
    of the engine's optimal next commands), mean_vote, all_negative (every judgment is -1).
    Steps without judgments are left out.
    """
    steps = rollouts.select([*STEP_KEY, "outcome"]).with_columns(good=optimal_steps(rollouts))
    votes = judgments.group_by(STEP_KEY).agg(
        mean_vote=pl.col("score").fill_null(0.0).mean(),
        all_negative=(pl.col("score") == -1.0).fill_null(False).all(),
    )
    return steps.join(votes, on=STEP_KEY, how="inner").sort(STEP_KEY)


def judge_step_accuracy(rollouts: pl.DataFrame, judgments: pl.DataFrame) -> float | None:
    """Share of judged steps whose mean-vote sign matches expert goodness (spec §7 "Process Acc").

    A step is good iff its action is in its ``expert_actions`` (TextWorld ``policy_commands``). A
    mean vote > 0 predicts good, < 0 predicts bad, and exactly 0 counts as wrong (no signal). None
    when nothing was judged. Example: votes [+1, -1/3, 0] on steps [good, bad, good] → 2/3.

    On games that are almost always lost most steps are bad, so a judge that calls every step bad
    scores the bad steps' share here: read it beside :func:`judge_step_metrics`' balanced accuracy.
    """
    return judge_step_metrics(rollouts, judgments).get("reward_model/step_accuracy")


def judge_step_metrics(
    rollouts: pl.DataFrame, judgments: pl.DataFrame, *, prefix: str = "reward_model/"
) -> dict[str, float]:
    """The judge's step-level metrics against the engine's labels (:func:`optimal_steps`), as stage metrics.

    * ``step_accuracy`` — raw accuracy (:func:`judge_step_accuracy`);
    * ``step_balanced_accuracy`` — the mean of the recall on good steps (mean vote > 0) and the recall on
      bad steps (mean vote < 0); a mean vote of exactly 0 is a miss in either class. A constant judge
      scores 0.5 (one recall 1, the other 0), whatever the classes' shares; absent when either class has no
      judged step (a recall of an empty class is undefined);
    * ``good_verdict_share`` — share of judged steps the judge calls good (mean vote > 0);
    * ``good_verdict_precision`` — share of those "good" verdicts that are right: on a bench where a good
      step is the rare signal, this (not balanced accuracy) decides whether the votes lift the policy
      (a judge that hands "good" to bad steps teaches the policy to repeat them); absent when no step is
      called good;
    * ``good_step_share`` — share of judged steps that are good (the engine's label): the raw accuracy of a
      judge that calls every step bad is one minus this.

    Each name is ``prefix`` + the above (``reward_model/`` for the training steps; the judge's yardstick is
    logged as ``reward_model/yardstick_``). Empty when nothing was judged, or when no step has expert
    labels (:func:`has_expert_labels`).

    Example: votes [+1, -1, -1, 0] on steps [good, bad, good, bad] → raw 2/4; recall good 1/2, bad 1/2 →
    balanced 0.5; good verdicts 1/4, of which 1/1 right; good steps 2/4.
    """
    if not has_expert_labels(rollouts):  # nothing to measure against (free text, no expert_actions)
        return {}
    votes = step_votes(rollouts, judgments)
    if votes.height == 0:
        return {}
    # mean vote > 0 predicts good, < 0 bad; exactly 0 predicts neither (a miss in either class)
    v = votes.with_columns(pred_good=pl.col("mean_vote") > 0, pred_bad=pl.col("mean_vote") < 0)
    good, bad = v.filter(pl.col("good")), v.filter(~pl.col("good"))
    hits_good, hits_bad = int(good["pred_good"].sum()), int(bad["pred_bad"].sum())
    said_good = int(v["pred_good"].sum())
    metrics = {
        f"{prefix}step_accuracy": (hits_good + hits_bad) / v.height,
        f"{prefix}good_verdict_share": said_good / v.height,
        f"{prefix}good_step_share": good.height / v.height,
    }
    if said_good:
        metrics[f"{prefix}good_verdict_precision"] = hits_good / said_good
    if good.height and bad.height:
        metrics[f"{prefix}step_balanced_accuracy"] = (hits_good / good.height + hits_bad / bad.height) / 2
    return metrics


def judge_outcome_agreement(rollouts: pl.DataFrame, judgments: pl.DataFrame) -> float | None:
    """Share of rollouts whose outcome the judge foresees (spec §7 "Outcome Acc").

    The prediction is the sign of the mean, over the rollout's steps, of the step mean votes; 0 counts
    as wrong. None when nothing was judged. Example: rollouts with step means [+1, +1/3] (outcome +1)
    and [-1] (outcome +1) → 1/2.
    """
    votes = step_votes(rollouts, judgments)
    if votes.height == 0:
        return None
    per_rollout = votes.group_by(["task_id", "rollout_id"]).agg(
        pred=pl.col("mean_vote").mean(), outcome=pl.col("outcome").first()
    )
    agree = ((pl.col("pred") > 0) & (pl.col("outcome") > 0)) | (
        (pl.col("pred") < 0) & (pl.col("outcome") < 0)
    )
    return float(per_rollout.select(agree.mean()).item())


# What the oracle's flip coins are drawn for (the first key part of derive_seed).
FLIP_STREAM = "oracle-flip"


def oracle_flips(steps: pl.DataFrame, good: pl.Series, *, flip: OracleFlip, seed: int) -> pl.Series:
    """Per step: whether the noisy oracle turns its votes over (``judge.oracle_flip``).

    A good step flips with probability ``flip.good``, a bad one with ``flip.bad``. Each decision compares a
    coin of its own, ``derive_uniform(seed, "oracle-flip", iteration, task_id, rollout_id, step)``, with its
    probability, so it is a pure function of the step's key and the seed: never of row order, of the other
    rows or of sharding. Reads ``steps``' iteration (0 when absent), task_id, rollout_id, step.

    Example: with ``flip.good = 1`` every good step flips and no bad one does.
    """
    iterations = steps["iteration"].to_list() if "iteration" in steps.columns else [0] * steps.height
    keys = zip(
        iterations, steps["task_id"].to_list(), steps["rollout_id"].to_list(), steps["step"].to_list(),
        good.to_list(), strict=True,
    )  # fmt: skip
    return pl.Series(
        "flip",
        [
            derive_uniform(seed, FLIP_STREAM, it, task, rollout, step) < (flip.good if is_good else flip.bad)
            for it, task, rollout, step, is_good in keys
        ],
        dtype=pl.Boolean,
    )


def oracle_judgments(
    rollouts: pl.DataFrame, *, m: int, flip: OracleFlip | None = None, seed: int = 0
) -> pl.DataFrame:
    """The 'judgments' an oracle judge would write: every one of a step's ``m`` votes is +1 when the played
    action is one of the engine's optimal next actions (:func:`optimal_steps`) and -1 otherwise; with
    ``flip`` (``judge.oracle_flip``) a step's votes are all turned over when :func:`oracle_flips` says so.

    A diagnostic (``judge.source=oracle``): it reads privileged information the reward model never sees, so
    the policy's step-wise reward is ±1 per step in place of the mean of m sampled votes — the upper bound
    of what the step-wise channel can carry, and with flips a judge whose step-level balanced accuracy is
    ``1 - (flip.good + flip.bad) / 2`` by construction. Rows have the 'judgments' schema; ``prompt`` and
    ``response`` are empty (no model was asked) and ``parse_error`` is null. Episodes whose environment
    failed are left out, as the judge stage leaves them out.

    Example: a step whose action is in its expert_actions gets m scores of +1.0 (of -1.0 when it flips).
    """
    steps = played(rollouts).filter(pl.col("step").is_not_null())
    good = optimal_steps(steps)
    if flip is not None and flip.any:
        good = good ^ oracle_flips(steps, good, flip=flip, seed=seed)
    score = pl.when(good).then(1.0).otherwise(-1.0)
    frame = (
        steps.select("iteration", *STEP_KEY, score=score)
        .join(pl.DataFrame({"judge_idx": list(range(m))}, schema={"judge_idx": pl.Int64}), how="cross")
        .sort([*STEP_KEY, "judge_idx"])
    )
    columns = get_schema("judgments").columns
    filled = frame.with_columns(
        pl.lit("").alias("prompt"),
        pl.lit("").alias("response"),
        *(
            pl.lit(None, dtype=dtype).alias(name)
            for name, dtype in columns.items()
            if name in ("images", "parse_error")
        ),
    )
    return validate("judgments", filled.select(list(columns)), where="oracle_judgments")


# A judge whose share of "good" verdicts falls below this fraction of the true good-step share has collapsed
# onto the majority label (it calls almost every step bad): its step-wise rewards carry little but the outcome.
COLLAPSE_RATIO = 0.5


def collapse_warning(metrics: dict[str, float], *, prefix: str = "reward_model/") -> str | None:
    """A one-line warning when a judge's ``good_verdict_share`` is below :data:`COLLAPSE_RATIO` times the
    ``good_step_share`` among ``metrics`` (a stage's, names with ``prefix``); None when it is not, or when
    either share is absent.

    Example: 3 % of steps called good where 18 % are → a warning; 15 % where 18 % are → None.
        >>> collapse_warning({"reward_model/good_verdict_share": 0.03, "reward_model/good_step_share": 0.18})[:38]
        'the judge calls 3% of steps good while'
    """
    said, true = metrics.get(f"{prefix}good_verdict_share"), metrics.get(f"{prefix}good_step_share")
    if said is None or true is None or said >= COLLAPSE_RATIO * true:
        return None
    return (
        f"the judge calls {said:.0%} of steps good while {true:.0%} are (below half): it has collapsed onto "
        "the majority label, so its step-wise rewards carry little besides the outcome (docs/study.md)"
    )
