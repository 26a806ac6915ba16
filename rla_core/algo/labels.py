"""Training labels for text games and GUI control: integrated policy reward and RM consistency reward.

Pure, vectorised polars functions (spec §2.1, §2.2): rollouts and judgments in, new frames out.

* Policy: ``R_i = O·[use_outcome] + λ·mean_j S_ij·[use_stepwise]``, normalised per task and step
  index among the rollouts that reach that step; tasks outside ``policy_acc_band`` and pending
  tasks that were not accepted are dropped; zero-advantage rows are dropped.
* Reward model: ``raw_ij = R_i · S_ij`` for a valid judgment and ``invalid_judgment_penalty`` for
  an unparsable one, normalised across the judgments of the same step; tasks outside
  ``rm_acc_band`` (by default nested inside ``policy_acc_band``, as in AlfWorld) are dropped;
  zero-advantage rows are dropped.

Unparsable judgments are null in ``judgments.score``. They count as 0 inside a mean taken over all
``m`` judgments (docs/architecture.md#the-design-contract).

Episodes whose environment failed (status ``env_error``, :mod:`rla_core.algo.episodes`) are dropped first
by every function here: they are not the policy's, so they enter no accuracy, no group of the policy's
advantages and no reward-model consistency target, and the judgments of their steps are ignored.

Example:
    >>> import polars as pl
    >>> from rla_core.config import RewardConfig
    >>> steps = pl.DataFrame({"task_id": ["t"] * 2, "rollout_id": [0, 1], "step": [0, 0],
    ...                       "outcome": [1.0, -1.0], "mean_score": [1.0, -1.0]})
    >>> integrated_rewards(steps, cfg=RewardConfig())["reward"].to_list()
    [2.0, -2.0]
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import polars as pl

from rla_core.algo.episodes import is_env_error, played
from rla_core.algo.judging import has_expert_labels, optimal_steps
from rla_core.config import Band, RewardConfig
from rla_core.errors import ArtifactError
from rla_core.schemas import images_column, iteration_column, token_columns, validate

STEP_KEYS: tuple[str, ...] = ("task_id", "rollout_id", "step")
# Accuracies are ratios of small integers; a band edge is compared with this slack so that an
# accuracy computed by float summation (0.1+0.1 vs 0.2) is not pushed out of an inclusive band.
ACC_TOL = 1e-9


def band_expr(col: str, band: Band) -> pl.Expr:
    """``low <= col <= high`` with ACC_TOL slack, so 1/5 counts as 0.2 (both ends inclusive)."""
    return (pl.col(col) >= band.low - ACC_TOL) & (pl.col(col) <= band.high + ACC_TOL)


def require_columns(df: pl.DataFrame, columns: Sequence[str], *, frame: str, where: str) -> None:
    """Raise ArtifactError naming the columns ``df`` (artifact ``frame``) lacks."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ArtifactError(
            f"{where}: the {frame} frame lacks columns {missing} (has {df.columns}); "
            f"pass the '{frame}' artifact (see rla_core.schemas)"
        )


def _rollout_table(rollouts: pl.DataFrame, *, where: str) -> pl.DataFrame:
    """One row per won or lost (task_id, rollout_id): outcome, pending, number of steps. Checks outcome is ±1."""
    require_columns(rollouts, ["task_id", "rollout_id", "step", "outcome"], frame="rollouts", where=where)
    rollouts = played(rollouts)
    pending = pl.col("pending").any() if "pending" in rollouts.columns else pl.lit(False)
    per_rollout = rollouts.group_by("task_id", "rollout_id").agg(
        o_min=pl.col("outcome").min(),
        o_max=pl.col("outcome").max(),
        o_nulls=pl.col("outcome").null_count(),
        pending=pending,
        n_steps=pl.col("step").count(),
    )
    bad = per_rollout.filter(
        (pl.col("o_nulls") > 0) | (pl.col("o_min") != pl.col("o_max")) | ~pl.col("o_min").is_in([-1.0, 1.0])
    )
    if bad.height:
        row = bad.row(0, named=True)
        raise ArtifactError(
            f"{where}: rollout (task_id={row['task_id']!r}, rollout_id={row['rollout_id']}) has outcome "
            f"values in [{row['o_min']}, {row['o_max']}] with {row['o_nulls']} nulls; every step of a "
            "rollout must carry the same outcome, +1 (success) or -1 (spec §2.1)"
        )
    return per_rollout.select("task_id", "rollout_id", pl.col("o_min").alias("outcome"), "pending", "n_steps")


