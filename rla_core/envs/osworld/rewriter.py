"""OSWorld adaptation (spec §3.3): switch to another evaluator key of the task's template, or add/remove hints.

The paper's environment model rewrites ``current_task`` into a single-key JSON whose key must be in
``task_template``; it may change the evaluator key or the hint strength, never invent a task or an
evaluator. Two rewriters make that edit (``adaptation.rewriter``):

* :class:`OsworldPrompts` (``llm``): the environment model answers the ``osworld_rewrite`` prompt,
  k = ``adaptation.candidates`` samples of one prompt per target; a sample is a candidate when its last
  JSON object has exactly one key, a key of ``task_template``, with a string value
  (:func:`parse_osworld_candidate`); the first valid one is chosen, and when none is,
  :func:`with_fallback` makes the parent itself the pending task, re-tested the next step (the paper's
  "old ``current_task`` as the temp task");
* :class:`OsworldRewriter` (``parametric``), deterministic, over our tasks' ``hints``: easier = one hint
  more on the same key, then the previous (easier) template key; harder = one hint less on the same key,
  then the next (harder) template key.

:func:`check_osworld_candidate` is the static check: the candidate is a valid task (:func:`check_task`) whose key
is a template key and whose instruction is that key's template plus its own first hints; then the one
rewrite rule over :data:`OSWORLD_SPACE`: it is the root task with only ``current_task`` changed (same id,
set-up, template, evaluators, hints: nothing invented), it differs from the parent and moves in the
goal's direction by :func:`difficulty`; last, a key other than the root's needs a scripted solution. The engine check (:class:`SolutionCheck`) then plays the key's scripted
solution on a desktop, before the candidate can be chosen. So a key switch is valid only when the new key's
solution wins; the root's own key without a solution (an official task's one ``default`` key) can only have
whole hint sentences added or removed, which keeps its instruction's meaning and its evaluator.
:func:`rewrite_demos` are the environment model's warm-start rows: the parametric rewriter's first valid
move for every variant and goal of the seed tasks, as the JSON answer the prompt asks for.

The accept rule is the shared one (``rla_core.algo.adaptation.accept_variant``): ``new_acc > 0`` — which is
OSWorld's extra "reject when after_acc == 0" — and the goal's band.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import polars as pl

from rla_core.algo.adaptation import VariantSpace
from rla_core.algo.parsing import parse_last_json_object
from rla_core.envs.demos import DEMO_COLUMNS
from rla_core.envs.osworld.tasks import check_task, current_key, difficulty, hint_count, with_variant
from rla_core.envs.prompts import load_template
from rla_core.envs.rewriter import Candidate, Goal, RewriteRequest
from rla_core.errors import EnvironmentSpecError
from rla_core.schemas import validate


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


# An OSWorld rewrite changes only ``current_task`` (the evaluator key and the hints it carries); harder is a
# larger :func:`difficulty` (the key's rank in the template, fewer hints).
OSWORLD_SPACE = VariantSpace(changes=frozenset({"current_task"}), measure=difficulty)


def check_osworld_candidate(spec: dict[str, Any], request: RewriteRequest) -> str | None:
    """Static checks of a candidate (module docstring); None when they pass, else the first reason."""
    try:
        check_task(spec)
    except EnvironmentSpecError as exc:
        return str(exc)
    key = current_key(spec)
    if hint_count(spec) is None:
        return f"the instruction of key {key!r} is not its template followed by the task's own hints"
    reason = request.problem(spec, OSWORLD_SPACE)
    if reason is not None:
        return reason
    root = request.root_spec
    if key != current_key(root) and not spec.get("solutions", {}).get(key):
        return (
            f"key {key!r} is not the root task's key {current_key(root)!r} and has no scripted solution to "
            "check that it still wins: only hints may change on this task"
        )
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


def rewrite_prompt(request: RewriteRequest) -> str:
    """The environment model's prompt: the root's variants and hints, the current task. The k samples of a
    request share it (the paper samples R times at T = 0.8 from one prompt)."""
    root = request.root_spec
    feedback = request.feedback.summaries() if request.feedback is not None else []
    return load_template("osworld_rewrite").substitute(
        template=json.dumps(root["task_template"], ensure_ascii=False),
        hints=json.dumps(root.get("hints", {}), ensure_ascii=False),
        current_task=json.dumps(request.parent_spec["current_task"], ensure_ascii=False),
        prev_acc=f"{request.prev_acc:.2f}",
        feedback=json.dumps(feedback) if feedback else "none",
        goal_word=request.goal.value.upper(),
    )


def answer(spec: dict[str, Any]) -> str:
    """The answer the prompt asks for: the task's ``current_task`` as one JSON object."""
    return json.dumps(spec["current_task"], ensure_ascii=False)


