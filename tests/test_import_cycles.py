"""The server and protocol packages import without cycles, counting the imports made inside
functions (which hide a cycle from Python until a call runs them)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BACKEND = Path(__file__).resolve().parents[2] / "backend"


def import_graph(package: str) -> dict[str, set[str]]:
    """{module: the modules of ``package`` it imports anywhere in its source}, names relative
    to ``package`` (e.g. ``"worker"``)."""
    folder = BACKEND.joinpath(*package.split("."))
    modules = {path.stem for path in folder.glob("*.py")}
    graph = {}
    for module in modules:
        tree = ast.parse((folder / f"{module}.py").read_text())
        graph[module] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level == 1:
                    base = f"{package}.{base}".rstrip(".")
                names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            else:
                continue
            for name in names:
                head, _, rest = name.partition(f"{package}.")
                if head == "" and rest.split(".")[0] in modules:
                    graph[module].add(rest.split(".")[0])
        graph[module].discard(module)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_imports_inside_functions():
    graph = import_graph("diffrec.server")
    assert "worker" in graph["app"]  # executor_factory imports it when called
    assert "executor" in graph["job_process"]


@pytest.mark.parametrize("package", ["diffrec.server", "diffrec.protocol"])
def test_no_import_cycles(package):
    assert cycles(import_graph(package)) == []
