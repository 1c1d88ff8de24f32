"""How precisely the feedback speaks of mistakes nobody catalogued: syntax-level mutants of every solution.

    python benchmarks/feedback_mutants.py [--chapters encoder,attention] [--per-function 40] [--show]

Each graded function's solution (``reference/<chapter>.py``) is mutated one node at a time: an
operator swapped, a constant changed, a sign dropped, a term dropped, two arguments swapped, an
augmented assignment made plain. Each mutant is run as a notebook cell would be (so that its
lines are the learner's and can be quoted) through the chapter's check on the visible cases, as
`python -m autograder check` runs them. A mutant that fails is counted as

- **named**: the message names a catalogued mistake that the check verified (it reproduces the
  mutant's values on every failing case);
- **located**: the message quotes the mutated line (for a default changed in the ``def`` line, which a
  learner's notebook lays out otherwise: the message names the parameter and its changed default);
- **plain**: neither (the case, the largest difference and the general formula).

Mutants the visible cases do not fail are counted apart (many change nothing: ``dim=-1`` made
``dim=2`` on a three-axis tensor), as are those only the hidden cases fail. It prints, per chapter,
the share of failing mutants that are named or located, the goal being 90 %, and with ``--show``
each plain message, to see what the feedback still cannot say.
"""
from __future__ import annotations

import argparse
import ast
import copy
import importlib
import inspect
import os
import sys
import textwrap
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autograder import course_secret  # noqa: E402
from autograder.checks import chapter_checks  # noqa: E402
from autograder.framework import CheckFailed, run_check  # noqa: E402
from course.layout import chapters  # noqa: E402
from harness.calls import remember_cell  # noqa: E402

SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.Pow: ast.Mult,
         ast.FloorDiv: ast.Div, ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
         ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.And: ast.Or, ast.Or: ast.And}


def _constant(value):
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1] if value != -1 else [-2]
    if isinstance(value, float):
        return [value * 2] if value else [1.0]
    return []


def node_mutations(node: ast.AST) -> list[tuple[str, str]]:
    """(description, kind) for each way one node can be mutated."""
    found = []
    if isinstance(node, (ast.BinOp, ast.AugAssign, ast.BoolOp)) and type(node.op) in SWAPS:
        found.append((f"{type(node.op).__name__} -> {SWAPS[type(node.op)].__name__}", "op"))
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        found.append(("dropped right operand", "left"))
    if isinstance(node, ast.Compare) and type(node.ops[0]) in SWAPS:
        found.append((f"{type(node.ops[0]).__name__} -> {SWAPS[type(node.ops[0])].__name__}", "cmp"))
    if isinstance(node, ast.Constant) and _constant(node.value):
        found.append((f"{node.value!r} -> {_constant(node.value)[0]!r}", "const"))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not, ast.Invert)):
        found.append(("dropped unary " + type(node.op).__name__, "unary"))
    if isinstance(node, ast.Call) and len(node.args) >= 2 and not any(isinstance(a, ast.Starred) for a in node.args[:2]):
        found.append(("swapped first two arguments", "swap"))
    return found


class _Apply(ast.NodeTransformer):
    """Applies one mutation to the node visited ``index``-th (in the order of :func:`_ordered`)."""

    def __init__(self, index: int, kind: str):
        self.index, self.kind, self.count = index, kind, -1

    def visit(self, node):
        self.count += 1
        if self.count != self.index:
            return self.generic_visit(node)
        if self.kind == "op":
            node.op = SWAPS[type(node.op)]()
        elif self.kind == "cmp":
            node.ops[0] = SWAPS[type(node.ops[0])]()
        elif self.kind == "left":
            return node.left
        elif self.kind == "const":
            node.value = _constant(node.value)[0]
        elif self.kind == "unary":
            return node.operand
        elif self.kind == "swap":
            node.args[0], node.args[1] = node.args[1], node.args[0]
        return node


