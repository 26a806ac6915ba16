"""Environment adaptation of ALFWorld games (spec §3.2): the two-token rewrite, and a parametric extension.

**Two-token rewrite (the paper's method).** The environment model sees an English summary of the
ROOT game's ``:init`` (object classes with their instances and where they are, receptacle classes,
``canContain``, which objects are cleanable / heatable / coolable, the lamps), the failure summaries,
"make the task HARDER/EASIER" with the success rate, and the task-type brief; it answers
``\\boxed{OBJECT,RECEPTACLE}`` (look tasks: ``\\boxed{OBJECT,LAMP}``). The candidate is the root spec
plus ``"goal": {"target": OBJECT, "place"|"light": SECOND}`` — the root's world with only the goal's
two type tokens (and the task sentence) changed; rewrites are always of the root, as in the paper.

Validation (:func:`check_two_token`, then the planner through ``env.check_winnable``):

1. the box parses into two known ALFRED classes (the two may come in either order: they are swapped
   when only the swapped pair satisfies canContain, as ``decide_new_types`` does);
2. the one rewrite rule (:func:`rla_core.algo.adaptation.variant_problem` over :data:`TWO_TOKEN_SPACE`):
   only ``goal`` differs from the root game, and the candidate is not the parent itself (no direction
   rule: the environment model judges which goal is harder);
3. the constraints of the task type hold in the root game (:func:`check_goal_tokens`):
   ``canContain(RECEPTACLE, OBJECT)`` and a receptacle of that class; the object pickable, with at
   least 2 instances for pick_two; cleanable / heatable / coolable objects and the sink basin /
   microwave / fridge for those types; a toggleable lamp of the named class for look tasks; the
   goal not already true at the start;
4. not the parent's goal (the goal the parent's game plays, stated or implied by its spec);
5. the planner finds a plan that wins the rewritten game.

Acceptance of a chosen rewrite happens next iteration by the spec's accuracy rule
(:func:`rla_core.algo.adaptation.accept_variant`), like every other setting.

**Parametric rewriter (our extension, not the paper's).** Tiny CPU models cannot write valid
two-token rewrites, so without an environment model the generator parameters move instead: harder =
the target behind doors (``target_location``: open -> any -> closed), more distractors, more
receptacles; easier = the reverse. It is validated by the rewrite rule over :data:`PARAMETRIC_SPACE`
(the scene, task and seed kept; no direction rule) and solvability (the engine check); published games
have no parameters, so it proposes nothing for them (the reason says so).

Example:
    >>> check_goal_tokens(facts, TaskType.PICK_AND_PLACE, GoalTokens("Apple", "Fridge"))  # doctest: +SKIP
    None
"""

from __future__ import annotations

import json
from collections import Counter
from string import Template
from typing import TYPE_CHECKING, Any

from rla_core.algo.adaptation import Goal, VariantSpace
from rla_core.algo.parsing import last_boxed
from rla_core.envs.alfworld import assets
from rla_core.envs.alfworld.goals import check_goal_tokens
from rla_core.envs.alfworld.pddl import GameFacts, class_name, goal_of, read_facts
from rla_core.envs.alfworld.spec import (
    GENERATED_KEYS,
    MAX_DISTRACTORS,
    RECEPTACLE_CAP_RANGE,
    TargetLocation,
    TaskType,
    canonical_spec,
    parse_goal,
)
from rla_core.envs.rewriter import Candidate, RewriteRequest, distinct_moves
from rla_core.errors import EnvironmentSpecError

if TYPE_CHECKING:
    from rla_core.envs.alfworld.env import AlfworldEnv

REWRITE_TEMPLATE = Template(
    "You adjust the difficulty of a household task in an ALFWorld room.\n"
    "ROOT game (the room stays as it is):\n${summary}\n"
    "Current task: ${task} (task type ${task_type}; success rate ${prev_acc})\n"
    "Failure summaries: ${feedback}\n"
    "Make the task ${goal_word}. ${brief} Harder: rarer types, objects behind doors, more searching. "
    "Easier: common types in plain view.\n"
    "Keep the goal framework; change only the two type tokens. "
    "Answer \\boxed{${first},${second}}. (Attempt ${attempt}/${attempts})"
)
_BRIEF = {
    TaskType.PICK_AND_PLACE: "The RECEPTACLE must be able to hold the OBJECT (canContain).",
    TaskType.PICK_TWO: "The RECEPTACLE must hold the OBJECT (canContain) and the room needs >= 2 such objects.",
    TaskType.LOOK_IN_LIGHT: "OBJECT must be pickable; LAMP must be a toggleable lamp in the room.",
    TaskType.CLEAN: "The OBJECT must be cleanable (sinkbasin) and fit the RECEPTACLE (canContain).",
    TaskType.HEAT: "The OBJECT must be heatable (microwave) and fit the RECEPTACLE (canContain).",
    TaskType.COOL: "The OBJECT must be coolable (fridge) and fit the RECEPTACLE (canContain).",
}


