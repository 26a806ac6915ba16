"""OSWorld adaptation (spec §3.3): switch to another evaluator key of the task's template, or add/remove hints.

The paper's environment model rewrites ``current_task`` into a single-key JSON whose key must be in
``task_template``; it may change the evaluator key or the hint strength, never invent a task or an
evaluator. :class:`OsworldRewriter` is the parametric (CPU) version of that edit, over our tasks' ``hints``:

* easier: one hint more on the same key, then the previous (easier) template key;
* harder: one hint less on the same key, then the next (harder) template key.

:func:`check_osworld_candidate` is the static check: the candidate is a valid task (:func:`check_task`); it is
the root task with only ``current_task`` changed (same id, set-up, template, evaluators, hints: nothing
invented); its key is a template key and its instruction is that key's template plus its own first hints;
it differs from the parent and moves in the goal's direction by :func:`difficulty`. The engine check
(:class:`SolutionCheck`) plays the new key's scripted solution on a desktop when the task has one; a task
without solutions is checked statically only (as the paper's OSWorld rewrites are: JSON and key checks).

The accept rule is the shared one (``rla_core.algo.adaptation.accept_variant``): ``new_acc > 0`` — which is
OSWorld's extra "reject when after_acc == 0" — and the goal's band.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from rla_core.envs.osworld.tasks import (
    check_task,
    current_key,
    difficulty,
    hint_count,
    with_variant,
)
from rla_core.envs.rewriter import Candidate, Goal, RewriteRequest
from rla_core.errors import EnvironmentSpecError


def _canonical(spec: dict[str, Any]) -> str:
    return json.dumps(spec["current_task"], sort_keys=True, ensure_ascii=False)


class OsworldRewriter:
    """Parametric rewriter over evaluator keys and hints (deterministic; ``seed`` unused)."""

    def propose(self, request: RewriteRequest, *, k: int, seed: int) -> list[Candidate]:
        """Up to ``k`` distinct candidates in preference order (see the module docstring)."""
        del seed
        parent = request.parent_spec
        keys = list(parent["task_template"])
        key = current_key(parent)
        rank, hints = keys.index(key), hint_count(parent) or 0

        def n_hints(k_: str) -> int:
            return len(parent.get("hints", {}).get(k_, []))

        options: list[tuple[str, int]] = []
        if request.goal is Goal.EASIER:
            if hints < n_hints(key):
                options.append((key, hints + 1))
            if rank > 0:
                prev = keys[rank - 1]
                options += [(prev, min(hints, n_hints(prev))), (prev, min(hints + 1, n_hints(prev)))]
        else:
            if hints > 0:
                options.append((key, hints - 1))
            if rank + 1 < len(keys):
                nxt = keys[rank + 1]
                options += [(nxt, min(hints, n_hints(nxt))), (nxt, max(0, min(hints, n_hints(nxt)) - 1))]
        out: list[Candidate] = []
        for k_, h in options:
            spec = with_variant(parent, k_, h)
            if spec["current_task"] != parent["current_task"] and all(c.spec != spec for c in out):
                out.append(Candidate(spec=spec, raw=_canonical(spec)))
        if not out:
            bound = (
                "hardest key without hints" if request.goal is Goal.HARDER else "easiest key with all hints"
            )
            out.append(Candidate(spec=None, raw=_canonical(parent), reason=f"already the task's {bound}"))
        return out[:k]


def check_osworld_candidate(spec: dict[str, Any], request: RewriteRequest) -> str | None:
    """Static checks of a candidate (module docstring); None when they pass, else the first reason."""
    try:
        check_task(spec)
    except EnvironmentSpecError as exc:
        return str(exc)
    root, parent = request.root_spec, request.parent_spec
    changed = sorted(k for k in set(spec) | set(root) if k != "current_task" and spec.get(k) != root.get(k))
    if changed:
        return f"off-anchor: the rewrite changed {changed} of the root task; only current_task may change"
    key = current_key(spec)
    if hint_count(spec) is None:
        return f"the instruction of key {key!r} is not its template followed by the task's own hints"
    if spec["current_task"] == parent["current_task"]:
        return "identical to the parent task"
    before, after = difficulty(parent), difficulty(spec)
    if (after <= before) if request.goal is Goal.HARDER else (after >= before):
        return f"not {request.goal.value} than the parent: difficulty {before} -> {after}"
    return None


class SolutionCheck:
    """The engine check of a rewrite: the new key's scripted solution (with all its hints) wins on a desktop.

    ``open_env`` starts the desktops only when a candidate needs them (a step with no rewrite starts none).
    """

    def __init__(self, open_env: Callable[[], Any]) -> None:
        self._open_env = open_env
        self._env: Any = None

    def check_winnable(self, spec: dict[str, Any]) -> str | None:
        key = current_key(spec)
        solution = spec.get("solutions", {}).get(key)
        if not solution:
            return None  # no scripted solution: static checks only (module docstring)
        if self._env is None:
            self._env = self._open_env()
        full = with_variant(spec, key, len(spec.get("hints", {}).get(key, [])))
        episode = self._env.play(full, solution)
        try:
            if episode.won:
                return None
            return episode.failure or f"the scripted solution of key {key!r} scored {episode.score}"
        finally:
            episode.close()

    def close(self) -> None:
        if self._env is not None:
            env, self._env = self._env, None
            env.close()
