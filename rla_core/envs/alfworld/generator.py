"""ALFRED-domain problems generated from the shipped floor plans: spec -> ``game.tw-pddl`` JSON (no planner).

The world of a spec (see :mod:`rla_core.envs.alfworld.spec`) is built deterministically from a
``random.Random`` seeded by the sha256 of the canonical spec without its ``goal`` (so a two-token goal
rewrite keeps its root's world, spec §3.2):

1. the scene's receptacles (completed, :mod:`~rla_core.envs.alfworld.assets`);
2. the target instance(s) (2 for pick_two) in receptacles that can hold the target
   (``VAL_RECEPTACLE_OBJECTS``), never of the ``place`` class (the goal must not hold at the start),
   behind a door or not as ``target_location`` asks;
3. look tasks: one lamp of class ``light`` on (or beside) a table-like receptacle;
4. with a ``receptacles`` cap, the needed receptacles (one of ``place``, the appliance — sink basin,
   microwave or fridge —, the target and lamp hosts) plus random others up to the cap;
5. ``distractors`` objects of the scene's other pickable classes in legal receptacles.

Everything else follows ALFWorld's problems: openable receptacles start closed, the agent starts in
the middle of the room, cleanable / heatable / coolable / toggleable flags come from
``VAL_ACTION_OBJECTS``, ``canContain`` facts list every legal (receptacle class, object class) pair
of the game, and every type constant is declared (the domain references ``SinkBasinType``,
``MicrowaveType``, ``FridgeType``, ``KnifeType``, ``ButterKnifeType``). The game JSON has the published
keys (``pddl_domain``, ``grammar`` with the task sentence, ``pddl_problem``, ``solvable``); the
planner fills ``solvable`` and ``walkthrough`` (:func:`rla_core.envs.alfworld.env.plan_game`).

Bad specs get :class:`~rla_core.errors.EnvironmentSpecError` naming the scene and what it offers
(unknown scene, a target the scene does not list, a receptacle that cannot hold the target, a task
type whose appliance or lamp the scene lacks, no legal start for the target).

Example:
    >>> game = generate_game({"scene": 1, "task_type": "pick_and_place_simple", "target": "Mug",
    ...                       "place": "CoffeeMachine", "light": None, "distractors": 3,
    ...                       "receptacles": 6, "target_location": "any", "seed": 0})  # doctest: +SKIP
    >>> sorted(game)  # doctest: +SKIP
    ['grammar', 'pddl_domain', 'pddl_problem', 'solvable']
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any

from rla_core.envs.alfworld import assets
from rla_core.envs.alfworld.assets import Receptacle, Scene
from rla_core.envs.alfworld.pddl import goal_pddl, grammar_with_task, mangle, read_facts, task_sentence
from rla_core.envs.alfworld.spec import (
    GeneratedSpec,
    GoalTokens,
    TargetLocation,
    canonical_spec,
    parse_generated,
)
from rla_core.errors import EnvironmentSpecError

AGENT = "agent1"
START = "loc|start"  # the middle of the room: no receptacle is there


@dataclass
class World:
    """Receptacles and placed objects of one generated game (ALFRED ids, unmangled)."""

    receptacles: list[Receptacle]
    objects: dict[str, str] = field(default_factory=dict)  # object id -> class
    host: dict[str, Receptacle] = field(default_factory=dict)  # object id -> receptacle it is in
    lights: set[str] = field(default_factory=set)

    def add(self, cls: str, host: Receptacle) -> str:
        """Place a new object of ``cls`` in ``host``; returns its id (``Class|NN``, numbered per class)."""
        n = sum(1 for c in self.objects.values() if c == cls) + 1
        oid = f"{cls}|{n:02d}"
        self.objects[oid] = cls
        self.host[oid] = host
        return oid


def _rng(spec: GeneratedSpec) -> random.Random:
    digest = hashlib.sha256(canonical_spec(spec.root()).encode("utf-8")).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _error(spec: GeneratedSpec, what: str) -> EnvironmentSpecError:
    return EnvironmentSpecError(f"alfworld spec {canonical_spec(spec.root())}: {what}")


def _check_feasible(spec: GeneratedSpec, scene: Scene) -> None:
    """Raise a specific error when the scene cannot host the task at all."""
    have = sorted({r.cls for r in scene.receptacles})
    pickable = sorted(scene.object_classes & assets.pickupable_classes())
    if spec.target not in assets.pickupable_classes():
        raise _error(
            spec, f"'{spec.target}' is not a pickable object class; scene {spec.scene} offers {pickable}"
        )
    if spec.target not in scene.object_classes:
        raise _error(spec, f"scene {spec.scene} has no '{spec.target}'; its pickable objects are {pickable}")
    kind = spec.task_type.property_kind
    if kind is not None and spec.target not in assets.action_classes(kind):
        raise _error(
            spec,
            f"a {spec.target} is not {kind.lower()}; {spec.task_type.value} needs one of "
            f"{sorted(assets.action_classes(kind) & set(pickable))} in this scene",
        )
    appliance = spec.task_type.appliance
    if appliance is not None and appliance not in have:
        raise _error(spec, f"{spec.task_type.value} needs a {appliance}, which scene {spec.scene} lacks")
    if spec.place is not None:
        if spec.place not in have:
            raise _error(spec, f"scene {spec.scene} has no receptacle '{spec.place}'; it has {have}")
        if spec.target not in assets.can_contain().get(spec.place, frozenset()):
            holders = sorted(c for c in have if spec.target in assets.can_contain().get(c, frozenset()))
            raise _error(
                spec,
                f"impossible placement: a {spec.place} cannot hold a {spec.target}; "
                f"receptacles of scene {spec.scene} that can: {holders}",
            )
    if spec.light is not None:
        lamps = sorted(scene.object_classes & assets.action_classes("Toggleable"))
        if spec.light not in lamps:
            raise _error(spec, f"scene {spec.scene} has no lamp '{spec.light}'; its lamps are {lamps}")
        if not any(r.cls in assets.light_holders(spec.light) for r in scene.receptacles):
            raise _error(spec, f"scene {spec.scene} has nothing a {spec.light} can stand on or beside")


def _target_hosts(spec: GeneratedSpec, receptacles: list[Receptacle]) -> list[Receptacle]:
    legal = [
        r
        for r in receptacles
        if spec.target in assets.can_contain().get(r.cls, frozenset()) and r.cls != spec.place
    ]
    if spec.target_location is TargetLocation.OPEN:
        legal = [r for r in legal if not r.openable]
    elif spec.target_location is TargetLocation.CLOSED:
        legal = [r for r in legal if r.openable]
    return legal


def build_world(spec: GeneratedSpec) -> World:
    """The receptacles and objects of ``spec``'s root world (module docstring, steps 1-5)."""
    scene = assets.load_scene(spec.scene)
    _check_feasible(spec, scene)
    rng = _rng(spec)
    everything = list(scene.receptacles)
    hosts = _target_hosts(spec, everything)
    if not hosts:
        raise _error(
            spec,
            f"impossible placement: no receptacle of scene {spec.scene}"
            + (f" other than the {spec.place}" if spec.place is not None else "")
            + f" can hold a {spec.target} with target_location={spec.target_location.value}",
        )
    needed: list[Receptacle] = []

    def need(r: Receptacle) -> Receptacle:
        if r not in needed:
            needed.append(r)
        return r

    target_hosts = [need(rng.choice(hosts)) for _ in range(spec.task_type.instances)]
    for cls in (spec.place, spec.task_type.appliance):
        if cls is not None:
            need(rng.choice([r for r in everything if r.cls == cls]))
    light_host = None
    if spec.light is not None:
        light_host = need(rng.choice([r for r in everything if r.cls in assets.light_holders(spec.light)]))
    if spec.receptacles is None:
        chosen = everything
    else:
        others = [r for r in everything if r not in needed]
        rng.shuffle(others)
        extra = max(0, spec.receptacles - len(needed))
        keep = {r.rid for r in needed} | {r.rid for r in others[:extra]}
        chosen = [r for r in everything if r.rid in keep]
    world = World(receptacles=chosen)
    for host in target_hosts:
        world.add(spec.target, host)
    if spec.light is not None and light_host is not None:
        world.lights.add(world.add(spec.light, light_host))
    pool = sorted((scene.object_classes & assets.pickupable_classes()) - {spec.target})
    placeable = [c for c in pool if any(c in assets.can_contain().get(r.cls, frozenset()) for r in chosen)]
    for _ in range(spec.distractors if placeable else 0):
        cls = rng.choice(placeable)
        world.add(cls, rng.choice([r for r in chosen if cls in assets.can_contain().get(r.cls, frozenset())]))
    return world


