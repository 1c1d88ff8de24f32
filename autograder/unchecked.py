"""What a learner's line depends on that the record of values cannot check.

The record (:mod:`harness.observe`) holds the tensors a learner's lines make, and the numbers and lists a
function of Python values makes; :mod:`autograder.locate` compares them with the computation's. It cannot
tell whether a size read from a shape, an index, an id or a dict of counts is right (a 3 equals some value of
any computation by chance), nor whether a line ran when it should have. So when the first wrong value is made
on a line from tensors that agree with the computation, or a line crashes on right tensors, what is left to
suspect is the line itself, the Python values it reads and the conditions under which it runs. This module
reads those from the learner's source (sent back with the trace as text; parsed here, never run) and names
their lines, in the learner's terms. Like the rest of the trace, it only shapes the message.
"""
from __future__ import annotations

import ast
import io
import textwrap
import tokenize
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from autograder.messages import N_, tr
from course import source_trees

#: methods that change the object they are called on: ``merged.append(x)`` sets ``merged`` as much as ``=`` does
_CHANGES = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "add",
                      "discard", "sort", "reverse", "popitem", "fill_", "zero_", "copy_"})
#: at most this many lines are quoted, so that the lines that matter are not lost among the others
MAX_QUOTED = 6
#: a quoted line longer than this is cut
_WIDTH = 120

#: (the learner's function, its first line, its source), as :class:`harness.observe.Observed` holds it
Code = Sequence[tuple[str, int, str]]
#: (function, variable, "tensor" or "python")
Held = Sequence[tuple[str, str, str]]


@dataclass(frozen=True)
class _Function:
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    first: int  # the number of its first line in the cell or file
    lines: list[str]

    def line(self, number: int) -> str:
        text = self.lines[number - self.first].strip() if 0 <= number - self.first < len(self.lines) else ""
        text = _without_comment(text)
        return text if len(text) <= _WIDTH else text[:_WIDTH - 1] + "…"

    def at(self, node: ast.AST) -> int:
        return node.lineno + self.first - 1


def _without_comment(text: str) -> str:
    """A line without its comment: the code is what the sentence is about."""
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                return text[:token.start[1]].rstrip()
    except (tokenize.TokenError, SyntaxError):  # a line of a longer statement: its comment is found before the error
        pass
    return text


def _parse(code: Code, function: str, kinds: tuple[type, ...] = (ast.FunctionDef, ast.AsyncFunctionDef)
           ) -> _Function | None:
    found = next(((first, text) for name, first, text in code if name == function), None)
    if found is None and "." in function and ast.ClassDef not in kinds:
        # an untraced case sends the class's source alone: its method is read inside it, numbered as the class is
        owner, _, method = function.rpartition(".")
        cls = _parse(code, owner, (ast.ClassDef,))
        node = next((n for n in cls.node.body if isinstance(n, kinds) and n.name == method), None) if cls else None
        return _Function(node, cls.first, cls.lines) if node is not None else None
    if found is None or not found[1]:
        return None
    text = textwrap.dedent(found[1])
    try:  # the learner's text: parsed, never run; whatever it is, a failure here only leaves the sentence out
        module = source_trees.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    node = module.body[0] if module.body else None
    if not isinstance(node, kinds):
        return None
    return _Function(node, found[0], text.splitlines())


def _attributes_set(cls: _Function) -> dict[str, list[int]]:
    """The attributes a class's methods give values the record does not follow, with the lines that do: ``self.d_k =
    d_model // h``, ``self.register_buffer("pe", table)``; not a submodule or a parameter (``self.w_q =
    nn.Linear(...)``: a call of a class, by its capital), whose values the record and the case's weights cover."""
    found: dict[str, list[int]] = {}
    for method in cls.node.body:
        if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) or not method.args.args:
            continue
        me = method.args.args[0].arg
        for node in ast.walk(method):
            value = getattr(node, "value", None)
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == me \
                        and not _constructs(value):
                    found.setdefault(target.attr, []).append(cls.at(node))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "register_buffer" \
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                found.setdefault(node.args[0].value, []).append(cls.at(node))
    return found


