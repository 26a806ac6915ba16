"""ALFWorld task specs: the six task types and the JSON spec of a generated or published game.

A generated game (:mod:`rla_core.envs.alfworld.generator`) is fixed by these keys:

================  ==========================================================================  ==============
key               meaning                                                                     values
================  ==========================================================================  ==============
scene             shipped AI2-THOR floor plan                                                 1-30, 201-230,
                                                                                              301-330, 401-430
task_type         one of :class:`TaskType`                                                    see below
target            object class to find (``Mug``); must be listed by the scene                 pickable class
place             receptacle class to put it in (``CoffeeMachine``); null for look tasks      receptacle class
light             lamp class (``DeskLamp`` / ``FloorLamp``) of look tasks; null otherwise    lamp class
distractors       other objects placed in the room                                            0..20
receptacles       at most this many receptacles (the needed ones always stay); null = all     2..60 or null
target_location   where the target starts: ``any``, ``open`` (never behind a door), ``closed``  string
seed              placement seed                                                              0..2**31-1
goal              optional two-token rewrite of the goal (spec §3.2): ``{"target": A,          object
                  "place": B}`` (look: ``{"target": A, "light": B}``); the world stays the
                  root's, only the goal and task sentence change
================  ==========================================================================  ==============

A published game is ``{"game_file": "path/to/game.tw-pddl"}`` (optionally with ``goal``), see
:mod:`rla_core.envs.alfworld.published`.

Example:
    >>> spec = {"scene": 1, "task_type": "pick_clean_then_place_in_recep", "target": "Mug",
    ...         "place": "CoffeeMachine", "light": None, "distractors": 4, "receptacles": 8,
    ...         "target_location": "any", "seed": 3}
    >>> TaskType(spec["task_type"]).verb
    'clean'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from rla_core.envs.base import canonical_spec
from rla_core.errors import EnvironmentSpecError


class TaskType(StrEnum):
    """ALFWorld's six task types (ALFRED goal names)."""

    PICK_AND_PLACE = "pick_and_place_simple"
    PICK_TWO = "pick_two_obj_and_place"
    LOOK_IN_LIGHT = "look_at_obj_in_light"
    CLEAN = "pick_clean_then_place_in_recep"
    HEAT = "pick_heat_then_place_in_recep"
    COOL = "pick_cool_then_place_in_recep"

    @property
    def verb(self) -> str | None:
        """``clean`` / ``heat`` / ``cool`` for the state-change types, else None."""
        return {TaskType.CLEAN: "clean", TaskType.HEAT: "heat", TaskType.COOL: "cool"}.get(self)

    @property
    def appliance(self) -> str | None:
        """The receptacle class that does the state change (domain constants SinkBasinType ...)."""
        return {TaskType.CLEAN: "SinkBasin", TaskType.HEAT: "Microwave", TaskType.COOL: "Fridge"}.get(self)

    @property
    def property_kind(self) -> str | None:
        """The ``VAL_ACTION_OBJECTS`` key the target must be in (``Cleanable`` ...)."""
        return {TaskType.CLEAN: "Cleanable", TaskType.HEAT: "Heatable", TaskType.COOL: "Coolable"}.get(self)

    @property
    def instances(self) -> int:
        """How many target instances the goal needs (pick_two: 2)."""
        return 2 if self is TaskType.PICK_TWO else 1


class TargetLocation(StrEnum):
    """Where the target object starts: anywhere legal, only in open receptacles, only behind doors."""

    ANY = "any"
    OPEN = "open"
    CLOSED = "closed"


GENERATED_KEYS: tuple[str, ...] = (
    "scene", "task_type", "target", "place", "light", "distractors", "receptacles", "target_location", "seed",
)  # fmt: skip
MAX_DISTRACTORS = 20
RECEPTACLE_CAP_RANGE = (2, 60)
MAX_SEED = 2**31 - 1


@dataclass(frozen=True)
class GoalTokens:
    """The two type tokens of a goal: the object class and the receptacle (or lamp) class."""

    target: str
    second: str  # place (receptacle class) or light (lamp class)


