"""No module in rla_core, flows or tasks grows past a size a reader can hold (like the README's length test).

A long file usually holds several things; split it by what each part does (the trainer became update,
launch, sft, logprobs, rows and checkpoints). The exceptions are listed with their reason.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 800
EXCEPTIONS: dict[str, int] = {}


def test_no_module_is_over_the_limit() -> None:
    over = {}
    for package in ("rla_core", "flows", "tasks"):
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > EXCEPTIONS.get(name, MAX_LINES):
                over[name] = lines
    assert over == {}, f"split these modules (limit {MAX_LINES} lines): {over}"