def _constructs(value: ast.AST | None) -> bool:
    """Whether an expression calls a class (``nn.Linear(...)``, ``LayerNorm(d)``, ``nn.Parameter(...)``)."""
    if not isinstance(value, ast.Call):
        return False
    callee = value.func.attr if isinstance(value.func, ast.Attribute) else getattr(value.func, "id", "")
    return callee[:1].isupper()


_Ancestry = tuple[tuple[ast.stmt, str], ...]


def _statements(fn: _Function) -> Iterator[tuple[ast.stmt, _Ancestry]]:
    """Every statement of the function's own body (not of the functions or classes it defines), in the order of
    the source, each with the compound statements around it and the branch (``body``, ``orelse``) it is in."""
    todo: list[tuple[ast.stmt, _Ancestry]] = [(s, ()) for s in reversed(fn.node.body)]
    while todo:
        statement, around = todo.pop()
        yield statement, around
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        inner = []
        for branch in ("body", "orelse", "finalbody", "handlers"):
            for child in getattr(statement, branch, None) or []:
                children = child.body if isinstance(child, ast.ExceptHandler) else [child]
                inner += [(c, (*around, (statement, branch))) for c in children if isinstance(c, ast.stmt)]
        todo += reversed(inner)


def _header(statement: ast.stmt) -> list[ast.AST]:
    """The expressions a statement evaluates itself: a compound statement's header, a simple one's whole."""
    if isinstance(statement, (ast.If, ast.While)):
        return [statement.test]
    if isinstance(statement, (ast.For, ast.AsyncFor)):
        return [statement.iter]
    if isinstance(statement, (ast.With, ast.AsyncWith)):
        return [item.context_expr for item in statement.items]
    if isinstance(statement, (ast.Try, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return []
    return [statement]


def _spans(fn: _Function, statement: ast.stmt, line: int) -> bool:
    """Whether ``line`` is one of the statement's own lines (a compound statement's header only)."""
    body = getattr(statement, "body", None)
    if isinstance(statement, ast.Try):
        last = statement.lineno
    elif isinstance(body, list) and body:
        last = body[0].lineno - 1  # a one-line `if x: y = 1` leaves its line to the statement inside
    else:
        last = statement.end_lineno or statement.lineno
    return fn.at(statement) <= line <= last + fn.first - 1


def _at_line(fn: _Function, statements: Sequence[tuple[ast.stmt, _Ancestry]], line: int
             ) -> tuple[ast.stmt, _Ancestry] | None:
    """Of ``statements`` (:func:`_statements`), the innermost whose own lines hold ``line``, with the statements
    around it; None for none."""
    return next((found for found in reversed(statements) if _spans(fn, found[0], line)), None)


def _locals_of(expressions: list[ast.AST]) -> set[str]:
    """The names bound inside expressions (a comprehension's variable, a lambda's argument): not the function's."""
    bound = set()
    for expression in expressions:
        for node in ast.walk(expression):
            if isinstance(node, ast.comprehension):
                bound |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
            elif isinstance(node, ast.Lambda):
                bound |= {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
    return bound


def _changed_by_call(statement: ast.stmt) -> ast.expr | None:
    """The object a statement that is one changing call changes (``merged`` in ``merged.append(x)``), or None."""
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call) \
            and isinstance(statement.value.func, ast.Attribute) and statement.value.func.attr in _CHANGES:
        return statement.value.func.value
    return None


def _changed(statement: ast.stmt) -> set[int]:
    """The nodes of the names a statement changes in place (``merged`` in ``merged.append(x)``, ``d`` in
    ``d[k] = v``): the object being changed, not a value the line reads."""
    bases = [b for b in (_changed_by_call(statement),) if b is not None]
    for target in getattr(statement, "targets", None) or [getattr(statement, "target", None)]:
        while isinstance(target, ast.Subscript):
            target = target.value
            bases.append(target)
    return {id(b) for b in bases if isinstance(b, ast.Name)}


def _read(statement: ast.stmt) -> list[str]:
    """The names the statement reads, in the order they appear."""
    expressions = _header(statement)
    skip, changed = _locals_of(expressions), _changed(statement)
    names = [n.id for e in expressions for n in ast.walk(e)
             if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in skip and id(n) not in changed]
    if isinstance(statement, ast.AugAssign) and isinstance(statement.target, ast.Name):
        names.insert(0, statement.target.id)  # i += 2 reads i
    return list(dict.fromkeys(names))


def _targets(target: ast.AST) -> Iterator[str]:
    """The variables an assignment's target sets or changes: ``a``, ``a, b``, ``a[i]`` (not ``a.x``: an
    attribute kept on an object, ``self.weights = w``, is no input of a later line)."""
    while isinstance(target, (ast.Subscript, ast.Starred)):
        target = target.value
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _targets(element)


def _sets(statement: ast.stmt) -> set[str]:
    """The variables a statement sets or changes."""
    found: set[str] = set()
    if isinstance(statement, ast.Assign):
        for target in statement.targets:
            found.update(_targets(target))
    elif isinstance(statement, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
        found.update(_targets(statement.target))
    elif isinstance(statement, (ast.With, ast.AsyncWith)):
        for item in statement.items:
            if item.optional_vars is not None:
                found.update(_targets(item.optional_vars))
    elif _changed_by_call(statement) is not None:
        found.update(_targets(_changed_by_call(statement)))
    for expression in _header(statement):
        found.update(n.target.id for n in ast.walk(expression)
                     if isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name))
    return found


def _optional(test: ast.expr | None, parameters: set[str]) -> bool:
    """Whether a condition only asks what the caller gave: ``mask is None``, ``if scaled:`` (a branch the case
    chooses, not one the learner's values steer)."""
    if test is None:
        return False
    if isinstance(test, ast.Name):
        return test.id in parameters
    return (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot))
            and isinstance(test.left, ast.Name) and test.left.id in parameters
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None)


