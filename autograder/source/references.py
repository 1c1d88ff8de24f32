"""The course's reference modules as text, for a learner process, without what is being graded.

The learner process that serves one graded function gets the course's versions of the other
functions it uses (so that one mistake is charged once), and of no other, and never the course's
version of that function: in its module the definition is replaced by a stub that computes nothing, so there is
nothing to unwrap, copy or call. The stub keeps the name, so that importing it still works and
calling it is reported as a forbidden call (the tripwire on that name records it).
"""
from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from course import source_trees
from course.layout import REFERENCE, REPO, reference_module

from .shortcuts import names_reached

_FUNCTION_STUB = '''def {name}(*args, **kwargs):
    """The course's `{name}` is not available while `{name}` is graded."""
    raise RuntimeError("the course's own `{name}` is not available while `{name}` is graded: write it yourself")
'''

_CLASS_STUB = '''class {name}(__import__("torch").nn.Module):
    """The course's `{name}` is not available while `{name}` is graded."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, *args, **kwargs):
        raise RuntimeError("the course's own `{name}` is not available while `{name}` is graded: write it yourself")
'''


def without(source: str, name: str) -> str:
    """``source`` with every top-level definition of ``name`` replaced by a stub."""
    tree = source_trees.parse(source)
    lines = source.splitlines(keepends=True)
    found = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            stub = (_CLASS_STUB if isinstance(node, ast.ClassDef) else _FUNCTION_STUB).format(name=name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and name in {
            t.id for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)
        }:
            stub = _FUNCTION_STUB.format(name=name)
        else:
            continue
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
        found.append((start, node.end_lineno, stub))
    for start, end, stub in reversed(found):
        lines[start:end] = [stub]
    return "".join(lines)


@cache
def _read(folder: Path) -> tuple[tuple[str, str], ...]:
    if not (folder / "__init__.py").is_file():
        return ()
    sources = [(REFERENCE, (folder / "__init__.py").read_text(encoding="utf-8"))]
    for path in sorted(folder.glob("*.py")):
        if path.name != "__init__.py":
            sources.append((reference_module(path.stem), path.read_text(encoding="utf-8")))
    return tuple(sources)


@cache
def _withheld(folder: Path, notebook: str, names: frozenset[str]) -> tuple[tuple[str, str], ...]:
    module = reference_module(notebook)
    sources = []
    for name, text in _read(folder):
        if name == module:
            for withheld in sorted(names):
                text = without(text, withheld)
        sources.append((name, text))
    return tuple(sources)


def imported_modules(sources: list[str] | tuple[str, ...]) -> set[str]:
    """The reference modules that ``sources`` (code, as text) import."""
    found: set[str] = set()
    for source in sources:
        try:
            tree = source_trees.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue  # it cannot run, or the scan of shortcuts charges it as unread
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
            found |= {n for n in names if n.split(".")[0] == REFERENCE and n.count(".") == 1}
    return found


def reference_sources(notebook: str, function: str, folder: Path = REPO / REFERENCE, *,
                      graded: frozenset[str] = frozenset(), needs: frozenset[str] | None = None,
                      imports: frozenset[str] | None = None) -> dict[str, str]:
    """Every reference module by import name, with ``function`` of ``notebook`` withheld, and, when
    ``needs`` is given, every other function of ``graded`` too but those (and what they use).
    With ``imports`` (the reference modules the submission imports), only the notebook's own module
    and those, with what they import in turn, are sent: not the chapters it never uses."""
    withheld = {function}
    if needs is not None:
        module = dict(_read(folder)).get(reference_module(notebook), "")
        kept = names_reached(module, set(needs) - {function}, graded) if module else set()
        withheld |= set(graded) - kept
    sources = dict(_withheld(folder, notebook, frozenset(withheld)))
    if imports is None:
        return sources
    wanted, todo = {REFERENCE}, [reference_module(notebook), *imports]
    while todo:
        name = todo.pop()
        if name in sources and name not in wanted:
            wanted.add(name)
            todo += sorted(imported_modules([sources[name]]))
    return {name: text for name, text in sources.items() if name in wanted}
