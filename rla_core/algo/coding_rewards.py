"""Coding rewards: policy reward from GT unit tests, RM reward for generated unit tests, metrics.

Spec §2.3-2.5. A "code" is one sampled program, keyed by ``(task_id, rollout_id)`` of the
``rollouts`` artifact (coding has one step per rollout). The ``executions`` artifact holds one row
per program × test with ``test_kind`` ``gt`` (the task's own tests) or ``generated`` (the reward
model's tests, ``test_idx`` matching the ``unit_tests`` artifact).

* policy: ``reward = GT pass ratio``, ``advantage = z-score over the task's codes`` (population
  std, 0 when the std is 0), tasks filtered on the pass-all accuracy, zero advantages kept;
* reward model: per generated test k of a task with at least one GT code (a code passing all GT
  tests), the three-case raw reward of §2.4, z-scored over the task's tests, no rows dropped;
  an invalid test (``unit_tests.valid`` false) fails every code;
* metrics: ``acc``, ``syn_ut_acc``, ``perfect_ut_rate`` (§2.5).

Example:
    >>> import polars as pl
    >>> from rla_core.config import RewardConfig
    >>> r = pl.DataFrame({"task_id": ["t", "t"], "pending": [False, False], "rollout_id": [0, 1],
    ...                   "step": [0, 0], "prompt": ["p", "p"], "response": ["a", "b"]})
    >>> ex = pl.DataFrame({"task_id": ["t"] * 4, "rollout_id": [0, 0, 1, 1], "test_kind": ["gt"] * 4,
    ...                    "test_idx": [0, 1, 0, 1], "passed": [True, True, True, False]})
    >>> cfg = RewardConfig(policy_acc_band={"low": 0.2, "high": 0.8})
    >>> coding_policy_samples(r, ex, cfg=cfg)[0]["advantage"].to_list()
    [1.0, -1.0]
"""

from __future__ import annotations

from collections.abc import Collection

import polars as pl

from rla_core.algo.episodes import EpisodeStatus, played
from rla_core.algo.labels import DROP_REASONS, band_expr, group_normalize, require_columns, task_stats
from rla_core.config import Band, RewardConfig
from rla_core.errors import ArtifactError
from rla_core.schemas import ErrorKind, images_column, iteration_column, token_columns, validate

GT = "gt"
GENERATED = "generated"
SANDBOX_ERROR = ErrorKind.SANDBOX.value  # executions.error_kind of a run whose sandbox died (ours)
# Reference `llm_rl_reward.py` L146-157: a response with at least (limit - 5) tokens is truncated.
TRUNCATION_MARGIN_TOKENS = 5


