"""MiniWoB++ task specs and task families of increasing difficulty (spec §3.3 spirit).

A task spec is ``{"task": <MiniWoB name>, "seed": <int>, "hint_level": 0|1|2}``:

* ``task`` picks the page (``miniwob/html/miniwob/<task>.html``), ``seed`` the instance
  (``Math.seedrandom``), so the n rollouts of a task all play the same instance;
* ``hint_level`` 0 = the task's own instruction; 1 = plus a hint naming the first expert action;
  2 = plus, at every step, the expert's next action appended to the observation.

Difficulty is ordered by (rank of the task in its family, fewer hints): :func:`difficulty`.

Example:
    >>> family_of("enter-text")
    'text'
    >>> difficulty({"task": "click-test-2", "seed": 0, "hint_level": 1})
    (1, -1)
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from rla_core.errors import EnvironmentSpecError
from rla_core.store.jsonl import jsonl_lines

SPEC_KEYS = ("hint_level", "seed", "task")
MAX_HINT_LEVEL = 2
MAX_SEED = 2**31 - 1

# Families, easiest first: a rewrite moves within its family (the anchor, like the root task of §3.2).
FAMILIES: dict[str, tuple[str, ...]] = {
    "click": ("click-test", "click-test-2", "click-button", "click-button-sequence"),
    "select": ("click-link", "click-tab", "click-option", "click-checkboxes"),
    "text": ("focus-text", "focus-text-2", "enter-text", "enter-password", "login-user"),
}


def default_html_dir() -> Path:
    """The ``html`` folder shipped inside the ``miniwob`` package."""
    import miniwob

    return Path(miniwob.__file__).parent / "html"


def available_tasks(html_dir: Path) -> list[str]:
    """Task names with a page under ``html_dir/miniwob``."""
    return sorted(p.stem for p in (html_dir / "miniwob").glob("*.html"))


def family_of(task: str) -> str | None:
    """The family a task belongs to (None for tasks outside the families)."""
    for name, members in FAMILIES.items():
        if task in members:
            return name
    return None


def difficulty(spec: dict[str, Any]) -> tuple[int, int]:
    """Sort key, harder is larger: (rank in its family, -hint_level); rank 0 outside the families."""
    family = family_of(spec["task"])
    rank = FAMILIES[family].index(spec["task"]) if family is not None else 0
    return rank, -int(spec["hint_level"])


def check_spec(spec: dict[str, Any], *, known_tasks: list[str]) -> None:
    """Raise EnvironmentSpecError (what, where, how to fix) unless ``spec`` is a valid task spec."""
    if not isinstance(spec, dict):
        raise EnvironmentSpecError(f"a MiniWoB task spec must be a dict with keys {SPEC_KEYS}, got {spec!r}")
    unknown, missing = sorted(set(spec) - set(SPEC_KEYS)), sorted(set(SPEC_KEYS) - set(spec))
    if unknown or missing:
        raise EnvironmentSpecError(
            f"MiniWoB spec {spec!r}: unknown keys {unknown}, missing keys {missing}; "
            f"a spec has exactly the keys {list(SPEC_KEYS)}"
        )
    task = spec["task"]
    if not isinstance(task, str) or task not in known_tasks:
        close = difflib.get_close_matches(str(task), known_tasks, n=3)
        raise EnvironmentSpecError(
            f"unknown MiniWoB task {task!r} in spec {spec!r}; "
            f"{'did you mean ' + ', '.join(close) + '? ' if close else ''}"
            f"the {len(known_tasks)} tasks are the pages of miniwob/html/miniwob (e.g. click-test, enter-text)"
        )
    for key, high in (("seed", MAX_SEED), ("hint_level", MAX_HINT_LEVEL)):
        value = spec[key]
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
            raise EnvironmentSpecError(
                f"MiniWoB spec {spec!r}: '{key}' must be an integer in [0, {high}], got {value!r}"
            )


def load_specs(path: Path, *, known_tasks: list[str]) -> list[dict[str, Any]]:
    """Read a JSONL task file (one spec per line, blank lines skipped), validating every line."""
    specs = []
    for lineno, spec, error in jsonl_lines(path):
        if error is not None:
            raise EnvironmentSpecError(
                f"{path}:{lineno}: not valid JSON ({error}); one spec per line"
            ) from error
        try:
            check_spec(spec, known_tasks=known_tasks)
        except EnvironmentSpecError as exc:
            raise EnvironmentSpecError(f"{path}:{lineno}: {exc}") from exc
        specs.append(spec)
    return specs
