"""The task registry: an append-only event table of task versions per slot (spec §3; artifact 'tasks', docs/data-dictionary.md).

A *slot* is one seed task's lineage. Its version 0 is the seed (the root, the anchor of every
rewrite); each accepted rewrite becomes the slot's new active version and the old one is retired;
a rejected rewrite stays in the history. Every change is an event row (schema ``tasks``), so the
state at any iteration is a replay of the events up to it. :class:`TaskRegistry` is immutable:
every operation returns a new registry.

Statuses and transitions (event → status of the row's task)::

    seed    → active      (version 0)
    propose → pending     (at most one pending per slot; slot must exist)
    accept  → active      (pending only; the slot's previous active task gets a 'retire' event)
    reject  → rejected    (pending only)

Example:
    >>> reg = TaskRegistry.seed([("s0", "textworld", {"seed": 1})])
    >>> reg, tid = reg.propose("s0", {"seed": 2}, goal="harder", prev_acc=1.0, iteration=1)
    >>> reg = reg.accept(tid, acc_after=0.5, iteration=2)
    >>> reg.active()["task_id"].to_list()
    ['s0-v1']
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import polars as pl

from rla_core.errors import RegistryError
from rla_core.schemas import empty_frame, validate


class Status(StrEnum):
    """Status of a task version."""

    ACTIVE = "active"
    PENDING = "pending"
    REJECTED = "rejected"
    RETIRED = "retired"


class Event(StrEnum):
    """Kinds of registry events."""

    SEED = "seed"
    PROPOSE = "propose"
    ACCEPT = "accept"
    REJECT = "reject"
    RETIRE = "retire"


def task_id_for(slot_id: str, version: int) -> str:
    """Deterministic task id of a slot's version: ``f"{slot_id}-v{version}"``."""
    return f"{slot_id}-v{version}"


def _spec_json(spec: dict[str, Any]) -> str:
    try:
        return json.dumps(spec, sort_keys=True, ensure_ascii=False)
    except TypeError as exc:
        raise RegistryError(
            f"task spec is not JSON-serialisable ({exc}); specs must be plain JSON data"
        ) from exc