def _type_constants() -> tuple[list[str], list[str]]:
    c = assets.constants()
    rtypes = sorted(assets.receptacle_classes())
    otypes = sorted(set(c.OBJECTS_SET) - set(rtypes))
    return otypes, rtypes


def render_problem(world: World, goal: str, *, name: str) -> str:
    """The PDDL problem of ``world`` with the given ``(:goal ...)`` block (ALFWorld's layout, mangled ids)."""
    otypes, rtypes = _type_constants()
    action = {k: assets.action_classes(k) for k in ("Cleanable", "Heatable", "Coolable", "Sliceable")}
    movable = set(assets.constants().MOVABLE_RECEPTACLES)
    locations = sorted({r.location for r in world.receptacles} | {START})
    objects = [f"{AGENT} - agent"]
    objects += [f"{t}Type - otype" for t in otypes] + [f"{t}Type - rtype" for t in rtypes]
    objects += [f"{mangle(o)} - object" for o in sorted(world.objects)]
    objects += [f"{mangle(r.rid)} - receptacle" for r in world.receptacles]
    objects += [f"{mangle(loc)} - location" for loc in locations]
    init = ["(= (total-cost) 0)", f"(atLocation {AGENT} {mangle(START)})"]
    for r in world.receptacles:
        init.append(f"(receptacleType {mangle(r.rid)} {r.cls}Type)")
        init.append(f"(receptacleAtLocation {mangle(r.rid)} {mangle(r.location)})")
        if r.openable:
            init.append(f"(openable {mangle(r.rid)})")
    for oid, cls in sorted(world.objects.items()):
        o, host = mangle(oid), world.host[oid]
        init.append(f"(objectType {o} {cls}Type)")
        init.append(f"(inReceptacle {o} {mangle(host.rid)})")
        init.append(f"(objectAtLocation {o} {mangle(host.location)})")
        if oid in world.lights:
            init.append(f"(toggleable {o})")
            continue
        init.append(f"(pickupable {o})")
        for kind, pred in (("Cleanable", "cleanable"), ("Heatable", "heatable"), ("Coolable", "coolable")):
            if cls in action[kind]:
                init.append(f"({pred} {o})")
        if cls in action["Sliceable"]:
            init.append(f"(sliceable {o})")
        if cls in movable:
            init.append(f"(isReceptacleObject {o})")
    r_classes = sorted({r.cls for r in world.receptacles})
    o_classes = sorted(set(world.objects.values()))
    for rc in r_classes:
        for oc in o_classes:
            if oc in assets.can_contain().get(rc, frozenset()):
                init.append(f"(canContain {rc}Type {oc}Type)")
    return (
        f"(define (problem {name})\n(:domain alfred)\n(:objects\n"
        + "\n".join(objects)
        + "\n)\n(:init\n"
        + "\n".join(init)
        + "\n)\n"
        + goal
    )