def code_table(
    rollouts: pl.DataFrame, executions: pl.DataFrame, *, truncation_limit: int | None = None
) -> pl.DataFrame:
    """Per code: GT pass ratio, pass-all flag and GT-code flag (spec §2.3).

    Reads ``rollouts.task_id, rollout_id`` (plus ``pending``, and ``response_tokens`` when
    ``truncation_limit`` is set) and ``executions.task_id, rollout_id, test_kind, test_idx,
    passed``. Writes ``task_id, rollout_id, pending, n_gt_tests, gt_passed, pass_all, truncated,
    pass_ratio, gt_code``, sorted by the keys. ``n_gt_tests`` is the number of distinct GT tests
    of the task; a code without an execution row for a test counts as failing it. With the
    truncation penalty (off by default, as shipped), a code with ``response_tokens >= limit - 5``
    gets ``pass_ratio = 0`` and is not a GT code; ``pass_all`` (and so acc) ignores the penalty,
    as in the reference. A task without any GT test raises ArtifactError.

    Example:
        >>> r = pl.DataFrame({"task_id": ["t"], "rollout_id": [0]})
        >>> ex = pl.DataFrame({"task_id": ["t", "t"], "rollout_id": [0, 0], "test_kind": ["gt", "gt"],
        ...                    "test_idx": [0, 1], "passed": [True, False]})
        >>> code_table(r, ex)["pass_ratio"].to_list()
        [0.5]
    """
    where = "code_table"
    require_columns(rollouts, ["task_id", "rollout_id"], frame="rollouts", where=where)
    rollouts = played(rollouts)  # a program whose sandbox died is not the policy's: no row here
    require_columns(
        executions,
        ["task_id", "rollout_id", "test_kind", "test_idx", "passed"],
        frame="executions",
        where=where,
    )
    kinds = set(executions["test_kind"].unique().to_list())
    if not kinds <= {GT, GENERATED}:
        raise ArtifactError(
            f"{where}: executions.test_kind has values {sorted(kinds - {GT, GENERATED})}; "
            f"only '{GT}' and '{GENERATED}' are defined (docs/architecture.md#the-design-contract)"
        )
    pending = pl.col("pending").any() if "pending" in rollouts.columns else pl.lit(False)
    aggs = [pending.alias("pending")]
    if truncation_limit is not None:
        require_columns(rollouts, ["response_tokens"], frame="rollouts", where=where)
        aggs.append(
            (pl.col("response_tokens").max() >= truncation_limit - TRUNCATION_MARGIN_TOKENS).alias(
                "truncated"
            )
        )
    codes = rollouts.group_by("task_id", "rollout_id").agg(*aggs)
    if truncation_limit is None:
        codes = codes.with_columns(truncated=pl.lit(False))
    codes = codes.with_columns(pl.col("truncated").fill_null(False))
    gt = executions.filter(pl.col("test_kind") == GT)
    n_tests = gt.group_by("task_id").agg(n_gt_tests=pl.col("test_idx").n_unique().cast(pl.Int64))
    passed = (
        gt.filter(pl.col("passed"))
        .group_by("task_id", "rollout_id")
        .agg(gt_passed=pl.col("test_idx").n_unique().cast(pl.Int64))
    )
    table = codes.join(n_tests, on="task_id", how="left").join(
        passed, on=["task_id", "rollout_id"], how="left"
    )
    no_tests = table.filter(pl.col("n_gt_tests").is_null())
    if no_tests.height:
        ids = sorted(no_tests["task_id"].unique().to_list())
        raise ArtifactError(
            f"{where}: tasks {ids[:5]} have no GT executions; every coding task needs GT tests "
            "(run the execute stage on the task's tests, spec §1.1 step 3)"
        )
    table = table.with_columns(pl.col("gt_passed").fill_null(0)).with_columns(
        pass_all=pl.col("gt_passed") == pl.col("n_gt_tests"),
        pass_ratio=pl.when(pl.col("truncated"))
        .then(pl.lit(0.0))
        .otherwise(pl.col("gt_passed") / pl.col("n_gt_tests"))
        .cast(pl.Float64),
    )
    table = table.with_columns(gt_code=pl.col("pass_all") & ~pl.col("truncated"))
    return table.select(
        "task_id",
        "rollout_id",
        "pending",
        "n_gt_tests",
        "gt_passed",
        "pass_all",
        "truncated",
        "pass_ratio",
        "gt_code",
    ).sort("task_id", "rollout_id")


def score_programs(rollouts: pl.DataFrame, executions: pl.DataFrame) -> pl.DataFrame:
    """The coding rollouts with their outcome, score and observation filled in from the GT runs (spec §0, §2.3).

    Reads a 'rollouts' frame (one row per program, ``outcome`` / ``score`` / ``next_observation``
    ignored) and the GT rows of ``executions``. Writes the 'rollouts' artifact with ``outcome = +1``
    iff the program passes every GT test of its task (else -1), ``score`` = its GT pass ratio and
    ``next_observation = "passed k/n GT tests"``; row order is kept. The rollout stage calls it, so
    the reward rule lives here and not in the coding adapter.
    """
    codes = code_table(rollouts, executions).select(
        "task_id", "rollout_id", "pass_all", "pass_ratio", "n_gt_tests", "gt_passed"
    )
    # A GT run whose sandbox died even after its retries (error_kind 'sandbox'): the program's outcome is
    # unknown, so the rollout is env_error (null outcome and score), never a failure of the policy's.
    broken = (
        executions.filter((pl.col("test_kind") == GT) & (pl.col("error_kind") == SANDBOX_ERROR))
        .group_by("task_id", "rollout_id")
        .agg(_broken=pl.format("the sandbox died under GT test {}", pl.col("test_idx").min()))
    )
    err = pl.col("_broken").is_not_null()
    scored = (
        rollouts.with_row_index("_row")
        .drop("outcome", "score", "next_observation", "status", "error_kind", "error_message", strict=False)
        .join(codes, on=["task_id", "rollout_id"], how="left")
        .join(broken, on=["task_id", "rollout_id"], how="left")
        .sort("_row")
        .with_columns(
            outcome=pl.when(err).then(None).when(pl.col("pass_all")).then(1.0).otherwise(-1.0),
            score=pl.when(err).then(None).otherwise(pl.col("pass_ratio")),
            next_observation=pl.format("passed {}/{} GT tests", pl.col("gt_passed"), pl.col("n_gt_tests")),
            status=pl.when(err)
            .then(pl.lit(EpisodeStatus.ENV_ERROR.value))
            .when(pl.col("pass_all"))
            .then(pl.lit(EpisodeStatus.WON.value))
            .otherwise(pl.lit(EpisodeStatus.LOST.value)),
            error_kind=pl.when(err).then(pl.lit(SANDBOX_ERROR)),
            error_message=pl.col("_broken"),
        )
    )
    return validate("rollouts", scored.select(rollouts.columns), where="score_programs")