def parse_osworld_candidate(text: str, parent: dict[str, Any]) -> Candidate:
    """The spec's rule: the last JSON object of ``text`` with exactly one key, present in ``task_template``,
    whose value is a string, becomes ``parent``'s ``current_task``; anything else is an unparsable sample."""
    parsed = parse_last_json_object(text)
    if not parsed.valid or parsed.value is None:
        return Candidate(spec=None, raw=text, reason=f"unparsable: {parsed.reason}")
    obj = dict(parsed.value)
    if len(obj) != 1:
        return Candidate(
            spec=None, raw=text, reason=f"the answer has {len(obj)} keys; exactly one is allowed"
        )
    ((key, value),) = obj.items()
    if key not in parent["task_template"]:
        keys = sorted(parent["task_template"])
        return Candidate(spec=None, raw=text, reason=f"key {key!r} is not in task_template (keys: {keys})")
    if not isinstance(value, str):
        return Candidate(spec=None, raw=text, reason=f"the instruction of key {key!r} is not a string")
    return Candidate(spec={**parent, "current_task": {key: value}}, raw=text)


class OsworldPrompts:
    """The environment model rewrites ``current_task`` (module docstring): the prompts and parsing of a
    :class:`~rla_core.envs.rewriter.ModelRewriter`, batched like every model rewriter."""

    def prompts(self, request: RewriteRequest, *, k: int) -> list[str]:
        return [rewrite_prompt(request)] * k

    def candidates(self, request: RewriteRequest, texts: list[str]) -> list[Candidate]:
        return [parse_osworld_candidate(text, request.parent_spec) for text in texts]


def with_fallback(
    proposals: pl.DataFrame, requests: Sequence[RewriteRequest], *, iteration: int
) -> pl.DataFrame:
    """``proposals`` plus, for each request none of whose candidates was chosen, one chosen row whose spec
    is the parent task itself (candidate_idx after the samples, valid, no reason): the paper's fallback, the
    old ``current_task`` as the temporary task, re-tested the next step and decided by the shared rule."""
    chosen = set(proposals.filter(pl.col("chosen"))["slot_id"].to_list())
    rows = []
    for request in requests:
        if request.slot_id in chosen:
            continue
        own = proposals.filter(pl.col("slot_id") == request.slot_id)
        rows.append(
            {
                "iteration": iteration,
                "slot_id": request.slot_id,
                "parent_task_id": request.parent_task_id,
                "candidate_idx": own.height,
                "goal": request.goal.value,
                "prev_acc": request.prev_acc,
                "critic_feedback": request.feedback.to_json() if request.feedback is not None else None,
                "spec": json.dumps(request.parent_spec, sort_keys=True, separators=(",", ":")),
                "valid": True,
                "invalid_reason": None,
                "chosen": True,
            }
        )
    if not rows:
        return proposals
    # each fallback row after its slot's samples, slots in the order of ``proposals``
    frame = pl.concat([proposals, pl.DataFrame(rows, schema=proposals.schema)], how="vertical")
    order = {slot: i for i, slot in enumerate(dict.fromkeys(frame["slot_id"].to_list()))}
    frame = frame.sort(pl.col("slot_id").replace_strict(order), "candidate_idx")
    return validate("proposals", frame, where="with_fallback")


# The (goal, success rate) pairs the demonstrations show: a rewrite's accuracy is in neither band.
DEMO_GOALS: tuple[tuple[Goal, float], ...] = ((Goal.HARDER, 1.0), (Goal.HARDER, 0.5), (Goal.EASIER, 0.0))


def rewrite_demos(specs: Sequence[dict[str, Any]]) -> pl.DataFrame:
    """Warm-start rows (prompt, response) of the environment model: for every seed task, every variant
    (key, hint count) of its template as the current task, and each of :data:`DEMO_GOALS`, the parametric rewriter's first
    candidate that passes :func:`check_osworld_candidate`, answered as JSON."""
    rows = []
    for root in specs:
        keys = list(root["task_template"])
        for key in keys:
            for h in range(len(root.get("hints", {}).get(key, [])) + 1):
                parent = with_variant(root, key, h)
                for goal, acc in DEMO_GOALS:
                    request = RewriteRequest("demo", "demo", parent, root, goal, prev_acc=acc)
                    spec = next(
                        (
                            c.spec
                            for c in OsworldRewriter().propose(request, k=len(keys) * 2, seed=0)
                            if c.spec is not None and check_osworld_candidate(c.spec, request) is None
                        ),
                        None,
                    )
                    if spec is not None:
                        rows.append(
                            {"prompt": rewrite_prompt(request), "images": None, "response": answer(spec)}
                        )
    return pl.DataFrame(rows, schema=DEMO_COLUMNS)