@dataclass(frozen=True)
class TaskRegistry:
    """Immutable wrapper around the ``tasks`` event frame (one row per event)."""

    events: pl.DataFrame

    # ------------------------------------------------------------------ construction
    @staticmethod
    def seed(tasks: Sequence[tuple[str, str, dict[str, Any]]], *, iteration: int = 0) -> TaskRegistry:
        """A registry with one active version-0 task per ``(slot_id, env, spec)``.

        Slot ids must be unique and non-empty.
        """
        slots = [slot for slot, _, _ in tasks]
        dupes = sorted({s for s in slots if slots.count(s) > 1})
        if dupes:
            raise RegistryError(
                f"duplicate slot ids {dupes} in the seed task list; give every seed task its own slot"
            )
        if any(not s for s in slots):
            raise RegistryError("an empty slot id in the seed task list; slot ids must be non-empty strings")
        rows = [
            {
                "event_id": i,
                "iteration": iteration,
                "event": Event.SEED.value,
                "slot_id": slot,
                "task_id": task_id_for(slot, 0),
                "version": 0,
                "root_task_id": task_id_for(slot, 0),
                "parent_task_id": None,
                "status": Status.ACTIVE.value,
                "env": env,
                "spec": _spec_json(spec),
                "goal": None,
                "prev_acc": None,
                "acc_after": None,
                "created_iter": iteration,
                "accepted_iter": iteration,
            }
            for i, (slot, env, spec) in enumerate(tasks)
        ]
        return TaskRegistry(_frame(rows))

    @staticmethod
    def from_events(events: pl.DataFrame) -> TaskRegistry:
        """Wrap a stored ``tasks`` artifact (validated against the schema)."""
        return TaskRegistry(validate("tasks", events, where="TaskRegistry.from_events").sort("event_id"))

    # ------------------------------------------------------------------ views
    def snapshot(self, at_iteration: int | None = None) -> pl.DataFrame:
        """Latest row (status) per task_id, over events up to ``at_iteration`` (all when None).

        Columns are the ``tasks`` schema's; sorted by slot_id, version.
        """
        ev = self.events if at_iteration is None else self.events.filter(pl.col("iteration") <= at_iteration)
        return ev.sort("event_id").group_by("task_id", maintain_order=True).last().sort("slot_id", "version")

    def active(self) -> pl.DataFrame:
        """The active task of every slot (one row per slot)."""
        return self.snapshot().filter(pl.col("status") == Status.ACTIVE.value)

    def pending(self) -> pl.DataFrame:
        """The pending rewrite of every slot that has one (at most one per slot)."""
        return self.snapshot().filter(pl.col("status") == Status.PENDING.value)

    def slots(self) -> list[str]:
        """All slot ids, sorted."""
        return sorted(self.events["slot_id"].unique().to_list())

    def history(self, slot_id: str) -> pl.DataFrame:
        """Every event of a slot, in order."""
        self._require_slot(slot_id)
        return self.events.filter(pl.col("slot_id") == slot_id).sort("event_id")

    def root_spec(self, slot_id: str) -> dict[str, Any]:
        """The spec of the slot's version 0 (the rewrite anchor, spec §3.1)."""
        root = self.history(slot_id).filter(pl.col("version") == 0)
        spec: dict[str, Any] = json.loads(root["spec"][0])
        return spec

    def task(self, task_id: str) -> dict[str, Any]:
        """The latest row of one task as a dict (``spec`` decoded)."""
        row = self.snapshot().filter(pl.col("task_id") == task_id)
        if row.height == 0:
            raise RegistryError(
                f"unknown task '{task_id}'; known tasks: {', '.join(self.snapshot()['task_id'])}"
            )
        out = row.row(0, named=True)
        out["spec"] = json.loads(out["spec"])
        return out

    def sample_active(self, k: int, seed: int) -> pl.DataFrame:
        """``k`` active tasks drawn without replacement from slots without a pending rewrite (spec §1).

        Deterministic for a given registry and seed. When fewer than ``k`` slots are eligible, all of
        them are returned. Rows are sorted by slot_id.
        """
        if k < 0:
            raise ValueError(f"k={k}; the number of tasks to sample must be >= 0")
        busy = set(self.pending()["slot_id"].to_list())
        eligible = self.active().filter(~pl.col("slot_id").is_in(sorted(busy)))
        slots = eligible["slot_id"].to_list()
        chosen = set(random.Random(seed).sample(slots, min(k, len(slots))))
        return eligible.filter(pl.col("slot_id").is_in(sorted(chosen)))

    # ------------------------------------------------------------------ transitions
    def propose(
        self, slot_id: str, spec: dict[str, Any], goal: str, prev_acc: float, iteration: int
    ) -> tuple[TaskRegistry, str]:
        """Add a pending rewrite of the slot's active task; returns the new registry and its task id.

        Raises RegistryError for an unknown slot or when the slot already has a pending rewrite.
        """
        self._require_slot(slot_id)
        snap = self.snapshot().filter(pl.col("slot_id") == slot_id)
        pend = snap.filter(pl.col("status") == Status.PENDING.value)
        if pend.height:
            raise RegistryError(
                f"slot '{slot_id}' already has pending task '{pend['task_id'][0]}'; accept or reject it "
                "before proposing another (at most one pending rewrite per slot, spec §3)"
            )
        active = snap.filter(pl.col("status") == Status.ACTIVE.value).row(0, named=True)
        version = _max_int(snap["version"]) + 1
        task_id = task_id_for(slot_id, version)
        row = {
            **active,
            "event": Event.PROPOSE.value,
            "iteration": iteration,
            "task_id": task_id,
            "version": version,
            "parent_task_id": active["task_id"],
            "status": Status.PENDING.value,
            "spec": _spec_json(spec),
            "goal": str(goal),
            "prev_acc": float(prev_acc),
            "acc_after": None,
            "created_iter": iteration,
            "accepted_iter": None,
        }
        return self._append([row]), task_id

    def accept(self, task_id: str, acc_after: float, iteration: int) -> TaskRegistry:
        """Pending → active; the slot's previous active task → retired."""
        row = self._require_status(task_id, Status.PENDING, "accept")
        old = (
            self.snapshot()
            .filter((pl.col("slot_id") == row["slot_id"]) & (pl.col("status") == Status.ACTIVE.value))
            .row(0, named=True)
        )
        retire = {**old, "event": Event.RETIRE.value, "iteration": iteration, "status": Status.RETIRED.value}
        accept = {
            **row,
            "event": Event.ACCEPT.value,
            "iteration": iteration,
            "status": Status.ACTIVE.value,
            "acc_after": float(acc_after),
            "accepted_iter": iteration,
        }
        return self._append([retire, accept])

    def reject(self, task_id: str, acc_after: float | None, iteration: int) -> TaskRegistry:
        """Pending → rejected (kept in the history); ``acc_after`` None when it was never measured."""
        row = self._require_status(task_id, Status.PENDING, "reject")
        reject = {
            **row,
            "event": Event.REJECT.value,
            "iteration": iteration,
            "status": Status.REJECTED.value,
            "acc_after": None if acc_after is None else float(acc_after),
        }
        return self._append([reject])

    # ------------------------------------------------------------------ helpers
    def _require_slot(self, slot_id: str) -> None:
        if self.events.filter(pl.col("slot_id") == slot_id).height == 0:
            raise RegistryError(f"unknown slot '{slot_id}'; known slots: {', '.join(self.slots())}")

    def _require_status(self, task_id: str, want: Status, action: str) -> dict[str, Any]:
        snap = self.snapshot()
        hit = snap.filter(pl.col("task_id") == task_id)
        if hit.height == 0:
            raise RegistryError(
                f"cannot {action} unknown task '{task_id}'; pending tasks: {self._pending_list()}"
            )
        row = hit.row(0, named=True)
        if row["status"] != want.value:
            raise RegistryError(
                f"cannot {action} task '{task_id}' of slot '{row['slot_id']}': its status is '{row['status']}', "
                f"only a '{want.value}' task can be {action}ed; pending tasks: {self._pending_list()}"
            )
        return row

    def _pending_list(self) -> str:
        ids = self.pending()["task_id"].to_list()
        return ", ".join(ids) if ids else "(none)"

    def _append(self, rows: list[dict[str, Any]]) -> TaskRegistry:
        start = _max_int(self.events["event_id"]) + 1
        for offset, row in enumerate(rows):
            row["event_id"] = start + offset
        return TaskRegistry(pl.concat([self.events, _frame(rows)], how="vertical"))


def _max_int(values: pl.Series) -> int:
    """Largest value of an integer column, -1 when empty."""
    present = [int(v) for v in values.drop_nulls().to_list()]
    return max(present) if present else -1


def _frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    base = empty_frame("tasks")
    if not rows:
        return base
    return validate("tasks", pl.DataFrame(rows, schema=base.schema))
