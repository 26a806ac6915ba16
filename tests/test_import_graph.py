"""Every import of the project respects the layers of docs/architecture.md, and the import graph has no cycle.

The layer list is read from the doc ("The design contract", **Layers.**): each numbered item names its
paths in backticks before the first colon, and a module may import only modules of its own layer or of
the layers above it. The edges are every ``import`` / ``from … import`` statement of a module, at module
level, inside functions and under ``TYPE_CHECKING`` alike, resolved to the module they name: ``from
rla_core.settings import adapter_for`` is an edge to the package face ``rla_core.settings`` (even from
inside that package), ``from rla_core.settings.base import X`` only to ``rla_core.settings.base`` (Python
runs the parent package's face first either way, but that face is the parent's business, not an import
this module chose).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tasks.code_closure import CodeIndex

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def read_layers(text: str) -> list[list[str]]:
    """The paths of each layer, top first, from the doc's **Layers.** list."""
    start = text.index("**Layers.**")
    end = text.index("**Stages.**", start)
    layers: list[list[str]] = []
    for line in text[start:end].splitlines():
        item = re.match(r"(\d+)\. (.*)", line)
        if item is None:
            continue
        assert int(item.group(1)) == len(layers) + 1, f"layer items out of order at: {line}"
        head = item.group(2).split(": ", 1)[0]
        layers.append(re.findall(r"`([^`]+)`", head))
    return layers


def layer_of(path: str, layers: list[list[str]]) -> int | None:
    """The index of the layer holding a file (its path relative to the project root); None: unplaced."""
    best: tuple[int, int] | None = None  # (length of the matching entry, layer)
    for i, entries in enumerate(layers):
        for entry in entries:
            hit = path.startswith(entry) if entry.endswith("/") else path == entry
            if hit and (best is None or len(entry) > best[0]):
                best = (len(entry), i)
    return None if best is None else best[1]


def direct_imports(index: CodeIndex, name: str) -> set[str]:
    """The project modules ``name``'s import statements name, each resolved to the most specific module."""
    module = index.find(name)
    assert module is not None, name
    package = module.name if module.is_package else module.name.rpartition(".")[0]

    def deepest(dotted: str) -> str | None:
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            found = index.find(".".join(parts[:i]))
            if found is not None:
                return found.name
        return None

    out: set[str] = set()
    for node in ast.walk(ast.parse(module.path.read_bytes(), filename=str(module.path))):
        targets: list[str | None] = []
        if isinstance(node, ast.Import):
            targets = [deepest(alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - (node.level - 1)])
                base = f"{anchor}.{node.module}" if node.module else anchor
            else:
                base = node.module or ""
            # `from pkg import name`: the submodule pkg.name if there is one, else pkg's face (or deeper).
            targets = [deepest(f"{base}.{alias.name}") for alias in node.names]
        out.update(t for t in targets if t is not None)
    return out - {name}


def layer_violations(graph: dict[str, set[str]], layer: dict[str, int]) -> list[str]:
    """'a -> b' for every edge from a module to one of a lower layer (a higher index), sorted."""
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets if layer[b] > layer[a])


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _project() -> tuple[dict[str, set[str]], dict[str, int | None]]:
    index = CodeIndex.default()
    layers = read_layers(ARCHITECTURE.read_text(encoding="utf-8"))
    graph = {name: direct_imports(index, name) for name in index.modules()}
    placed = {}
    for name in graph:
        found = index.find(name)
        assert found is not None
        placed[name] = layer_of(found.path.relative_to(ROOT).as_posix(), layers)
    return graph, placed


def test_cycle_finder_on_a_hand_made_graph() -> None:
    # a -> b -> c -> a is one cycle; d -> a hangs off it; e -> e is a self-import, not a cycle here.
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_the_layer_check_catches_an_import_that_points_down() -> None:
    # Layers, top first: 0 = `core/base.py`, 1 = `core/adapters/`, 2 = `core/dispatch.py`.
    layers = read_layers(
        "**Layers.** Each layer imports only the ones above it.\n\n"
        "1. `core/base.py`: the base.\n2. `core/adapters/`: adapters.\n3. `core/dispatch.py`: dispatch.\n\n"
        "**Stages.**"
    )
    assert layers == [["core/base.py"], ["core/adapters/"], ["core/dispatch.py"]]
    files = {"base": "core/base.py", "gui": "core/adapters/gui.py", "face": "core/adapters/__init__.py"}
    files["dispatch"] = "core/dispatch.py"
    layer = {name: layer_of(path, layers) for name, path in files.items()}
    assert layer == {"base": 0, "gui": 1, "face": 1, "dispatch": 2}
    # dispatch -> face -> gui -> base point up: fine. An adapter importing the dispatch layer points down
    # (the deliberate violation), and the face <-> gui pair is a cycle inside one layer.
    graph = {"dispatch": {"face"}, "face": {"gui"}, "gui": {"base", "face", "dispatch"}, "base": set()}
    assert layer_violations(graph, {k: v for k, v in layer.items() if v is not None}) == ["gui -> dispatch"]
    assert _cycles(graph) == [["dispatch", "face", "gui"]]


def test_an_import_of_the_own_package_face_is_an_edge() -> None:
    index = CodeIndex.at(ROOT)
    # tasks/rollout.py names rla_core.stage_inputs (a module) and tasks.stage (a module), not their packages.
    edges = direct_imports(index, "tasks.rollout")
    assert "rla_core.stage_inputs" in edges and "rla_core" not in edges and "tasks" not in edges


def test_every_module_is_in_a_layer_of_the_doc() -> None:
    graph, placed = _project()
    assert len(graph) > 90 and sum(len(v) for v in graph.values()) > 200  # the real graph, not an empty one
    assert [name for name, layer in placed.items() if layer is None] == []


def test_every_import_respects_the_layers() -> None:
    graph, placed = _project()
    layer = {name: value for name, value in placed.items() if value is not None}
    assert layer_violations(graph, layer) == []


def test_the_project_import_graph_has_no_cycle() -> None:
    graph, _placed = _project()
    assert _cycles(graph) == []
