"""The one JSONL line reader behind the task and problem files."""

from __future__ import annotations

import json
from pathlib import Path

from rla_core.store.jsonl import JsonLine, jsonl_lines


def test_lines_are_numbered_from_one_blank_ones_skipped_bad_ones_carry_their_error(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"a": 1}\n\n   \n[2, 3]\n{"b": \n"x"\n', encoding="utf-8")
    lines = list(jsonl_lines(path))
    assert [line.lineno for line in lines] == [1, 4, 5, 6]
    assert lines[0] == JsonLine(1, {"a": 1}, None)
    assert lines[1] == JsonLine(4, [2, 3], None)
    assert lines[2].value is None and isinstance(lines[2].error, json.JSONDecodeError)
    assert lines[3] == JsonLine(6, "x", None)


def test_an_empty_file_has_no_lines(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n", encoding="utf-8")
    assert list(jsonl_lines(path)) == []
