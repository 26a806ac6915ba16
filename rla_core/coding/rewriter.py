"""LLM problem rewriting for the coding setting (spec §3.1): critic feedback, prompt, validation.

* Critic feedback = per-unit-test pass rates of the current policy codes, one list for the GT tests and
  one for the RM-generated tests (labelled "may not be accurate"). Tests whose input or output is empty
  or longer than ``max_chars`` (cfg.coding.max_prompt_test_chars, 100) are left out. Unlike the
  reference (spec §3.1 bug: ``rates[:len(filtered)]``), each rate stays attached to its own test: the
  filter runs over (idx, rate, input, output) rows.
* The prompt is anchored to the ROOT problem (version 0) and its tests, shows the current problem, the
  pass rates and the goal (harder / easier), and asks for one JSON object.
* A candidate is valid iff the last balanced JSON object parses, ``question`` is a non-empty string,
  ``test_input``/``test_output`` are lists of strings of equal length >= ``min_tests``, no test is
  empty, and ``test_method`` (if given) is "stdio". No reference solution is required: acceptance at the
  next iteration needs acc > 0 (spec §11).

Example:
    >>> validate_candidate('{"question": "q", "test_input": ["1"], "test_output": ["2"]}', min_tests=1).valid
    True
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import polars as pl

from rla_core.algo.parsing import Parsed, parse_last_json_object
from rla_core.coding.tasks import CodingTask, TestMethod
from rla_core.schemas import validate

REWRITE_TEMPLATE = (
    "You are a curator of programming problems. Rewrite a problem so that it becomes {goal_upper} for the "
    "current model (its pass-all accuracy on the current version is {prev_acc:.2f}).\n\n"
    "CRITICAL ANCHOR: the new problem must stay a variant of the ORIGINAL problem below (same topic and "
    "input style); do not drift to an unrelated task.\n### Original problem\n{root_question}\n"
    "### Original tests\n{root_tests}\n\n### Current problem\n{current_question}\n"
    "### Current tests\n{current_tests}\n\n"
    "### Pass rates of the current model's programs per test\n"
    "GT tests: {gt_rates}\nGenerated tests (may not be accurate): {gen_rates}\n\n"
    "Use the pass rates: to make it {goal}, {advice}. Output ONE JSON object only, with keys "
    '"question" (string), "test_method" ("stdio"), "test_time_limit" ({time_limit}), '
    '"test_input" (list of stdin strings) and "test_output" (list of expected stdout strings), with at '
    "least {min_tests} tests.\n"
)
_ADVICE = {
    "harder": "add a requirement or edge case that the low-pass-rate tests hint the model struggles with",
    "easier": "simplify the requirement or the input format, keeping what the high-pass-rate tests check",
}


def pass_rates(executions: pl.DataFrame) -> pl.DataFrame:
    """Per-test pass rate over all programs of a task: task_id, test_kind, test_idx, pass_rate.

    Reads artifact 'executions' (task_id, test_kind, test_idx, passed). Spec §3.1 critic feedback.
    """
    return (
        executions.group_by("task_id", "test_kind", "test_idx")
        .agg(pl.col("passed").cast(pl.Float64).mean().alias("pass_rate"))
        .sort("task_id", "test_kind", "test_idx")
    )


def feedback_entries(
    tests: Sequence[tuple[str, str]], rates: Sequence[float | None], *, max_chars: int
) -> list[dict[str, Any]]:
    """Entries {idx, pass_rate, test_input, test_output} for the tests short enough for the prompt.

    ``rates[k]`` belongs to ``tests[k]``; filtering keeps that pairing (the reference misaligns it).
    """
    if len(tests) != len(rates):
        raise ValueError(f"{len(tests)} tests but {len(rates)} pass rates: they must be aligned by index")
    out = []
    for idx, ((t_in, t_out), rate) in enumerate(zip(tests, rates, strict=True)):
        if not t_in or not t_out or len(t_in) > max_chars or len(t_out) > max_chars:
            continue
        out.append(
            {
                "idx": idx,
                "pass_rate": None if rate is None else round(rate, 3),
                "test_input": t_in,
                "test_output": t_out,
            }
        )
    return out


def critic_feedback(
    *,
    gt_tests: Sequence[tuple[str, str]],
    gt_rates: Sequence[float | None],
    generated_tests: Sequence[tuple[str, str]],
    generated_rates: Sequence[float | None],
    max_chars: int,
) -> dict[str, list[dict[str, Any]]]:
    """The critic feedback of spec §3.1 as a JSON-able dict {"gt": [...], "generated": [...]}."""
    return {
        "gt": feedback_entries(gt_tests, gt_rates, max_chars=max_chars),
        "generated": feedback_entries(generated_tests, generated_rates, max_chars=max_chars),
    }


def _tests_text(task: CodingTask, max_chars: int) -> str:
    shown = [{"input": i, "output": o} for i, o in task.tests if len(i) <= max_chars and len(o) <= max_chars]
    return json.dumps(shown, ensure_ascii=False)


def rewrite_prompt(
    *,
    root: CodingTask,
    current: CodingTask,
    feedback: dict[str, list[dict[str, Any]]],
    goal: str,
    prev_acc: float,
    min_tests: int,
    time_limit_s: float,
    max_chars: int,
) -> str:
    """The environment model's rewrite prompt (spec §3.1), anchored to the root problem."""
    if goal not in _ADVICE:
        raise ValueError(f"goal must be 'harder' or 'easier', got {goal!r}")
    return REWRITE_TEMPLATE.format(
        goal=goal,
        goal_upper=goal.upper(),
        prev_acc=prev_acc,
        root_question=root.question.strip(),
        root_tests=_tests_text(root, max_chars),
        current_question=current.question.strip(),
        current_tests=_tests_text(current, max_chars),
        gt_rates=json.dumps(feedback["gt"], ensure_ascii=False),
        gen_rates=json.dumps(feedback["generated"], ensure_ascii=False),
        advice=_ADVICE[goal],
        time_limit=time_limit_s,
        min_tests=min_tests,
    )


