"""Small builders of real artifact frames for the algorithm tests."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from rla_core.schemas import validate


def rollouts(
    tasks: dict[str, list[tuple[float, int]]], *, pending: Iterable[str] = (), iteration: int = 1
) -> pl.DataFrame:
    """A 'rollouts' artifact: ``tasks[task_id] = [(outcome, n_steps) per rollout]``."""
    pend = set(pending)
    rows = []
    for task_id, runs in tasks.items():
        for rollout_id, (outcome, n_steps) in enumerate(runs):
            for step in range(n_steps):
                rows.append(
                    {
                        "iteration": iteration,
                        "task_id": task_id,
                        "slot_id": task_id.split("-")[0],
                        "pending": task_id in pend,
                        "rollout_id": rollout_id,
                        "step": step,
                        "prompt": f"prompt {task_id}/{rollout_id}/{step}",
                        "response": f"response {task_id}/{rollout_id}/{step}",
                        "action": "look",
                        "action_valid": True,
                        "invalid_reason": None,
                        "next_observation": "obs",
                        "expert_actions": "[]",
                        "observation_ref": None,
                        "next_observation_ref": None,
                        "done": step == n_steps - 1,
                        "outcome": outcome,
                        "score": None,
                        "prompt_tokens": 10,
                        "response_tokens": 5,
                        "status": "won" if outcome > 0 else "lost",
                        "error_kind": None,
                        "error_message": None,
                        "attempt": 0,
                    }
                )
    return validate("rollouts", pl.DataFrame(rows, schema=pl.Schema(_rollout_schema())))


def _rollout_schema() -> dict[str, pl.DataType]:
    from rla_core.schemas import get_schema

    return get_schema("rollouts").columns


def judgments(scores: dict[tuple[str, int, int], list[float | None]], *, iteration: int = 1) -> pl.DataFrame:
    """A 'judgments' artifact: ``scores[(task_id, rollout_id, step)] = [score per judge_idx]``."""
    from rla_core.schemas import get_schema

    rows = [
        {
            "iteration": iteration,
            "task_id": task_id,
            "rollout_id": rollout_id,
            "step": step,
            "judge_idx": j,
            "prompt": f"judge {task_id}/{rollout_id}/{step}",
            "response": f"verdict {j}",
            "score": s,
            "parse_error": None if s is not None else "no \\boxed{}",
        }
        for (task_id, rollout_id, step), values in scores.items()
        for j, s in enumerate(values)
    ]
    return validate("judgments", pl.DataFrame(rows, schema=pl.Schema(get_schema("judgments").columns)))


def uniform_judgments(
    r: pl.DataFrame, value: float | None, m: int, *, skip: Iterable[tuple[str, int, int]] = ()
) -> dict[tuple[str, int, int], list[float | None]]:
    """The same m scores for every step of ``r``."""
    skipped = set(skip)
    return {
        (t, ro, st): [value] * m
        for t, ro, st in r.select("task_id", "rollout_id", "step").iter_rows()
        if (t, ro, st) not in skipped
    }
