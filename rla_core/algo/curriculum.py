"""The task-set side of one RL step (spec §1, §3): which tasks to play, pending decisions, rewrite requests.

Pure functions over the task registry and per-task accuracies; the rules themselves are
:func:`rla_core.algo.adaptation.goal_from_acc` and :func:`~rla_core.algo.adaptation.accept_variant`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple

import polars as pl

from rla_core.algo.adaptation import Goal, accept_variant, goal_from_acc
from rla_core.algo.registry import Status, TaskRegistry
from rla_core.config import AdaptationConfig
from rla_core.schemas import validate


class PlayTask(NamedTuple):
    """A task to roll out: its id, its slot, whether it is a pending rewrite, and its spec.

    The one task type of the rollout runner (:func:`rla_core.envs.rollout.run_rollouts`), the
    settings adapters and the curriculum.
    """

    task_id: str
    slot_id: str
    pending: bool
    spec: dict[str, Any]


def tasks_to_play(registry: TaskRegistry, *, k: int, seed: int) -> list[PlayTask]:
    """``k`` random active tasks from slots without a pending rewrite, plus every pending task (spec §1).

    Reads the registry snapshot (task_id, slot_id, status, spec). Ordered by slot_id, actives first.

    Example: with slots a, b, c active and a pending rewrite of b, ``k=1`` plays one of {a, c} plus b's
    pending variant.
    """
    active = registry.sample_active(k, seed=seed)
    pending = registry.pending().sort("slot_id")
    out = [
        PlayTask(r["task_id"], r["slot_id"], False, json.loads(r["spec"]))
        for r in active.iter_rows(named=True)
    ]
    out += [
        PlayTask(r["task_id"], r["slot_id"], True, json.loads(r["spec"]))
        for r in pending.iter_rows(named=True)
    ]
    return out


NO_ROLLOUTS = "no_rollouts"  # decisions.reason of a pending task whose step produced no rollouts


def decide_pending(
    registry: TaskRegistry, acc: pl.DataFrame, *, cfg: AdaptationConfig, iteration: int
) -> tuple[TaskRegistry, pl.DataFrame]:
    """Accept or reject every pending task of the registry this step (spec §3); artifact 'decisions'.

    Reads ``acc`` (task_id, acc) of this step's rollouts. Every pending task is played in the step
    after it was proposed (:func:`tasks_to_play`), so each one is decided now. A pending task with
    no rollouts in ``acc`` (its episodes produced no rows) is rejected with reason
    :data:`NO_ROLLOUTS` and a null ``acc_after``: kept pending it would block its slot for good
    (no rewrite of a slot with a pending task), and without an accuracy it cannot be accepted. The
    reference has no such case (every variant is played). A pending task whose rollouts all ended in
    ``env_error`` (in ``acc`` with a null acc, :func:`~rla_core.algo.labels.task_accuracy`) is not
    decided: our machinery failed, not the variant; it stays pending and is played again next step.
    Returns the updated registry (accept: pending → active, old active → retired; reject: pending →
    rejected) and one 'decisions' row per decided task with the rule's reason.
    """
    acc_by_task = dict(zip(acc["task_id"].to_list(), acc["acc"].to_list(), strict=True))
    rows: list[dict[str, Any]] = []
    for row in registry.pending().sort("slot_id").iter_rows(named=True):
        if row["task_id"] in acc_by_task and acc_by_task[row["task_id"]] is None:
            continue  # every episode was env_error: no accuracy, no decision
        new_acc = acc_by_task.get(row["task_id"])
        if new_acc is None:
            registry = registry.reject(row["task_id"], acc_after=None, iteration=iteration)
            rows.append(
                {
                    "iteration": iteration, "slot_id": row["slot_id"], "task_id": row["task_id"],
                    "goal": row["goal"], "prev_acc": float(row["prev_acc"]), "acc_after": None,
                    "accepted": False, "reason": NO_ROLLOUTS,
                }
            )  # fmt: skip
            continue
        decision = accept_variant(float(new_acc), float(row["prev_acc"]), row["goal"], cfg=cfg)
        if decision.accepted:
            registry = registry.accept(row["task_id"], acc_after=float(new_acc), iteration=iteration)
        else:
            registry = registry.reject(row["task_id"], acc_after=float(new_acc), iteration=iteration)
        rows.append(
            {
                "iteration": iteration,
                "slot_id": row["slot_id"],
                "task_id": row["task_id"],
                "goal": row["goal"],
                "prev_acc": float(row["prev_acc"]),
                "acc_after": float(new_acc),
                "accepted": decision.accepted,
                "reason": decision.reason,
            }
        )
    frame = pl.DataFrame(rows, schema=_DECISIONS_SCHEMA)
    return registry, validate("decisions", frame, where="decide_pending")


_DECISIONS_SCHEMA = {
    "iteration": pl.Int64,
    "slot_id": pl.String,
    "task_id": pl.String,
    "goal": pl.String,
    "prev_acc": pl.Float64,
    "acc_after": pl.Float64,
    "accepted": pl.Boolean,
    "reason": pl.String,
}


def accepted_pending(decisions: pl.DataFrame) -> set[str]:
    """Task ids of pending variants accepted this step: only their rollouts enter training (spec §2.1)."""
    return set(decisions.filter(pl.col("accepted"))["task_id"].to_list())


@dataclass(frozen=True)
class RewriteTarget:
    """An active task played this step whose accuracy asks for a harder or easier variant."""

    slot_id: str
    task_id: str
    goal: Goal
    prev_acc: float
    spec: dict[str, Any]
    root_spec: dict[str, Any]


def rewrite_targets(
    registry: TaskRegistry, acc: pl.DataFrame, *, cfg: AdaptationConfig, iteration: int
) -> list[RewriteTarget]:
    """Active tasks played this step with acc ≥ α_high (harder) or ≤ α_low (easier), spec §3.

    Pending tasks and slots that still have a pending rewrite are never rewritten, and neither is a
    variant accepted at ``iteration`` (this step): it was played as a pending variant, and the
    reference rewrites only tasks that were already in the dataset when the step began. Reads
    ``acc`` (task_id, acc) and the registry snapshot.
    """
    snap = registry.snapshot()
    busy = set(snap.filter(pl.col("status") == Status.PENDING.value)["slot_id"].to_list())
    active = snap.filter((pl.col("status") == Status.ACTIVE.value) & (pl.col("accepted_iter") < iteration))
    # A task whose episodes were all env_error has no accuracy: nothing asks for a rewrite of it.
    measured = acc.select("task_id", "acc").filter(pl.col("acc").is_not_null())
    joined = active.join(measured, on="task_id", how="inner").sort("slot_id")
    out: list[RewriteTarget] = []
    for row in joined.iter_rows(named=True):
        goal = goal_from_acc(float(row["acc"]), cfg=cfg)
        if goal is Goal.KEEP or row["slot_id"] in busy:
            continue
        out.append(
            RewriteTarget(
                slot_id=row["slot_id"],
                task_id=row["task_id"],
                goal=goal,
                prev_acc=float(row["acc"]),
                spec=json.loads(row["spec"]),
                root_spec=registry.root_spec(row["slot_id"]),
            )
        )
    return out


def register_chosen(
    registry: TaskRegistry, proposals: pl.DataFrame, *, iteration: int
) -> tuple[TaskRegistry, list[str]]:
    """Make each slot's chosen proposal its pending task (at most one per slot); returns the new task ids.

    Reads 'proposals' (slot_id, chosen, spec, goal, prev_acc).
    """
    new_ids: list[str] = []
    for row in proposals.filter(pl.col("chosen")).sort("slot_id").iter_rows(named=True):
        registry, task_id = registry.propose(
            row["slot_id"], json.loads(row["spec"]), row["goal"], float(row["prev_acc"]), iteration
        )
        new_ids.append(task_id)
    return registry, new_ids
