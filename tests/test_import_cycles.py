"""No package of the project has an import cycle, counting the imports made inside functions
(which hide a cycle from Python until a call runs them): the backend (``diffrec``, and
``diffrec_bench`` where it exists) and the add-on, module by module, across packages."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"diffrec": ROOT / "backend", "diffrec_bench": ROOT / "backend", "addon": ROOT}
"""Each top-level package and the folder it sits in."""


def modules(packages: dict[str, Path]) -> dict[str, Path]:
    """{dotted module name: its file} for every module of ``packages`` (a package is its
    ``__init__.py``); packages whose folder is missing are left out."""
    found = {}
    for top, base in packages.items():
        for path in sorted((base / top).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = path.relative_to(base).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that module ``name`` (file ``path``) imports anywhere in its
    source: ``from p import m`` counts as module ``p.m`` where that is a module, else as ``p``;
    relative imports are resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}".rstrip(".")
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return (found & known) - {name}


def import_graph(packages: dict[str, Path] = PACKAGES) -> dict[str, set[str]]:
    """{module: the project's modules it imports}, dotted names."""
    files = modules(packages)
    return {name: imported_modules(name, path, set(files)) for name, path in files.items()}


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


def test_the_graph_sees_imports_inside_functions_and_relative_ones():
    graph = import_graph()
    assert "diffrec.server.worker" in graph["diffrec.server.app"]  # imported when called
    assert "diffrec.server.executor" in graph["diffrec.server.job_process"]
    assert "addon.core.wire" in graph["addon.import_result"]  # from .core import wire
    assert "diffrec.raster._torch.texture_mip" in graph["diffrec.raster._torch.texture"]
    assert "diffrec.raster._torch" not in graph["diffrec.raster._torch.texture"], \
        "from a package import its module: an import of the module"


def test_the_graph_covers_every_package():
    graph = import_graph()
    tops = {name.split(".")[0] for name in graph}
    assert {"diffrec", "addon"} <= tops
    assert {name.rpartition(".")[0] for name in graph} >= {
        "diffrec.pipeline", "diffrec.server", "diffrec.protocol", "diffrec.raster._torch"}


def test_no_import_cycles():
    assert cycles(import_graph()) == []
