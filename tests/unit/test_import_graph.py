"""streamdb's modules import each other without cycles.

A cycle means two modules each need a piece of the other: the piece belongs
in a lower module both import. Imports inside functions count too, since
hiding an import in a function only defers the cycle to run time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import streamdb

PACKAGE_ROOT = Path(streamdb.__file__).resolve().parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, name: str, modules: set[str]) -> set[str]:
    """Every streamdb module `path` imports, at any depth of its code."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import mod` names the submodule pkg.mod; any other name
            # comes from the module `base` itself.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            # The deepest streamdb module the dotted name names.
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE_ROOT.rglob("*.py")}
    modules = set(paths)
    return {name: imported_modules(path, name, modules) for name, path in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
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


def test_the_graph_sees_every_kind_of_import() -> None:
    graph = import_graph()
    streams = graph["streamdb.commands.streams"]
    assert "streamdb.commands.registry" in streams      # from .registry import command
    assert "streamdb.engine" in streams                 # from ..engine import Stream
    assert "streamdb.engine.ids" in streams             # from ..engine.ids import ...
    # Imported inside a function (security/acl.py's _all_specs).
    assert "streamdb.commands.registry" in graph["streamdb.security.acl"]


def test_cycles_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


if __name__ == "__main__":
    for component in cycles(import_graph()):
        print(" <-> ".join(component))
