"""Coding task loading and validation (rla_core/coding/tasks.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rla_core.coding.tasks import CodingTask, TestMethod, load_humaneval, load_problems
from rla_core.errors import EnvironmentSpecError

DATA = Path(__file__).resolve().parents[2] / "data" / "coding"


def test_shipped_problem_sets_are_valid() -> None:
    train, bad_train = load_problems(DATA / "problems.jsonl")
    held_out, bad_eval = load_problems(DATA / "eval.jsonl")
    assert (len(train), len(held_out), bad_train, bad_eval) == (12, 4, [], [])
    assert all(len(t.tests) >= 4 and t.solution for t in train + held_out)
    assert not {t.task_id for t in train} & {t.task_id for t in held_out}


def test_malformed_problems_are_recorded_with_id_field_and_reason(tmp_path: Path) -> None:
    good = {"task_id": "ok", "question": "q", "test_input": ["1"], "test_output": ["1"]}
    lines = [
        json.dumps(good),
        json.dumps({**good, "task_id": "uneq", "test_output": ["1", "2"]}),
        json.dumps({**good, "task_id": "empty", "test_input": [], "test_output": []}),
        json.dumps({**good, "task_id": "types", "test_input": [1]}),
        json.dumps({**good, "task_id": "blank", "test_output": ["  "]}),
        json.dumps({**good, "task_id": "method", "test_method": "gui"}),
        json.dumps({**good, "task_id": "fn", "test_method": "function"}),
        "{not json",
    ]
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(lines) + "\n")
    tasks, invalid = load_problems(path)
    assert [t.task_id for t in tasks] == ["ok"]
    reasons = {p.task_id: p.reason for p in invalid}
    assert "unequal lengths 1 and 2" in reasons["uneq"]
    assert "field 'test_input' is empty" in reasons["empty"]
    assert "test_input[0]/test_output[0]" in reasons["types"] and "strings" in reasons["types"]
    assert "invalid test" in reasons["blank"]
    assert "test_method" in reasons["method"]
    assert "entry_point" in reasons["fn"]
    assert reasons[None].startswith("not valid JSON")
    assert all("problem '" in p.reason for p in invalid if p.task_id)


def test_duplicate_ids_and_missing_file_raise(tmp_path: Path) -> None:
    line = json.dumps({"task_id": "a", "question": "q", "test_input": ["1"], "test_output": ["1"]})
    path = tmp_path / "dup.jsonl"
    path.write_text(line + "\n" + line + "\n")
    with pytest.raises(EnvironmentSpecError, match="duplicate task_id 'a'"):
        load_problems(path)
    with pytest.raises(EnvironmentSpecError, match="does not exist"):
        load_problems(tmp_path / "missing.jsonl")


def test_spec_round_trip_and_humaneval() -> None:
    train, _ = load_problems(DATA / "problems.jsonl")
    assert CodingTask.from_spec(train[0].spec()) == train[0]
    he = load_humaneval()
    assert len(he) == 164
    first = he[0]
    assert first.test_method is TestMethod.FUNCTION and first.entry_point == "has_close_elements"
    assert first.tests == (("check(has_close_elements)", "None"),)
    assert CodingTask.from_spec(first.spec()) == first
