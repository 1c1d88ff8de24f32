"""How the course's notebooks are written and read: authoring tags, nbgrader metadata, test cells.

Authors mark the cells of an instructor notebook (a jupytext percent script) with tags instead
of writing nbgrader's metadata by hand:

    # %% tags=["export"]                                   imports and helpers the module needs
    # %% tags=["solution"] grade_id="softmax"              a learner fills this in
    # %% tags=["test"] grade_id="test_softmax" points=2    a graded, read-only test cell

Markdown and exported cells become read-only; untagged code cells (demonstrations, plots) stay
editable and ungraded. A test cell runs the course's checks, ``check("<stem>.<function>", f)``,
and under ``### BEGIN HIDDEN TESTS`` the same with ``hidden=True``; no other cell may call them.

A test cell is known by its nbgrader metadata (``is_graded``), never by what it calls: the grader
runs every cell of a submission but those with the grade ids of the instructor's test cells, and
reads what each test checks with ``check_calls``.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat

from . import source_trees

NBGRADER_SCHEMA = 3
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}
_SAFE_ID = re.compile(r"[^A-Za-z0-9_-]")
SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
HIDDEN_MARKERS = ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")


class NotebookSourceError(ValueError):
    """An instructor notebook breaks the authoring conventions above."""


# ----------------------------------------------------------------------------------------
# test cells and the checks they call
# ----------------------------------------------------------------------------------------


def _is_check_call(node: ast.AST) -> bool:
    """``check(...)`` or ``something.check(...)``: how a cell runs the course's checks."""
    return isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "check"


def calls_checks(source: str) -> bool:
    """Whether code runs the course's checks itself; code that does not parse does not."""
    try:
        tree = source_trees.parse(source)
    except SyntaxError:
        return False
    return any(_is_check_call(node) for node in ast.walk(tree))


def is_graded(cell) -> bool:
    """A graded test cell by nbgrader's metadata."""
    metadata = cell.get("metadata", {})
    meta = metadata.get("nbgrader", {}) if isinstance(metadata, dict) else {}
    return isinstance(meta, dict) and meta.get("grade") is True


def check_calls(source: str) -> list[tuple[str | None, str | None, bool]]:
    """The (check id, function name, hidden) of every `check(...)` call in a test cell.

    The id or the name is None where the call does not spell it out as a literal and a name.
    """
    calls = []
    for node in ast.walk(source_trees.parse(source)):
        if _is_check_call(node):
            check_id = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
            fn = node.args[1].id if len(node.args) > 1 and isinstance(node.args[1], ast.Name) else None
            hidden = any(kw.arg == "hidden" and getattr(kw.value, "value", False) is True for kw in node.keywords)
            calls.append((check_id, fn, hidden))
    return calls


def graded_cells(nb: nbformat.NotebookNode, role: str) -> list:
    """Cells of one role, 'solution' or 'test', from a notebook that carries nbgrader metadata."""
    if role == "test":
        return [cell for cell in nb.cells if is_graded(cell)]
    if role == "solution":
        return [cell for cell in nb.cells if cell.metadata.get("nbgrader", {}).get("solution")]
    raise ValueError(f"graded cells have the role 'solution' or 'test', not {role!r}")


def module_cells(nb: nbformat.NotebookNode) -> list[tuple[str, bool]]:
    """(source, is an answer) of the cells a notebook's module is made of, in order: its exported and
    answer cells, as their authoring tags (which the release keeps) mark them."""
    cells = []
    for cell in nb.cells:
        tags = set(cell.metadata.get("tags", []))
        if cell.cell_type == "code" and tags & {"export", "solution"}:
            cells.append((cell.source, "solution" in tags))
    return cells


def graded_functions(path: Path) -> list[str]:
    """The functions (and classes) an instructor notebook grades: the grade_ids of its answer cells."""
    return [c.metadata["nbgrader"]["grade_id"] for c in graded_cells(read_instructor_notebook(path), "solution")]


# ----------------------------------------------------------------------------------------
# from the authoring tags to nbgrader's metadata
# ----------------------------------------------------------------------------------------


def _nbgrader(*, grade: bool, solution: bool, locked: bool, grade_id: str, points: float | None = None) -> dict:
    meta = {
        "grade": grade,
        "grade_id": grade_id,
        "locked": locked,
        "schema_version": NBGRADER_SCHEMA,
        "solution": solution,
        "task": False,
    }
    if grade:
        meta["points"] = points
    return meta


def cell_role(cell) -> str:
    """'solution', 'test', 'export', 'markdown' or 'demo'."""
    if cell.cell_type == "markdown":
        return "markdown"
    tags = set(cell.metadata.get("tags", []))
    roles = tags & {"solution", "test", "export"}
    if len(roles) > 1:
        raise NotebookSourceError(f"a cell has more than one role {sorted(roles)}:\n{cell.source[:200]}")
    return roles.pop() if roles else "demo"


