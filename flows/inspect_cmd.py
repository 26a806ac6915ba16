"""`rla inspect`: pick columns and rows of an artifact and show them readably (or as CSV/JSON to pipe).

Filters (``--where``, repeatable, all must hold) are ``COLUMN OP VALUE`` with OP one of
``== != >= <= > <`` or ``~`` (substring); VALUE is read as the column's type (``step>=2``,
``action_valid==false``, ``task_id==t0``, ``response~boxed``).
"""

from __future__ import annotations

import re
import shutil
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from rla_core.errors import ConfigError

if TYPE_CHECKING:
    import polars as pl

_FILTER = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(==|!=|>=|<=|>|<|~)\s*(.*?)\s*$")


class OutputFormat(StrEnum):
    """How `rla inspect` prints: ``auto`` = a table if it fits the terminal, else one block per row."""

    AUTO = "auto"
    TABLE = "table"
    RECORDS = "records"
    CSV = "csv"
    JSON = "json"


def select_columns(df: pl.DataFrame, columns: str | None) -> pl.DataFrame:
    """Keep ``columns`` (comma-separated, in that order); a ConfigError lists the available ones."""
    if not columns:
        return df
    wanted = [c.strip() for c in columns.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in df.columns]
    if unknown:
        raise ConfigError(
            f"--columns: no column {', '.join(unknown)}; this artifact has: {', '.join(df.columns)}"
        )
    return df.select(wanted)


def _literal(df: pl.DataFrame, column: str, text: str) -> Any:
    import polars as pl

    dtype = df.schema[column]
    if text.lower() in ("null", "none"):
        return None
    try:
        if dtype == pl.Boolean:
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        if dtype.is_integer():
            return int(text)
        if dtype.is_float():
            return float(text)
    except ValueError:
        raise ConfigError(f"--where: '{text}' is not a {dtype} value for column '{column}'") from None
    return text.strip("'\"")


def apply_filters(df: pl.DataFrame, filters: list[str]) -> pl.DataFrame:
    """Rows where every ``COLUMN OP VALUE`` filter holds (see the module docstring)."""
    import polars as pl

    for text in filters:
        m = _FILTER.match(text)
        if m is None:
            raise ConfigError(f"--where '{text}': write COLUMN OP VALUE with OP one of == != >= <= > < ~")
        column, op, raw = m.groups()
        if column not in df.columns:
            raise ConfigError(
                f"--where '{text}': no column '{column}'; this artifact has: {', '.join(df.columns)}"
            )
        col = pl.col(column)
        if op == "~":
            df = df.filter(col.cast(pl.String).str.contains(raw, literal=True))
            continue
        value = _literal(df, column, raw)
        if value is None:
            df = df.filter(col.is_null() if op == "==" else col.is_not_null())
            continue
        expr = {"==": col == value, "!=": col != value, ">=": col >= value, "<=": col <= value,
                ">": col > value, "<": col < value}[op]  # fmt: skip
        df = df.filter(expr)
    return df


def shorten(value: Any, width: int) -> str:
    """One line of at most ``width`` characters: newlines shown as ⏎, the cut marked with …."""
    text = "null" if value is None else str(value)
    text = text.replace("\r", "").replace("\n", "⏎")
    return text if len(text) <= width else text[: max(width - 1, 1)] + "…"


def render(df: pl.DataFrame, fmt: OutputFormat, *, width: int, terminal_width: int | None = None) -> str:
    """The frame as text: CSV/JSON (full values, for pipes), a table, or one ``column: value`` block per row."""
    if fmt is OutputFormat.CSV:
        return df.write_csv()
    if fmt is OutputFormat.JSON:
        return df.write_ndjson()
    cols = terminal_width or shutil.get_terminal_size((160, 40)).columns
    cells = [[shorten(v, width) for v in row] for row in df.iter_rows()]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(df.columns)]
    fits = sum(widths) + 3 * len(widths) <= cols
    if fmt is OutputFormat.TABLE or (fmt is OutputFormat.AUTO and fits):
        line = " | ".join(c.ljust(w) for c, w in zip(df.columns, widths, strict=True))
        rule = "-+-".join("-" * w for w in widths)
        body = [" | ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
        return "\n".join([line, rule, *body])
    name_w = max((len(c) for c in df.columns), default=0)
    blocks = []
    for i, row in enumerate(cells):
        lines = [f"── row {i} " + "─" * 20]
        lines += [f"{c.rjust(name_w)}: {v}" for c, v in zip(df.columns, row, strict=True)]
        blocks.append("\n".join(lines))
    return "\n".join(blocks)
