"""Task rewriters for TextWorld specs: parametric and LLM, one validation path (docs/architecture.md#cross-module-interfaces, spec §3.2).

A :class:`TaskRewriter` proposes k candidate specs for a :class:`RewriteRequest` (a task whose accuracy
asked for a harder or easier variant). :func:`rewrite_tasks` checks EVERY candidate the same way and
writes the 'proposals' artifact; the first valid candidate is ``chosen`` (spec §3.2: first valid wins).
The environment model's rewriters (:class:`ModelRewriter` over an engine's :class:`RewritePrompts`:
:class:`TextWorldPrompts`, ALFWorld's two-token prompts, …) sample every request's attempts in one
generate call, which shards over a Ray cluster.

Checks, in order (the first failure is the ``invalid_reason``):

1. parses (LLM output: last JSON object, via ``parse_last_json_object``);
2. the one rewrite rule, :func:`rla_core.algo.adaptation.variant_problem` over :data:`TEXTWORLD_SPACE`:
   exactly the keys of :data:`SPEC_BOUNDS`, integers in range; the ``seed`` (the task family) kept as
   the ROOT task's (the paper always rewrites the root game, spec §3.2); not identical to the parent;
   moves in the goal's direction (harder = no difficulty key, :data:`DIFFICULTY_KEYS`, decreases and one
   increases; easier = the reverse); every difficulty key within 3 of the root's value;
3. the engine compiles it and its own walkthrough wins it (the AlfWorld smoke test, spec §3.2).

Example:
    >>> req = RewriteRequest("s0", "t0", parent, parent, Goal.HARDER, prev_acc=1.0)  # doctest: +SKIP
    >>> rewrite_tasks([req], rewriter=ParametricRewriter(), env=env, k=3, seed=0, iteration=1)  # doctest: +SKIP
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import polars as pl

from rla_core.algo.adaptation import Goal, VariantSpace, variant_problem
from rla_core.algo.parsing import parse_last_json_object
from rla_core.algo.seeds import derive_seed
from rla_core.envs.feedback import CriticFeedback
from rla_core.envs.prompts import render_rewrite_prompt
from rla_core.envs.textworld_env import DIFFICULTY_KEYS, SPEC_BOUNDS, canonical_spec
from rla_core.schemas import get_schema, validate

if TYPE_CHECKING:
    from rla_core.algo.curriculum import RewriteTarget
    from rla_core.config import SamplingConfig
    from rla_core.models.generator import Generator


@dataclass(frozen=True)
class RewriteRequest:
    """A task to rewrite: its slot, the current (parent) version, the slot's root, goal and accuracy."""

    slot_id: str
    parent_task_id: str
    parent_spec: dict[str, Any]
    root_spec: dict[str, Any]
    goal: Goal
    prev_acc: float
    feedback: CriticFeedback | None = None

    def __post_init__(self) -> None:
        if self.goal is Goal.KEEP:
            raise ValueError(
                f"slot '{self.slot_id}': a rewrite needs goal 'harder' or 'easier', not 'keep' (rewrite_targets "
                "never asks to rewrite a task whose accuracy is in band)"
            )

    def problem(self, spec: dict[str, Any], space: VariantSpace) -> str | None:
        """Why ``spec`` is not a valid rewrite of this request's task in ``space`` (the one rule,
        :func:`~rla_core.algo.adaptation.variant_problem`), or None."""
        return variant_problem(
            spec, parent=self.parent_spec, root=self.root_spec, goal=self.goal, space=space
        )

    @classmethod
    def for_targets(
        cls, targets: Sequence[RewriteTarget], feedback: dict[str, CriticFeedback]
    ) -> list[RewriteRequest]:
        """One request per rewrite target (``rla_core.algo.curriculum.rewrite_targets``), with its feedback."""
        return [
            cls(
                slot_id=t.slot_id,
                parent_task_id=t.task_id,
                parent_spec=t.spec,
                root_spec=t.root_spec,
                goal=t.goal,
                prev_acc=t.prev_acc,
                feedback=feedback.get(t.task_id),
            )
            for t in targets
        ]


@dataclass(frozen=True)
class Candidate:
    """One proposed spec (None when it could not be parsed) with the raw text and any parse failure."""

    spec: dict[str, Any] | None
    raw: str
    reason: str | None = None


class TaskRewriter(Protocol):
    """Proposes ``k`` candidate specs for a request (validation happens in :func:`rewrite_tasks`)."""

    def propose(self, request: RewriteRequest, *, k: int, seed: int) -> list[Candidate]: ...


class ValidatingEnvironment(Protocol):
    """An environment that can smoke-test a spec (compiles and is winnable by its walkthrough)."""

    def check_winnable(self, spec: dict[str, Any]) -> str | None: ...


