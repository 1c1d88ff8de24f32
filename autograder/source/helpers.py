"""Which of a notebook's graded functions a learner's function relies on, and what to say about it.

Attention calls the learner's softmax; an encoder layer builds the learner's LayerNorm. When
such a helper is wrong, the function that uses it fails too, for a reason that is not its own:

* in the notebook, a failing check runs the helpers' own checks and, when one fails, says so
  first (:func:`blame_helpers`);
* the grader judges each function with the course's versions of the others, so there one
  mistake costs its points once; when a function passed only thanks to that substitution, the
  feedback says so (:func:`substitution_notes`), because the notebook tells a different story.

A helper is found by name: the globals a function's code loads (``LOAD_GLOBAL``/``LOAD_NAME``),
followed through the learner's other, ungraded functions, kept when another check of the same
chapter grades a function by that name.
"""
from __future__ import annotations

import ast
import dis
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from course import source_trees

from ..messages import N_, tr

_LOADS = {"LOAD_GLOBAL", "LOAD_NAME"}

#: what the check of a function says when a helper it calls is not written yet: the words between the
#: function and the helper, in the learner's language (the same message as the framework's "implemented" rule)
NOT_IMPLEMENTED = N_("{name} could not run because `{origin}` is not implemented yet: it calls `{owner}`, so finish "
                     "that first (its own test cell comes earlier).")


def _codes_of(obj: Any) -> list[types.CodeType]:
    """The code objects of a function, or of the methods a class defines itself."""
    if isinstance(obj, type):
        members = [getattr(m, "__func__", m) for klass in obj.__mro__ if klass.__module__ == obj.__module__
                   for m in vars(klass).values()]
        members += [a for m in members if isinstance(m, property) for a in (m.fget, m.fset, m.fdel)]
        return [m.__code__ for m in members if isinstance(getattr(m, "__code__", None), types.CodeType)]
    code = getattr(obj, "__code__", None)
    return [code] if isinstance(code, types.CodeType) else []


def _globals_loaded(code: types.CodeType) -> set[str]:
    names: set[str] = set()
    todo = [code]
    while todo:
        current = todo.pop()
        names |= {i.argval for i in dis.get_instructions(current) if i.opname in _LOADS and isinstance(i.argval, str)}
        todo += [c for c in current.co_consts if isinstance(c, types.CodeType)]
    return names


def _namespace(obj: Any) -> Mapping[str, Any]:
    if isinstance(obj, type):
        for code_owner in vars(obj).values():
            scope = getattr(getattr(code_owner, "__func__", code_owner), "__globals__", None)
            if scope is not None:
                return scope
        return {}
    return getattr(obj, "__globals__", {})


def helpers_of(fn: Callable, graded: Iterable[str]) -> dict[str, Any]:
    """The graded functions ``fn`` uses that the learner wrote beside it: {name: the learner's object}.

    Only objects of ``fn``'s own module count (``__main__`` in a notebook): a helper imported from
    the course's package is not the learner's to fix.
    """
    graded = set(graded) - {getattr(fn, "__name__", "")}
    module = getattr(fn, "__module__", None)
    found: dict[str, Any] = {}
    seen: set[int] = set()
    todo = [fn]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        scope = _namespace(current)
        for name in sorted(set().union(*map(_globals_loaded, _codes_of(current)))):
            obj = scope.get(name)
            if obj is None or getattr(obj, "__module__", None) != module or not callable(obj):
                continue
            if name in graded:
                found.setdefault(name, obj)
            elif isinstance(obj, (types.FunctionType, type)):
                todo.append(obj)  # an ungraded function of the learner's, which may call a graded one
    return found


def _phrase(names: Sequence[str]) -> str:
    """The names quoted and listed (`a`; `a` and `b`; `a`, `b` and `c`), in the learner's language."""
    quoted = [f"`{n}`" for n in names]
    if len(quoted) == 1:
        return quoted[0]
    earlier = quoted[0]
    for name in quoted[1:-1]:
        earlier = tr("{earlier}, {later}").format(earlier=earlier, later=name)
    return tr("{earlier} and {last}").format(earlier=earlier, last=quoted[-1])


def _says_not_implemented(message: str, name: str) -> bool:
    """Whether ``message`` already says that the helper ``name`` (or a method of it) is the one not written yet."""
    template = tr(NOT_IMPLEMENTED)
    before = template[:template.index("{origin}")]
    between = before[before.rindex("}") + 1:] if "}" in before else before  # the words after {name}
    return f"{between}{name}`" in message or f"{between}{name}." in message