def _alias(statement: ast.stmt) -> bool:
    """Whether a statement only gives a value another name (``angle = position``)."""
    return isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Name)


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    a = node.args
    return {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if p is not None}


def _leaves(statement: ast.stmt) -> bool:
    """Whether a statement is an ``if`` that, when its condition holds, leaves the block before what follows it
    runs (``return``, ``continue``, ``break``; not ``raise``: a refusal of bad arguments, which a valid case
    never reaches without the message saying so)."""
    return (isinstance(statement, ast.If) and not statement.orelse
            and isinstance(statement.body[-1], (ast.Return, ast.Continue, ast.Break)))


#: how a statement depends on a condition, by what :func:`_condition` says: in words with the condition, and as
#: the reason a statement that never ran did not
_HOLDS, _FAILS, _WHILE = "holds", "fails", "while"
_STEERS = {_HOLDS: N_("the condition on {lines}, under which it runs"),
           _FAILS: N_("the condition on {lines}, which must be false for it to run"),
           _WHILE: N_("the condition on {lines}, while which it runs")}
_NEVER = {_HOLDS: N_("Line {line}, `{source}`, never ran on this case: it runs only when the condition on {condition}, "
                     "holds and it never did. Look there."),
          _FAILS: N_("Line {line}, `{source}`, never ran on this case: it runs only when the condition on {condition}, "
                     "does not hold and it never did. Look there."),
          _WHILE: N_("Line {line}, `{source}`, never ran on this case: it runs only while the condition on {condition}, "
                     "holds and it never did. Look there.")}


