"""Counts of the environment seam's repeated rules, read from the source (no import of the code counted).

What each count measures (the patterns the house style retires):

* ``rewrite_rule_functions``: functions that state a part of the rewrite-validity rule themselves — a
  string they return says "identical to the parent", "off-anchor" or "not … than the parent" (docstrings
  are not read). The one generic check in ``rla_core.algo`` is counted apart (``generic``) from the
  engines' own parts (``engine``);
* ``success_rules``: comparisons of an episode's score with a threshold (``score > 0``, ``score >= 1.0``)
  outside ``rla_core.algo``;
* ``play_rollouts_calls``: call sites of ``play_rollouts`` (the replay loop) in ``rla_core``;
* ``preflight_setting_branches``: ``if`` tests in ``rla_core/preflight.py`` that compare with a member of
  ``Setting``, ``GuiEngine`` or ``TextGameEngine``;
* ``warm_start_setting_branches``: the same in ``rla_core/settings/warm_start.py``;
* ``inheritance_bases``: classes of ours that another class of ours derives from to inherit behaviour —
  not Protocols, exceptions, enums, pydantic models, named tuples or typed dicts (declarations of data),
  nor a dataclass record whose subclasses only add fields (and their ``__post_init__`` checks).

Run: ``python benchmarks/seam_counts.py [ROOT]`` (ROOT: a checkout, default this one); prints JSON, < 1 s.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rla_core", "tasks", "flows", "plugins", "examples")
RULE_TEXT = re.compile(r"identical to the parent|off-anchor|not \{?.*\}? ?than the parent")
ENUMS = {"Setting", "GuiEngine", "TextGameEngine"}
DATA_BASES = {
    "Protocol", "Exception", "RuntimeError", "ValueError", "Enum", "StrEnum", "IntEnum", "BaseModel",
    "NamedTuple", "TypedDict", "Generic", "object",
}  # fmt: skip


def _sources(root: Path, package: str) -> list[Path]:
    return sorted(p for p in (root / package).rglob("*.py") if ".venv" not in p.parts)


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def _strings(node: ast.AST) -> str:
    """Every string constant under ``node`` (f-string parts included) but docstrings, joined."""
    docs = {
        id(n.body[0].value)
        for n in ast.walk(node)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Module)
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    return " ".join(
        n.value
        for n in ast.walk(node)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    )


def rewrite_rule_functions(root: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {"generic": [], "engine": []}
    for path in _sources(root, "rla_core"):
        tree = ast.parse(path.read_text())
        for fn in _functions(tree):
            if RULE_TEXT.search(_strings(fn)):
                kind = "generic" if path.parent.name == "algo" else "engine"
                found[kind].append(f"{path.relative_to(root)}::{fn.name}")
    return found


def success_rules(root: Path) -> list[str]:
    """Comparisons ``<score> > 0`` / ``<score> >= 1.0`` outside ``rla_core.algo``."""
    out = []
    for path in _sources(root, "rla_core"):
        if path.parent.name == "algo":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Compare)
                and len(node.ops) == 1
                and isinstance(node.ops[0], ast.Gt | ast.GtE)
                and isinstance(node.comparators[0], ast.Constant)
                and node.comparators[0].value in (0, 1)
                and "score" in ast.unparse(node.left)
            ):
                out.append(f"{path.relative_to(root)}:{node.lineno}")
    return out


def play_rollouts_calls(root: Path) -> list[str]:
    out = []
    for path in _sources(root, "rla_core"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = (
                    node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                )
                if name == "play_rollouts":
                    out.append(f"{path.relative_to(root)}:{node.lineno}")
    return out


def setting_branches(path: Path) -> list[int]:
    """Line numbers of ``if`` tests in ``path`` that compare with a setting or engine member."""
    if not path.is_file():
        return []
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.If | ast.IfExp):
            compares = [c for c in ast.walk(node.test) if isinstance(c, ast.Compare)]
            if any(
                isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name) and a.value.id in ENUMS
                for c in compares
                for a in ast.walk(c)
            ):
                out.append(node.lineno)
    return out


def _base_names(cls: ast.ClassDef) -> list[str]:
    names = []
    for base in cls.bases:
        node = base.value if isinstance(base, ast.Subscript) else base
        names.append(node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", ""))
    return names


def _only_adds_fields(cls: ast.ClassDef) -> bool:
    """A dataclass that defines no method but ``__post_init__``: a record extended by fields."""
    decorated = any("dataclass" in ast.unparse(d) for d in cls.decorator_list)
    methods = {n.name for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    return decorated and methods <= {"__post_init__"}


def inheritance_bases(root: Path) -> list[str]:
    """Our classes that another of our classes derives from (data declarations left out, see above)."""
    classes: dict[str, tuple[str, list[str]]] = {}
    subclasses: dict[str, list[ast.ClassDef]] = {}
    for package in PACKAGES:
        for path in _sources(root, package):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    classes.setdefault(node.name, (str(path.relative_to(root)), _base_names(node)))
                    for base in _base_names(node):
                        subclasses.setdefault(base, []).append(node)

    def is_data(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name in DATA_BASES or name.endswith(("Error", "Exception")):
            return True
        if name not in classes or name in seen:
            return False
        return any(is_data(b, seen | {name}) for b in classes[name][1] if b not in ("ABC", "Generic"))

    derived_from = {b for _where, bases in classes.values() for b in bases}
    return sorted(
        f"{where}::{name}"
        for name, (where, _bases) in classes.items()
        if name in derived_from
        and not is_data(name)
        and not all(_only_adds_fields(sub) for sub in subclasses[name])
    )


def counts(root: Path = ROOT) -> dict[str, Any]:
    rules = rewrite_rule_functions(root)
    bases = inheritance_bases(root)
    calls = play_rollouts_calls(root)
    pre = setting_branches(root / "rla_core" / "preflight.py")
    warm = setting_branches(root / "rla_core" / "settings" / "warm_start.py")
    score = success_rules(root)
    return {
        "rewrite_rule_functions": {
            "generic": len(rules["generic"]),
            "engine": len(rules["engine"]),
            "where": rules,
        },
        "success_rules_outside_algo": {"count": len(score), "where": score},
        "play_rollouts_calls": {"count": len(calls), "where": calls},
        "preflight_setting_branches": {"count": len(pre), "lines": pre},
        "warm_start_setting_branches": {"count": len(warm), "lines": warm},
        "inheritance_bases": {"count": len(bases), "classes": bases},
    }


if __name__ == "__main__":
    print(json.dumps(counts(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT), indent=1))
