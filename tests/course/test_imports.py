"""No import cycle among the course's packages.

A cycle means two modules each need the other, so one of them holds something in the wrong
place; it also makes what a module is for depend on the order the two are imported in. The graph
is read from the source, not from the import system, so that an import inside a function (made
late to keep a start fast, or to break a cycle by hiding it) counts as much as one at the top,
and so does ``importlib.import_module("a.literal.name")``. An edge goes to the module a statement
names (``from .calls import Case`` to ``harness.calls``, ``from harness import wire`` to
``harness.wire``), never to the packages above it, which Python imports on the way but which a
module does not ask for.
"""
from __future__ import annotations

import ast
from pathlib import Path

from course.layout import REPO

PACKAGES = ("autograder", "harness", "course", "transformer")

#: cycles still known, each with the reason it is tolerated; an entry goes once its cycle does
#: cycles tolerated for now, each with what removes it (none today)
KNOWN_CYCLES: set[frozenset[str]] = set()


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The course's modules that the module ``name`` (at ``path``) imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    named: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            named |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[: len(base) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            named |= {f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module for alias in node.names}
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            named.add(node.args[0].value)
    found = set()
    for module in named:
        while module and module not in modules:
            module = module.rpartition(".")[0]  # "a.b.function" names the module a.b
        if module and module != name:
            found.add(module)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imported(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            following = next(edges, None)
            if following is not None:
                if following not in index:
                    index[following] = low[following] = len(index)
                    stack.append(following)
                    on_stack.add(following)
                    work.append((following, iter(sorted(graph.get(following, ())))))
                elif following in on_stack:
                    low[node] = min(low[node], index[following])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_the_graph_sees_imports_inside_functions_and_by_name():
    graph = import_graph()
    assert "autograder.checks" in graph["autograder"]  # `from .checks import get`, inside `check`
    assert "harness.wire" in graph["harness.worker"]  # `from . import wire`, inside a method
    assert "harness.calls" in graph["harness.wire"]  # `from .calls import Case, ...`: the module, not the name


def test_cycles_are_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_the_course_imports_itself_through_others():
    found = [sorted(c) for c in cycles(import_graph()) if c not in KNOWN_CYCLES]
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)