def _task_table(rollouts: pl.DataFrame, *, where: str) -> pl.DataFrame:
    """One row per task: n_rollouts, acc, pending, n_steps."""
    return (
        _rollout_table(rollouts, where=where)
        .group_by("task_id")
        .agg(
            n_rollouts=pl.len(),
            n_success=(pl.col("outcome") > 0).sum(),
            pending=pl.col("pending").any(),
            n_steps=pl.col("n_steps").sum(),
        )
        # Integer counts divided once: k/n is the double nearest the ratio, so 1/5 == 0.2 exactly.
        .with_columns(acc=pl.col("n_success") / pl.col("n_rollouts"))
        .sort("task_id")
    )


def task_accuracy(rollouts: pl.DataFrame) -> pl.DataFrame:
    """Per-task success rate over its won and lost rollouts (spec §0 acc(q)).

    Reads ``rollouts.task_id, rollout_id, outcome`` (one outcome per rollout, +1 = success) and
    ``status`` when present; writes ``task_id, n_rollouts, acc`` sorted by task_id. ``env_error``
    rollouts do not count; a task all of whose rollouts are ``env_error`` has ``n_rollouts = 0`` and a
    null ``acc`` (no accuracy: no decision, no rewrite). A rollout whose steps disagree on the outcome,
    or whose outcome is not ±1, raises :class:`ArtifactError`.

    Example:
        >>> df = pl.DataFrame({"task_id": ["a", "a", "a", "b"], "rollout_id": [0, 0, 1, 0],
        ...                    "step": [0, 1, 0, 0], "outcome": [1.0, 1.0, -1.0, None],
        ...                    "status": ["won", "won", "lost", "env_error"]})
        >>> task_accuracy(df)["acc"].to_list()
        [0.5, None]
    """
    acc = _task_table(rollouts, where="task_accuracy").select("task_id", "n_rollouts", "acc")
    broken = rollouts.filter(is_env_error(rollouts)).select("task_id").unique()
    only_errors = broken.join(acc, on="task_id", how="anti").with_columns(
        n_rollouts=pl.lit(0, pl.UInt32), acc=pl.lit(None, pl.Float64)
    )
    return pl.concat([acc, only_errors.select(acc.columns)], how="vertical_relaxed").sort("task_id")


def step_scores(rollouts: pl.DataFrame, judgments: pl.DataFrame, *, m: int) -> pl.DataFrame:
    """Mean judge score per agent step, over all ``m`` judgments (spec §2.1, docs/architecture.md#the-design-contract).

    Reads ``rollouts.task_id, rollout_id, step, outcome`` and ``judgments.task_id, rollout_id,
    step, judge_idx, score`` (+1 / -1 / null). Writes ``task_id, rollout_id, step, outcome,
    mean_score, n_valid`` sorted by the keys: ``mean_score = (sum of non-null scores) / m``, so an
    unparsable judgment counts as 0. A step with fewer than ``m`` judgment rows is treated as if the
    missing ones were unparsable (null) too; a step with none gets ``mean_score = 0``. Rollouts
    without steps (null ``step``) and judgments of steps not in ``rollouts`` are ignored. More than
    ``m`` rows for one step, a ``judge_idx`` outside ``0..m-1`` or a score other than ±1/null raise
    ArtifactError.

    Example:
        >>> r = pl.DataFrame({"task_id": ["a"], "rollout_id": [0], "step": [0], "outcome": [1.0]})
        >>> j = pl.DataFrame({"task_id": ["a"] * 3, "rollout_id": [0] * 3, "step": [0] * 3,
        ...                   "judge_idx": [0, 1, 2], "score": [1.0, None, 1.0]})
        >>> step_scores(r, j, m=3)["mean_score"].round(4).to_list()
        [0.6667]
    """
    where = "step_scores"
    require_columns(rollouts, [*STEP_KEYS, "outcome"], frame="rollouts", where=where)
    _check_judgments(judgments, m=m, where=where)
    tasks = _task_table(rollouts, where=where).with_columns(drop_reason=pl.lit(None, dtype=pl.String))
    steps = played(rollouts).filter(pl.col("step").is_not_null()).select(*STEP_KEYS, "outcome")
    index = _StepIndex.build(tasks, steps)
    judged = index.encode(judgments.select(*STEP_KEYS, "judge_idx", "score"), kept_only=True)
    agg = _judgment_agg(judged, m=m, where=where)
    return (
        index.encode(steps, kept_only=True)
        .join(agg.lazy(), on=_SID, how="left")
        .with_columns(
            mean_score=pl.col("score_sum").fill_null(0.0) / m,
            n_valid=pl.col("n_valid").fill_null(0).cast(pl.Int64),
        )
        .sort(_SID)
        .select(*STEP_KEYS, "outcome", "mean_score", "n_valid")
        .collect()
    )