def _condition(fn: _Function, statement: ast.stmt, around: _Ancestry) -> Iterator[tuple[int, str]]:
    """The conditions that decide whether the statement runs, the nearest first: (line, how it depends: one of
    :data:`_STEERS`). They are those of the ``if`` and ``while`` it is inside, and those of an ``if ...: return``
    before it in its block or an enclosing one."""
    parameters = _parameters(fn.node)
    found = []
    node = statement
    for parent, branch in [*reversed(around), (None, "body")]:
        block = fn.node.body if parent is None else getattr(parent, branch)
        if node in block:
            found += [(fn.at(s), _FAILS) for s in block[:block.index(node)] if _leaves(s)
                      and not _optional(s.test, parameters)]
        if parent is None:
            break
        if not _optional(getattr(parent, "test", None), parameters):
            if isinstance(parent, ast.If) and branch in ("body", "orelse"):
                found.append((fn.at(parent), _HOLDS if branch == "body" else _FAILS))
            elif isinstance(parent, ast.While) and branch == "body":
                found.append((fn.at(parent), _WHILE))
        node = parent
    yield from sorted(found, key=lambda c: -c[0])  # the nearest above it first


def _reaches(setter: tuple[ast.stmt, _Ancestry], reader: tuple[ast.stmt, _Ancestry]) -> bool:
    """Whether a value a statement sets can be what another reads: it comes first, or a loop holds them both
    (``best`` set at the end of one pass and read at the start of the next)."""
    if setter[0].lineno < reader[0].lineno:
        return True
    loops = {id(s) for s, branch in reader[1] if isinstance(s, (ast.For, ast.AsyncFor, ast.While)) and branch == "body"}
    if isinstance(reader[0], (ast.For, ast.AsyncFor, ast.While)):
        loops.add(id(reader[0]))  # a loop's header reads what its body set on the pass before
    return any(id(s) in loops for s, _ in setter[1])


def _listed(items: Sequence[str], last: str = "and") -> str:
    """``a``, ``a and b``, ``a, b and c`` (``last``: "and" or "or"), in the learner's language."""
    if len(items) == 1:
        return items[0]
    earlier = joined(items[:-1])
    if last == "or":
        return tr("{earlier} or {last}").format(earlier=earlier, last=items[-1])
    return tr("{earlier} and {last}").format(earlier=earlier, last=items[-1])


def joined(items: Sequence[str]) -> str:
    """``a, b, c``, in the learner's language."""
    out = items[0] if items else ""
    for item in items[1:]:
        out = tr("{earlier}, {later}").format(earlier=out, later=item)
    return out


def in_turn(items: Sequence[str]) -> str:
    """``a; b; c``, in the learner's language."""
    out = items[0] if items else ""
    for item in items[1:]:
        out = tr("{earlier}; {later}").format(earlier=out, later=item)
    return out


def quoted_line(number: int, source: str) -> str:
    """A learner's line, quoted: ``line 3, `x = y```."""
    return tr("line {line}, `{source}`").format(line=number, source=source)


def _lines_listed(quoted: Sequence[str]) -> str:
    """Quoted lines (:func:`quoted_line`), ``line 3, `a`, line 5, `b` and line 7, `c```, in the learner's language."""
    if len(quoted) == 1:
        return quoted[0]
    return tr("{lines} and {line}").format(lines=joined(quoted[:-1]), line=quoted[-1])


def _quote(fn: _Function, lines: Sequence[int]) -> str:
    return _lines_listed([quoted_line(n, fn.line(n)) for n in lines])


@dataclass(frozen=True)
class _Part:
    """One thing a line depends on: variables and the lines that set them, or a condition (``how`` it steers)."""

    lines: tuple[int, ...]
    names: Sequence[str] = ()
    how: str = ""
    #: the source the lines are quoted from, where not the function's own (its class's)
    source: _Function | None = None

    def words(self, fn: _Function, lines: Sequence[int]) -> str:
        fn = self.source or fn
        if self.how:
            return tr(_STEERS[self.how]).format(lines=_quote(fn, lines))
        return tr("{names}, set on {lines}").format(names=_listed([f"`{n}`" for n in self.names]),
                                                    lines=_quote(fn, lines))