def summarize_facts(facts: GameFacts) -> str:
    """The English summary of a game's init facts shown to the environment model (spec §3.2)."""
    where: dict[str, list[str]] = {}
    for obj, cls in sorted(facts.object_class.items()):
        host = facts.receptacle_class.get(facts.in_receptacle.get(obj, ""), "?")
        where.setdefault(cls, []).append(host)
    objects = "; ".join(
        f"{cls} x{len(hosts)} (in {', '.join(sorted(set(hosts)))})" for cls, hosts in where.items()
    )
    recs = Counter(facts.receptacle_class.values())
    receptacles = ", ".join(f"{cls} x{n}" for cls, n in sorted(recs.items()))
    flags = {
        k: sorted({facts.object_class.get(o, o) for o in facts.flags.get(k, set())})
        for k in ("cleanable", "heatable", "coolable", "toggleable")
    }
    contain = ", ".join(f"{r}>{o}" for r, o in sorted(facts.can_contain))
    return (
        f"Objects: {objects}.\nReceptacles: {receptacles}.\n"
        + "".join(f"{k.capitalize()}: {', '.join(v) or 'none'}.\n" for k, v in flags.items())
        + f"canContain: {contain}."
    )


def parse_two_tokens(text: str) -> tuple[str, str] | str:
    """The two classes in the last ``\\boxed{A,B}`` of ``text`` (canonical names), or the reason it fails."""
    boxed = last_boxed(text)
    if boxed is None:
        return "unparsable: no \\boxed{OBJECT,RECEPTACLE} in the output"
    parts = [p.strip() for p in boxed.replace(";", ",").split(",") if p.strip()]
    if len(parts) != 2:
        return f"unparsable: \\boxed{{{boxed}}} does not hold exactly two type tokens"
    known = {c.lower() for c in (*assets.constants().OBJECTS, *assets.constants().RECEPTACLES)}
    names = [class_name(p.replace(" ", "")) for p in parts]
    unknown = [p for p, n in zip(parts, names, strict=True) if n.lower() not in known]
    if unknown:
        return f"unparsable: unknown ALFRED classes {unknown}"
    return names[0], names[1]


class TwoTokenPrompts:
    """The environment model rewrites the root game's two goal tokens (spec §3.2; paper's method): the
    prompts and parsing of a :class:`~rla_core.envs.rewriter.ModelRewriter`."""

    def __init__(self, env: AlfworldEnv) -> None:
        self.env = env

    def prompts(self, request: RewriteRequest, *, k: int) -> list[str]:
        """The k attempt prompts ("(Attempt i/k)" suffix for diversity)."""
        root = self.env.game(request.root_spec)
        task_type, tokens = goal_of(self.env.game(request.parent_spec)["pddl_problem"])
        feedback = request.feedback.summaries() if request.feedback is not None else []
        second = "LAMP" if task_type is TaskType.LOOK_IN_LIGHT else "RECEPTACLE"
        return [
            REWRITE_TEMPLATE.substitute(
                summary=summarize_facts(read_facts(root["pddl_problem"])),
                task=f"{tokens.target} -> {tokens.second}",
                task_type=task_type.value,
                prev_acc=f"{request.prev_acc:.2f}",
                feedback=json.dumps(feedback),
                goal_word=request.goal.value.upper(),
                brief=_BRIEF[task_type],
                first="OBJECT",
                second=second,
                attempt=i + 1,
                attempts=k,
            )
            for i in range(k)
        ]

    def candidates(self, request: RewriteRequest, texts: list[str]) -> list[Candidate]:
        """Each output parsed with :func:`candidate_from_text`."""
        task_type, _ = goal_of(self.env.game(request.root_spec)["pddl_problem"])
        return [candidate_from_text(text, request.root_spec, task_type) for text in texts]


