"""Environment adaptation of ALFWorld games (spec §3.2): two-token rewrites under the task type's
constraints, validated by the planner; the parametric extension validated by solvability."""

from __future__ import annotations

from typing import Any

import polars as pl

from rla_core.algo.adaptation import Goal
from rla_core.config import SamplingConfig
from rla_core.envs.alfworld.env import AlfworldEnv
from rla_core.envs.alfworld.goals import check_goal_tokens
from rla_core.envs.alfworld.pddl import read_facts
from rla_core.envs.alfworld.rewriter import (
    ParametricRewriter,
    TwoTokenPrompts,
    check_parametric,
    check_two_token,
    parse_two_tokens,
)
from rla_core.envs.alfworld.spec import GoalTokens, TaskType
from rla_core.envs.rewriter import ModelRewriter, RewriteRequest, rewrite_tasks
from tests.envs.alfworld.conftest import SPECS
from tests.recorded import RecordedGenerator


def _request(spec: dict[str, Any], goal: Goal) -> RewriteRequest:
    return RewriteRequest("s0", "t0", spec, spec, goal, prev_acc=1.0 if goal is Goal.HARDER else 0.0)


def test_two_token_rewrites_obey_the_constraints_or_are_rejected_with_reasons(
    alfworld_env: AlfworldEnv,
) -> None:
    # Kitchen 1 capped at 9 receptacles: cabinets, coffee machine, counter top, drawers, shelves, sink basin,
    # stove burner; a mug and eight distractors (no bread).
    spec = {**SPECS["pick_clean_then_place_in_recep"], "receptacles": 9, "distractors": 8}
    outputs = [
        r"I pick \boxed{Mug,StoveBurner}",  # a stove burner cannot hold a mug
        r"\boxed{Mug}",  # one token
        r"\boxed{Mug,CoffeeMachine}",  # the parent's own goal
        r"\boxed{CounterTop,Mug}",  # swapped order is accepted (decide_new_types), valid
        r"\boxed{Mug,Cabinet}",  # valid too, but the first valid one wins
    ]
    rewriter = ModelRewriter(
        TwoTokenPrompts(alfworld_env), RecordedGenerator(outputs), sampling=SamplingConfig()
    )
    assert "Make the task HARDER" in rewriter.form.prompts(_request(spec, Goal.HARDER), k=1)[0]
    rewriter.generator = RecordedGenerator(outputs)
    frame = rewrite_tasks(
        [_request(spec, Goal.HARDER)], rewriter=rewriter, env=alfworld_env, k=5, seed=0, iteration=1,
        check=lambda s, r: check_two_token(alfworld_env, s, r),
    )  # fmt: skip
    reasons = frame["invalid_reason"].to_list()
    assert reasons[0] == "canContain(StoveBurner, Mug) does not hold"
    assert reasons[1].startswith("unparsable")
    assert reasons[2] == "identical to the parent task's goal"
    assert reasons[3] is None and reasons[4] is None
    assert frame["chosen"].to_list() == [False, False, False, True, False]
    chosen = frame.filter(pl.col("chosen"))["spec"].item()
    assert '"goal":{"place":"CounterTop","target":"Mug"}' in chosen


def test_goal_token_constraints_per_task_type(alfworld_env: AlfworldEnv) -> None:
    facts = read_facts(alfworld_env.game(SPECS["pick_two_obj_and_place"])["pddl_problem"])
    mugs = len(facts.objects_of("Mug"))
    assert mugs == 2
    assert check_goal_tokens(facts, TaskType.PICK_TWO, GoalTokens("Mug", "Cabinet")) is None
    single = next(c for c in sorted(set(facts.object_class.values())) if len(facts.objects_of(c)) == 1)
    assert "needs 2" in str(check_goal_tokens(facts, TaskType.PICK_TWO, GoalTokens(single, "CounterTop")))
    assert check_goal_tokens(facts, TaskType.HEAT, GoalTokens("Mug", "CounterTop")) == (
        "the room has no Microwave to heat with"
    )
    look = read_facts(alfworld_env.game(SPECS["look_at_obj_in_light"])["pddl_problem"])
    assert check_goal_tokens(look, TaskType.LOOK_IN_LIGHT, GoalTokens("Book", "DeskLamp")) is None
    assert "no toggleable FloorLamp" in str(
        check_goal_tokens(look, TaskType.LOOK_IN_LIGHT, GoalTokens("Book", "FloorLamp"))
    )
    assert parse_two_tokens(r"\boxed{apple, spaceship}") == "unparsable: unknown ALFRED classes ['spaceship']"
    assert parse_two_tokens(r"\boxed{apple, sink basin}") == ("Apple", "SinkBasin")


def test_parametric_rewriter_moves_parameters_and_is_validated_by_solvability(
    alfworld_env: AlfworldEnv,
) -> None:
    spec = SPECS["pick_heat_then_place_in_recep"]
    harder = rewrite_tasks(
        [_request(spec, Goal.HARDER)], rewriter=ParametricRewriter(), env=alfworld_env, k=2, seed=0, iteration=1,
        check=check_parametric,
    )  # fmt: skip
    assert harder["valid"].to_list() == [True, True]
    assert '"target_location":"closed"' in harder["spec"][0] and '"distractors":6' in harder["spec"][1]
    easier = ParametricRewriter().propose(
        _request({**spec, "target_location": "open", "distractors": 0}, Goal.EASIER), k=3, seed=0
    )
    assert [c.spec["receptacles"] for c in easier if c.spec] == [5]  # only the cap can still move down
    published = ParametricRewriter().propose(_request({"game_file": "x"}, Goal.HARDER), k=3, seed=0)
    assert published[0].spec is None and published[0].reason == "a published game has no parameters"