def unchecked(code: Code, held: Held, function: str, line: int, checked: set[str] = frozenset(),
              made: str = "", compared: bool = True) -> str:
    """The sentence that names what line ``line`` of the learner's ``function`` depends on and the record cannot
    check (the Python values it reads, where they are set, and the conditions it runs under), or "" when there
    is nothing of the kind. ``checked`` are variables whose values the record did compare (and found right);
    ``made`` the variable whose value the line is blamed for making (no suspect of its own making); ``compared``
    false where the record's tensors were compared with nothing (no stage of the computation fits the case)."""
    fn = _parse(code, function)
    if fn is None:
        return ""
    everything = list(_statements(fn))
    here = _at_line(fn, everything, line)
    if here is None:
        return ""
    statement, around = here
    python = {name for f, name, kind in held if f == function and kind == "python"}
    # no record at all, or nothing it was compared with: every variable is unchecked
    untraced = not compared or not any(f == function for f, _, _ in held)
    listed = {made} | set(checked)

    def suspects(reader: ast.stmt) -> dict[tuple[int, ...], list[str]]:
        """The Python values ``reader`` reads that no earlier part names, grouped by the lines that set them."""
        found: dict[tuple[int, ...], list[str]] = {}
        placed = next(p for p in everything if p[0] is reader)
        for name in _read(reader):
            if name in listed:
                continue
            setters = [s for s, a in everything if name in _sets(s) and s is not reader and _reaches((s, a), placed)]
            # a tensor's value is compared, unless a line only gave it another name (`centred = x`): that line
            # made no value for the record to see
            if not untraced and name not in python and not (setters and all(_alias(s) for s in setters)):
                continue
            lines = tuple(fn.at(s) for s in setters)
            if lines:  # an argument the function never changes is the case's own, and right
                found.setdefault(lines, []).append(name)
                listed.add(name)
        return found

    owner = _parse(code, function.rpartition(".")[0], (ast.ClassDef,)) if "." in function else None
    attributes = _attributes_set(owner) if owner is not None else {}
    me = fn.node.args.args[0].arg if fn.node.args.args else ""

    def attributes_read(reader: ast.stmt) -> list[_Part]:
        """The attributes of self the line reads that a method of the class set (``self.pe``, ``self.d_k``)."""
        read = [n.attr for e in _header(reader) for n in ast.walk(e) if isinstance(n, ast.Attribute)
                and isinstance(n.ctx, ast.Load) and isinstance(n.value, ast.Name) and n.value.id == me]
        parts = []
        for attribute in dict.fromkeys(read):
            lines = [n for n in attributes.get(attribute, []) if n != line]
            if lines and f"self.{attribute}" not in listed:
                listed.add(f"self.{attribute}")
                parts.append(_Part(tuple(lines), (f"self.{attribute}",), source=owner))
        return parts

    # the conditions it runs under, nearest first (a loop that never ends is one of them); what the line reads;
    # then what those conditions read
    conditions = {fn.at(s): s for s, _ in everything if isinstance(s, (ast.If, ast.While))}
    steering = list(_condition(fn, statement, around))[:2]
    parts = [_Part((number,), how=how) for number, how in steering]
    parts += [_Part(lines, names) for lines, names in suspects(statement).items()] + attributes_read(statement)
    for number, _ in steering:
        parts += [_Part(lines, names) for lines, names in suspects(conditions[number]).items()]
    # one step further back: what the lines that set those values read (`counts[pair] = ...` reads `pair`)
    setting = {fn.at(s): s for s, _ in everything}
    for part in [p for p in parts if p.names and p.source is None]:
        for number in part.lines:
            parts += [_Part(lines, names) for lines, names in suspects(setting[number]).items()]
    said, quoted = [], 0
    for part in parts:
        if quoted >= MAX_QUOTED:
            break
        lines = part.lines[:MAX_QUOTED - quoted]
        quoted += len(lines)
        said.append(part.words(fn, lines))
    if not said:
        return ""
    return tr("Line {line} also depends on what the record of your values cannot check: {parts}. Look there too."
              ).format(line=fn.at(statement), parts=in_turn(said))