@dataclass(frozen=True)
class GeneratedSpec:
    """A validated spec of a generated game (types checked here; feasibility in the generator)."""

    scene: int
    task_type: TaskType
    target: str
    place: str | None
    light: str | None
    distractors: int
    receptacles: int | None
    target_location: TargetLocation
    seed: int
    goal: GoalTokens | None

    def root(self) -> dict[str, Any]:
        """The spec without its goal rewrite (the world it lives in)."""
        return {
            "scene": self.scene, "task_type": self.task_type.value, "target": self.target, "place": self.place,
            "light": self.light, "distractors": self.distractors, "receptacles": self.receptacles,
            "target_location": self.target_location.value, "seed": self.seed,
        }  # fmt: skip


def _fail(spec: Mapping[str, Any], what: str) -> EnvironmentSpecError:
    return EnvironmentSpecError(f"alfworld spec {canonical_spec(spec)}: {what}")


def _int(spec: Mapping[str, Any], key: str, low: int, high: int) -> int:
    value = spec[key]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _fail(spec, f"'{key}' must be an integer in [{low}, {high}], got {value!r}")
    return value


def _str_or_none(spec: Mapping[str, Any], key: str) -> str | None:
    value = spec[key]
    if value is not None and (not isinstance(value, str) or not value):
        raise _fail(spec, f"'{key}' must be a class name such as 'Mug' or null, got {value!r}")
    return value


def parse_goal(spec: Mapping[str, Any], task_type: TaskType | None) -> GoalTokens | None:
    """The ``goal`` rewrite of a spec, or None; the second key is ``light`` for look tasks, else ``place``."""
    goal = spec.get("goal")
    if goal is None:
        return None
    second = "light" if task_type is TaskType.LOOK_IN_LIGHT else "place"
    if (
        not isinstance(goal, Mapping)
        or set(goal) != {"target", second}
        or not all(isinstance(v, str) and v for v in goal.values())
    ):
        raise _fail(spec, f'\'goal\' must be an object {{"target": CLASS, "{second}": CLASS}}, got {goal!r}')
    return GoalTokens(target=str(goal["target"]), second=str(goal[second]))


def parse_generated(spec: Any) -> GeneratedSpec:
    """Check keys and types of a generated-game spec; raise EnvironmentSpecError (what, where, how) otherwise."""
    if not isinstance(spec, Mapping):
        raise EnvironmentSpecError(
            f"alfworld spec must be a JSON object, got {type(spec).__name__}; pass keys {list(GENERATED_KEYS)}"
        )
    unknown = sorted(set(spec) - {*GENERATED_KEYS, "goal"})
    missing = sorted(set(GENERATED_KEYS) - set(spec))
    if unknown or missing:
        raise _fail(
            spec, f"unknown keys {unknown} and missing keys {missing}; use {list(GENERATED_KEYS)} (+ 'goal')"
        )
    try:
        task_type = TaskType(spec["task_type"])
    except ValueError:
        raise _fail(
            spec, f"unknown task_type {spec['task_type']!r}; choose one of {[t.value for t in TaskType]}"
        ) from None
    try:
        location = TargetLocation(spec["target_location"])
    except ValueError:
        raise _fail(
            spec,
            f"target_location {spec['target_location']!r} is not one of {[t.value for t in TargetLocation]}",
        ) from None
    target = _str_or_none(spec, "target")
    place, light = _str_or_none(spec, "place"), _str_or_none(spec, "light")
    if target is None:
        raise _fail(spec, "'target' is required (the object class to find, e.g. 'Mug')")
    if task_type is TaskType.LOOK_IN_LIGHT and (light is None or place is not None):
        raise _fail(spec, "look_at_obj_in_light needs 'light' (DeskLamp or FloorLamp) and place=null")
    if task_type is not TaskType.LOOK_IN_LIGHT and (place is None or light is not None):
        raise _fail(spec, f"{task_type.value} needs 'place' (a receptacle class) and light=null")
    receptacles = None if spec["receptacles"] is None else _int(spec, "receptacles", *RECEPTACLE_CAP_RANGE)
    return GeneratedSpec(
        scene=_int(spec, "scene", 0, 10_000),
        task_type=task_type,
        target=target,
        place=place,
        light=light,
        distractors=_int(spec, "distractors", 0, MAX_DISTRACTORS),
        receptacles=receptacles,
        target_location=location,
        seed=_int(spec, "seed", 0, MAX_SEED),
        goal=parse_goal(spec, task_type),
    )
