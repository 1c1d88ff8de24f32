"""Shortcuts judged where the learner cannot reach: the submission's source, read in the grader's
process before any of it runs.

Two kinds of rule:

* **Forbidden** uses cost points. A function may not call what its exercise asks to build (its
  check's ``forbidden`` names and ``forbidden_ops`` fragments, reached under any alias:
  ``from torch import softmax as s``, ``F = torch.nn.functional``, ``getattr(torch, "softmax")``,
  a Tensor method). No code of a submission may use torch's private internals (``torch._C``,
  ``torch._VF``, ``torch.ops``, ``native_*`` kernels), reach inside functions or frames
  (``__closure__``, ``__globals__``, ``sys._getframe``, ...), run code from text (``eval``,
  ``exec``, ``compile``), import the grader's packages or the course's own model and tools, or
  name a torch attribute or module it computes at run time. The first kind costs the function
  that reaches the use; the second costs every function, since such code runs in every process.
* **Review** flags mark what cannot be decided from the source (a computed ``getattr`` on an
  object of unknown kind, ``globals()``, ``ctypes``, ``gc``, ``inspect``, changing torch's
  attributes): the instructor is told, the score stands.

Cells the instructor's notebook gives (unchanged) are read for the names they bind but never
judged: the course's own code is not the learner's doing.
"""
from __future__ import annotations

import ast
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from course import source_trees
from harness.calls import watched_names

#: what every rule of the second kind says, by its key
RULES = {
    "private": "torch's private internals (torch._C, torch._VF, torch.ops, native_* kernels) reach its built-ins "
               "past every check",
    "inside": "reaching inside functions or frames takes what the course's code keeps there",
    "text": "eval, exec and compile run code the grader cannot read",
    "grader": "the grader's own packages hold its checks and oracles",
    "course": "the course's model and tools hold complete implementations",
    "computed": "a torch attribute or module named at run time cannot be checked",
}
#: the review flags, by key
REVIEW = {
    "getattr": "an attribute named at run time (getattr, setattr, delattr)",
    "namespace": "a namespace read as a dictionary (globals, vars, locals, __dict__, sys.modules)",
    "lowlevel": "a module that reaches past Python's own rules",
    "import": "a module imported by a name computed at run time",
    "patch": "an attribute of torch changed",
    "star": "a star import, whose names cannot be followed",
}
GRADER_PACKAGES = ("autograder", "harness")
#: what the notebooks themselves import from the grader, and the sandbox provides: the notebook's
#: test runner (which does nothing there) and the toy models
NOTEBOOK_IMPORTS = ("autograder", "autograder.check", "autograder.toys")
COURSE_PACKAGES = ("course", "transformer", "solutions")
LOW_LEVEL = ("ctypes", "gc", "inspect", "marshal", "pickle", "dill", "builtins", "mmap", "sysv_ipc", "posix_ipc")
INSIDE = frozenset({"__closure__", "cell_contents", "__globals__", "__code__", "__wrapped__", "__builtins__",
                    "f_globals", "f_locals", "f_back", "f_code", "tb_frame", "gi_frame", "cr_frame", "_getframe"})
NAMESPACES = frozenset({"globals", "vars", "locals"})
TEXT = frozenset({"eval", "exec", "compile"})


@dataclass(frozen=True)
class Finding:
    rule: str  # a key of RULES or REVIEW, or "forbidden"
    what: str  # the construct, as the grader resolved it
    cell: int  # index among the submission's code cells
    line: int

    def where(self, cells: Sequence[str]) -> str:
        from .session import cell_name

        return f"line {self.line} of {cell_name(self.cell, cells[self.cell])}" if self.cell < len(cells) else ""