# What a TextWorld rewrite may change: the generation parameters inside their bounds, the seed (the task
# family) kept as the root's, each difficulty key within 3 of the root's value (spec §3.2).
TEXTWORLD_SPACE = VariantSpace(
    bounds=SPEC_BOUNDS, difficulty=DIFFICULTY_KEYS, anchor_radius=3, changes=frozenset(DIFFICULTY_KEYS),
    closed=True,
)  # fmt: skip


def check_candidate(spec: dict[str, Any], request: RewriteRequest) -> str | None:
    """The rewrite rule over :data:`TEXTWORLD_SPACE` (module docstring, check 2); None when it holds."""
    return request.problem(spec, TEXTWORLD_SPACE)


# Moves per goal, most preferred first: (key, step) pairs applied together.
_HARDER_MOVES: tuple[tuple[tuple[str, int], ...], ...] = (
    (("quest_length", 1),),
    (("nb_objects", 2),),
    (("world_size", 1),),
    (("quest_length", 1), ("nb_objects", 2)),
    (("world_size", 1), ("nb_objects", 2)),
)


class ParametricRewriter:
    """Moves generation parameters in the goal's direction, bounded by :data:`SPEC_BOUNDS`.

    Harder: longer quest, then more objects, then more rooms. Easier: the reverse moves; when most of
    the judge's high-risk actions were moves between rooms (critic feedback), fewer rooms is tried
    first, since the agent got lost rather than stuck on the quest.
    """

    def propose(self, request: RewriteRequest, *, k: int, seed: int) -> list[Candidate]:
        """Up to ``k`` distinct, in-bounds candidates (one explaining candidate when all moves are clamped)."""
        del seed  # deterministic: the parameters move by fixed steps
        sign = 1 if request.goal is Goal.HARDER else -1
        moves = list(_HARDER_MOVES)
        nav = request.feedback.navigation_share() if request.feedback is not None else None
        if request.goal is Goal.EASIER and nav is not None and nav > 0.5:
            moves.sort(key=lambda move: 0 if move[0][0] == "world_size" else 1)
        specs = []
        for move in moves:
            spec = dict(request.parent_spec)
            for key, step in move:
                low, high = SPEC_BOUNDS[key]
                spec[key] = max(low, min(high, spec[key] + sign * step))
            specs.append(spec)
        at_bound = f"every parameter is already at its {'upper' if sign > 0 else 'lower'} bound"
        return distinct_moves(specs, request.parent_spec, k=k, canonical=canonical_spec, none_left=at_bound)


def distinct_moves(
    specs: Iterable[dict[str, Any]],
    parent: dict[str, Any],
    *,
    k: int,
    canonical: Callable[[dict[str, Any]], str],
    none_left: str,
) -> list[Candidate]:
    """A parametric rewriter's candidates: the first ``k`` of ``specs`` that differ from ``parent`` and from
    each other (compared as ``canonical`` text); none: one candidate without a spec, ``none_left`` its reason."""
    out: list[Candidate] = []
    seen: set[str] = set()
    for spec in specs:
        text = canonical(spec)
        if spec == parent or text in seen:
            continue
        seen.add(text)
        out.append(Candidate(spec=spec, raw=text))
        if len(out) == k:
            break
    return out or [Candidate(spec=None, raw=canonical(parent), reason=none_left)]


class RewritePrompts(Protocol):
    """What the environment model is asked for a request, and how its answers become candidates (per engine)."""

    def prompts(self, request: RewriteRequest, *, k: int) -> list[str]:
        """The k attempt prompts of ``request``."""
        ...

    def candidates(self, request: RewriteRequest, texts: list[str]) -> list[Candidate]:
        """The candidates parsed from ``request``'s k attempt outputs, in attempt order."""
        ...


@dataclass
class ModelRewriter:
    """A rewriter whose candidates the environment model writes: an engine's ``form`` (its prompts and
    their parsing), sampled with ``generator`` and ``sampling``.

    :meth:`propose_all` samples every request's attempts in ONE generate call (with ``cluster.backend=ray``
    the stage's generator is a :class:`~rla_core.cluster.ShardedGenerator`, so that call shards over the
    cluster); each prompt keeps the seed one call per request would give it (:func:`sample_attempts`), so
    the candidates are the same whatever the batching.
    """

    form: RewritePrompts
    generator: Generator
    sampling: SamplingConfig

    def propose(self, request: RewriteRequest, *, k: int, seed: int) -> list[Candidate]:
        """The k candidates of one request (:meth:`propose_all` of that request alone)."""
        return self.propose_all([request], k=k, seed=seed)[0]

    def propose_all(self, requests: Sequence[RewriteRequest], *, k: int, seed: int) -> list[list[Candidate]]:
        """Every request's k candidates, sampled in one generate call."""
        texts = sample_attempts(
            self.generator, [self.form.prompts(r, k=k) for r in requests], self.sampling, seed,
            [r.slot_id for r in requests],
        )  # fmt: skip
        return [self.form.candidates(r, t) for r, t in zip(requests, texts, strict=True)]