def refusals(code: Code, function: str) -> str:
    """For a call that returned where it should have refused: the sentence that names the conditions the learner's
    ``raise`` statements run under (none of them held), or "" when the function has none under a condition."""
    guards: list[tuple[_Function, int]] = []
    for name, _, _ in code:
        fn = _parse(code, name) if name == function or name.startswith(function + ".") else None
        if fn is not None:
            guards += [(fn, number) for s, around in _statements(fn) if isinstance(s, ast.Raise)
                       for number, _ in list(_condition(fn, s, around))[:1]]
    guards = list({(fn.first, n): (fn, n) for fn, n in guards}.values())[:3]
    if not guards:
        return ""
    conditions = [quoted_line(n, fn.line(n)) for fn, n in guards]
    if len(conditions) == 1:
        return tr("Your `raise` did not run on this case: it runs when the condition on {condition}, holds, and on "
                  "this case it does not. Look there.").format(condition=conditions[0])
    return tr("None of your `raise` statements ran on this case: they run when one of the conditions on "
              "{conditions} holds, and on this case none does. Look there.").format(conditions=_lines_listed(conditions))


def loop_around(code: Code, function: str, line: int) -> tuple[int, str] | None:
    """The innermost loop of the learner's ``function`` that line ``line`` is in (or heads): its line and its
    text; None when it is in none, or the source cannot be read. A call stopped for its time is stopped
    wherever it happened to be: the loop it was in says the same at every run."""
    fn = _parse(code, function)
    if fn is None:
        return None
    here = _at_line(fn, list(_statements(fn)), line)
    if here is None:
        return None
    statement, around = here
    loops = [s for s, branch in around if isinstance(s, (ast.While, ast.For, ast.AsyncFor)) and branch == "body"]
    if isinstance(statement, (ast.While, ast.For, ast.AsyncFor)):
        loops.append(statement)
    return (fn.at(loops[-1]), fn.line(fn.at(loops[-1]))) if loops else None


def readers(code: Code, function: str, names: Sequence[str]) -> str:
    """The learner's lines that use the arguments ``names`` (a rule's failure is about them: the budget, the seed),
    or "" when none does or the source cannot be read. A refusal's condition is left out: it does not shape the
    result of a valid case."""
    fn = _parse(code, function)
    if fn is None:
        return ""
    lines = [fn.at(s) for s, _ in _statements(fn) if not isinstance(s, ast.Raise)
             and not (isinstance(s, ast.If) and isinstance(s.body[0], ast.Raise)) and set(_read(s)) & set(names)]
    lines = list(dict.fromkeys(lines))[:3]
    if not lines:
        return ""
    return tr("Your lines that use {names}: {lines}. Look there.").format(
        names=_listed([f"`{n}`" for n in names], "or"), lines=_quote(fn, lines))


def default_differs(code: Code, function: str, defaults: dict[str, object], given: set[str]) -> str:
    """Where the learner's ``def`` line gives an argument the case leaves out another default than the exercise's
    (``defaults``): the sentence that says so, or ""."""
    fn = _parse(code, function)
    if fn is None:
        return ""
    a = fn.node.args
    positional = [*a.posonlyargs, *a.args]
    pairs = [*zip(positional[len(positional) - len(a.defaults):], a.defaults), *zip(a.kwonlyargs, a.kw_defaults)]
    for parameter, node in pairs:
        name = parameter.arg
        if node is None or name in given or name not in defaults:
            continue
        try:
            mine = ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        theirs = defaults[name]
        if type(mine) in (int, float, bool, str, type(None)) and mine != theirs:
            return tr("Your `def` line gives `{name}` the default {mine} where the exercise's is {theirs}, and this "
                      "case leaves `{name}` to its default: keep the defaults the exercise gives.").format(
                name=name, mine=repr(mine), theirs=repr(theirs))
    return ""


def never_ran(code: Code, function: str, ran: Sequence[int]) -> str:
    """For a function that returned a value before the step it should have taken next (a merge that never
    happened): the first of its lines that sets a value, never ran, and runs only under a condition, with that
    condition; "" when there is none or the source cannot be read."""
    fn = _parse(code, function)
    if fn is None or not ran:
        return ""
    for statement, around in _statements(fn):
        if fn.at(statement) in ran or not isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)) \
                or isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue
        steering = list(_condition(fn, statement, around))[:1]
        if steering:
            number, how = steering[0]
            return tr(_NEVER[how]).format(line=fn.at(statement), source=fn.line(fn.at(statement)),
                                          condition=quoted_line(number, fn.line(number)))
    return ""


