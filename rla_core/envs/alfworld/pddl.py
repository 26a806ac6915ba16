"""PDDL text of ALFRED problems: ALFRED's name mangling, goals from the goal library, and reading facts back.

ALFRED ids such as ``Cabinet|+00.68|+00.50|-02.20`` are not PDDL symbols; ALFWorld mangles them
(``|`` -> ``_bar_``, ``+`` -> ``_plus_``, ``-`` -> ``_minus_``, ``.`` -> ``_dot_``, ``,`` -> ``_comma_``)
and TextWorld's ``AlfredDemangler`` turns them back into "cabinet 1". Fast Downward lower-cases every
symbol, so facts read back are compared case-insensitively (:func:`class_name` restores the class).

Example:
    >>> mangle("Mug|+01.00|-00.25")
    'Mug_bar__plus_01_dot_00_bar__minus_00_dot_25'
    >>> parse_sexpr("(and (inReceptacle a b))")
    ['and', ['inReceptacle', 'a', 'b']]
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from rla_core.envs.alfworld import assets
from rla_core.envs.alfworld.spec import GoalTokens, TaskType
from rla_core.errors import EnvironmentSpecError

_MANGLE = (("-", "_minus_"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"), (",", "_comma_"))
_TOKEN = re.compile(r"\(|\)|[^\s()]+")


def mangle(name: str) -> str:
    """ALFRED id -> PDDL symbol, as ALFWorld's ``fix_pddl_str_chars`` does."""
    for old, new in _MANGLE:
        name = name.replace(old, new)
    return name


def parse_sexpr(text: str) -> list[Any]:
    """Parse one s-expression (comments after ``;`` dropped) into nested lists of strings."""
    tokens = _TOKEN.findall("\n".join(line.split(";", 1)[0] for line in text.splitlines()))
    stack: list[list[Any]] = [[]]
    for tok in tokens:
        if tok == "(":
            stack.append([])
        elif tok == ")":
            if len(stack) == 1:
                raise EnvironmentSpecError("unbalanced PDDL: a ')' closes nothing; check the parentheses")
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(tok)
    if len(stack) != 1 or len(stack[0]) != 1:
        raise EnvironmentSpecError(
            "unparsable PDDL: expected exactly one balanced (define ...) expression; check the parentheses"
        )
    out: list[Any] = stack[0][0]
    return out


@cache
def _class_names() -> dict[str, str]:
    c = assets.constants()
    names = {n.lower(): n for n in (*c.OBJECTS, *c.RECEPTACLES)}
    return names


def class_name(type_token: str) -> str:
    """``mugtype`` / ``MugType`` -> ``Mug`` (canonical ALFRED class; unknown classes keep their spelling)."""
    base = type_token[:-4] if type_token.lower().endswith("type") else type_token
    return _class_names().get(base.lower(), base)


def goal_pddl(task_type: TaskType, tokens: GoalTokens) -> str:
    """The ``(:goal ...)`` block of ``task_type`` for the two tokens, closing the ``(define``.

    Taken from ALFWorld's goal library (``#`` stands for ``-`` there); look tasks fill ``{toggle}``.
    """
    text = str(assets.goal_library()[task_type.value]["pddl"])
    fill = {"obj": tokens.target, "recep": tokens.second, "toggle": tokens.second}
    return text.format(**fill).replace("#", "-").strip() + "\n"


def task_sentence(task_type: TaskType, tokens: GoalTokens, *, variant: int) -> str:
    """The task sentence (goal-library template ``variant`` mod the number of templates), lower-cased classes."""
    templates = list(assets.goal_library()[task_type.value]["templates"])
    template = templates[variant % len(templates)]
    low = {"obj": tokens.target.lower(), "recep": tokens.second.lower(), "toggle": tokens.second.lower()}
    return str(template.format(**low))


def grammar_with_task(sentence: str) -> str:
    """The shipped grammar with ``UNKNOWN GOAL`` replaced by the task sentence (as ALFWorld's games have it)."""
    return assets.grammar_twl2().replace("UNKNOWN GOAL", sentence)


def replace_task_sentence(grammar: str, sentence: str) -> str:
    """A game's grammar with its task sentence replaced (published games carry theirs in the ``task`` rule)."""
    pattern = re.compile(r'("rhs":\s*"Your task is to: )(.*?)(\.?")')
    if not pattern.search(grammar):
        raise EnvironmentSpecError(
            "the game's grammar has no 'Your task is to: ...' rule; is it an ALFWorld grammar (alfred.twl2)?"
        )
    return pattern.sub(lambda m: m.group(1) + sentence + m.group(3), grammar, count=1)


