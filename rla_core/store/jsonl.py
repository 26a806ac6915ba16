"""Reading a JSONL input file (task and problem files): one JSON value per line, blank lines skipped."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple


class JsonLine(NamedTuple):
    """One non-blank line of a JSONL file: its number (from 1) and its value, or why it is not JSON."""

    lineno: int
    value: Any
    error: json.JSONDecodeError | None


def jsonl_lines(path: Path) -> Iterator[JsonLine]:
    """Each non-blank line of ``path`` (UTF-8), parsed; the caller words the error of a line that is not JSON."""
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield JsonLine(lineno, json.loads(line), None)
        except json.JSONDecodeError as exc:
            yield JsonLine(lineno, None, exc)
