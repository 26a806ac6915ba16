"""Artifact schemas: every Parquet artifact's columns and dtypes, declared once (docs/architecture.md#the-design-contract).

Each schema carries a version. :func:`validate` checks a frame on write and on read and raises a
:class:`~rla_core.errors.SchemaError` listing missing, extra and mistyped columns. Every column is
documented in ``docs/data-dictionary.md`` (a test checks that the two agree).

Example:
    >>> import polars as pl
    >>> df = empty_frame("eval")
    >>> validate("eval", df).columns[:3]
    ['iteration', 'task_id', 'rollout_id']
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import polars as pl

from rla_core.errors import SchemaError

SCHEMA_VERSION = 1


class ErrorKind(StrEnum):
    """Why an execution did (not) pass; the ``error_kind`` column of 'executions'."""

    OK = "ok"
    WRONG_ANSWER = "wrong_answer"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    MEMORY = "memory"
    OUTPUT_LIMIT = "output_limit"
    INVALID_TEST = "invalid_test"
    INVALID_PROGRAM = "invalid_program"
    # pid 1 of the sandbox reported no status: killed from inside (the program can do that) or from outside.
    # It may be ours or the program's; it stays the program's failure, or a program could escape its -1.
    NO_STATUS = "no_status"
    # The sandbox died under the program: bwrap's monitor was killed by a signal nobody in the sandbox can
    # send (not our wall-time kill). Ours: the run is replayed (``run_many(retries=)``), never the program's.
    SANDBOX = "sandbox"


# Instances (not classes) so the column maps are typed ``dict[str, pl.DataType]``; they compare equal to
# the classes (``pl.String() == pl.String``).
Str: pl.DataType = pl.String()
I64: pl.DataType = pl.Int64()
F64: pl.DataType = pl.Float64()
Bool: pl.DataType = pl.Boolean()
# Image file references of a prompt, in order (null: a text prompt), relative to the rollout stage's files.
Images: pl.DataType = pl.List(pl.String())
# Token ids as the model saw or generated them, and a log-probability per generated token (null: a turn
# played as text; the recording endpoint records them for the turns it answers).
TokenIds: pl.DataType = pl.List(pl.Int64())
TokenLogprobs: pl.DataType = pl.List(pl.Float64())


@dataclass(frozen=True)
class ArtifactSchema:
    """Name, version and ordered columns of one artifact."""

    name: str
    version: int
    columns: dict[str, pl.DataType]
    description: str
    # Columns added after the artifact first shipped: a frame written before has none of them, and reading
    # it (ArtifactStore.read_frame) fills them with nulls, so old runs stay readable and resumable.
    added: tuple[str, ...] = ()

    @property
    def polars_schema(self) -> pl.Schema:
        return pl.Schema(self.columns)

    def fingerprint(self) -> str:
        """A short string that changes whenever a column name or dtype changes."""
        return ";".join(f"{name}:{dtype}" for name, dtype in self.columns.items()) + f"@v{self.version}"


def _schema(
    name: str, description: str, columns: dict[str, pl.DataType], *, added: tuple[str, ...] = ()
) -> ArtifactSchema:
    assert set(added) <= set(columns), f"{name}: added columns must be columns"
    return ArtifactSchema(
        name=name, version=SCHEMA_VERSION, columns=columns, description=description, added=added
    )


# What a model is trained on, the same in the policy's and the reward model's rows: the row's reward and
# advantage, and the prompt (text and images) with the response.
_TRAINING_ROW: dict[str, pl.DataType] = {
    "reward": F64,
    "advantage": F64,
    "prompt": Str,
    "images": Images,
    "response": Str,
}

SCHEMAS: dict[str, ArtifactSchema] = {
    s.name: s
    for s in [
        _schema(
            "tasks",
            "Task registry events: one row per task-version status change (append-only).",
            {
                "event_id": I64,
                "iteration": I64,
                "event": Str,
                "slot_id": Str,
                "task_id": Str,
                "version": I64,
                "root_task_id": Str,
                "parent_task_id": Str,
                "status": Str,
                "env": Str,
                "spec": Str,
                "goal": Str,
                "prev_acc": F64,
                "acc_after": F64,
                "created_iter": I64,
                "accepted_iter": I64,
            },
        ),
        _schema(
            "rollouts",
            "Policy rollouts: one row per agent step (coding: one step per program).",
            {
                "iteration": I64,
                "task_id": Str,
                "slot_id": Str,
                "pending": Bool,
                "rollout_id": I64,
                "step": I64,
                "prompt": Str,
                "images": Images,
                "response": Str,
                "action": Str,
                "action_valid": Bool,
                "invalid_reason": Str,
                "next_observation": Str,
                "expert_actions": Str,
                "observation_ref": Str,
                "next_observation_ref": Str,
                "done": Bool,
                "outcome": F64,
                "score": F64,
                "prompt_tokens": I64,
                "response_tokens": I64,
                "status": Str,
                "error_kind": Str,
                "error_message": Str,
                "attempt": I64,
                "prompt_ids": TokenIds,
                "response_ids": TokenIds,
                "response_logprobs": TokenLogprobs,
            },
            added=(
                *("next_observation_ref", "images", "status", "error_kind", "error_message", "attempt"),
                *("prompt_ids", "response_ids", "response_logprobs"),
            ),
        ),
        _schema(
            "judgments",
            "Reward-model step judgments: one row per (step, judge sample).",
            {
                "iteration": I64,
                "task_id": Str,
                "rollout_id": I64,
                "step": I64,
                "judge_idx": I64,
                "prompt": Str,
                "images": Images,
                "response": Str,
                "score": F64,
                "parse_error": Str,
            },
            added=("images",),
        ),
        _schema(
            "unit_tests",
            "Reward-model-written unit tests (coding): one row per generated test.",
            {
                "iteration": I64,
                "task_id": Str,
                "test_idx": I64,
                "prompt": Str,
                "response": Str,
                "test_input": Str,
                "test_output": Str,
                "valid": Bool,
                "invalid_reason": Str,
            },
        ),
        _schema(
            "executions",
            "Sandboxed executions (coding): one row per program × test.",
            {
                "iteration": I64,
                "task_id": Str,
                "rollout_id": I64,
                "test_kind": Str,
                "test_idx": I64,
                "passed": Bool,
                "error_kind": Str,
                "wall_s": F64,
            },
        ),
        _schema(
            "policy_samples",
            "Kept policy training rows with their reward and advantage.",
            {
                "iteration": I64,
                "task_id": Str,
                "rollout_id": I64,
                "step": I64,
                **_TRAINING_ROW,
                "prompt_ids": TokenIds,
                "response_ids": TokenIds,
            },
            added=("images", "prompt_ids", "response_ids"),
        ),
        _schema(
            "reward_samples",
            "Kept reward-model training rows (coding: step holds test_idx).",
            {
                "iteration": I64,
                "task_id": Str,
                "rollout_id": I64,
                "step": I64,
                "judge_idx": I64,
                **_TRAINING_ROW,
            },
            added=("images",),
        ),
        _schema(
            "decisions",
            "Pending task variants decided this iteration.",
            {
                "iteration": I64,
                "slot_id": Str,
                "task_id": Str,
                "goal": Str,
                "prev_acc": F64,
                "acc_after": F64,
                "accepted": Bool,
                "reason": Str,
            },
        ),
        _schema(
            "proposals",
            "Environment-model rewrite candidates, valid or not, with the reason for rejection.",
            {
                "iteration": I64,
                "slot_id": Str,
                "parent_task_id": Str,
                "candidate_idx": I64,
                "goal": Str,
                "prev_acc": F64,
                "critic_feedback": Str,
                "spec": Str,
                "valid": Bool,
                "invalid_reason": Str,
                "chosen": Bool,
            },
        ),
        _schema(
            "eval",
            "Held-out evaluation episodes.",
            {
                "iteration": I64,
                "task_id": Str,
                "rollout_id": I64,
                "outcome": F64,
                "steps": I64,
                "invalid_actions": I64,
                "status": Str,
                "error_kind": Str,
                "error_message": Str,
                "attempt": I64,
            },
            added=("status", "error_kind", "error_message", "attempt"),
        ),
        _schema(
            "env_errors",
            "Failed attempts of episodes whose environment failed (retried or not): one row per attempt.",
            {
                "iteration": I64,
                "task_id": Str,
                "rollout_id": I64,
                "attempt": I64,
                "steps": I64,
                "error_kind": Str,
                "error_message": Str,
            },
        ),
        _schema(
            "osworld_files",
            "The OSWorld file cache's manifest (`<cache_dir>/manifest.parquet`): one row per cached file.",
            {
                "task_id": Str,
                "field": Str,
                "url": Str,
                "source": Str,
                "path": Str,
                "bytes": I64,
                "sha256": Str,
            },
        ),
        _schema(
            "study",
            "An ablation study (`rla study`): every metric of every run, one row per run, iteration and metric.",
            {
                "study": Str,
                "arm": Str,
                "seed": I64,
                "run_id": Str,
                "iteration": I64,
                "metric": Str,
                "value": F64,
            },
        ),
        _schema(
            "study_walltime",
            "Wall time of `rla study` sittings: one row per run and sitting, each its own file, never rewritten.",
            {
                "study": Str,
                "run_id": Str,
                "sitting": Str,
                "ended_at": Str,
                "wall_s": F64,
            },
        ),
        _schema(
            "study_pairs",
            "Arms of a study compared paired by seed: per pair of arms, one row per compared quantity.",
            {
                "study": Str,
                "arm": Str,
                "baseline": Str,
                "quantity": Str,
                "method": Str,
                "decides": Bool,
                "seeds": I64,
                "n": I64,
                "mean": F64,
                "low": F64,
                "high": F64,
                "verdict": Str,
                "per_seed": Str,
            },
        ),
    ]
}


def get_schema(name: str) -> ArtifactSchema:
    """The schema of artifact ``name``; a SchemaError lists the known names otherwise."""
    try:
        return SCHEMAS[name]
    except KeyError:
        raise SchemaError(f"unknown artifact '{name}'; known artifacts: {', '.join(SCHEMAS)}") from None


def empty_frame(name: str) -> pl.DataFrame:
    """An empty frame with exactly the artifact's columns and dtypes."""
    return pl.DataFrame(schema=get_schema(name).polars_schema)