@dataclass
class Scan:
    cells: Sequence[str]
    #: graded function -> the forbidden uses that cost it its points
    forbidden: dict[str, list[Finding]] = field(default_factory=dict)
    #: what the instructor should look at
    review: list[Finding] = field(default_factory=list)
    #: graded function -> the other graded functions it reads by name (directly or through the
    #: learner's own helpers): the course's versions of these, and no others, go to its process
    needs: dict[str, set[str]] = field(default_factory=dict)

    def message(self, function: str) -> str | None:
        """Why ``function`` scores 0, for the learner; None when nothing forbidden is reached."""
        found = self.forbidden.get(function)
        if not found:
            return None
        first = found[0]
        if first.rule == "forbidden":
            return (f"`{function}` calls {first.what}, which this exercise asks you to build yourself "
                    f"({first.where(self.cells)}): write it with basic tensor operations instead.")
        return (f"`{function}` scores 0: {first.where(self.cells)} uses `{first.what}`, and {RULES[first.rule]}. "
                "Graded code may not use it anywhere in the notebook.")

    def flags(self) -> list[str]:
        """One line per construct to review, for the instructor."""
        seen = dict.fromkeys(f"{REVIEW[f.rule]}: `{f.what}` ({f.where(self.cells)})" for f in self.review)
        return list(seen)


def _plain(name: str) -> str:
    return name.replace("_", "").lower()