def _check_judgments(judgments: pl.DataFrame, *, m: int, where: str) -> None:
    require_columns(judgments, [*STEP_KEYS, "judge_idx", "score"], frame="judgments", where=where)
    if m < 1:
        raise ValueError(f"{where}: m={m}; the number of judgments per step must be at least 1")
    bounds = judgments.select(
        lo=pl.col("judge_idx").min(),
        hi=pl.col("judge_idx").max(),
        bad_scores=(pl.col("score").is_not_null() & ~pl.col("score").is_in([-1.0, 1.0])).sum(),
    ).row(0, named=True)
    if judgments.height and (bounds["lo"] < 0 or bounds["hi"] >= m):
        raise ArtifactError(
            f"{where}: judge_idx spans {bounds['lo']}..{bounds['hi']} but m={m} judgments per step "
            "allow 0..m-1; pass the m the judge stage used (config judge.m)"
        )
    if bounds["bad_scores"]:
        raise ArtifactError(
            f"{where}: {bounds['bad_scores']} judgment scores are not +1, -1 or null; parse judge "
            "outputs with rla_core.algo.parsing.parse_boxed_score (spec §5)"
        )


_SID = "_sid"  # dense Int64 id of an agent step
_GID = "_gid"  # dense Int64 id of a (task, step index) group


@dataclass(frozen=True)
class _StepIndex:
    """Dense integer ids for steps, so that joins and groupings hash one Int64 instead of (str, int, int).

    Grouping and joining on the string task_id plus two integers dominated the run time of the
    labels on a million steps; encoding once and working on one integer key is several times faster.
    """

    tasks: pl.DataFrame  # task_id, _tc (dense task code), drop_reason
    r_min: int
    r_span: int
    s_min: int
    s_span: int

    @staticmethod
    def build(tasks: pl.DataFrame, steps: pl.DataFrame) -> _StepIndex:
        b = steps.select(
            r_lo=pl.col("rollout_id").min(),
            r_hi=pl.col("rollout_id").max(),
            s_lo=pl.col("step").min(),
            s_hi=pl.col("step").max(),
        ).row(0, named=True)
        r_min, s_min = int(b["r_lo"] or 0), int(b["s_lo"] or 0)
        r_span = int(b["r_hi"] if b["r_hi"] is not None else 0) - r_min + 1
        s_span = int(b["s_hi"] if b["s_hi"] is not None else 0) - s_min + 1
        if max(tasks.height, 1) * r_span * s_span >= 2**62:
            raise ArtifactError(
                f"rollout ids span {r_span} values and steps {s_span} over {tasks.height} tasks: too many "
                "to index; renumber rollout_id and step from 0 within each task"
            )
        coded = (
            tasks.select("task_id", "drop_reason")
            .with_row_index("_tc")
            .with_columns(pl.col("_tc").cast(pl.Int64))
        )
        return _StepIndex(coded, r_min, r_span, s_min, s_span)

    def encode(self, df: pl.DataFrame | pl.LazyFrame, *, kept_only: bool) -> pl.LazyFrame:
        """Lazily add ``_tc``, ``_sid`` and ``_gid``. Rows of tasks absent from the rollouts (or
        dropped by the task filter, with ``kept_only``) are removed; rows whose rollout_id or step
        lies outside the rollouts' range get a null ``_sid``."""
        codes = self.tasks.filter(pl.col("drop_reason").is_null()) if kept_only else self.tasks
        rid = pl.col("rollout_id") - self.r_min
        st = pl.col("step") - self.s_min
        inside = rid.is_between(0, self.r_span - 1) & st.is_between(0, self.s_span - 1)
        return (
            df.lazy()
            .join(codes.lazy().select("task_id", "_tc"), on="task_id", how="inner")
            .with_columns(
                pl.when(inside).then((pl.col("_tc") * self.r_span + rid) * self.s_span + st).alias(_SID),
                pl.when(inside).then(pl.col("_tc") * self.s_span + st).alias(_GID),
            )
        )


