"""Critic feedback for task rewriting (spec §3.2 AlfWorld critic feedback).

For every failed rollout of a task: the judge's high-risk steps (indices where all m judgments are
-1) and, when an environment model is configured, its <= 2-sentence failure summary written from the
task, the numbered trajectory and those indices (prompt in spec §5). Without an environment model the
feedback stays structured (docs/architecture.md#cross-module-interfaces) and the parametric rewriter reads it.

Example:
    >>> fb = critic_feedback(rollouts, judgments, max_steps=8)  # doctest: +SKIP
    >>> fb["t0"].failed[0].high_risk_steps  # doctest: +SKIP
    (2, 3)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import polars as pl

from rla_core.algo.judging import step_votes
from rla_core.algo.parsing import last_boxed
from rla_core.algo.seeds import derive_seed
from rla_core.envs.prompts import render_failure_summary_prompt
from rla_core.schemas import validate

if TYPE_CHECKING:
    from rla_core.config import SamplingConfig
    from rla_core.models.generator import Generator


@dataclass(frozen=True)
class FailedRollout:
    """One failed rollout's critique: all-negative steps, their actions, and an optional summary."""

    rollout_id: int
    steps: int
    high_risk_steps: tuple[int, ...]
    high_risk_actions: tuple[str, ...]
    summary: str | None
    summary_error: str | None


@dataclass(frozen=True)
class CriticFeedback:
    """The critique of one task: its failed rollouts."""

    task_id: str
    failed: tuple[FailedRollout, ...]

    def summaries(self) -> list[str]:
        """The failure summaries that were produced (for the LLM rewrite prompt)."""
        return [f.summary for f in self.failed if f.summary]

    def navigation_share(self) -> float | None:
        """Share of high-risk actions that are moves (``go ...``); None without high-risk steps."""
        actions = [a for f in self.failed for a in f.high_risk_actions]
        if not actions:
            return None
        return sum(a.startswith("go ") for a in actions) / len(actions)

    def to_json(self) -> str:
        """Canonical JSON (the proposals artifact's ``critic_feedback`` column)."""
        return json.dumps(asdict(self), sort_keys=True)


def _instruction_of(prompt: str) -> str:
    for line in prompt.splitlines():
        if line.startswith("Task: "):
            return line.removeprefix("Task: ")
    return ""


def critic_feedback(
    rollouts: pl.DataFrame,
    judgments: pl.DataFrame,
    *,
    max_steps: int,
    summarizer: Generator | None = None,
    sampling: SamplingConfig | None = None,
    seed: int = 0,
) -> dict[str, CriticFeedback]:
    """Critic feedback per task that has failed rollouts (spec §3.2 steps 1-2).

    Reads 'rollouts' task_id, rollout_id, step, prompt, action, next_observation, outcome and
    'judgments' task_id, rollout_id, step, score. With ``summarizer`` (the environment model) and
    ``sampling``, one generate call writes a summary per failed rollout, parsed from its last
    ``\\boxed{}`` (no box: summary None, ``summary_error`` says so).
    """
    rollouts = validate("rollouts", rollouts, where="critic_feedback input")
    failed = rollouts.filter(pl.col("outcome") < 0).sort(["task_id", "rollout_id", "step"])
    votes = step_votes(failed, judgments) if judgments.height else None
    risky: dict[tuple[str, int], list[int]] = {}
    if votes is not None:
        for row in votes.filter(pl.col("all_negative")).iter_rows(named=True):
            risky.setdefault((row["task_id"], row["rollout_id"]), []).append(row["step"])
    keys: list[tuple[str, int]] = []
    prompts: list[str] = []
    parts: dict[tuple[str, int], tuple[int, list[int], list[str]]] = {}
    for (task_id, rollout_id), group in failed.group_by(["task_id", "rollout_id"], maintain_order=True):
        key = (str(task_id), int(str(rollout_id)))
        actions = group["action"].to_list()
        steps = sorted(risky.get(key, []))
        parts[key] = (group.height, steps, [actions[s] for s in steps])
        keys.append(key)
        prompts.append(
            render_failure_summary_prompt(
                instruction=_instruction_of(group["prompt"][0]),
                trajectory=list(zip(actions, group["next_observation"].to_list(), strict=True)),
                high_risk_steps=steps,
                max_steps=max_steps,
            )
        )
    summaries: dict[tuple[str, int], tuple[str | None, str | None]] = {}
    if summarizer is not None and sampling is not None and prompts:
        outputs = summarizer.generate(
            [summarizer.format_prompt(p) for p in prompts],
            n=1,
            sampling=sampling,
            seed=derive_seed(seed, "summaries"),
        )
        for key, out in zip(keys, outputs, strict=True):
            boxed = last_boxed(out[0].text)
            text = boxed.strip() if boxed is not None else ""
            summaries[key] = (text, None) if text else (None, "no non-empty \\boxed{} in the summary output")
    result: dict[str, list[FailedRollout]] = {}
    for key in keys:
        n_steps, risk, risk_actions = parts[key]
        summary, error = summaries.get(key, (None, None))
        result.setdefault(key[0], []).append(
            FailedRollout(
                rollout_id=key[1],
                steps=n_steps,
                high_risk_steps=tuple(risk),
                high_risk_actions=tuple(risk_actions),
                summary=summary,
                summary_error=error,
            )
        )
    return {task_id: CriticFeedback(task_id=task_id, failed=tuple(f)) for task_id, f in result.items()}
