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
  name a torch attribute or module it computes at run time, or start a thread or a process (the
  tripwires in the learner's process are its own, and work done elsewhere is out of their
  sight). The first kind costs the function that reaches the use; the second costs every
  function whose process runs it, which is every function for what a cell runs.
* **Unread** code costs points too. A statement the grader cannot read (nested too deeply, say)
  costs the functions that use it, and every function when any of it runs as the cell runs;
  a cell it cannot parse, unless Python itself rejects it, costs every function. The scan
  fails closed: what it cannot read, it cannot clear.
* **Review** flags mark what cannot be decided from the source (a computed ``getattr`` on an
  object of unknown kind, ``globals()``, ``ctypes``, ``gc``, ``inspect``, changing torch's
  attributes): the instructor is told, the score stands.

Cells the instructor's notebook gives (unchanged) are read for the names they bind but never
judged: the course's own code is not the learner's doing.

The scan's work grows in step with the source (a statement's names are found once, each name's
statements through an index), and it stops at the submission's deadline when one is given.
"""
from __future__ import annotations

import ast
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from course import source_trees
from harness.calls import plain_name, watched_names

from ..messages import N_, tr
from ..submissions import cell_name

#: what every rule of the second kind says, by its key (marked: translated where a message uses it)
RULES = {
    "private": N_("torch's private internals (torch._C, torch._VF, torch.ops, native_* kernels) reach its built-ins "
                  "past every check"),
    "inside": N_("reaching inside functions or frames takes what the course's code keeps there"),
    "text": N_("eval, exec and compile run code the grader cannot read"),
    "grader": N_("the grader's own packages hold its checks and oracles"),
    "course": N_("the course's model and tools hold complete implementations"),
    "computed": N_("an attribute of torch, or of a module that starts threads or processes, named at run time "
                   "cannot be checked"),
    "concurrent": N_("a thread or process it starts runs where the grader's tripwires do not look"),
}
#: the review flags, by key
REVIEW = {
    "getattr": N_("an attribute named at run time (getattr, setattr, delattr)"),
    "namespace": N_("a namespace read as a dictionary (globals, vars, locals, __dict__, sys.modules)"),
    "lowlevel": N_("a module that reaches past Python's own rules"),
    "import": N_("a module imported by a name computed at run time"),
    "patch": N_("an attribute of torch changed"),
    "star": N_("a star import, whose names cannot be followed"),
}
GRADER_PACKAGES = ("autograder", "harness")
#: what the notebooks themselves import from the grader, and the sandbox provides: the notebook's
#: test runner (which does nothing there) and the toy models
NOTEBOOK_IMPORTS = ("autograder", "autograder.check", "autograder.toys")
#: the course's own model and tools, and its solutions: complete implementations of the exercises
MODEL_AND_TOOLS = ("course", "transformer", "solutions")
LOW_LEVEL = ("ctypes", "gc", "inspect", "marshal", "pickle", "dill", "builtins", "mmap", "sysv_ipc", "posix_ipc")
INSIDE = frozenset({"__closure__", "cell_contents", "__globals__", "__code__", "__wrapped__", "__builtins__",
                    "f_globals", "f_locals", "f_back", "f_code", "tb_frame", "gi_frame", "cr_frame", "_getframe"})
NAMESPACES = frozenset({"globals", "vars", "locals"})
TEXT = frozenset({"eval", "exec", "compile"})
#: modules whose use starts threads or processes, and the functions of os that start processes
CONCURRENT = ("threading", "_thread", "multiprocessing", "concurrent", "subprocess", "asyncio", "pty", "joblib",
              "torch.multiprocessing", "torch.distributed")
#: the modules and objects one name may stand for (``F`` for torch.nn.functional, ...) before a
#: statement that reads it is charged as unread; ordinary code binds a name to one or two
MAX_ALIASES = 32
PROCESS_STARTERS = ("fork", "forkpty", "register_at_fork", "posix_spawn", "spawn", "exec", "system", "popen")


class OutOfTime(TimeoutError):
    """The submission's time ran out while its source was being read."""


