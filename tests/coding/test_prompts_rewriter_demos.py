"""Prompts, unit-test parsing, problem rewriting and warm-start demos (rla_core/coding)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rla_core.algo.parsing import parse_unit_test
from rla_core.coding.demos import policy_demo_rows, unit_test_demo_rows
from rla_core.coding.prompts import TEMPLATES, policy_prompt, template_version, unit_test_prompt
from rla_core.coding.rewriter import critic_feedback, proposal_rows, rewrite_prompt, validate_candidate
from rla_core.coding.tasks import CodingTask, TestMethod, load_problems
from rla_core.coding.unit_tests import extract_program
from rla_core.sandbox.runner import Sandbox

DATA = Path(__file__).resolve().parents[2] / "data" / "coding"
ROOT = CodingTask(
    task_id="sum-two",
    question="Read a and b. Print a + b.",
    test_method=TestMethod.STDIO,
    tests=(("1 2", "3"), ("-5 5", "0"), ("x" * 101, "1"), ("0 0", "0")),
)


def test_prompts_are_faithful_short_and_versioned() -> None:
    p = policy_prompt(ROOT.question, test_method=TestMethod.STDIO)
    assert "input()" in p and "print()" in p and "```python" in p and ROOT.question in p
    u = unit_test_prompt(ROOT.question, test_method=TestMethod.STDIO)
    for phrase in (
        "rigorous unit-test designer",
        "exactly ONE correct and discriminative",
        "**Test Input:**",
        "**Test Output:**",
        "**Explanation:**",
    ):
        assert phrase in u
    f = unit_test_prompt("def add(a, b): ...", test_method=TestMethod.FUNCTION, entry_point="add")
    assert "add(...)" in f and "assert <call> == <expected>" in f
    # Under ~400 tokens: a word count (≈ 0.75 tokens per word for English) well below 300.
    assert all(len(t.split()) < 150 for t in TEMPLATES.values())
    versions = {template_version(n) for n in TEMPLATES}
    assert len(versions) == 4 and all(len(v) == 12 for v in versions)


def test_extract_program_takes_last_python_block() -> None:
    text = "think\n```python\nprint(1)\n```\nbetter:\n```python\nprint(2)\n```"
    assert extract_program(text).value == "print(2)"
    assert not extract_program("no code here").valid


def test_critic_feedback_keeps_rates_aligned_after_filtering() -> None:
    fb = critic_feedback(
        gt_tests=ROOT.tests,
        gt_rates=[1.0, 0.25, 0.5, 0.75],
        generated_tests=[("", "3"), ("2 2", "4")],
        generated_rates=[0.0, 0.5],
        max_chars=100,
    )
    # GT test 2 (101-char input) is dropped; test 3 keeps ITS rate 0.75 (the reference would show 0.5).
    assert [(e["idx"], e["pass_rate"]) for e in fb["gt"]] == [(0, 1.0), (1, 0.25), (3, 0.75)]
    # Generated test 0 has an empty input → dropped; test 1 keeps 0.5.
    assert [(e["idx"], e["pass_rate"]) for e in fb["generated"]] == [(1, 0.5)]
    prompt = rewrite_prompt(
        root=ROOT,
        current=ROOT,
        feedback=fb,
        goal="harder",
        prev_acc=0.9,
        min_tests=4,
        time_limit_s=4.0,
        max_chars=100,
    )
    assert "HARDER" in prompt and "CRITICAL ANCHOR" in prompt and "may not be accurate" in prompt
    assert "x" * 101 not in prompt
    with pytest.raises(ValueError, match="goal"):
        rewrite_prompt(
            root=ROOT,
            current=ROOT,
            feedback=fb,
            goal="sideways",
            prev_acc=0.9,
            min_tests=4,
            time_limit_s=4.0,
            max_chars=100,
        )


def _cand(**kw: object) -> str:
    base: dict[str, object] = {
        "question": "Print a*b.",
        "test_method": "stdio",
        "test_input": ["1 2", "2 3", "0 5", "4 4"],
        "test_output": ["2", "6", "0", "16"],
    }
    base.update(kw)
    return "Sure, here it is: " + json.dumps(base)


def test_candidate_validation_and_first_valid_is_chosen() -> None:
    assert validate_candidate(_cand(), min_tests=4).valid
    cases = {
        "no json at all": "no '{' in text",
        _cand(question=""): "question",
        _cand(test_output=["2", "6", "0"]): "4 items but 'test_output' has 3",
        _cand(test_input=["1"], test_output=["1"]): "at least 4",
        _cand(test_output=["2", 6, "0", "16"]): "must be strings",
        _cand(test_method="function"): "stdio",
        _cand(test_input=["1 2", "", "0 5", "4 4"]): "empty",
    }
    for text, reason in cases.items():
        res = validate_candidate(text, min_tests=4)
        assert not res.valid and reason in (res.reason or ""), (text, res.reason)
    df = proposal_rows(
        iteration=2,
        slot_id="s0",
        parent=ROOT,
        goal="harder",
        prev_acc=0.9,
        feedback={"gt": [], "generated": []},
        candidates=[_cand(question=""), _cand(), _cand(question="Print a-b.")],
        min_tests=4,
        time_limit_s=4.0,
    )
    assert df["valid"].to_list() == [False, True, True]
    assert df["chosen"].to_list() == [False, True, False]
    spec = json.loads(df["spec"][1])
    new = CodingTask.from_spec(spec)
    assert new.time_limit_s == 4.0 and new.source == "env" and new.tests[3] == ("4 4", "16")


def test_warm_start_demos_round_trip() -> None:
    tasks, _ = load_problems(DATA / "problems.jsonl")
    pol = policy_demo_rows(tasks)
    assert pol.height == 12
    assert [extract_program(r).value for r in pol["response"]] == [
        t.solution.strip() for t in tasks if t.solution
    ]
    uts = unit_test_demo_rows(tasks[:3], sandbox=Sandbox(max_parallel=2))
    parsed = [parse_unit_test(r).value for r in uts["response"]]
    # Outputs come from running each reference solution on its first GT input.
    assert parsed == [("1 2", "3"), ("abc", "cba"), ("3\n1 5 2", "5")]
    assert all("rigorous unit-test designer" in p for p in uts["prompt"])