def _ordered(tree: ast.AST) -> list[ast.AST]:
    """The nodes in the order ast.NodeTransformer visits them (depth first, fields in order)."""
    out = []

    def walk(node):
        out.append(node)
        for child in ast.iter_child_nodes(node):
            walk(child)
    walk(tree)
    return out


def mutants(source: str):
    """(description, the mutated line as the mutant's text has it, the mutant's text) for each mutant."""
    tree = ast.parse(source)
    before = ast.unparse(tree).splitlines()
    for index, node in enumerate(_ordered(tree)):
        for description, kind in node_mutations(node):
            mutated = ast.fix_missing_locations(_Apply(index, kind).visit(copy.deepcopy(tree)))
            text = ast.unparse(mutated)
            after = text.splitlines()
            line = next((b for a, b in zip(before, after) if a != b), None)
            if line is not None:
                yield description, line.strip(), text


def run(chapter_names: list[str] | None, per_function: int, show: bool) -> None:
    totals = {}
    plain_messages = []
    for chapter in chapters():
        stem = chapter.stem
        if chapter_names and stem not in chapter_names:
            continue
        reference = importlib.import_module(f"reference.{stem}")
        counts = Counter()
        for function, check in chapter_checks(stem).items():
            original = getattr(reference, function)
            source = textwrap.dedent(inspect.getsource(original))
            every = list(mutants(source))
            chosen = every if len(every) <= per_function else [every[i * len(every) // per_function]
                                                                for i in range(per_function)]
            for n, (description, mutated_line, text) in enumerate(chosen):
                cell = f"<cell {stem}-{function}-{n}>"
                remember_cell(cell, text)
                namespace = dict(vars(reference), __name__="__main__")
                try:
                    exec(compile(text, cell, "exec"), namespace)  # noqa: S102
                except Exception:
                    continue
                mutant = namespace[function]
                try:
                    run_check(check, mutant, hidden=False)
                except CheckFailed as failure:
                    message = str(failure)
                    if failure.names:
                        counts["named"] += 1
                    elif mutated_line[:70] in message or (mutated_line.startswith("def ")
                                                           and "Your `def` line gives" in message):
                        counts["located"] += 1  # a default changed in the def line: the message names it
                    else:
                        counts["plain"] += 1
                        plain_messages.append((f"{stem}.{function}", description, mutated_line, message))
                    continue
                except Exception as error:  # a mutant the check itself cannot judge
                    counts["check error"] += 1
                    plain_messages.append((f"{stem}.{function}", description, "", repr(error)))
                    continue
                try:
                    run_check(check, mutant, hidden=True)
                    counts["not failed"] += 1
                except CheckFailed:
                    counts["hidden only"] += 1
        totals[stem] = counts
    print(f"{'chapter':16s} {'named':>6s} {'located':>8s} {'plain':>6s} {'share':>6s} {'hidden only':>12s} {'not failed':>11s}")
    for stem, c in totals.items():
        failed = c["named"] + c["located"] + c["plain"]
        share = f"{100 * (c['named'] + c['located']) / failed:.0f} %" if failed else "-"
        print(f"{stem:16s} {c['named']:6d} {c['located']:8d} {c['plain']:6d} {share:>6s} {c['hidden only']:12d} "
              f"{c['not failed']:11d}")
    if show:
        for check_id, description, line, message in plain_messages:
            print(f"\n## {check_id}: {description} on `{line}`\n{message}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chapters", help="comma-separated chapter names (the notebooks' stems)")
    parser.add_argument("--per-function", type=int, default=40, help="at most this many mutants of each function")
    parser.add_argument("--show", action="store_true", help="print each plain message")
    args = parser.parse_args()
    try:
        course_secret.load()
    except course_secret.NoSecret:
        # Any secret measures the same: the mutants meet hidden cases of the benchmark's own.
        os.environ[course_secret.ENV] = "be" * 32
    run(args.chapters.split(",") if args.chapters else None, args.per_function, args.show)


if __name__ == "__main__":
    main()