def replace_goal(problem: str, goal: str) -> str:
    """``problem`` with its ``(:goal ...)`` block (to the end of the define) replaced by ``goal``."""
    at = problem.find("(:goal")
    if at < 0:
        raise EnvironmentSpecError("the PDDL problem has no (:goal ...) block to rewrite")
    return problem[:at] + goal


@dataclass
class GameFacts:
    """The class-level view of a problem's ``:init``: what the rewrite constraints are checked against.

    Object and receptacle ids are as written in the problem; classes are canonical ALFRED names.
    """

    object_class: dict[str, str] = field(default_factory=dict)
    receptacle_class: dict[str, str] = field(default_factory=dict)
    in_receptacle: dict[str, str] = field(default_factory=dict)
    can_contain: set[tuple[str, str]] = field(default_factory=set)  # (receptacle class, object class)
    flags: dict[str, set[str]] = field(default_factory=dict)  # predicate (lower case) -> object ids

    def has(self, predicate: str, obj: str) -> bool:
        """Whether the unary fact ``(predicate obj)`` is in the init."""
        return obj in self.flags.get(predicate.lower(), set())

    def objects_of(self, cls: str) -> list[str]:
        """Ids of the objects of class ``cls``."""
        return sorted(o for o, c in self.object_class.items() if c == cls)

    def receptacles_of(self, cls: str) -> list[str]:
        """Ids of the receptacles of class ``cls``."""
        return sorted(r for r, c in self.receptacle_class.items() if c == cls)


def read_facts(problem: str) -> GameFacts:
    """The :class:`GameFacts` of a PDDL problem text (published or generated)."""
    tree = parse_sexpr(problem)
    facts = GameFacts()
    init = next((part for part in tree if isinstance(part, list) and part and part[0] == ":init"), None)
    if init is None:
        raise EnvironmentSpecError("the PDDL problem has no (:init ...) block")
    for atom in init[1:]:
        if not isinstance(atom, list) or not atom or not isinstance(atom[0], str):
            continue
        name, args = atom[0].lower(), [a for a in atom[1:] if isinstance(a, str)]
        if name == "objecttype" and len(args) == 2:
            facts.object_class[args[0]] = class_name(args[1])
        elif name == "receptacletype" and len(args) == 2:
            facts.receptacle_class[args[0]] = class_name(args[1])
        elif name == "inreceptacle" and len(args) == 2:
            facts.in_receptacle[args[0]] = args[1]
        elif name == "cancontain" and len(args) == 2:
            facts.can_contain.add((class_name(args[0]), class_name(args[1])))
        elif len(args) == 1:
            facts.flags.setdefault(name, set()).add(args[0])
    return facts


def goal_of(problem: str) -> tuple[TaskType, GoalTokens]:
    """The task type and two tokens of a problem's goal, recognised by its shape (the goal library's six)."""
    at = problem.find("(:goal")
    if at < 0:
        raise EnvironmentSpecError("the PDDL problem has no (:goal ...) block")
    goal = problem[at:].lower()
    types = [class_name(t) for t in re.findall(r"\(objecttype\s+\?\w+\s+(\w+)\)", goal)]
    rtypes = [class_name(t) for t in re.findall(r"\(receptacletype\s+\?\w+\s+(\w+)\)", goal)]
    if "istoggled" in goal and len(types) >= 2:
        # look_at_obj_in_light: the lamp's objectType comes first in the goal library's block.
        return TaskType.LOOK_IN_LIGHT, GoalTokens(target=types[1], second=types[0])
    if not types or not rtypes:
        raise EnvironmentSpecError(
            "the goal is not one of the six ALFWorld task shapes (no objectType/receptacleType tokens)"
        )
    token = GoalTokens(target=types[0], second=rtypes[0])
    if "(not (= ?o1 ?o2))" in goal:
        return TaskType.PICK_TWO, token
    for task_type, flag in ((TaskType.CLEAN, "isclean"), (TaskType.HEAT, "ishot"), (TaskType.COOL, "iscool")):
        if f"({flag} ?o)" in goal:
            return task_type, token
    return TaskType.PICK_AND_PLACE, token
