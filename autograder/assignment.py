"""The assignment model: what one assignment grades, read from a notebook carrying nbgrader's metadata.

An :class:`Assignment` is built from the instructor's notebook (for grading a class) or from a
release (for a learner's own ``check``), never from a submission: a learner may edit, delete or
duplicate their copy of a test cell, and that changes nothing here. It lists the graded test cells
with their points and the checks each runs, and answers what a graded function may not call. It
runs nothing and reads no submission.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import nbformat

from course import source_trees
from course.layout import reference_module
from course.notebook_format import check_calls, graded_cells, is_graded

from .checks import get
from .framework import Check
from .submissions import notebook_cells


@dataclass(frozen=True)
class GradedTest:
    """One graded test cell: its id, its points and the checks it runs."""

    grade_id: str
    points: float
    calls: tuple[tuple[str, str, bool], ...]  # (check id, function name, hidden)


@dataclass(frozen=True)
class Assignment:
    name: str
    notebook: str
    tests: tuple[GradedTest, ...]
    #: the modules its notebook imports: the worker imports them once, before any learner process
    imports: tuple[str, ...] = ()
    #: the code cells the notebook gives (neither answers nor tests): the scan of shortcuts trusts them
    given: tuple[str, ...] = ()

    @property
    def functions(self) -> list[str]:
        return list(dict.fromkeys(fn for t in self.tests for _, fn, _ in t.calls))

    @property
    def test_ids(self) -> frozenset[str]:
        """The grade ids of its test cells: those cells of a submission are left out, these run instead."""
        return frozenset(t.grade_id for t in self.tests)

    @property
    def max_score(self) -> float:
        return sum(t.points for t in self.tests)

    @classmethod
    def from_notebook(cls, name: str, notebook: str, nb) -> Assignment:
        """From a notebook carrying nbgrader metadata: the instructor's source, or a release."""
        tests = []
        for cell in graded_cells(nb, "test"):
            meta = cell.metadata["nbgrader"]
            calls = tuple((c, f, h) for c, f, h in check_calls(cell.source) if c and f)
            tests.append(GradedTest(meta["grade_id"], float(meta.get("points", 0)), calls))
        return cls(name, notebook, tuple(tests), _imports(nb), _given(nb))

    def forbidden(self, function: str) -> tuple[str, ...]:
        """What ``function`` may not call: the built-ins it rebuilds, and the course's own answer."""
        own = f"{reference_module(self.notebook)}.{function}"
        return tuple(dict.fromkeys([n for ch in self._checks(function) for n in ch.forbidden] + [own]))

    def forbidden_ops(self, function: str) -> tuple[str, ...]:
        """Further fragments of the operator names ``function`` may not call (see Check.forbidden_ops)."""
        return tuple(dict.fromkeys(n for ch in self._checks(function) for n in ch.forbidden_ops))

    def _checks(self, function: str) -> list[Check]:
        return list({get(c).__class__: get(c) for t in self.tests for c, f, _ in t.calls if f == function}.values())


def _given(nb) -> tuple[str, ...]:
    """The sources of the code cells the notebook gives, as the grader reads a submission's cells."""
    cells = [c for c in nb.cells if c.cell_type == "code" and not c.metadata.get("nbgrader", {}).get("solution")]
    tests = [c.metadata["nbgrader"]["grade_id"] for c in graded_cells(nb, "test")]
    return tuple(notebook_cells(nbformat.from_dict({"cells": cells}), tests)[0])


def _imports(nb) -> tuple[str, ...]:
    """The installed modules a notebook's code cells import (not the course's reference code)."""
    names: dict[str, None] = {}
    for cell in nb.cells:
        if cell.cell_type != "code" or is_graded(cell):
            continue
        try:
            tree = source_trees.parse(cell.source)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(dict.fromkeys(alias.name for alias in node.names))
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names[node.module] = None
    return tuple(n for n in names if n.split(".")[0] not in ("reference", "autograder", "course"))


def load_assignment(root: Path, name: str):
    """An assignment's graded tests and the instructor's notebook they come from."""
    from course.layout import instructor_notebook
    from course.notebook_format import read_instructor_notebook

    path = instructor_notebook(name, root)
    source = read_instructor_notebook(path)
    return Assignment.from_notebook(name, path.stem, source), source