def _tasks(codes: pl.DataFrame) -> pl.DataFrame:
    return (
        codes.group_by("task_id")
        .agg(
            n_codes=pl.len(),
            n_pass_all=pl.col("pass_all").sum(),
            n_gt_codes=pl.col("gt_code").sum(),
            pending=pl.col("pending").any(),
        )
        # Integer counts divided once, so 1/5 is exactly the double 0.2.
        .with_columns(acc=pl.col("n_pass_all") / pl.col("n_codes"))
        .sort("task_id")
    )


def _filter_reason(
    tasks: pl.DataFrame, *, band: Band, accepted_pending: Collection[str], need_gt_code: bool
) -> pl.DataFrame:
    accepted = pl.Series("accepted", list(accepted_pending), dtype=pl.String).implode()
    rules: list[tuple[pl.Expr, str]] = [
        (pl.col("pending") & ~pl.col("task_id").is_in(accepted), "pending_not_accepted"),
        (~band_expr("acc", band), "out_of_band"),
    ]
    if need_gt_code:
        rules.append((pl.col("n_gt_codes") == 0, "no_gt_code"))
    # The first matching rule names the reason (same precedence as the list).
    reason: pl.Expr = pl.lit(None, dtype=pl.String)
    for cond, label in reversed(rules):
        reason = pl.when(cond).then(pl.lit(label)).otherwise(reason)
    return tasks.with_columns(drop_reason=reason)


def coding_policy_samples(
    rollouts: pl.DataFrame,
    executions: pl.DataFrame,
    *,
    cfg: RewardConfig,
    accepted_pending: Collection[str] = (),
    truncation_limit: int | None = None,
) -> tuple[pl.DataFrame, dict[str, int]]:
    """Policy rows for coding: GT pass ratio, z-scored over the task's codes (spec §2.3).

    Reads ``rollouts.iteration, task_id, pending, rollout_id, step, prompt, response`` and the GT
    rows of ``executions``. A task is dropped if pending and not in ``accepted_pending``, or if its
    pass-all acc lies outside ``cfg.policy_acc_band`` (coding preset: [0.2, 0.8], inclusive).
    ``reward = pass_ratio``; ``advantage = (reward - mean) / pop_std`` over the task's codes, 0 when
    std ≤ ``cfg.std_eps``. Zero-advantage rows are kept (all codes of a kept task are written).

    Returns the ``policy_samples`` frame and counts ``tasks_total, tasks_pending_not_accepted,
    tasks_out_of_band, tasks_kept, rows_total, rows_pending_not_accepted, rows_out_of_band,
    rows_kept, codes_truncated``.
    """
    where = "coding_policy_samples"
    require_columns(
        rollouts, ["task_id", "rollout_id", "step", "prompt", "response"], frame="rollouts", where=where
    )
    codes = code_table(rollouts, executions, truncation_limit=truncation_limit)
    tasks = _filter_reason(
        _tasks(codes), band=cfg.policy_acc_band, accepted_pending=accepted_pending, need_gt_code=False
    )
    stats = task_stats(tasks, rows_col="n_codes")
    stats["codes_truncated"] = int(codes["truncated"].sum())
    kept = tasks.filter(pl.col("drop_reason").is_null()).select("task_id")
    rows = (
        codes.join(kept, on="task_id", how="semi")
        .select("task_id", "rollout_id", reward="pass_ratio")
        .sort("task_id", "rollout_id")  # the z-score's float sums run in row order: fix it
    )
    rows = group_normalize(
        rows, value="reward", by=["task_id"], step_col=None, eps=cfg.std_eps, keep_singleton_raw=False
    )
    text = rollouts.select(
        iteration_column(rollouts),
        "task_id",
        "rollout_id",
        "step",
        "prompt",
        images_column(rollouts),
        "response",
        *token_columns(rollouts),
    )
    samples = rows.join(text, on=["task_id", "rollout_id"], how="inner").sort("task_id", "rollout_id", "step")
    stats["rows_kept"] = samples.height
    return validate("policy_samples", samples, where=where), stats


