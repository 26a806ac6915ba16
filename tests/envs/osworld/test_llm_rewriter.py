"""The environment model's OSWorld rewrites: the spec's validity rule, the fallback, the warm-start rows.

Hand-computed cases on the shipped ``rla-os-mkdir`` task: keys ``dir`` (easiest) and ``nested``, one hint
each; its seed variant plays ``dir`` with its hint. The model is a :class:`RecordedGenerator` (the subject
is the code around the model); the engine check is the real :class:`SolutionCheck`.
"""

from __future__ import annotations

import json
from typing import Any

import polars as pl
import pytest
from pydantic import ValidationError

from rla_core.algo.curriculum import register_chosen, tasks_to_play
from rla_core.algo.registry import TaskRegistry
from rla_core.config import AdaptationConfig, RunConfig
from rla_core.envs.osworld.rewriter import (
    OsworldPrompts,
    SolutionCheck,
    check_osworld_candidate,
    parse_osworld_candidate,
    rewrite_demos,
    rewrite_prompt,
    with_fallback,
)
from rla_core.envs.rewriter import Goal, ModelRewriter, RewriteRequest, rewrite_tasks
from tests.envs.osworld.test_tasks import shipped
from tests.recorded import RecordedGenerator

DIR = "Create a folder named 'projects' on the Desktop."
DIR_HINT = "Hint: in the terminal, run `mkdir ~/Desktop/projects`."
NESTED = "Create the folder 'projects/2024' on the Desktop, with its parent."
NESTED_HINT = "Hint: in the terminal, run `mkdir -p ~/Desktop/projects/2024`."


def mkdir(*, solutions: bool = True) -> dict[str, Any]:
    task = next(t for t in shipped() if t["id"] == "rla-os-mkdir")
    assert task["current_task"] == {"dir": f"{DIR} {DIR_HINT}"}
    assert task["task_template"] == {"dir": DIR, "nested": NESTED}
    return task if solutions else {k: v for k, v in task.items() if k != "solutions"}


def request(task: dict[str, Any], goal: Goal) -> RewriteRequest:
    return RewriteRequest("os/rla-os-mkdir", "os/rla-os-mkdir", task, task, goal, prev_acc=0.5)


def no_desktop() -> Any:
    raise AssertionError("no candidate here has a scripted solution to replay: no desktop may start")


def proposals(task: dict[str, Any], goal: Goal, texts: list[str]) -> pl.DataFrame:
    """R = 3 recorded samples through the shared model-rewriter path, then the fallback."""
    req = request(task, goal)
    writer = ModelRewriter(OsworldPrompts(), RecordedGenerator(texts), sampling=AdaptationConfig().sampling)
    frame = rewrite_tasks(
        [req], rewriter=writer, env=SolutionCheck(no_desktop), k=3, seed=0, iteration=1,
        check=check_osworld_candidate,
    )  # fmt: skip
    return with_fallback(frame, [req], iteration=1)


def test_the_last_json_object_with_exactly_one_string_template_key_is_the_candidate() -> None:
    task = mkdir()
    chosen = parse_osworld_candidate(f'First {{"nested": "x"}}, then: {{"dir": "{DIR}"}}', task)
    assert chosen.spec == {**task, "current_task": {"dir": DIR}}  # the last object, on the parent task
    for text, reason in (
        ("I would remove the hint.", "unparsable: "),
        (json.dumps({"dir": DIR, "nested": NESTED}), "the answer has 2 keys; exactly one is allowed"),
        (json.dumps({"default": DIR}), "key 'default' is not in task_template (keys: ['dir', 'nested'])"),
        (json.dumps({"dir": ["a"]}), "the instruction of key 'dir' is not a string"),
        ("{}", "the answer has 0 keys; exactly one is allowed"),
    ):
        cand = parse_osworld_candidate(text, task)
        assert cand.spec is None and (cand.reason or "").startswith(reason), (text, cand.reason)


def test_first_valid_sample_is_chosen_and_a_key_switch_needs_a_scripted_solution() -> None:
    task = mkdir(solutions=False)  # without solutions only the root's key 'dir' may be played
    frame = proposals(
        task,
        Goal.HARDER,
        [
            json.dumps({"nested": NESTED}),  # another key, but nothing can check that it still wins
            f'Drop the hint: {{"dir": "{DIR}"}}',  # whole hint sentence removed: valid, chosen
            json.dumps({"dir": DIR}),  # valid too, but not the first
        ],
    )
    assert frame["candidate_idx"].to_list() == [0, 1, 2]  # a slot with a chosen sample gets no fallback
    assert frame["valid"].to_list() == [False, True, True]
    assert frame["chosen"].to_list() == [False, True, False]
    assert frame["invalid_reason"][0] == (
        "key 'nested' is not the root task's key 'dir' and has no scripted solution to check that it still "
        "wins: only hints may change on this task"
    )
    assert json.loads(frame["spec"][1])["current_task"] == {"dir": DIR}
    # with its scripted solution the key switch passes the static checks; SolutionCheck replays it next
    assert (
        check_osworld_candidate(
            {**mkdir(), "current_task": {"nested": NESTED}}, request(mkdir(), Goal.HARDER)
        )
        is None
    )