class TextWorldPrompts:
    """The environment model rewrites a TextWorld spec as JSON, anchored to the root (spec §3.2, §5)."""

    def prompts(self, request: RewriteRequest, *, k: int) -> list[str]:
        """The k attempt prompts ("(Attempt i/k)" suffix for diversity, spec §3.2)."""
        feedback = request.feedback.summaries() if request.feedback is not None else []
        return [
            render_rewrite_prompt(
                root_spec=request.root_spec,
                current_spec=request.parent_spec,
                prev_acc=request.prev_acc,
                feedback=feedback,
                goal=request.goal.value,
                bounds=SPEC_BOUNDS,
                attempt=i + 1,
                attempts=k,
            )
            for i in range(k)
        ]

    def candidates(self, request: RewriteRequest, texts: list[str]) -> list[Candidate]:
        """Each output parsed with :func:`parse_candidate`."""
        return [parse_candidate(text) for text in texts]


def sample_attempts(
    generator: Generator,
    prompts: Sequence[Sequence[str]],
    sampling: SamplingConfig,
    seed: int,
    slot_ids: Sequence[str],
) -> list[list[str]]:
    """One generate call for every slot's attempt prompts (in the model's chat markup): one text per attempt.

    ``prompts[s]`` are slot ``slot_ids[s]``'s attempts; attempt i of slot s is seeded
    ``derive_seed(seed, slot_ids[s]) + i``, the seed a call of that slot's prompts alone with
    ``seed=derive_seed(seed, slot_ids[s])`` gives it, so the texts do not depend on which slots are
    sampled together (a generator's sample depends only on its prompt, its seed and its index).
    """
    flat = [generator.format_prompt(p) for attempts in prompts for p in attempts]
    if not flat:
        return [[] for _ in prompts]
    seeds = [
        derive_seed(seed, slot) + i
        for slot, attempts in zip(slot_ids, prompts, strict=True)
        for i in range(len(attempts))
    ]
    outs = iter(generator.generate(flat, n=1, sampling=sampling, seed=seeds[0], seeds=seeds))
    return [[next(outs)[0].text for _ in attempts] for attempts in prompts]


def parse_candidate(text: str) -> Candidate:
    """Parse an LLM rewrite output: its last JSON object is the candidate spec."""
    parsed = parse_last_json_object(text)
    if not parsed.valid or parsed.value is None:
        return Candidate(spec=None, raw=text, reason=f"unparsable: {parsed.reason}")
    return Candidate(spec=dict(parsed.value), raw=text)


def rewrite_tasks(
    requests: Sequence[RewriteRequest],
    *,
    rewriter: TaskRewriter,
    env: ValidatingEnvironment,
    k: int,
    seed: int,
    iteration: int,
    check: Callable[[dict[str, Any], RewriteRequest], str | None] = check_candidate,
) -> pl.DataFrame:
    """Propose, validate and choose rewrites; return the 'proposals' artifact (spec §3.2).

    ``check`` is the static validity check of a candidate (None when valid, else the reason): the
    engine's composition of the one rewrite rule (:meth:`RewriteRequest.problem`) with its own static
    checks; the default is the text games' :func:`check_candidate`. Statically valid candidates then go
    through the engine (``env.check_winnable``).

    Writes iteration, slot_id, parent_task_id, candidate_idx, goal, prev_acc, critic_feedback (the
    feedback as JSON, null without any), spec (canonical JSON of the candidate, or the raw model
    output when it did not parse), valid, invalid_reason (null when valid), chosen (first valid one).
    """
    rows: list[dict[str, Any]] = []
    proposed: Iterable[list[Candidate]] = (  # the environment model samples every request in one call
        rewriter.propose_all(requests, k=k, seed=seed)
        if isinstance(rewriter, ModelRewriter)
        else (rewriter.propose(request, k=k, seed=seed) for request in requests)
    )
    for request, candidates in zip(requests, proposed, strict=True):
        chosen_done = False
        for idx, cand in enumerate(candidates):
            reason = cand.reason
            if reason is None and cand.spec is not None:
                reason = check(cand.spec, request)
                if reason is None:
                    engine = env.check_winnable(cand.spec)
                    reason = f"engine check failed: {engine}" if engine is not None else None
            valid = reason is None
            chosen = valid and not chosen_done
            chosen_done = chosen_done or chosen
            rows.append(
                {
                    "iteration": iteration,
                    "slot_id": request.slot_id,
                    "parent_task_id": request.parent_task_id,
                    "candidate_idx": idx,
                    "goal": request.goal.value,
                    "prev_acc": request.prev_acc,
                    "critic_feedback": request.feedback.to_json() if request.feedback is not None else None,
                    "spec": json.dumps(cand.spec, sort_keys=True, separators=(",", ":"))
                    if cand.spec is not None
                    else cand.raw,
                    "valid": valid,
                    "invalid_reason": reason,
                    "chosen": chosen,
                }
            )
    frame = pl.DataFrame(rows, schema=get_schema("proposals").polars_schema)
    return validate("proposals", frame, where="rewrite_tasks")