def _ut_table(
    codes: pl.DataFrame, executions: pl.DataFrame, unit_tests: pl.DataFrame, *, gt_col: str
) -> pl.DataFrame:
    """Per generated test: counts of GT / non-GT codes that pass it. Invalid tests fail every code.

    A test with a run whose sandbox died even after its retries (``error_kind`` 'sandbox') is left out:
    whether that code passes it is unknown, and counting the run as a failure would move the test's
    three-case reward (docs/environment-errors.md). ``sandbox_died`` keeps the count of those tests.
    """
    died = pl.col("error_kind") == SANDBOX_ERROR if "error_kind" in executions.columns else pl.lit(False)
    generated = executions.filter(pl.col("test_kind") == GENERATED).select(
        "task_id", "rollout_id", "test_idx", pl.col("passed").alias("exec_passed"), died.alias("died")
    )
    matrix = (
        codes.select("task_id", "rollout_id", is_gt=pl.col(gt_col))
        .join(unit_tests.select("task_id", "test_idx", "valid"), on="task_id", how="inner")
        .join(generated, on=["task_id", "rollout_id", "test_idx"], how="left")
        .with_columns(ut_passed=pl.col("valid").fill_null(False) & pl.col("exec_passed").fill_null(False))
    )
    return (
        matrix.group_by("task_id", "test_idx")
        .agg(
            n_gt=pl.col("is_gt").sum().cast(pl.Int64),
            gt_pass=(pl.col("is_gt") & pl.col("ut_passed")).sum().cast(pl.Int64),
            n_non_gt=(~pl.col("is_gt")).sum().cast(pl.Int64),
            non_gt_pass=(~pl.col("is_gt") & pl.col("ut_passed")).sum().cast(pl.Int64),
            sandbox_died=pl.col("died").fill_null(False).any(),
        )
        .with_columns(
            gt_ut=(pl.col("n_gt") > 0) & (pl.col("gt_pass") == pl.col("n_gt")),
            non_gt_fail=pl.col("n_non_gt") - pl.col("non_gt_pass"),
        )
        .sort("task_id", "test_idx")
    )


def coding_reward_samples(
    rollouts: pl.DataFrame,
    executions: pl.DataFrame,
    unit_tests: pl.DataFrame,
    *,
    cfg: RewardConfig,
    accepted_pending: Collection[str] = (),
    truncation_limit: int | None = None,
) -> tuple[pl.DataFrame, dict[str, int]]:
    """Reward-model rows for coding: one per generated unit test (spec §2.4).

    Reads ``rollouts`` and ``executions`` as :func:`code_table` and ``unit_tests.iteration,
    task_id, test_idx, valid, prompt, response``. Per task with at least one GT code:

    * no non-GT codes: ``r_k = +1`` if test k is a GT-UT (every GT code passes it) else ``-1``;
    * else a GT-UT: ``r_k = #non-GT codes that fail k``; a wrong test: ``r_k = -#non-GT codes
      that pass k``;

    an invalid test fails every code (so it is never a GT-UT, and scores 0 when non-GT codes
    exist). A test with a run whose sandbox died even after its retries (``executions.error_kind``
    'sandbox') has no reward: whether that code passes it is unknown, so it is left out before the
    z-score (counted in ``rows_sandbox_died``). ``advantage`` = z-score of r over the task's other tests
    (0 when std ≤ ``cfg.std_eps``); no other rows are dropped. Tasks dropped: pending and not accepted; pass-all acc outside
    ``cfg.rm_acc_band`` (coding default [0.2, 0.8], the policy's band: in the reference the policy
    filter's ``continue`` skips the task's RM block, spec §2.4); no GT code.

    Output rows follow the ``reward_samples`` schema with ``step = test_idx`` and null
    ``rollout_id`` / ``judge_idx`` (a test is not tied to one rollout). Counts: ``tasks_*`` and
    ``rows_*`` (rows = unit tests) for ``pending_not_accepted``, ``out_of_band``, ``no_gt_code``, and
    ``rows_sandbox_died``.
    """
    where = "coding_reward_samples"
    require_columns(
        unit_tests, ["task_id", "test_idx", "valid", "prompt", "response"], frame="unit_tests", where=where
    )
    codes = code_table(rollouts, executions, truncation_limit=truncation_limit)
    per_task_tests = unit_tests.group_by("task_id").agg(n_tests=pl.len())
    tasks = (
        _filter_reason(
            _tasks(codes), band=cfg.rm_acc_band, accepted_pending=accepted_pending, need_gt_code=True
        )
        .join(per_task_tests, on="task_id", how="left")
        .with_columns(pl.col("n_tests").fill_null(0))
    )
    stats = task_stats(tasks, rows_col="n_tests", reasons=(*DROP_REASONS, "no_gt_code"))
    kept = tasks.filter(pl.col("drop_reason").is_null()).select("task_id")
    uts = _ut_table(codes.join(kept, on="task_id", how="semi"), executions, unit_tests, gt_col="gt_code")
    stats["rows_sandbox_died"] = int(uts["sandbox_died"].sum())
    uts = uts.filter(~pl.col("sandbox_died")).with_columns(
        reward=pl.when(pl.col("n_non_gt") == 0)
        .then(pl.when(pl.col("gt_ut")).then(pl.lit(1.0)).otherwise(pl.lit(-1.0)))
        .when(pl.col("gt_ut"))
        .then(pl.col("non_gt_fail").cast(pl.Float64))
        .otherwise(-pl.col("non_gt_pass").cast(pl.Float64))
    )
    uts = group_normalize(
        uts, value="reward", by=["task_id"], step_col=None, eps=cfg.std_eps, keep_singleton_raw=False
    )
    text = unit_tests.select(
        iteration_column(unit_tests), "task_id", "test_idx", "prompt", images_column(unit_tests), "response"
    )
    samples = (
        uts.join(text, on=["task_id", "test_idx"], how="inner")
        .select(
            "iteration",
            "task_id",
            pl.lit(None, dtype=pl.Int64).alias("rollout_id"),
            pl.col("test_idx").alias("step"),
            pl.lit(None, dtype=pl.Int64).alias("judge_idx"),
            "reward",
            "advantage",
            "prompt",
            "images",
            "response",
        )
        .sort("task_id", "step")
    )
    stats["rows_kept"] = samples.height
    return validate("reward_samples", samples, where=where), stats


