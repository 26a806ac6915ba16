"""Artifact schemas: the data dictionary matches SCHEMAS; validate() reports precisely."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from rla_core.errors import SchemaError
from rla_core.schemas import SCHEMAS, empty_frame, get_schema, validate

DICTIONARY = Path(__file__).resolve().parents[1] / "docs" / "data-dictionary.md"


def _dictionary_tables() -> dict[str, list[tuple[str, str, str]]]:
    """Parse '## `artifact`' sections into [(column, dtype, raw table line), ...] in table order."""
    tables: dict[str, list[tuple[str, str, str]]] = {}
    current: str | None = None
    for line in DICTIONARY.read_text(encoding="utf-8").splitlines():
        heading = re.fullmatch(r"## `([a-z_]+)`", line.strip())
        if heading:
            current = heading.group(1)
            tables[current] = []
        elif line.startswith("## "):
            current = None
        elif current is not None and (row := re.match(r"\| `([a-z0-9_]+)` \| ([\w()]+) \|", line)):
            tables[current].append((row.group(1), row.group(2), line))
    return tables


def test_dictionary_lists_exactly_the_schema_columns() -> None:
    tables = _dictionary_tables()
    assert sorted(tables) == sorted(SCHEMAS)
    for name, schema in SCHEMAS.items():
        documented = [(col, dtype) for col, dtype, _ in tables[name]]
        declared = [(col, str(dtype)) for col, dtype in schema.columns.items()]
        assert documented == declared, f"docs/data-dictionary.md section '{name}' is out of date"


def test_every_dictionary_row_has_a_meaning() -> None:
    rows = [line for table in _dictionary_tables().values() for _, _, line in table]
    assert len(rows) == sum(len(s.columns) for s in SCHEMAS.values())
    for line in rows:
        # column | dtype | meaning | values / units | null semantics
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 5, line
        assert cells[2], f"no meaning for {cells[0]}"
        assert cells[4], f"no null semantics for {cells[0]}"


def test_validate_accepts_and_reorders() -> None:
    # Columns given in reverse order come back in schema order.
    df = empty_frame("eval")
    back = validate("eval", df.select(list(reversed(df.columns))))
    assert back.columns == list(SCHEMAS["eval"].columns)


def test_validate_lists_missing_extra_and_mistyped() -> None:
    df = pl.DataFrame(
        {
            "iteration": [1],
            "task_id": [7],  # mistyped: Int64 instead of String
            "rollout_id": [0],
            "outcome": ["won"],  # mistyped: String instead of Float64
            "surprise": [True],  # extra
            # missing: steps, invalid_actions and the episode status columns
        }
    )
    with pytest.raises(SchemaError) as err:
        validate("eval", df, where="unit-test")
    message = str(err.value)
    assert "artifact 'eval' at unit-test does not match schema v1" in message
    assert (
        "missing columns ['steps', 'invalid_actions', 'status', 'error_kind', 'error_message', 'attempt']"
        in message
    )
    assert "extra columns ['surprise']" in message
    assert "task_id is Int64, expected String" in message
    assert "outcome is String, expected Float64" in message


def test_validate_casts_numeric_width_and_all_null() -> None:
    df = pl.DataFrame(
        {
            "iteration": pl.Series([1], dtype=pl.Int32),  # Int32 → Int64
            "task_id": ["t"],
            "rollout_id": [0],
            "outcome": [1],  # Int64 → Float64: integers widen to floats
            "steps": [3],
            "invalid_actions": pl.Series([None], dtype=pl.Null),  # all-null → Int64
            "status": ["won"],
            "error_kind": [None],  # all-null → String
            "error_message": [None],
            "attempt": pl.Series([0], dtype=pl.Int32),
        }
    )
    back = validate("eval", df)
    assert back.schema == get_schema("eval").polars_schema
    assert back.row(0) == (1, "t", 0, 1.0, 3, None, "won", None, None, 0)


def test_validate_refuses_float_to_int() -> None:
    df = empty_frame("eval").with_columns(pl.col("steps").cast(pl.Float64))
    with pytest.raises(SchemaError, match="steps is Float64, expected Int64"):
        validate("eval", df)


def test_unknown_artifact_lists_known_ones() -> None:
    with pytest.raises(SchemaError, match="unknown artifact 'rollout'; known artifacts: tasks, rollouts"):
        get_schema("rollout")


def test_fingerprint_changes_with_dtype() -> None:
    schema = get_schema("eval")
    changed = type(schema)(
        name=schema.name,
        version=schema.version,
        columns={**schema.columns, "steps": pl.Float64()},
        description=schema.description,
    )
    assert schema.fingerprint() != changed.fingerprint()
    assert schema.fingerprint().endswith("@v1")


def test_a_stored_frame_written_before_an_added_column_reads_with_nulls() -> None:
    """Rollouts written before ``next_observation_ref``, ``images``, the episode status and the recorded
    tokens existed stay readable; a new frame must have them."""
    schema = get_schema("rollouts")
    status = ("status", "error_kind", "error_message", "attempt")
    tokens = ("prompt_ids", "response_ids", "response_logprobs")
    assert schema.added == ("next_observation_ref", "images", *status, *tokens)
    old = empty_frame("rollouts").drop("next_observation_ref", "images", *status, *tokens)
    old = pl.concat([old, pl.DataFrame([{c: None for c in old.columns}], schema=old.schema)])
    back = validate("rollouts", old, written_before=True)
    assert back.columns == list(schema.columns)
    assert back["next_observation_ref"].to_list() == [None] and back["images"].to_list() == [None]
    assert back.schema["images"] == pl.List(pl.String)
    assert back.select(status).row(0) == (None, None, None, None)
    assert back.select(tokens).row(0) == (None, None, None)
    assert back.schema["response_ids"] == pl.List(pl.Int64)
    with pytest.raises(SchemaError, match=r"missing columns \['images', 'next_observation_ref', 'status'"):
        validate("rollouts", old)