def _validate(source: Path, cell, role: str, grade_id: str | None, points) -> None:
    if role in ("solution", "test") and not grade_id:
        raise NotebookSourceError(f"{source}: a {role} cell needs a grade_id:\n{cell.source[:200]}")
    if role == "test" and not isinstance(points, (int, float)):
        raise NotebookSourceError(f"{source}: test cell {grade_id!r} needs points=<number>")
    if role == "test" and not calls_checks(cell.source):
        raise NotebookSourceError(f"{source}: test cell {grade_id!r} calls no check(...), so it would grade nothing")
    if role in ("demo", "export", "solution") and calls_checks(cell.source):
        # It would look like a test to the learner and grade nothing: only graded cells are tests.
        raise NotebookSourceError(
            f"{source}: a {role} cell calls check(...); only a test cell (tags=[\"test\"]) may:\n{cell.source[:200]}"
        )
    if role == "solution" and SOLUTION_MARKERS[0] not in cell.source:
        raise NotebookSourceError(f"{source}: solution cell {grade_id!r} has no {SOLUTION_MARKERS[0]} region")
    if role != "solution" and SOLUTION_MARKERS[0] in cell.source:
        raise NotebookSourceError(f"{source}: a solution region outside a solution cell:\n{cell.source[:200]}")


def to_nbgrader(source: Path) -> nbformat.NotebookNode:
    """The nbgrader notebook for an instructor source, with stable cell ids."""
    import jupytext  # only the release and the grader's set-up read percent scripts

    nb = jupytext.read(source)
    stem = source.stem
    seen: set[str] = set()
    for index, cell in enumerate(nb.cells):
        role = cell_role(cell)
        meta = cell.metadata
        grade_id = meta.pop("grade_id", None)
        points = meta.pop("points", None)
        meta.pop("lines_to_next_cell", None)
        _validate(source, cell, role, grade_id, points)
        grade_id = grade_id or f"{stem}-{index:03d}"
        if grade_id in seen:
            raise NotebookSourceError(f"{source}: grade_id {grade_id!r} is used twice")
        seen.add(grade_id)
        if role == "solution":
            meta["nbgrader"] = _nbgrader(grade=False, solution=True, locked=False, grade_id=grade_id)
        elif role == "test":
            meta["nbgrader"] = _nbgrader(grade=True, solution=False, locked=True, grade_id=grade_id, points=points)
        elif role in ("markdown", "export"):
            meta["nbgrader"] = _nbgrader(grade=False, solution=False, locked=True, grade_id=grade_id)
        # jupytext invents random ids; a generated file must not change when its source has not.
        cell.id = _SAFE_ID.sub("-", grade_id)[:64]
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    nb.metadata = {
        "kernelspec": dict(KERNELSPEC),
        "language_info": {"name": "python"},
    }
    nb.nbformat, nb.nbformat_minor = 4, 5
    nbformat.validate(nb)
    return nb


def read_instructor_notebook(path: Path) -> nbformat.NotebookNode:
    """An instructor notebook with nbgrader's metadata, from a percent script or an nbgrader .ipynb."""
    if path.suffix == ".py":
        return to_nbgrader(path)
    return nbformat.read(path, as_version=4)


def write_notebook(nb: nbformat.NotebookNode, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = nbformat.writes(nb) + "\n"
    path.write_text(text, encoding="utf-8")


# ----------------------------------------------------------------------------------------
# what the tests and the release read out of a notebook
# ----------------------------------------------------------------------------------------


def strip_solution_markers(source: str) -> str:
    lines = [ln for ln in source.splitlines() if ln.strip() not in SOLUTION_MARKERS]
    return "\n".join(lines)


def complete(release_nb: nbformat.NotebookNode, source_nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The release notebook with every answer cell filled in from the instructor's source.

    This is what a learner who solved everything would hand in: used to prove that a
    perfect submission gets full marks.
    """
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in graded_cells(source_nb, "solution")}
    done = nbformat.from_dict(release_nb)
    for cell in graded_cells(done, "solution"):
        cell.source = strip_solution_markers(answers[cell.metadata["nbgrader"]["grade_id"]])
    return done


def definitions(nb: nbformat.NotebookNode) -> dict:
    """Run a notebook's exported and answer cells in a fresh namespace and return it.

    Only for notebooks the course itself wrote (the release, the solutions): it is how the tests
    get at a stub or a solution without running demonstrations or test cells.
    """
    namespace: dict = {"__name__": "course_notebook"}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and (meta.get("solution") or "export" in cell.metadata.get("tags", [])):
            exec(compile(cell.source, f"<cell {cell.get('id', '?')}>", "exec"), namespace)  # noqa: S102
    return namespace


def secret_lines(nb: nbformat.NotebookNode, min_length: int = 16) -> set[str]:
    """Distinctive lines of solution regions and hidden tests: what must never be published.

    A line the notebook also shows outside those regions (an attribute name the instructions
    spell out, say) is published on purpose and is not counted.
    """
    secrets, shown = set(), ""
    for cell in nb.cells:
        inside = False
        for line in cell.source.splitlines():
            marker = line.strip()
            if marker in (SOLUTION_MARKERS[0], HIDDEN_MARKERS[0]):
                inside = True
            elif marker in (SOLUTION_MARKERS[1], HIDDEN_MARKERS[1]):
                inside = False
            elif inside and len(marker) >= min_length:
                secrets.add(marker)
            elif not inside:
                shown += line + "\n"
    return {s for s in secrets if s not in shown}
