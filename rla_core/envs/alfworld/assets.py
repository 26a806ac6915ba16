"""The ALFRED domain files shipped in the ``alfworld`` wheel: PDDL domain, text grammar, floor plans, constants.

Read-only data, loaded lazily and cached per process:

* ``alfworld/data/alfred.pddl`` (domain) and ``alfworld/data/alfred.twl2`` (TextWorld grammar, whose
  ``UNKNOWN GOAL`` is replaced by the task sentence);
* ``alfworld/gen/layouts/FloorPlan<N>-objects.json`` (object and receptacle classes of the scene) and
  ``-openable.json`` (receptacle instances ``Class|x|y|z`` -> the agent's pose ``[x, z, rotation,
  horizon]`` in metres and degrees from which the receptacle is reached);
* ``alfworld/gen/constants.py`` (which receptacle class holds which object classes, which objects are
  cleanable / heatable / coolable / toggleable, the seen/unseen scene split) and
  ``alfworld/gen/goal_library.py`` (goal PDDL and task sentences per task type).

**Completion of the floor plans.** ``openable.json`` lacks receptacle classes that ``objects.json`` lists
(measured over the 120 plans: GarbageCan in 85, StoveBurner / CoffeeMachine / Toaster in 30,
HandTowelHolder / TowelHolder / ToiletPaperHanger in 29, Drawer / LaundryHamper in 8, a few others).
Every such class gets exactly ONE instance with its own location (no pose is known, so it is a
location of its own, reachable like any other by ``go to``); it is openable, and starts closed, iff
its class is openable in ALFRED (``OPENABLE_CLASS_LIST``). One instance is the least we can claim
from the class list alone; the published games (built from AI2-THOR metadata) sometimes have more
(e.g. four stove burners).

Example:
    >>> scene = load_scene(1)  # doctest: +SKIP
    >>> sorted({r.cls for r in scene.receptacles})[:3]  # doctest: +SKIP
    ['Cabinet', 'CoffeeMachine', 'CounterTop']
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import ModuleType
from typing import Any

from rla_core.errors import EnvironmentSpecError

_INSTALL_HINT = "install it with `pip install --no-deps alfworld==0.4.2` (scripts/setup.sh does)"
# ALFRED's receptacles that are also pickable objects; ALFWorld games treat them as objects only.
_LIGHT_HOLDERS: dict[str, tuple[str, ...]] = {
    # Lamps are not in any receptacle's canContain list (they are never put anywhere), but the
    # look_at_obj_in_light goal needs the lamp in a receptacle at the agent's location: desk lamps
    # stand on tables, floor lamps are modelled as standing next to (i.e. "in") a seat or table.
    "DeskLamp": ("Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "DiningTable", "TVStand"),
    "FloorLamp": ("SideTable", "Sofa", "ArmChair", "Dresser", "Desk", "Bed", "CoffeeTable", "TVStand"),
}


def _alfworld_files() -> Any:
    try:
        return resources.files("alfworld")
    except ModuleNotFoundError:
        raise EnvironmentSpecError(
            f"the ALFWorld engine needs the 'alfworld' package; {_INSTALL_HINT}"
        ) from None


@cache
def domain_pddl() -> str:
    """The ALFRED PDDL domain (``alfworld/data/alfred.pddl``)."""
    return str(_alfworld_files().joinpath("data", "alfred.pddl").read_text(encoding="utf-8"))


@cache
def grammar_twl2() -> str:
    """The ALFRED TextWorld grammar with the ``UNKNOWN GOAL`` placeholder (``alfworld/data/alfred.twl2``)."""
    return str(_alfworld_files().joinpath("data", "alfred.twl2").read_text(encoding="utf-8"))


@cache
def constants() -> ModuleType:
    """``alfworld.gen.constants`` (plain Python data; importing it needs nothing else)."""
    try:
        import alfworld.gen.constants as module
    except ModuleNotFoundError:
        raise EnvironmentSpecError(
            f"the ALFWorld engine needs the 'alfworld' package; {_INSTALL_HINT}"
        ) from None
    return module


@cache
def goal_library() -> dict[str, dict[str, Any]]:
    """``alfworld.gen.goal_library.gdict``: goal PDDL (``#`` for ``-``, ``{obj}Type`` ...) and sentences."""
    import alfworld.gen.goal_library as glib

    return dict(glib.gdict)


@cache
def receptacle_classes() -> frozenset[str]:
    """Static receptacle classes (ALFRED's receptacles minus the movable ones, which are objects here)."""
    c = constants()
    return frozenset(set(c.RECEPTACLES) - set(c.MOVABLE_RECEPTACLES))


@cache
def can_contain() -> dict[str, frozenset[str]]:
    """Receptacle class -> object classes it can hold (``VAL_RECEPTACLE_OBJECTS``), static receptacles only."""
    c = constants()
    return {
        r: frozenset(o for o in objs if not o.endswith("Sliced"))
        for r, objs in c.VAL_RECEPTACLE_OBJECTS.items()
    }


@cache
def pickupable_classes() -> frozenset[str]:
    """Object classes some receptacle can hold: what a task may ask to pick up (sliced variants excluded)."""
    return frozenset().union(*can_contain().values())


def action_classes(kind: str) -> frozenset[str]:
    """Object classes of ``VAL_ACTION_OBJECTS[kind]`` (``Cleanable``, ``Heatable``, ``Coolable``, ``Toggleable``)."""
    return frozenset(o for o in constants().VAL_ACTION_OBJECTS[kind] if not o.endswith("Sliced"))


def light_holders(light: str) -> tuple[str, ...]:
    """Receptacle classes a lamp of class ``light`` may stand on or next to (see :data:`_LIGHT_HOLDERS`)."""
    return _LIGHT_HOLDERS.get(light, ())


@cache
def scene_numbers() -> tuple[int, ...]:
    """Every floor plan shipped in the wheel, ascending."""
    layouts = _alfworld_files().joinpath("gen", "layouts")
    found = [re.fullmatch(r"FloorPlan(\d+)-objects\.json", p.name) for p in layouts.iterdir()]
    return tuple(sorted(int(m.group(1)) for m in found if m))


def scene_split(scene: int) -> str:
    """``train`` for ALFRED's seen rooms (``TRAIN_SCENE_NUMBERS``), ``heldout`` for its unseen rooms."""
    return "train" if scene in set(constants().TRAIN_SCENE_NUMBERS) else "heldout"


@dataclass(frozen=True)
class Receptacle:
    """A receptacle instance of a floor plan: ALFRED id (``Class|x|y|z``), class, location id, openable."""

    rid: str
    cls: str
    location: str
    openable: bool
    completed: bool = False  # added by the completion rule (not in openable.json)


@dataclass(frozen=True)
class Scene:
    """A floor plan: its receptacles (completed) and the object classes it lists."""

    number: int
    receptacles: tuple[Receptacle, ...]
    object_classes: frozenset[str]


def _receptacle_class(rid: str) -> str:
    # 'Sink|+00.71|+00.82|-01.77|SinkBasin' names the basin last; plain ids name the class first.
    parts = rid.split("|")
    return parts[-1] if len(parts) == 5 else parts[0]


def _location_id(pose: list[float]) -> str:
    # ALFRED's grid location: x and z in 0.25 m steps, rotation in quarter turns, camera horizon.
    x, z, rotation, horizon = pose
    return f"loc|{round(x / 0.25)}|{round(z / 0.25)}|{round(rotation / 90) % 4}|{round(horizon)}"


@cache
def load_scene(scene: int) -> Scene:
    """The floor plan ``scene`` with its receptacle list completed (module docstring); typed error if unknown."""
    known = scene_numbers()
    if scene not in known:
        raise EnvironmentSpecError(
            f"alfworld spec: unknown scene {scene}; the shipped floor plans are 1-30 (kitchens), "
            "201-230 (living rooms), 301-330 (bedrooms) and 401-430 (bathrooms)"
        )
    layouts = _alfworld_files().joinpath("gen", "layouts")
    objects = json.loads(layouts.joinpath(f"FloorPlan{scene}-objects.json").read_text(encoding="utf-8"))
    poses = json.loads(layouts.joinpath(f"FloorPlan{scene}-openable.json").read_text(encoding="utf-8"))
    openable_classes = set(constants().OPENABLE_CLASS_LIST)
    static = receptacle_classes()
    receptacles = [
        Receptacle(rid=rid, cls=cls, location=_location_id(pose), openable=cls in openable_classes)
        for rid, pose in sorted(poses.items())
        if (cls := _receptacle_class(rid)) in static
    ]
    have = {r.cls for r in receptacles}
    for i, cls in enumerate(sorted(c for c in set(objects) & static if c not in have)):
        receptacles.append(
            Receptacle(
                rid=f"{cls}|+{90 + i:02d}.00|+00.00|+{90 + i:02d}.00",
                cls=cls,
                location=f"loc|{90 + i}|0|0|0",
                openable=cls in openable_classes,
                completed=True,
            )
        )
    return Scene(number=scene, receptacles=tuple(receptacles), object_classes=frozenset(objects))
