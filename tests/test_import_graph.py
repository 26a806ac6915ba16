"""The project's import graph has no cycle (issue 25): built with the AST walk that stage code versions use."""

from __future__ import annotations

from tasks.code_closure import CodeIndex


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


def test_cycle_finder_on_a_hand_made_graph() -> None:
    # a -> b -> c -> a is one cycle; d -> a hangs off it; e -> e is a self-import, not a cycle here.
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_the_project_import_graph_has_no_cycle() -> None:
    index = CodeIndex.default()
    graph = {name: index.imports_of(name) for name in index.modules()}
    assert len(graph) > 90 and sum(len(v) for v in graph.values()) > 200  # the real graph, not an empty one
    assert _cycles(graph) == []
