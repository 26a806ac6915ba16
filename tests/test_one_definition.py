"""Facts declared once: one seed derivation, one stage-seed function."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _definitions(name: str) -> list[str]:
    """``path:line`` of every function called ``name`` in the project packages."""
    found = []
    for pkg in ("rla_core", "tasks", "flows"):
        for path in sorted((REPO / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.FunctionDef) and node.name == name:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def test_one_derive_seed_and_one_stage_seed() -> None:
    assert [d.split(":")[0] for d in _definitions("derive_seed")] == ["rla_core/algo/seeds.py"]
    assert [d.split(":")[0] for d in _definitions("stage_seed")] == ["tasks/stage.py"]
    assert _definitions("no_such_function_anywhere") == []  # the scan can come back empty