def _judgment_agg(judged: pl.LazyFrame, *, m: int, where: str) -> pl.DataFrame:
    """Per step id: score_sum, n_pos, n_valid, n_rows (judgments already encoded)."""
    agg = (
        judged.filter(pl.col(_SID).is_not_null())
        .group_by(_SID)
        .agg(
            score_sum=pl.col("score").sum(),
            n_pos=(pl.col("score") > 0).sum().cast(pl.Int64),
            n_valid=pl.col("score").count().cast(pl.Int64),
            n_rows=pl.len().cast(pl.Int64),
        )
        .collect()
    )
    over = agg.filter(pl.col("n_rows") > m)
    if over.height:
        sid, n_rows = over[_SID][0], over["n_rows"][0]
        row = judged.filter(pl.col(_SID) == sid).collect().row(0, named=True)
        raise ArtifactError(
            f"{where}: step (task_id={row['task_id']!r}, rollout_id={row['rollout_id']}, step={row['step']}) "
            f"has {n_rows} judgment rows but m={m}; each (step, judge_idx) must appear once"
        )
    return agg


def _integrated_expr(cfg: RewardConfig) -> pl.Expr:
    reward = pl.lit(0.0)
    if cfg.use_outcome:
        reward = reward + pl.col("outcome")
    if cfg.use_stepwise:
        reward = reward + cfg.lam * pl.col("mean_score")
    return reward


def integrated_rewards(scores: pl.DataFrame, *, cfg: RewardConfig) -> pl.DataFrame:
    """Add ``reward = O·[use_outcome] + λ·mean_score·[use_stepwise]`` (spec §2.1, §8.1-8.2).

    Reads ``outcome`` and ``mean_score`` (as written by :func:`step_scores`); returns the frame with
    a new Float64 ``reward`` column. With the defaults (λ = 1, both terms on) this is the reference
    code's ``raw_i = O + mean_j S_ij`` in [-2, 2].

    Example:
        >>> df = pl.DataFrame({"outcome": [-1.0], "mean_score": [1 / 3]})
        >>> integrated_rewards(df, cfg=RewardConfig(lam=0.5))["reward"].round(4).to_list()
        [-0.8333]
    """
    return scores.with_columns(reward=_integrated_expr(cfg).cast(pl.Float64))


def group_normalize(
    df: pl.DataFrame,
    *,
    value: str,
    by: Sequence[str],
    step_col: str | None,
    eps: float,
    keep_singleton_raw: bool = True,
    out: str = "advantage",
) -> pl.DataFrame:
    """Add ``out = (x - mean) / pop_std`` within groups ``by + [step_col]`` (spec §2.1, §2.2).

    * std ≤ ``eps`` (all values equal) gives 0;
    * a group of one row keeps its raw value when ``keep_singleton_raw`` (policy, spec §2.1: only
      one rollout reaches step k) and gets 0 otherwise (reward model: a single judgment, spec §2.2).

    For the policy, ``by=["task_id"], step_col="step"``: the group of step k is the task's rollouts
    that have a step k. For the reward model, ``by=["task_id", "rollout_id", "step"],
    step_col=None``: the group is the m judgments of one step.

    Example:
        >>> df = pl.DataFrame({"task_id": ["a"] * 3, "step": [0, 0, 1], "r": [2.0, 0.0, 1.5]})
        >>> group_normalize(df, value="r", by=["task_id"], step_col="step", eps=1e-8)["advantage"].to_list()
        [1.0, -1.0, 1.5]
    """
    keys = [*by, step_col] if step_col is not None else list(by)
    x = pl.col(value)
    n = pl.len().over(keys)
    mean = x.mean().over(keys)
    std = x.std(ddof=0).over(keys)
    singleton = x if keep_singleton_raw else pl.lit(0.0)
    adv = (
        pl.when(n == 1)
        .then(singleton)
        .when(std <= eps)
        .then(pl.lit(0.0))
        .otherwise((x - mean) / std)
        .cast(pl.Float64)
    )
    return df.with_columns(adv.alias(out))