def blame_helpers(check_id: str, fn: Callable, message: str) -> str:
    """``message`` (``fn``'s failure), led by the learner's helpers that fail their own checks.

    Returns ``message`` unchanged when no helper of ``fn`` fails, or when the message already
    says that a helper is the one missing (a stub that is not implemented yet).
    """
    from ..checks import chapter_checks
    from ..framework import CheckFailed, run_check

    notebook, _, function = check_id.partition(".")
    checks = chapter_checks(notebook)
    failing = []
    for name, helper in helpers_of(fn, checks).items():
        if _says_not_implemented(message, name):
            continue
        try:
            run_check(checks[name], helper)
        except CheckFailed:
            failing.append(name)
    if not failing:
        return message
    helpers = _phrase(failing)
    if len(failing) > 1:
        lead = tr("your {helpers}, used here, fail their own tests: fix them first. Your notebook runs `{function}` "
                  "with your own {helpers}, so their mistake shows up here too. The class grader judges each function "
                  "with the course's version of the others, so there one mistake costs its own points only.")
    else:
        lead = tr("your {helpers}, used here, fails its own test: fix it first. Your notebook runs `{function}` with "
                  "your own {helpers}, so its mistake shows up here too. The class grader judges each function with "
                  "the course's version of the others, so there one mistake costs its own points only.")
    saw = tr("What this test saw with your {helpers}:").format(helpers=helpers)
    return f"{lead.format(helpers=helpers, function=function)}\n{saw}\n{message}"


# --------------------------------------------------------------------------------------------
# The grader's side: the learner's code is only text here, so helpers are found in its syntax.
# --------------------------------------------------------------------------------------------


def _definitions(cells: Sequence[str]) -> dict[str, ast.AST]:
    """The learner's top-level functions and classes by name; a later definition wins, as it would."""
    found: dict[str, ast.AST] = {}
    for source in cells:
        try:
            tree = source_trees.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue  # it cannot run, or the scan of shortcuts charges it as unread
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found[node.name] = node
    return found


def helpers_in_source(cells: Sequence[str], function: str, graded: Iterable[str]) -> list[str]:
    """The graded functions that ``function``, as written in ``cells``, uses and the learner defines."""
    defined = _definitions(cells)
    graded = set(graded) - {function}
    found: list[str] = []
    seen: set[str] = set()
    todo = [function]
    while todo:
        name = todo.pop()
        if name in seen or name not in defined:
            continue
        seen.add(name)
        for node in ast.walk(defined[name]):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in defined:
                if node.id in graded:
                    found.append(node.id)
                else:
                    todo.append(node.id)
    return list(dict.fromkeys(sorted(found)))


def substitution_notes(tests: Sequence[Any], outcomes: Sequence[Any], cells: Sequence[str], include_hidden: bool,
                       passes: Callable[[str, str, bool, str], bool]) -> list[str]:
    """Notes for functions that passed only because the course's version of a helper was used.

    ``tests`` are the graded tests (``calls`` of (check id, function, hidden)) and ``outcomes``
    their results, in the same order; ``cells`` the submission's code. ``passes(check_id,
    function, hidden, helper)`` runs one check again with the learner's own ``helper`` in place of
    the course's. Stops quietly when the grading time runs out (TimeoutError).
    """
    failed = {f for test, o in zip(tests, outcomes) if not o.passed for _, f, _ in test.calls}
    notes: list[str] = []
    for test, outcome in zip(tests, outcomes):
        if not outcome.passed or not failed:
            continue
        for function in dict.fromkeys(f for _, f, _ in test.calls):
            for helper in helpers_in_source(cells, function, failed):
                calls = [(c, h) for c, f, h in test.calls if f == function and (include_hidden or not h)]
                try:
                    failing = next((h for c, h in calls if not passes(c, function, h, helper)), None)
                except TimeoutError:
                    return notes
                if failing is None:
                    continue  # it does not depend on the helper's mistake
                if failing:
                    note = tr("`{function}` was graded with the course's `{helper}`, because yours fails its own "
                              "test; with your `{helper}` it fails some hidden cases.")
                else:
                    note = tr("`{function}` was graded with the course's `{helper}`, because yours fails its own "
                              "test; in your notebook it fails until `{helper}` is fixed.")
                notes.append(note.format(function=function, helper=helper))
    return notes