class _Reader:
    """Resolves names to dotted paths (``F.softmax`` -> ``torch.nn.functional.softmax``) through
    the imports and plain assignments of every cell, then records what each statement uses."""

    def __init__(self, trees: Sequence[ast.Module]):
        self.aliases: dict[str, set[str]] = {}
        for tree in trees:
            for node in ast.walk(tree):
                self._bind(node)
        for _ in range(3):  # an alias of an alias
            for tree in trees:
                for node in ast.walk(tree):
                    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                        paths = self.resolve(node.value)
                        if paths:
                            self.aliases.setdefault(node.targets[0].id, set()).update(paths)

    def _bind(self, node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.aliases.setdefault(alias.asname, set()).add(alias.name)
                else:
                    root = alias.name.split(".")[0]
                    self.aliases.setdefault(root, set()).add(root)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if alias.name != "*":
                    self.aliases.setdefault(alias.asname or alias.name, set()).add(f"{node.module}.{alias.name}")

    def resolve(self, node: ast.AST) -> set[str]:
        if isinstance(node, ast.Name):
            return set(self.aliases.get(node.id, ()))
        if isinstance(node, ast.Attribute):
            return {f"{p}.{node.attr}" for p in self.resolve(node.value)}
        if _is_call(node, "getattr") and len(node.args) >= 2 and _constant(node.args[1]):
            return {f"{p}.{node.args[1].value}" for p in self.resolve(node.args[0])}
        return set()


def _is_call(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name


def _constant(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _universal(path: str) -> str | None:
    """The rule of the second kind a dotted path breaks, if any."""
    parts = path.split(".")
    root = parts[0]
    if root == "torch":
        if any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts[1:]):
            return "private"
        if parts[1:2] == ["ops"] or any(p.startswith("native_") for p in parts[1:]):
            return "private"
    if root in GRADER_PACKAGES:
        return "grader"
    if root in COURSE_PACKAGES:
        return "course"
    return None


@dataclass
class _Statement:
    cell: int
    node: ast.stmt
    trusted: bool
    binds: set[str]
    uses: set[str]
    #: (rule, what, line): uses that break a rule of the second kind, and what to review
    universal: list[tuple[str, str, int]] = field(default_factory=list)
    review: list[tuple[str, str, int]] = field(default_factory=list)
    #: (dotted path, line) of every name it resolves, and (attribute, line) of those it cannot
    paths: list[tuple[str, int]] = field(default_factory=list)
    attributes: list[tuple[str, int]] = field(default_factory=list)


def _names(stmt: ast.stmt) -> tuple[set[str], set[str]]:
    """(names the statement binds at the top level, global names it or any function inside it reads)."""
    try:
        table = source_trees.symbol_table(ast.unparse(stmt), "<cell>")
    except (SyntaxError, ValueError, RecursionError):
        return set(), set()
    binds = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    uses: set[str] = set()
    todo = [table]
    while todo:
        current = todo.pop()
        top = current.get_type() == "module"
        for symbol in current.get_symbols():
            if symbol.is_referenced() and (top or symbol.is_global()):
                uses.add(symbol.get_name())
            if not top and symbol.is_global() and symbol.is_assigned():
                binds.add(symbol.get_name())
        todo += current.get_children()
    return binds, uses


def _read(reader: _Reader, stmt: _Statement, allowed_imports: Collection[str]) -> None:
    """Record what one statement uses."""
    outer = {id(n.value) for n in ast.walk(stmt.node) if isinstance(n, ast.Attribute)}
    for node in ast.walk(stmt.node):
        line = getattr(node, "lineno", stmt.node.lineno)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if isinstance(node, ast.ImportFrom) and (node.level or not node.module):
                continue
            for alias in node.names:
                if alias.name == "*":
                    stmt.review.append(("star", f"from {node.module} import *", line))
                    continue
                full = alias.name if isinstance(node, ast.Import) else f"{node.module}.{alias.name}"
                _path(stmt, full, line, allowed_imports)
        elif isinstance(node, ast.Attribute) and id(node) not in outer:
            paths = reader.resolve(node)
            for path in paths:
                _path(stmt, path, line, ())
            if not paths:
                stmt.attributes.append((node.attr, line))
            if any(n in INSIDE for n in _chain(node)):
                stmt.universal.append(("inside", ast.unparse(node)[:80], line))
            elif node.attr == "__dict__" or ast.unparse(node).endswith("sys.modules"):
                stmt.review.append(("namespace", ast.unparse(node)[:80], line))
            if isinstance(node.ctx, ast.Store) and any(p.split(".")[0] == "torch" for p in reader.resolve(node.value)):
                stmt.review.append(("patch", ast.unparse(node)[:80], line))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id in TEXT:
                stmt.universal.append(("text", node.id, line))
            elif node.id in NAMESPACES:
                stmt.review.append(("namespace", f"{node.id}()", line))
            for path in reader.resolve(node):
                if path != node.id:
                    _path(stmt, path, line, ())
        elif isinstance(node, ast.Call):
            _call(reader, stmt, node, line)


def _chain(node: ast.AST) -> list[str]:
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    return names


def _path(stmt: _Statement, path: str, line: int, allowed_imports: Collection[str]) -> None:
    rule = _universal(path)
    notebook_import = path in NOTEBOOK_IMPORTS[:2] or path.startswith(NOTEBOOK_IMPORTS[2]) or path in allowed_imports
    if rule is not None and not (rule == "grader" and notebook_import):
        stmt.universal.append((rule, path, line))
    if path.split(".")[0] in LOW_LEVEL:
        stmt.review.append(("lowlevel", path, line))
    stmt.paths.append((path, line))


def _call(reader: _Reader, stmt: _Statement, node: ast.Call, line: int) -> None:
    func = node.func
    names = {func.id} if isinstance(func, ast.Name) else reader.resolve(func)
    if _is_call(node, "getattr"):
        for path in reader.resolve(node):  # getattr(torch, "softmax") is torch.softmax
            _path(stmt, path, line, ())
    if names & {"getattr", "setattr", "delattr", "hasattr"} and len(node.args) >= 2 and not _constant(node.args[1]):
        if any(p.split(".")[0] == "torch" for p in reader.resolve(node.args[0])):
            stmt.universal.append(("computed", ast.unparse(node)[:80], line))
        else:
            stmt.review.append(("getattr", ast.unparse(node)[:80], line))
    if names & {"__import__", "importlib.import_module", "importlib.__import__", "builtins.__import__"} and node.args:
        if _constant(node.args[0]):
            name = node.args[0].value
            if name.split(".")[0] == "torch":
                stmt.universal.append(("computed", ast.unparse(node)[:80], line))
            _path(stmt, name, line, ())
        else:
            stmt.review.append(("import", ast.unparse(node)[:80], line))


def _forbidden_use(stmt: _Statement, paths: Sequence[str], watched: Sequence[str]) -> tuple[str, int] | None:
    """The first use in ``stmt`` of what a function may not call."""
    methods = {p.rsplit(".", 1)[-1] for p in paths if p.startswith("torch.Tensor.")}
    for path, line in stmt.paths:
        if any(path == p or path.startswith(p + ".") for p in paths):
            return path, line
        if path.split(".")[0] == "torch" and any(w in _plain(path.rsplit(".", 1)[-1]) for w in watched):
            return path, line
    for attribute, line in stmt.attributes:  # a method of an object the source does not name: a Tensor's
        if hasattr(torch.Tensor, attribute) and (attribute in methods or any(w in _plain(attribute) for w in watched)):
            return f"torch.Tensor.{attribute}", line
    return None


def scan(cells: Sequence[str], rules: Mapping[str, tuple[Sequence[str], Sequence[str]]],
         given: Collection[str] = ()) -> Scan:
    """Read ``cells`` (the submission's code) for the graded functions of ``rules`` (function ->
    (forbidden paths, forbidden operator fragments)). ``given`` are the sources of the cells the
    instructor's notebook gives, whose imports (``from autograder import check``) are allowed."""
    given = {source.strip() for source in given}
    trees: list[tuple[int, ast.Module, bool]] = []
    for index, source in enumerate(cells):
        try:
            trees.append((index, source_trees.parse(source), source.strip() in given))
        except (SyntaxError, ValueError, RecursionError):
            continue  # it raises when it runs, as the learner will be told
    reader = _Reader([t for _, t, _ in trees])
    allowed = {f"{n.module}.{a.name}" if isinstance(n, ast.ImportFrom) else a.name
               for _, tree, trusted in trees if trusted for n in ast.walk(tree)
               if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    statements: list[_Statement] = []
    for index, tree, trusted in trees:
        for node in tree.body:
            binds, uses = _names(node)
            statement = _Statement(index, node, trusted, binds, uses)
            if not trusted:
                _read(reader, statement, allowed)
            statements.append(statement)
    result = Scan(cells)
    result.review = [Finding(rule, what, s.cell, line) for s in statements for rule, what, line in s.review]
    # What runs in every process: the statements that are not definitions, and what they call.
    # What a graded function's own code does is charged to that function alone, even where a cell calls it.
    everywhere = _reached(statements, [n for s in statements if not isinstance(s.node, _DEFINITIONS) for n in s.uses],
                          [s for s in statements if not isinstance(s.node, _DEFINITIONS)], stop=set(rules))
    for function, (paths, ops) in rules.items():
        watched = watched_names(paths, ops)
        found: list[Finding] = []
        # Another graded function it calls is graded on its own: the course's version stands in for it.
        reached = _reached(statements, [function], stop=set(rules) - {function})
        result.needs[function] = {n for s in reached for n in s.uses if n in rules and n != function}
        for statement in reached:
            use = None if statement.trusted else _forbidden_use(statement, paths, watched)
            if use is not None:
                found.append(Finding("forbidden", use[0], statement.cell, use[1]))
        found += [Finding(rule, what, s.cell, line) for s in {id(s): s for s in reached + everywhere}.values()
                  for rule, what, line in s.universal]
        if found:
            result.forbidden[function] = found
    return result


_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _reached(statements: Sequence[_Statement], roots: Sequence[str], start: Sequence[_Statement] = (),
             stop: Collection[str] = ()) -> list[_Statement]:
    """The top-level statements that ``roots`` (names) depend on: what binds each of them, and
    what binds each global name those read, transitively, never through the names in ``stop``;
    ``start`` are included as they are."""
    reached: dict[int, _Statement] = {id(s): s for s in start}
    names, todo = set(stop), list(roots)
    while todo:
        name = todo.pop()
        if name in names:
            continue
        names.add(name)
        for statement in statements:
            if name in statement.binds and id(statement) not in reached:
                reached[id(statement)] = statement
                todo += list(statement.uses - names)
    return list(reached.values())


def names_reached(source: str, roots: Collection[str], among: Collection[str]) -> set[str]:
    """``roots`` and the names of ``among`` that their top-level definitions in ``source`` use,
    directly or through other definitions there."""
    statements = [_Statement(0, node, True, *_names(node)) for node in source_trees.parse(source).body]
    return set(roots) | {n for s in _reached(statements, list(roots)) for n in s.binds & set(among)}