def _task_filter(
    tasks: pl.DataFrame, *, band: Band, extra_band: Band | None, accepted_pending: Collection[str]
) -> pl.DataFrame:
    """Add ``drop_reason`` (null = kept) to the task table."""
    accepted = pl.Series("accepted", list(accepted_pending), dtype=pl.String)
    in_band = band_expr("acc", band)
    if extra_band is not None:
        in_band = in_band & band_expr("acc", extra_band)
    return tasks.with_columns(
        drop_reason=pl.when(pl.col("pending") & ~pl.col("task_id").is_in(accepted.implode()))
        .then(pl.lit("pending_not_accepted"))
        .when(~in_band)
        .then(pl.lit("out_of_band"))
        .otherwise(pl.lit(None, dtype=pl.String))
    )


DROP_REASONS = ("pending_not_accepted", "out_of_band")  # why a task's rows are left out of the samples


def task_stats(
    tasks: pl.DataFrame, *, rows_col: str, reasons: tuple[str, ...] = DROP_REASONS
) -> dict[str, int]:
    """Tasks and their rows (``rows_col``): in all, left out for each of ``reasons`` (``drop_reason``), kept."""
    stats = {"tasks_total": tasks.height, "rows_total": int(tasks[rows_col].sum())}
    for reason in reasons:
        sub = tasks.filter(pl.col("drop_reason") == reason)
        stats[f"tasks_{reason}"] = sub.height
        stats[f"rows_{reason}"] = int(sub[rows_col].sum())
    stats["tasks_kept"] = tasks.filter(pl.col("drop_reason").is_null()).height
    return stats


def policy_samples(
    rollouts: pl.DataFrame,
    judgments: pl.DataFrame,
    *,
    cfg: RewardConfig,
    m: int,
    accepted_pending: Collection[str] = (),
) -> tuple[pl.DataFrame, dict[str, int]]:
    """Policy training rows from the integrated reward, group-normalised and filtered (spec §2.1).

    Reads ``rollouts.iteration, task_id, pending, rollout_id, step, outcome, prompt, response`` (and
    ``images``, ``prompt_ids``, ``response_ids`` when present: they are carried to the rows unchanged, so a
    turn the recording endpoint answered trains on its recorded tokens)
    and ``judgments.task_id, rollout_id, step, judge_idx, score``. Steps:

    1. per task acc (:func:`task_accuracy`); a task is dropped if it is ``pending`` and not in
       ``accepted_pending`` (a rewritten task enters training only once accepted, spec §1), or if
       its acc lies outside ``cfg.policy_acc_band`` (inclusive);
    2. ``reward`` per step (:func:`step_scores`, :func:`integrated_rewards`);
    3. ``advantage`` by :func:`group_normalize` per (task, step index), singleton groups raw;
    4. rows with ``advantage == 0`` are dropped.

    Returns the ``policy_samples`` artifact frame (schema-validated) and counts:
    ``tasks_total, tasks_pending_not_accepted, tasks_out_of_band, tasks_kept`` and
    ``rows_total, rows_pending_not_accepted, rows_out_of_band, rows_zero_advantage, rows_kept``
    (rows = agent steps).

    Example:
        >>> r = pl.DataFrame({"task_id": ["a", "a"], "pending": [False] * 2, "rollout_id": [0, 1],
        ...     "step": [0, 0], "outcome": [1.0, -1.0], "prompt": ["p"] * 2, "response": ["x", "y"]})
        >>> j = pl.DataFrame({"task_id": ["a"], "rollout_id": [0], "step": [0], "judge_idx": [0],
        ...     "score": [1.0]})
        >>> policy_samples(r, j, cfg=RewardConfig(), m=1)[0]["advantage"].to_list()
        [1.0, -1.0]
    """
    where = "policy_samples"
    require_columns(rollouts, [*STEP_KEYS, "outcome", "prompt", "response"], frame="rollouts", where=where)
    _check_judgments(judgments, m=m, where=where)
    tasks = _task_filter(
        _task_table(rollouts, where=where),
        band=cfg.policy_acc_band,
        extra_band=None,
        accepted_pending=accepted_pending,
    )
    stats = task_stats(tasks, rows_col="n_steps")
    steps = played(rollouts).filter(pl.col("step").is_not_null())
    steps = steps.select(
        iteration_column(steps), *STEP_KEYS, "outcome", "prompt", images_column(steps), "response",
        *token_columns(steps),
    )  # fmt: skip
    index = _StepIndex.build(tasks, steps)
    judged = index.encode(judgments.select(*STEP_KEYS, "judge_idx", "score"), kept_only=True)
    agg = _judgment_agg(judged, m=m, where=where)
    scored = (
        index.encode(steps, kept_only=True)
        .join(agg.lazy().select(_SID, "score_sum"), on=_SID, how="left")
        .with_columns(mean_score=pl.col("score_sum").fill_null(0.0) / m)
        .with_columns(reward=_integrated_expr(cfg).cast(pl.Float64))
        # Joins do not keep row order; the z-score's float sums below run in row order, so without a
        # fixed order the advantages differed in the last bits between calls.
        .sort(_SID)
        .collect()
    )
    # One group per (task, step index): the task's rollouts that reach step k (spec §2.1).
    normed = group_normalize(scored, value="reward", by=[_GID], step_col=None, eps=cfg.std_eps)
    # _sid orders like (task_id, rollout_id, step): task codes follow the sorted task table.
    samples = normed.filter(pl.col("advantage") != 0.0).sort(_SID)
    stats["rows_zero_advantage"] = normed.height - samples.height
    stats["rows_kept"] = samples.height
    columns = [
        "iteration", *STEP_KEYS, "reward", "advantage", "prompt", "images", "response", "prompt_ids", "response_ids"
    ]  # fmt: skip
    return validate("policy_samples", samples.select(columns), where=where), stats


