"""streamdb's modules import each other without cycles, and its folders stand in floors.

A cycle means two modules each need a piece of the other: the piece belongs
in a lower module both import. Imports inside functions count too, since
hiding an import in a function only defers the cycle to run time.

The floors (``FLOORS``, docs/ARCHITECTURE.md's layout) go from the ground up: a
folder (or a top-level module) imports only what stands on its own floor or
below, and no two of them import each other.  A new folder gets its floor here.
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
    assert "streamdb.dispatch.registry" in streams      # from ..dispatch.registry import command
    assert "streamdb.engine" in streams                 # from ..engine import Stream
    assert "streamdb.engine.ids" in streams             # from ..engine.ids import ...
    # Imported inside a function (server/lifecycle.py's AOF size at shutdown).
    assert "streamdb.persistence.aof" in graph["streamdb.server.lifecycle"]


def test_cycles_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


# From the ground up.  A unit is a folder of streamdb/ or one of its top-level modules.
FLOORS: list[tuple[str, set[str]]] = [
    ("ground", {"streamdb", "streamdb.compiled", "streamdb.config", "streamdb.files",
                "streamdb.glob", "streamdb.log", "streamdb.memory", "streamdb.tls"}),
    ("engine and protocol", {"streamdb.engine", "streamdb.protocol"}),
    ("dispatch", {"streamdb.dispatch"}),
    ("persistence and security", {"streamdb.persistence", "streamdb.security"}),
    ("replication", {"streamdb.replication"}),
    ("commands", {"streamdb.commands"}),
    ("server", {"streamdb.server"}),
    ("programs", {"streamdb.__main__", "streamdb.cli", "streamdb.spark"}),
]


def unit_of(module: str) -> str:
    """The folder (streamdb.engine) or top-level module (streamdb.config) ``module`` is in."""
    return ".".join(module.split(".")[:2])


def unit_imports(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """(importing unit, imported unit) -> the module imports behind it, across units only."""
    found: dict[tuple[str, str], list[str]] = {}
    for name, targets in graph.items():
        for target in targets:
            pair = (unit_of(name), unit_of(target))
            if pair[0] != pair[1]:
                found.setdefault(pair, []).append(f"{name} -> {target}")
    return found


def floor_breaches(graph: dict[str, set[str]]) -> list[str]:
    """Every import that runs up a floor, and every pair of units importing each other."""
    floor = {unit: i for i, (_, units) in enumerate(FLOORS) for unit in units}
    pairs = unit_imports(graph)
    breaches = []
    for (low, high), imports in sorted(pairs.items()):
        if floor[high] > floor[low]:
            breaches.append(f"up from {FLOORS[floor[low]][0]} to {FLOORS[floor[high]][0]}: "
                            + ", ".join(sorted(imports)))
        if (high, low) in pairs and low < high:
            breaches.append(f"{low} and {high} import each other")
    return breaches


def test_every_unit_has_a_floor() -> None:
    placed = set().union(*(units for _, units in FLOORS))
    assert {unit_of(name) for name in import_graph()} - placed == set()


def test_floor_breaches_finds_an_upward_import_and_a_pair() -> None:
    graph = {"streamdb.engine.stream": {"streamdb.server.core"},
             "streamdb.persistence.aof": {"streamdb.security.acl"},
             "streamdb.security.acl": {"streamdb.persistence.files"},
             "streamdb.server.core": set(), "streamdb.persistence.files": set()}
    breaches = floor_breaches(graph)
    assert breaches[0].startswith("up from engine and protocol to server: streamdb.engine.stream")
    assert "streamdb.persistence and streamdb.security import each other" in breaches


def test_imports_run_down_the_floors() -> None:
    assert floor_breaches(import_graph()) == []


if __name__ == "__main__":
    for component in cycles(import_graph()):
        print(" <-> ".join(component))
    for breach in floor_breaches(import_graph()):
        print(breach)