def test_no_valid_sample_makes_the_old_task_the_pending_one_re_tested_next_step() -> None:
    task = mkdir(solutions=False)
    frame = proposals(
        task,
        Goal.EASIER,  # the seed variant is already the easiest key with all its hints
        [
            json.dumps({"dir": f"{DIR} {DIR_HINT}"}),  # the parent itself
            json.dumps({"dir": "Make a folder 'projects'."}),  # reworded: not template + own hints
            json.dumps({"dir": DIR}),  # one hint less: harder, not easier
        ],
    )
    assert frame["candidate_idx"].to_list() == [0, 1, 2, 3]
    assert frame["invalid_reason"].to_list() == [
        "identical to the parent task",
        "the instruction of key 'dir' is not its template followed by the task's own hints",
        "not easier than the parent: difficulty (0, -1) -> (0, 0)",
        None,
    ]
    assert frame["valid"].to_list() == [False, False, False, True]
    assert frame["chosen"].to_list() == [False, False, False, True]
    assert json.loads(frame["spec"][3]) == task  # the old current_task is the temporary task
    registry, [new_id] = register_chosen(
        TaskRegistry.seed([("os/rla-os-mkdir", "osworld", task)]), frame, iteration=1
    )
    [pending] = [t for t in tasks_to_play(registry, k=0, seed=0) if t.pending]
    assert (pending.task_id, pending.spec) == (new_id, task)  # played, then decided, the next step


def test_the_prompt_shows_the_variants_hints_and_goal_and_the_demos_answer_it() -> None:
    task = mkdir()
    prompt = rewrite_prompt(request(task, Goal.HARDER))
    assert json.dumps(task["task_template"]) in prompt and NESTED_HINT in prompt
    assert f'Current task: {{"dir": "{DIR} {DIR_HINT}"}} (success rate 0.50)' in prompt
    assert "Make the task HARDER" in prompt
    demos = rewrite_demos([task])
    answers = {(p.split("Current task: ")[1].split(" (success")[0], p.split("Make the task ")[1].split(":")[0])
               for p in demos["prompt"]}  # fmt: skip
    # (dir, 0 hints): harder = nested without hints, easier = dir with its hint; (dir, 1): harder = dir;
    # (nested, 0): easier = nested with its hint; (nested, 1): harder = nested, easier = dir with its hint.
    # Harder rows come once per success rate shown (1.00, 0.50): 3 * 2 + 3 = 9 rows.
    assert demos.height == 9 and len(answers) == 6
    pairs = dict(zip(demos["prompt"], demos["response"], strict=True))
    want = {
        ("dir", DIR, "HARDER"): {"nested": NESTED},
        ("dir", DIR, "EASIER"): {"dir": f"{DIR} {DIR_HINT}"},
        ("dir", f"{DIR} {DIR_HINT}", "HARDER"): {"dir": DIR},
        ("nested", NESTED, "EASIER"): {"nested": f"{NESTED} {NESTED_HINT}"},
        ("nested", f"{NESTED} {NESTED_HINT}", "HARDER"): {"nested": NESTED},
        ("nested", f"{NESTED} {NESTED_HINT}", "EASIER"): {"dir": f"{DIR} {DIR_HINT}"},
    }
    for prompt, response in pairs.items():
        current = json.loads(prompt.split("Current task: ")[1].split(" (success")[0])
        ((key, text),) = current.items()
        goal = prompt.split("Make the task ")[1].split(":")[0]
        assert json.loads(response) == want[(key, text, goal)]


def test_the_llm_rewriter_without_an_environment_model_is_a_config_error() -> None:
    with pytest.raises(ValidationError, match=r"adaptation\.rewriter=llm needs an environment model"):
        RunConfig.model_validate(
            {"setting": "gui", "gui": {"engine": "osworld"}, "adaptation": {"rewriter": "llm"}}
        )


def test_the_fallback_row_follows_its_own_slots_samples() -> None:
    task = mkdir(solutions=False)
    hard = request(task, Goal.HARDER)
    easy = RewriteRequest("os/other", "os/other", task, task, Goal.EASIER, prev_acc=0.0)
    texts = ["no", json.dumps({"dir": DIR}), "no", "no", "no", "no"]  # slot 1: sample 1 valid; slot 2: none
    frame = rewrite_tasks(
        [hard, easy], rewriter=ModelRewriter(OsworldPrompts(), RecordedGenerator(texts), sampling=AdaptationConfig().sampling),
        env=SolutionCheck(no_desktop), k=3, seed=0, iteration=1, check=check_osworld_candidate,
    )  # fmt: skip
    out = with_fallback(frame, [hard, easy], iteration=1)
    assert list(zip(out["slot_id"], out["candidate_idx"], out["chosen"], strict=True)) == [
        ("os/rla-os-mkdir", 0, False), ("os/rla-os-mkdir", 1, True), ("os/rla-os-mkdir", 2, False),
        ("os/other", 0, False), ("os/other", 1, False), ("os/other", 2, False), ("os/other", 3, True),
    ]  # fmt: skip