def reward_samples(
    rollouts: pl.DataFrame,
    judgments: pl.DataFrame,
    *,
    cfg: RewardConfig,
    m: int,
    accepted_pending: Collection[str] = (),
    nested_in_policy_band: bool = True,
) -> tuple[pl.DataFrame, dict[str, float]]:
    """Reward-model training rows from the consistency reward (spec §2.2).

    Reads ``rollouts.iteration, task_id, pending, rollout_id, step, outcome`` and
    ``judgments.task_id, rollout_id, step, judge_idx, score, prompt, response``. Per judgment j of
    step i: ``raw_ij = R_i · S_ij`` where ``R_i`` is the *unnormalised* integrated reward of the
    step with the same ``lam`` / ``use_outcome`` / ``use_stepwise`` switches as the policy reward
    (reference: ``O + mean_l S_il``), and ``raw_ij = cfg.invalid_judgment_penalty`` (-2) when
    ``S_ij`` is null (unparsable). The advantage is the z-score across the judgment rows present
    for the step (population std); a step whose judgments all have the same raw value, or that has
    one judgment, gives 0. Rows with ``advantage == 0`` are dropped.

    Task filter: pending tasks not in ``accepted_pending`` are dropped; acc must lie in
    ``cfg.rm_acc_band`` and, when ``nested_in_policy_band`` (AlfWorld, where the RM filter sits
    inside the policy filter), also in ``cfg.policy_acc_band``.

    With ``cfg.rm_outcome_balance`` (ours, not the paper's) the kept rows' advantages are then scaled by
    :func:`outcome_balance_weights`, so that rows of won and of lost episodes carry equal total weight.

    Returns the ``reward_samples`` frame (schema-validated, ``reward`` = raw_ij) and counts
    ``tasks_*`` as in :func:`policy_samples` plus ``rows_*`` over judgment rows and
    ``judgments_invalid`` (null scores among kept tasks) and ``judgments_without_step``; the balance of
    the rows that enter the update: ``rows_kept_won`` / ``rows_kept_lost`` (by episode outcome),
    ``rows_kept_good_step`` / ``rows_kept_bad_step`` (by the engine's label, :func:`~rla_core.algo.judging.
    optimal_steps`, when the rollouts carry expert actions), ``steps_judged`` (judged steps of kept tasks),
    ``steps_unanimous`` (those whose judgments all earn the same raw reward, so every row has advantage 0)
    and ``unanimous_step_share``; and with the balance on, ``balance_weight_won`` / ``balance_weight_lost``.

    Example:
        >>> r = pl.DataFrame({"task_id": ["a", "a"], "pending": [False] * 2, "rollout_id": [0, 1],
        ...     "step": [0, 0], "outcome": [1.0, -1.0]})
        >>> j = pl.DataFrame({"task_id": ["a"] * 2, "rollout_id": [0] * 2, "step": [0] * 2,
        ...     "judge_idx": [0, 1], "score": [1.0, None], "prompt": ["p"] * 2, "response": ["+", "?"]})
        >>> cfg = RewardConfig(policy_acc_band={"low": 0, "high": 1}, rm_acc_band={"low": 0, "high": 1})
        >>> reward_samples(r, j, cfg=cfg, m=2)[0]["advantage"].to_list()
        [1.0, -1.0]
    """
    where = "reward_samples"
    require_columns(judgments, ["prompt", "response"], frame="judgments", where=where)
    _check_judgments(judgments, m=m, where=where)
    tasks = _task_filter(
        _task_table(rollouts, where=where),
        band=cfg.rm_acc_band,
        extra_band=cfg.policy_acc_band if nested_in_policy_band else None,
        accepted_pending=accepted_pending,
    )
    steps = played(rollouts).filter(pl.col("step").is_not_null())
    labelled = has_expert_labels(steps)
    good = optimal_steps(steps) if labelled else pl.Series("good", [None] * steps.height, dtype=pl.Boolean)
    steps = steps.select(iteration_column(steps), *STEP_KEYS, "outcome").with_columns(good)
    index = _StepIndex.build(tasks, steps)
    # Row counts per drop reason (rows = judgments of tasks present in the rollouts).
    counts = judgments.select(
        **{
            name: pl.col("task_id").is_in(ids.implode()).sum()
            for name, ids in (
                ("rows_total", tasks["task_id"]),
                (
                    "rows_pending_not_accepted",
                    tasks.filter(pl.col("drop_reason") == "pending_not_accepted")["task_id"],
                ),
                ("rows_out_of_band", tasks.filter(pl.col("drop_reason") == "out_of_band")["task_id"]),
                ("rows_kept_tasks", tasks.filter(pl.col("drop_reason").is_null())["task_id"]),
            )
        }
    ).row(0, named=True)
    stats: dict[str, float] = dict(task_stats(tasks.with_columns(n_rows=pl.lit(0)), rows_col="n_rows"))
    stats.update({k: int(v) for k, v in counts.items() if k != "rows_kept_tasks"})
    judged = index.encode(
        judgments.select(*STEP_KEYS, "judge_idx", "score", "prompt", images_column(judgments), "response"),
        kept_only=True,
    )

    # Per step: R_i and the mean / population std of its judgments' raw rewards. A step's raw values
    # take at most three values (R, -R, penalty), so the moments follow from the counts, which avoids
    # a second grouping of the judgment rows (the z-score is the one group_normalize computes).
    p = cfg.invalid_judgment_penalty
    agg = _judgment_agg(judged, m=m, where=where)
    step_tab = (
        index.encode(steps, kept_only=True)
        .join(agg.lazy(), on=_SID, how="inner")
        .with_columns(mean_score=pl.col("score_sum") / m)
        .with_columns(step_reward=_integrated_expr(cfg).cast(pl.Float64))
        .with_columns(n_neg=pl.col("n_valid") - pl.col("n_pos"), n_inv=pl.col("n_rows") - pl.col("n_valid"))
    )
    r, n = pl.col("step_reward"), pl.col("n_rows")
    mean = (r * (pl.col("n_pos") - pl.col("n_neg")) + p * pl.col("n_inv")) / n
    step_tab = step_tab.with_columns(_mean=mean).with_columns(
        _std=(
            (
                pl.col("n_pos") * (r - pl.col("_mean")) ** 2
                + pl.col("n_neg") * (-r - pl.col("_mean")) ** 2
                + pl.col("n_inv") * (p - pl.col("_mean")) ** 2
            )
            / n
        ).sqrt()
    )
    rows = (
        judged.join(
            step_tab.select(_SID, "iteration", "outcome", "good", "step_reward", "_mean", "_std", "n_rows"),
            on=_SID,
            how="inner",
        )
        .with_columns(
            reward=pl.when(pl.col("score").is_null())
            .then(pl.lit(p))
            .otherwise(pl.col("step_reward") * pl.col("score"))
            .cast(pl.Float64)
        )
        .with_columns(
            advantage=pl.when((pl.col("n_rows") == 1) | (pl.col("_std") <= cfg.std_eps))
            .then(pl.lit(0.0))
            .otherwise((pl.col("reward") - pl.col("_mean")) / pl.col("_std"))
            .cast(pl.Float64)
        )
        .collect()
    )
    # Judgments whose step is missing from the rollouts (other tasks were counted above).
    stats["judgments_without_step"] = (
        judgments.height - stats["rows_total"] + int(counts["rows_kept_tasks"]) - rows.height
    )
    stats["judgments_invalid"] = int(rows["score"].null_count())
    samples = rows.filter(pl.col("advantage") != 0.0).sort(_SID, "judge_idx")
    stats["rows_zero_advantage"] = rows.height - samples.height
    stats["rows_kept"] = samples.height
    stats |= _balance_stats(rows, samples, labelled=labelled)
    if cfg.rm_outcome_balance:
        weights = outcome_balance_weights(samples["outcome"])
        samples = samples.with_columns(advantage=pl.col("advantage") * weights)
        for name, sign in (("balance_weight_won", 1.0), ("balance_weight_lost", -1.0)):
            of_outcome = weights.filter(samples["outcome"] * sign > 0).to_list()
            stats[name] = of_outcome[0] if of_outcome else 1.0
    columns = ["iteration", *STEP_KEYS, "judge_idx", "reward", "advantage", "prompt", "images", "response"]
    return validate("reward_samples", samples.select(columns), where=where), stats


