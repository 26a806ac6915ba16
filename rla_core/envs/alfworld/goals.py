"""Whether a two-token goal can be played in a game: the constraints of its task type (spec §3.2).

Shared by the game generator, the published-game loader and the two-token rewriter, below all three
(it reads game facts only), so none of them imports another to check a goal.

Example:
    >>> check_goal_tokens(facts, TaskType.PICK_AND_PLACE, GoalTokens("Apple", "Fridge"))  # doctest: +SKIP
"""

from __future__ import annotations

from rla_core.envs.alfworld.pddl import GameFacts
from rla_core.envs.alfworld.spec import GoalTokens, TaskType


def check_goal_tokens(facts: GameFacts, task_type: TaskType, tokens: GoalTokens) -> str | None:
    """None when ``tokens`` satisfy ``task_type``'s constraints in the game ``facts``; else the reason."""
    objs = [o for o in facts.objects_of(tokens.target) if facts.has("pickupable", o)]
    need = task_type.instances
    if len(objs) < need:
        have = sorted({c for o, c in facts.object_class.items() if facts.has("pickupable", o)})
        return f"the room has {len(objs)} pickable {tokens.target} (needs {need}); pickable classes: {have}"
    if task_type is TaskType.LOOK_IN_LIGHT:
        lamps = [o for o in facts.objects_of(tokens.second) if facts.has("toggleable", o)]
        if not lamps or not any(o in facts.in_receptacle for o in lamps):
            have = sorted({facts.object_class[o] for o in facts.flags.get("toggleable", set())})
            return f"no toggleable {tokens.second} stands in a receptacle; the room's lamps: {have}"
        return None
    recs = facts.receptacles_of(tokens.second)
    if not recs:
        return f"the room has no {tokens.second}; receptacles: {sorted(set(facts.receptacle_class.values()))}"
    if (tokens.second, tokens.target) not in facts.can_contain:
        return f"canContain({tokens.second}, {tokens.target}) does not hold"
    flag = {TaskType.CLEAN: "cleanable", TaskType.HEAT: "heatable", TaskType.COOL: "coolable"}.get(task_type)
    if flag is not None:
        if not any(facts.has(flag, o) for o in objs):
            return f"no {tokens.target} is {flag}"
        appliance = str(task_type.appliance)
        if not facts.receptacles_of(appliance):
            return f"the room has no {appliance} to {task_type.verb} with"
    if flag is None:
        already = sum(
            1 for o in objs if facts.receptacle_class.get(facts.in_receptacle.get(o, "")) == tokens.second
        )
        if already >= need:
            return f"already solved at the start: {already} {tokens.target} already in a {tokens.second}"
    return None