def coding_metrics(
    rollouts: pl.DataFrame, executions: pl.DataFrame, unit_tests: pl.DataFrame
) -> dict[str, float | None]:
    """Coding metrics of spec §2.5 (reference ``llm_rl_reward.py`` L114-202), over all tasks given.

    * ``acc``: share of all codes passing every GT test;
    * ``syn_ut_acc``: generated tests passed by every GT code / generated tests, over tasks with
      at least one GT code;
    * ``perfect_ut_rate``: tests passed by every GT code and failed by every non-GT code / tests,
      over tasks with both GT and non-GT codes.

    A metric whose denominator is empty is ``None`` (no signal), never a made-up 0. Tests with a run whose
    sandbox died are left out of both (as in :func:`coding_reward_samples`). GT codes here
    are pass-all codes (the truncation penalty does not apply to metrics).

    Example:
        >>> r = pl.DataFrame({"task_id": ["t"], "rollout_id": [0]})
        >>> ex = pl.DataFrame({"task_id": ["t"], "rollout_id": [0], "test_kind": ["gt"],
        ...                    "test_idx": [0], "passed": [True]})
        >>> ut = pl.DataFrame({"task_id": ["t"], "test_idx": [0], "valid": [False]})
        >>> coding_metrics(r, ex, ut)
        {'acc': 1.0, 'syn_ut_acc': 0.0, 'perfect_ut_rate': None}
    """
    require_columns(unit_tests, ["task_id", "test_idx", "valid"], frame="unit_tests", where="coding_metrics")
    codes = code_table(rollouts, executions)
    tasks = _tasks(codes)
    acc = float(codes["pass_all"].sum()) / codes.height if codes.height else None
    uts = (
        _ut_table(codes, executions, unit_tests, gt_col="pass_all")
        .filter(~pl.col("sandbox_died"))
        .join(tasks.select("task_id", "n_codes", "n_gt_codes"), on="task_id", how="inner")
    )
    with_gt = uts.filter(pl.col("n_gt_codes") > 0)
    syn_ut_acc = float(with_gt["gt_ut"].sum()) / with_gt.height if with_gt.height else None
    both = uts.filter((pl.col("n_gt_codes") > 0) & (pl.col("n_gt_codes") < pl.col("n_codes")))
    perfect = both.filter(pl.col("gt_ut") & (pl.col("non_gt_pass") == 0))
    perfect_ut_rate = float(perfect.height) / both.height if both.height else None
    return {"acc": acc, "syn_ut_acc": syn_ut_acc, "perfect_ut_rate": perfect_ut_rate}