def validate_candidate(text: str, *, min_tests: int) -> Parsed[dict[str, Any]]:
    """Check one environment-model output (spec §3.1 validity); the value is the parsed object."""
    parsed = parse_last_json_object(text)
    if not parsed.valid or parsed.value is None:
        return Parsed.fail(parsed.reason or "no JSON object")
    obj = parsed.value
    question = obj.get("question")
    if not isinstance(question, str) or not question.strip():
        return Parsed.fail("'question' is missing or not a non-empty string")
    method = obj.get("test_method", TestMethod.STDIO.value)
    if method != TestMethod.STDIO.value:
        return Parsed.fail(f"'test_method' must be 'stdio', got {method!r}")
    t_in, t_out = obj.get("test_input"), obj.get("test_output")
    if not isinstance(t_in, list) or not isinstance(t_out, list):
        return Parsed.fail("'test_input' and 'test_output' must both be lists")
    if len(t_in) != len(t_out):
        return Parsed.fail(f"'test_input' has {len(t_in)} items but 'test_output' has {len(t_out)}")
    if len(t_in) < min_tests:
        return Parsed.fail(f"only {len(t_in)} tests; at least {min_tests} are required")
    for k, (i, o) in enumerate(zip(t_in, t_out, strict=True)):
        if not isinstance(i, str) or not isinstance(o, str):
            return Parsed.fail(f"test {k}: input and output must be strings")
        if not i.strip() or not o.strip():
            return Parsed.fail(f"test {k}: empty input or output (an invalid test)")
    return Parsed.ok(obj)


def proposal_rows(
    *,
    iteration: int,
    slot_id: str,
    parent: CodingTask,
    goal: str,
    prev_acc: float,
    feedback: dict[str, list[dict[str, Any]]],
    candidates: Sequence[str],
    min_tests: int,
    time_limit_s: float,
) -> pl.DataFrame:
    """Artifact 'proposals' for one task's k candidates; the first valid one is ``chosen``.

    Writes iteration, slot_id, parent_task_id, candidate_idx, goal, prev_acc, critic_feedback (JSON),
    spec (the new task's JSON spec, or the raw output when invalid), valid, invalid_reason, chosen.
    """
    rows = []
    chosen_done = False
    for k, text in enumerate(candidates):
        check = validate_candidate(text, min_tests=min_tests)
        spec_text = text
        if check.valid and check.value is not None:
            obj = check.value
            task = CodingTask(
                task_id=f"{parent.task_id}~i{iteration}c{k}",
                question=obj["question"],
                test_method=TestMethod.STDIO,
                tests=tuple(zip(obj["test_input"], obj["test_output"], strict=True)),
                time_limit_s=time_limit_s,
                source="env",
            )
            spec_text = json.dumps(task.spec(), ensure_ascii=False)
        chosen = check.valid and not chosen_done
        chosen_done = chosen_done or chosen
        rows.append(
            {
                "iteration": iteration,
                "slot_id": slot_id,
                "parent_task_id": parent.task_id,
                "candidate_idx": k,
                "goal": goal,
                "prev_acc": prev_acc,
                "critic_feedback": json.dumps(feedback, ensure_ascii=False),
                "spec": spec_text,
                "valid": check.valid,
                "invalid_reason": check.reason,
                "chosen": chosen,
            }
        )
    schema = {
        "iteration": pl.Int64,
        "slot_id": pl.String,
        "parent_task_id": pl.String,
        "candidate_idx": pl.Int64,
        "goal": pl.String,
        "prev_acc": pl.Float64,
        "critic_feedback": pl.String,
        "spec": pl.String,
        "valid": pl.Boolean,
        "invalid_reason": pl.String,
        "chosen": pl.Boolean,
    }
    return validate("proposals", pl.DataFrame(rows, schema=schema), where=f"proposals for {slot_id}")
