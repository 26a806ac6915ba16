"""Harder/easier MiniWoB++ task variants from critic feedback, validated by loading and solving them.

:class:`GuiRewriter` implements the shared ``TaskRewriter`` protocol (rla_core.envs.rewriter) for
specs ``{task, seed, hint_level}`` (spec §3.3 spirit):

* easier: a targeted hint first — level 2 (the expert's next action at every step) when the judge's
  high-risk steps show failures after the first step, else one level more — then the easier sibling
  task of the family (same seed, no hint);
* harder: one hint level less, then the harder sibling (same seed and hint level).

:func:`rewrite_gui_tasks` checks every candidate (a valid spec in the ROOT task's family, then the one
rewrite rule over :data:`GUI_SPACE`: the root's seed kept, differs from the parent, moves in the goal's
direction by :func:`difficulty`; then the page loads and the scripted solver wins it) and writes the
'proposals' artifact; the first valid one is chosen.

Example:
    >>> req = RewriteRequest("s0", "t0", parent, parent, Goal.EASIER, prev_acc=0.0)  # doctest: +SKIP
    >>> rewrite_gui_tasks([req], rewriter=GuiRewriter(), env=env, k=3, iteration=1)  # doctest: +SKIP
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import polars as pl

from rla_core.algo.adaptation import VariantSpace
from rla_core.envs.base import canonical_spec
from rla_core.envs.miniwob.tasks import (
    FAMILIES,
    MAX_HINT_LEVEL,
    check_spec,
    difficulty,
    family_of,
)
from rla_core.envs.rewriter import Candidate, Goal, RewriteRequest, ValidatingEnvironment, rewrite_tasks
from rla_core.errors import EnvironmentSpecError


class GuiRewriter:
    """Parametric rewriter over hint level and sibling tasks (deterministic; ``seed`` unused)."""

    def propose(self, request: RewriteRequest, *, k: int, seed: int) -> list[Candidate]:
        """Up to ``k`` distinct candidates in preference order (see the module docstring)."""
        del seed
        parent = request.parent_spec
        family = family_of(parent["task"])
        members = FAMILIES[family] if family is not None else (parent["task"],)
        rank = members.index(parent["task"])
        hint = int(parent["hint_level"])
        specs: list[dict[str, Any]] = []
        if request.goal is Goal.EASIER:
            late = _fails_after_first_step(request)
            target = MAX_HINT_LEVEL if late else hint + 1
            if hint < MAX_HINT_LEVEL:
                specs.append({**parent, "hint_level": min(MAX_HINT_LEVEL, target)})
            if hint + 1 < MAX_HINT_LEVEL and not late:
                specs.append({**parent, "hint_level": MAX_HINT_LEVEL})
            if rank > 0:
                specs.append({**parent, "task": members[rank - 1], "hint_level": 0})
        else:
            if hint > 0:
                specs.append({**parent, "hint_level": hint - 1})
            if rank + 1 < len(members):
                specs.append({**parent, "task": members[rank + 1]})
                if hint > 0:
                    specs.append({**parent, "task": members[rank + 1], "hint_level": 0})
        out: list[Candidate] = []
        for spec in specs:
            if spec != parent and all(c.spec != spec for c in out):
                out.append(Candidate(spec=spec, raw=canonical_spec(spec)))
        if not out:
            bound = (
                "hardest task without hints"
                if request.goal is Goal.HARDER
                else "easiest task with full hints"
            )
            out.append(
                Candidate(spec=None, raw=canonical_spec(parent), reason=f"already the family's {bound}")
            )
        return out[:k]


def _fails_after_first_step(request: RewriteRequest) -> bool:
    """Whether the judge's all-negative steps (critic feedback) include steps after the first."""
    if request.feedback is None:
        return False
    return any(step > 0 for f in request.feedback.failed for step in f.high_risk_steps)


# A GUI rewrite changes the task (within the root's family) and the hint level; the seed (the page's
# instance) stays the root's; harder is a larger :func:`difficulty` (rank in the family, fewer hints).
GUI_SPACE = VariantSpace(changes=frozenset({"task", "hint_level"}), measure=difficulty)


def check_gui_candidate(
    spec: dict[str, Any], request: RewriteRequest, *, known_tasks: list[str]
) -> str | None:
    """Static checks of a candidate; None when they pass, else the reason (the first failure): a valid
    spec in the root task's family, then the rewrite rule over :data:`GUI_SPACE`."""
    try:
        check_spec(spec, known_tasks=known_tasks)
    except EnvironmentSpecError as exc:
        return str(exc)
    root = request.root_spec
    if family_of(spec["task"]) != family_of(root["task"]) or (
        family_of(root["task"]) is None and spec["task"] != root["task"]
    ):
        return f"off-anchor: task '{spec['task']}' is not in the family of the root task '{root['task']}'"
    return request.problem(spec, GUI_SPACE)


def rewrite_gui_tasks(
    requests: Sequence[RewriteRequest],
    *,
    rewriter: GuiRewriter,
    env: ValidatingEnvironment,
    known_tasks: list[str],
    k: int,
    iteration: int,
    seed: int = 0,
) -> pl.DataFrame:
    """Propose, validate and choose GUI rewrites; return the 'proposals' artifact (spec §3.2-3.3).

    The shared :func:`rla_core.envs.rewriter.rewrite_tasks` with the GUI's static check
    (:func:`check_gui_candidate`); the engine check (page loads, scripted solver wins) runs only on
    statically valid candidates.
    """
    return rewrite_tasks(
        requests,
        rewriter=rewriter,
        env=env,
        k=k,
        seed=seed,
        iteration=iteration,
        check=functools.partial(check_gui_candidate, known_tasks=known_tasks),
    )