def _balance_stats(rows: pl.DataFrame, samples: pl.DataFrame, *, labelled: bool) -> dict[str, float]:
    """What the judge's update is made of: kept rows by outcome (and by the engine's label), and how many
    judged steps gave no row at all because their judgments all earned the same raw reward."""
    per_step = rows.group_by(_SID).agg(unanimous=(pl.col("advantage") == 0.0).all())
    judged, unanimous = per_step.height, int(per_step["unanimous"].sum())
    stats: dict[str, float] = {
        "rows_kept_won": int((samples["outcome"] > 0).sum()),
        "rows_kept_lost": int((samples["outcome"] < 0).sum()),
        "steps_judged": judged,
        "steps_unanimous": unanimous,
    }
    if judged:
        stats["unanimous_step_share"] = unanimous / judged
    if labelled:
        stats["rows_kept_good_step"] = int(samples["good"].sum())
        stats["rows_kept_bad_step"] = int((~samples["good"]).sum())
    return stats


def outcome_balance_weights(outcome: pl.Series) -> pl.Series:
    """Per reward-model row: the weight that gives won and lost episodes equal total weight (ours).

    ``reward.rm_outcome_balance`` (docs/method.md#balancing-the-judges-rows-by-outcome). With ``N`` rows in
    all, ``N_won`` of won and ``N_lost`` of lost episodes, a row of outcome ``o`` gets ``N / (2 · N_o)``: each
    outcome's rows then weigh ``N / 2`` together, and the total weight stays ``N``. When only one outcome is
    present there is nothing to balance and every weight is 1. The caller multiplies the rows' advantages by
    it: the policy-gradient term of the update is reweighted, its KL term is not.

    Example: outcomes [+1, -1, -1, -1] → N = 4, N_won = 1, N_lost = 3 → weights [2, 2/3, 2/3, 2/3];
    won 2 = lost 3 · 2/3 = 2.
        >>> [round(w, 4) for w in outcome_balance_weights(pl.Series([1.0, -1.0, -1.0, -1.0])).to_list()]
        [2.0, 0.6667, 0.6667, 0.6667]
    """
    n = outcome.len()
    won = int((outcome > 0).sum())
    lost = n - won
    if won == 0 or lost == 0:
        return pl.Series("weight", [1.0] * n, dtype=pl.Float64)
    return pl.Series(
        "weight", [n / (2 * won) if o > 0 else n / (2 * lost) for o in outcome.to_list()], dtype=pl.Float64
    )