class _Clock:
    """The submission's deadline, looked at between statements: the scan never outlasts it."""

    def __init__(self, deadline: float | None):
        self.deadline = deadline

    def check(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise OutOfTime(tr("the submission's time ran out while the grader read its source"))


@dataclass(frozen=True)
class Finding:
    rule: str  # a key of RULES or REVIEW, or "forbidden"
    what: str  # the construct, as the grader resolved it
    cell: int  # index among the submission's code cells
    line: int

    def where(self, cells: Sequence[str]) -> str:
        if self.cell >= len(cells):
            return ""
        place = cell_name(self.cell, cells[self.cell])
        # line 0: the whole cell
        return tr("line {line} of {place}").format(line=self.line, place=place) if self.line else place


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
        if first.rule == "unread":
            return tr("`{function}` scores 0: the grader could not read {where}: {why}. Code it cannot read cannot "
                      "be checked, so graded code may not depend on it, nor may the notebook run it: write it more "
                      "simply.").format(function=function, where=first.where(self.cells), why=first.what)
        if first.rule == "forbidden":
            return tr("`{function}` calls {names}, which this exercise asks you to build yourself ({where}): write it "
                      "with basic tensor operations instead.").format(
                          function=function, names=first.what, where=first.where(self.cells))
        return tr("`{function}` scores 0: {where} uses `{construct}`, and {reason}. Graded code may not use it "
                  "anywhere in the notebook.").format(function=function, where=first.where(self.cells),
                                                       construct=first.what, reason=tr(RULES[first.rule]))

    def flags(self) -> list[str]:
        """One line per construct to review, for the instructor."""
        seen = dict.fromkeys(tr("{flag}: `{construct}` ({where})").format(
            flag=tr(REVIEW[f.rule]), construct=f.what, where=f.where(self.cells)) for f in self.review)
        return list(seen)


class _Reader:
    """Resolves names to dotted paths (``F.softmax`` -> ``torch.nn.functional.softmax``) through
    the imports and plain assignments of every cell, then records what each statement uses."""

    def __init__(self, trees: Sequence[ast.Module], clock: _Clock | None = None):
        clock = clock or _Clock(None)
        self.aliases: dict[str, set[str]] = {}
        #: names bound to more than MAX_ALIASES modules and objects: a statement that reads one is unread
        self.crowded: set[str] = set()
        statements = [node for tree in trees for node in tree.body]
        for statement in statements:
            clock.check()
            for node in ast.walk(statement):
                self._bind(node)
        assignments = [[n for n in ast.walk(statement) if isinstance(n, ast.Assign) and len(n.targets) == 1
                        and isinstance(n.targets[0], ast.Name)] for statement in statements]
        for _ in range(3):  # an alias of an alias
            for found in assignments:
                clock.check()
                for node in found:
                    self._alias(node.targets[0].id, self.resolve(node.value))

    def _alias(self, name: str, paths: Collection[str]) -> None:
        # Past a bound, the paths a name stands for would be copied into every alias of it and
        # checked at every use, a cost that grows with the square of the source: stop there.
        if not paths:
            return
        known = self.aliases.setdefault(name, set())
        for path in paths:
            if len(known) >= MAX_ALIASES and path not in known:
                self.crowded.add(name)
                return
            known.add(path)

    def _bind(self, node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self._alias(alias.asname, [alias.name])
                else:
                    root = alias.name.split(".")[0]
                    self._alias(root, [root])
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if alias.name != "*":
                    self._alias(alias.asname or alias.name, [f"{node.module}.{alias.name}"])

    def resolve(self, node: ast.AST) -> set[str]:
        # A loop, not recursion: an attribute chain thousands long must not stop the scan.
        attributes = []
        while True:
            if isinstance(node, ast.Attribute):
                attributes.append(node.attr)
                node = node.value
            elif _is_call(node, "getattr") and len(node.args) >= 2 and _constant(node.args[1]):
                attributes.append(node.args[1].value)
                node = node.args[0]
            else:
                break
        if not isinstance(node, ast.Name):
            return set()
        tail = "".join(f".{a}" for a in reversed(attributes))
        return {f"{p}{tail}" for p in self.aliases.get(node.id, ())}


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
    if root in MODEL_AND_TOOLS:
        return "course"
    if _starts_work(path):
        return "concurrent"
    return None


def _starts_work(path: str) -> bool:
    """Whether a dotted path belongs to what starts a thread or a process."""
    parts = path.split(".")
    if parts[0] in ("os", "posix"):
        return len(parts) > 1 and parts[1].startswith(PROCESS_STARTERS)
    return any(path == m or path.startswith(f"{m}.") for m in CONCURRENT)


def _computed_matters(path: str) -> bool:
    """Whether an attribute computed at run time on this path could be what a rule forbids."""
    return path.split(".")[0] in ("torch", "os", "posix") or _starts_work(path)


class _Text:
    """A cell's source as the parser counts it: lines end at every line break Python knows
    (``\\r\\n``, ``\\r``, ``\\n``), columns are UTF-8 bytes."""

    def __init__(self, source: str):
        self.lines = [line.encode() for line in source.replace("\r\n", "\n").replace("\r", "\n").split("\n")]

    def statement(self, node: ast.stmt) -> str:
        """A top-level statement as the learner wrote it, its decorators included."""
        decorators = getattr(node, "decorator_list", None)
        # A decorator's @ opens its line: a compound statement cannot follow another on one line.
        line, column = (decorators[0].lineno, 0) if decorators else (node.lineno, node.col_offset)
        if line == node.end_lineno:
            return self.lines[line - 1][column:node.end_col_offset].decode()
        first, middle, last = self.lines[line - 1][column:], self.lines[line:node.end_lineno - 1], self.lines[node.end_lineno - 1]
        return b"\n".join([first, *middle, last[:node.end_col_offset]]).decode()

    def excerpt(self, node: ast.AST, limit: int = 80) -> str:
        """The start of a construct's text, for a message; its cost does not grow with the line's length."""
        stop = node.col_offset + 4 * limit  # enough bytes for ``limit`` characters
        if node.end_lineno == node.lineno:
            stop = min(stop, node.end_col_offset)
        return self.lines[node.lineno - 1][node.col_offset:stop].decode(errors="ignore")[:limit]


@dataclass
class _Statement:
    cell: int
    node: ast.stmt
    trusted: bool
    binds: set[str]
    uses: set[str]
    text: _Text
    #: the grader could not read it: it binds what its kind shows (a definition, its name), and is charged
    unread: bool = False
    #: (rule, what, line): uses that break a rule of the second kind, and what to review
    universal: list[tuple[str, str, int]] = field(default_factory=list)
    review: list[tuple[str, str, int]] = field(default_factory=list)
    #: (dotted path, line) of every name it resolves, and (attribute, line) of those it cannot
    paths: list[tuple[str, int]] = field(default_factory=list)
    attributes: list[tuple[str, int]] = field(default_factory=list)


def _names(stmt: ast.stmt, text: _Text) -> tuple[set[str], set[str]]:
    """(names the statement binds at the top level, global names it or any function inside it reads).
    Raises whatever reading it raises: the caller charges what cannot be read."""
    table = source_trees.symbol_table(text.statement(stmt), "<cell>")
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
                stmt.universal.append(("inside", stmt.text.excerpt(node), line))
            elif node.attr == "__dict__" or _dotted(node).endswith("sys.modules") or "sys.modules" in paths:
                stmt.review.append(("namespace", stmt.text.excerpt(node), line))
            if isinstance(node.ctx, ast.Store) and any(p.split(".")[0] == "torch" for p in reader.resolve(node.value)):
                stmt.review.append(("patch", stmt.text.excerpt(node), line))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id in reader.crowded:
                stmt.universal.append(("unread", tr("`{name}` stands for more than {count} modules and objects, more "
                                                    "than the grader follows").format(name=node.id, count=MAX_ALIASES),
                                       line))
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


def _dotted(node: ast.Attribute) -> str:
    """``a.b.c`` as written, whatever its root: ``sys.modules`` is seen without the cost of unparsing."""
    root = node
    while isinstance(root, ast.Attribute):
        root = root.value
    return ".".join([root.id if isinstance(root, ast.Name) else "", *reversed(_chain(node))])


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
        if any(_computed_matters(p) for p in reader.resolve(node.args[0])):
            stmt.universal.append(("computed", stmt.text.excerpt(node), line))
        else:
            stmt.review.append(("getattr", stmt.text.excerpt(node), line))
    if names & {"__import__", "importlib.import_module", "importlib.__import__", "builtins.__import__"} and node.args:
        if _constant(node.args[0]):
            name = node.args[0].value
            if name.split(".")[0] == "torch":
                stmt.universal.append(("computed", stmt.text.excerpt(node), line))
            _path(stmt, name, line, ())
        else:
            stmt.review.append(("import", stmt.text.excerpt(node), line))


def _forbidden_use(stmt: _Statement, paths: Sequence[str], watched: Sequence[str]) -> tuple[str, int] | None:
    """The first use in ``stmt`` of what a function may not call."""
    methods = {p.rsplit(".", 1)[-1] for p in paths if p.startswith("torch.Tensor.")}
    for path, line in stmt.paths:
        if any(path == p or path.startswith(p + ".") for p in paths):
            return path, line
        if path.split(".")[0] == "torch" and any(w in plain_name(path.rsplit(".", 1)[-1]) for w in watched):
            return path, line
    for attribute, line in stmt.attributes:  # a method of an object the source does not name: a Tensor's
        if hasattr(torch.Tensor, attribute) and (attribute in methods or any(w in plain_name(attribute) for w in watched)):
            return f"torch.Tensor.{attribute}", line
    return None


def scan(cells: Sequence[str], rules: Mapping[str, tuple[Sequence[str], Sequence[str]]],
         given: Collection[str] = (), deadline: float | None = None) -> Scan:
    """Read ``cells`` (the submission's code) for the graded functions of ``rules`` (function ->
    (forbidden paths, forbidden operator fragments)). ``given`` are the sources of the cells the
    instructor's notebook gives, whose imports (``from autograder import check``) are allowed.
    Raises OutOfTime once ``deadline`` (a ``time.monotonic()`` value) has passed."""
    clock = _Clock(deadline)
    given = {source.strip() for source in given}
    trees: list[tuple[int, ast.Module, bool]] = []
    unreadable: list[Finding] = []  # cells Python may run that the grader could not parse: charged to all
    for index, source in enumerate(cells):
        clock.check()
        try:
            trees.append((index, source_trees.parse(source), source.strip() in given))
        except SyntaxError:
            continue  # Python rejects it too: it raises when it runs, as the learner will be told
        except Exception as exc:  # a parse that gives up part-way (too deep, say) may still run there
            unreadable.append(Finding("unread", _why(exc), index, 0))
    reader = _Reader([t for _, t, _ in trees], clock)
    allowed = {f"{n.module}.{a.name}" if isinstance(n, ast.ImportFrom) else a.name
               for _, tree, trusted in trees if trusted for n in ast.walk(tree)
               if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    statements: list[_Statement] = []
    for index, tree, trusted in trees:
        text = _Text(cells[index])
        for node in tree.body:
            clock.check()
            statements.append(_statement(reader, index, node, trusted, text, allowed))
    result = Scan(cells)
    result.review = [Finding(rule, what, s.cell, line) for s in statements for rule, what, line in s.review]
    binders = _binders(statements)
    # What runs in every process: the statements that are not definitions, and what they call.
    # What a graded function's own code does is charged to that function alone, even where a cell calls it.
    start = [s for s in statements if _runs_as_the_cell_runs(s)]
    everywhere = _reached(binders, [n for s in start for n in s.uses], start, stop=set(rules))
    for function, (paths, ops) in rules.items():
        clock.check()
        watched = watched_names(paths, ops)
        found: list[Finding] = []
        # Another graded function it calls is graded on its own: the course's version stands in for it.
        reached = _reached(binders, [function], stop=set(rules) - {function})
        result.needs[function] = {n for s in reached for n in s.uses if n in rules and n != function}
        for statement in reached:
            use = None if statement.trusted else _forbidden_use(statement, paths, watched)
            if use is not None:
                found.append(Finding("forbidden", use[0], statement.cell, use[1]))
        found += [Finding(rule, what, s.cell, line) for s in {id(s): s for s in reached + everywhere}.values()
                  for rule, what, line in s.universal]
        found += unreadable
        if found:
            result.forbidden[function] = found
    return result


def _statement(reader: _Reader, cell: int, node: ast.stmt, trusted: bool, text: _Text,
               allowed_imports: Collection[str]) -> _Statement:
    """What one top-level statement binds and uses. One the grader cannot read (a recursion limit, a
    construct it does not know, anything) is charged as unread, never passed as harmless."""
    try:
        statement = _Statement(cell, node, trusted, *_names(node, text), text)
        if not trusted:
            _read(reader, statement, allowed_imports)
        return statement
    except Exception as exc:
        unread = _Statement(cell, node, trusted, {node.name} if isinstance(node, _DEFINITIONS) else set(), set(),
                            text, unread=True)
        if not trusted:
            unread.universal.append(("unread", _why(exc), node.lineno))
        return unread


def _why(exc: Exception) -> str:
    """Why the grader could not read something, for the learner."""
    if isinstance(exc, RecursionError):
        return tr("it is nested too deeply for the grader to follow")
    if isinstance(exc, MemoryError):
        return tr("it is too complex for Python's parser")
    return f"{type(exc).__name__}: {str(exc)[:120]}"


_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _runs_as_the_cell_runs(statement: _Statement) -> bool:
    """Whether any of the statement's code runs in every process, when its cell runs: all of it
    but a definition's body; all of an unread definition that has code outside its body (a class's
    body, decorators, defaults, annotations), since what that code does cannot be known."""
    node = statement.node
    if not isinstance(node, _DEFINITIONS):
        return True
    if not statement.unread:
        return False
    if isinstance(node, ast.ClassDef):
        return True
    arguments = node.args
    annotated = [a for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg,
                             arguments.kwarg) if a is not None and a.annotation is not None]
    return bool(node.decorator_list or arguments.defaults or any(arguments.kw_defaults) or node.returns or annotated)


def _binders(statements: Sequence[_Statement]) -> dict[str, list[_Statement]]:
    """Each name, and the statements that bind it, in order: a name's statements are found at once."""
    binders: dict[str, list[_Statement]] = {}
    for statement in statements:
        for name in statement.binds:
            binders.setdefault(name, []).append(statement)
    return binders


def _reached(binders: Mapping[str, Sequence[_Statement]], roots: Sequence[str], start: Sequence[_Statement] = (),
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
        for statement in binders.get(name, ()):
            if id(statement) not in reached:
                reached[id(statement)] = statement
                todo += list(statement.uses - names)
    return list(reached.values())


def names_reached(source: str, roots: Collection[str], among: Collection[str]) -> set[str]:
    """``roots`` and the names of ``among`` that their top-level definitions in ``source`` use,
    directly or through other definitions there."""
    text = _Text(source)
    statements = [_Statement(0, node, True, *_names(node, text), text) for node in source_trees.parse(source).body]
    return set(roots) | {n for s in _reached(_binders(statements), list(roots)) for n in s.binds & set(among)}