#: the part of a result that is the whole of it (:func:`made_on`), not one value of a returned tuple
WHOLE_RESULT = -1
#: at most this many lines are quoted for what makes a returned value: its return, its setters and theirs
MAX_MAKING = 8


def made_on(code: Code, function: str, part: int, what: str, returned_on: int | None = None) -> str:
    """For a wrong value of the result that no line of the learner's was located for (``part``: its position in the
    returned tuple, or :data:`WHOLE_RESULT`; ``what``: its name in words): the sentence that quotes the lines that
    make it, or "" when the source cannot be read. They are the ``return`` statements (where they compute it), the
    returns of the functions the learner's function defines and calls there (a score normalised by a helper), the
    lines that set what those read, and the lines that set what those lines read in turn. ``returned_on``: the line
    of the ``return`` that ran, where the record saw it (the others are left out)."""
    fn = _parse(code, function)
    if fn is None:
        return ""
    everything = list(_statements(fn))
    helpers = {s.name: s for s, _ in everything if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
    made: list[tuple[tuple[ast.stmt, _Ancestry], ast.expr]] = []
    for statement, around in everything:
        if isinstance(statement, ast.Return) and statement.value is not None \
                and (returned_on is None or fn.at(statement) <= returned_on <= statement.end_lineno + fn.first - 1):
            value = statement.value
            if part != WHOLE_RESULT and isinstance(value, ast.Tuple):
                if part >= len(value.elts) or any(isinstance(e, ast.Starred) for e in value.elts[:part + 1]):
                    continue
                value = value.elts[part]
            made.append(((statement, around), value))
    if not made:
        return ""
    quoted: dict[int, str] = {}  # line -> how it is quoted, in the order found
    # the returns themselves, where they compute the value rather than hand on a variable
    for (statement, _), value in made:
        if not isinstance(value, ast.Name):
            quoted.setdefault(fn.at(statement), _quote(fn, [fn.at(statement)]))
        for call in ast.walk(value):
            helper = helpers.get(call.func.id) if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) else None
            if helper is not None:
                inner = _Function(helper, fn.first, fn.lines)
                for s, _ in _statements(inner):
                    if isinstance(s, ast.Return):
                        quoted.setdefault(fn.at(s), tr("in `{helper}`, {line}").format(
                            helper=helper.name, line=_quote(fn, [fn.at(s)])))
    listed = set(helpers)

    def setters(reads: Sequence[str], reader: tuple[ast.stmt, _Ancestry]) -> list[list[tuple[ast.stmt, _Ancestry]]]:
        """For each name ``reader`` reads that no earlier step listed, the statements that set it and can reach it."""
        out = []
        for name in reads:
            if name in listed:
                continue
            found = [(s, a) for s, a in everything if name in _sets(s) and s is not reader[0]
                     and _reaches((s, a), reader) and not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
            if found:  # an argument the function never changes is the case's own
                listed.add(name)
                out.append(found)
        return out

    first = [found for reader, value in made
             for found in setters([n.id for n in ast.walk(value) if isinstance(n, ast.Name)
                                   and isinstance(n.ctx, ast.Load) and n.id not in _locals_of([value])], reader)]
    second = [found for each in first for placed in each for found in setters(_read(placed[0]), placed)]
    for found in first + second:
        for s, _ in found:
            quoted.setdefault(fn.at(s), _quote(fn, [fn.at(s)]))
    if not quoted:
        return ""
    kept = sorted(list(quoted)[:MAX_MAKING])  # the nearest to the value first, then told in the order of the source
    return tr("Your lines that make {what}: {lines}. Look there.").format(
        what=what, lines=in_turn([quoted[n] for n in kept]))