def candidate_from_text(text: str, root_spec: dict[str, Any], task_type: TaskType) -> Candidate:
    """A two-token candidate: the root spec plus the boxed goal; ``reason`` set when it does not parse."""
    parsed = parse_two_tokens(text)
    if isinstance(parsed, str):
        return Candidate(spec=None, raw=text, reason=parsed)
    first, second = parsed
    key = "light" if task_type is TaskType.LOOK_IN_LIGHT else "place"
    receptacles = assets.receptacle_classes()
    if task_type is not TaskType.LOOK_IN_LIGHT and first in receptacles and second not in receptacles:
        # decide_new_types: the pair may come in either order; the receptacle class goes second.
        first, second = second, first
    return Candidate(spec={**root_spec, "goal": {"target": first, key: second}}, raw=text)


# A two-token rewrite changes only the goal of the root game; the environment model judges its direction.
TWO_TOKEN_SPACE = VariantSpace(changes=frozenset({"goal"}))


def check_two_token(env: AlfworldEnv, spec: dict[str, Any], request: RewriteRequest) -> str | None:
    """Checks 1-4 of the module docstring for a two-token candidate (planner check: ``check_winnable``)."""
    root = env.game(request.root_spec)
    task_type, _ = goal_of(root["pddl_problem"])
    try:
        tokens = parse_goal(spec, task_type)
    except EnvironmentSpecError as exc:
        return str(exc)
    if tokens is None:
        return "the candidate has no 'goal' to rewrite"
    reason = request.problem(spec, TWO_TOKEN_SPACE) or check_goal_tokens(
        read_facts(root["pddl_problem"]), task_type, tokens
    )
    if reason is not None:
        return reason
    _, parent_tokens = goal_of(env.game(request.parent_spec)["pddl_problem"])
    if tokens == parent_tokens:
        return "identical to the parent task's goal"
    return None


_LOCATION_ORDER = (TargetLocation.OPEN, TargetLocation.ANY, TargetLocation.CLOSED)


class ParametricRewriter:
    """Moves the generator's parameters in the goal's direction (our extension; see the module docstring)."""

    def propose(self, request: RewriteRequest, *, k: int, seed: int) -> list[Candidate]:
        """Up to ``k`` distinct candidates; one explaining candidate when nothing can move."""
        del seed  # deterministic moves
        parent = dict(request.parent_spec)
        if set(GENERATED_KEYS) - set(parent):
            return [
                Candidate(spec=None, raw=canonical_spec(parent), reason="a published game has no parameters")
            ]
        sign = 1 if request.goal is Goal.HARDER else -1
        return distinct_moves(
            self._moves(parent, sign),
            parent,
            k=k,
            canonical=canonical_spec,
            none_left="every parameter is at its bound",
        )

    @staticmethod
    def _moves(parent: dict[str, Any], sign: int) -> list[dict[str, Any]]:
        loc = _LOCATION_ORDER.index(TargetLocation(parent["target_location"]))
        new_loc = _LOCATION_ORDER[max(0, min(len(_LOCATION_ORDER) - 1, loc + sign))]
        distractors = max(0, min(MAX_DISTRACTORS, parent["distractors"] + 2 * sign))
        cap = parent["receptacles"]
        low, high = RECEPTACLE_CAP_RANGE
        new_cap = None if cap is None else max(low, min(high, cap + 2 * sign))
        return [
            {**parent, "target_location": new_loc.value},
            {**parent, "distractors": distractors},
            {**parent, "receptacles": new_cap},
            {**parent, "distractors": distractors, "receptacles": new_cap},
        ]


# The parametric rewriter moves the generator's parameters (target location, distractors, receptacle cap,
# and a stated goal is not held to the root's); the room, task, its objects and the seed stay the root's.
# Solvability is the engine's check, and there is no direction rule.
PARAMETRIC_SPACE = VariantSpace(changes=frozenset({"target_location", "distractors", "receptacles", "goal"}))


def check_parametric(spec: dict[str, Any], request: RewriteRequest) -> str | None:
    """The rewrite rule over :data:`PARAMETRIC_SPACE` (the engine checks the rest)."""
    return request.problem(spec, PARAMETRIC_SPACE)