def iteration_column(frame: pl.DataFrame) -> pl.Expr:
    """``frame``'s column ``iteration``, or nulls when it has none (frames written before it was added)."""
    return pl.col("iteration") if "iteration" in frame.columns else pl.lit(None, pl.Int64).alias("iteration")


def images_column(frame: pl.DataFrame) -> pl.Expr:
    """``frame``'s prompt images (column ``images``), or nulls when it has none (text prompts)."""
    return pl.col("images") if "images" in frame.columns else pl.lit(None, Images).alias("images")


def token_columns(frame: pl.DataFrame) -> list[pl.Expr]:
    """``frame``'s recorded token ids (``prompt_ids``, ``response_ids``), or nulls when it has none (turns
    played as text)."""
    return [
        pl.col(name) if name in frame.columns else pl.lit(None, TokenIds).alias(name)
        for name in ("prompt_ids", "response_ids")
    ]


def validate(name: str, df: pl.DataFrame, *, where: str = "", written_before: bool = False) -> pl.DataFrame:
    """Check ``df`` against artifact ``name`` and return it with columns in schema order.

    Raises SchemaError listing every missing, extra and mistyped column. Integer and float columns
    whose dtype differs only in width (Int32 vs Int64) are cast; a Null-typed column (all values
    null, or lists of nulls only) is cast to the declared dtype. ``written_before`` (a stored frame being read): the schema's
    ``added`` columns it lacks are filled with nulls.
    """
    schema = get_schema(name)
    if written_before:  # a stored frame may predate the schema's added columns: they read as nulls
        df = df.with_columns(
            pl.lit(None, schema.columns[c]).alias(c) for c in schema.added if c not in df.columns
        )
    missing = [c for c in schema.columns if c not in df.columns]
    extra = [c for c in df.columns if c not in schema.columns]
    mistyped: list[str] = []
    casts: list[pl.Expr] = []
    for col, want in schema.columns.items():
        if col not in df.columns:
            continue
        have = df.schema[col]
        if have == want:
            continue
        all_null = have == pl.Null or have == pl.List(pl.Null)  # a column (or list column) of nulls only
        if all_null or (have.is_numeric() and want.is_numeric() and (have.is_integer() or want.is_float())):
            casts.append(pl.col(col).cast(want))
        else:
            mistyped.append(f"{col} is {have}, expected {want}")
    if missing or extra or mistyped:
        parts = []
        if missing:
            parts.append(f"missing columns {missing}")
        if extra:
            parts.append(f"extra columns {extra}")
        if mistyped:
            parts.append(f"mistyped columns [{'; '.join(mistyped)}]")
        loc = f" at {where}" if where else ""
        raise SchemaError(
            f"artifact '{name}'{loc} does not match schema v{schema.version}: " + ", ".join(parts)
        )
    if casts:
        df = df.with_columns(casts)
    return df.select(list(schema.columns))