def generate_game(spec: dict[str, Any]) -> dict[str, Any]:
    """The ``game.tw-pddl`` dict of a generated spec (``solvable`` False until the planner confirms it).

    The same spec gives the same bytes (``json.dumps(game, sort_keys=True)``): placement is seeded by
    the spec's hash and every list is sorted.
    """
    parsed = parse_generated(spec)
    world = build_world(parsed)
    tokens = parsed.goal or _root_tokens(parsed)
    if parsed.goal is not None:
        # A two-token rewrite keeps the root's world; its tokens must fit that world (spec §3.2).
        from rla_core.envs.alfworld.goals import check_goal_tokens

        root_problem = render_problem(world, goal_pddl(parsed.task_type, _root_tokens(parsed)), name="root")
        reason = check_goal_tokens(read_facts(root_problem), parsed.task_type, tokens)
        if reason is not None:
            raise _error(
                parsed, f"goal rewrite {tokens.target},{tokens.second} breaks a constraint: {reason}"
            )
    name = "gen_" + hashlib.sha256(canonical_spec(spec).encode("utf-8")).hexdigest()[:12]
    sentence = task_sentence(parsed.task_type, tokens, variant=_rng(parsed).randrange(2))
    return {
        "pddl_domain": assets.domain_pddl(),
        "grammar": grammar_with_task(sentence),
        "pddl_problem": render_problem(world, goal_pddl(parsed.task_type, tokens), name=name),
        "solvable": False,
    }


def _root_tokens(spec: GeneratedSpec) -> GoalTokens:
    return GoalTokens(target=spec.target, second=spec.light if spec.light is not None else str(spec.place))
