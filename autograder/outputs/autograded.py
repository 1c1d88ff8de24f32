"""nbgrader's autograded/ copy of each submission, for the instructor's review in formgrader.

Formgrader renders the copy in the instructor's browser, so it holds nothing of the learner's that
a browser would act on (see :func:`autograded_notebook`). Beside the copy go the submission's
``timestamp.txt`` and ``submission_secret.txt``, from which `nbgrader generate_feedback` copies
them (:func:`autograder.outputs.feedback.write_exchange_files`).
"""
from __future__ import annotations

import re
from pathlib import Path

from course.layout import autograded_folder
from course.notebook_format import is_graded

from ..assignment import Assignment
from ..engine import Result
from ..submissions import safe_name
from .escapes import visible
from .feedback import write_exchange_files


def autograded_notebook(result: Result, source_nb, max_bytes: int = 64 << 20):
    """nbgrader's autograded/ copy of a submission, for formgrader's manual review.

    Formgrader renders this notebook as a page in the instructor's browser, and renders whatever
    it holds: the learner's markdown, saved HTML or JavaScript outputs, attachments and metadata
    would run there as script. So the copy holds the learner's code cells only, each as text (its
    source, which formgrader highlights, without outputs), with the nbgrader metadata of the
    instructor's cell of the same grade id, never the learner's. Every graded test cell is the
    instructor's (restored if it was edited or deleted), with this grader's verdict as its only
    output; the instructor's markdown stands in for the learner's copy of it; an answer the
    instructor grades by hand in a markdown cell is shown as text, never rendered. The learner's
    other markdown and raw cells are left out. A notebook over ``max_bytes`` is not read:
    formgrader gets the instructor's test cells.
    """
    import nbformat

    outcomes = {o.grade_id: o for o in result.outcomes}
    instructor = {c.metadata["nbgrader"]["grade_id"]: c for c in source_nb.cells
                  if isinstance(c.metadata.get("nbgrader", {}).get("grade_id"), str)}
    tests = [g for g, c in instructor.items() if c.cell_type == "code" and is_graded(c)
             and not c.metadata["nbgrader"].get("solution")]
    try:
        if result.path is None or result.path.is_symlink() or result.path.stat().st_size > max_bytes:
            raise ValueError("not read")
        learner_cells, cells = nbformat.read(result.path, as_version=4).cells, []
    except Exception:  # unreadable: formgrader gets the instructor's cells with the reason
        learner_cells = []
        reason = result.error or "the notebook could not be read"
        cells = [nbformat.v4.new_markdown_cell("**Not graded:**\n\n" + _as_text(reason))]
    placed = set()
    for cell in learner_cells:
        copied = _reviewed_cell(cell, instructor, tests, placed)
        if copied is not None:
            cells.append(copied)
    cells += [nbformat.from_dict(instructor[g]) for g in tests if g not in placed]
    for cell in cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in tests:
            cell.source = instructor[grade_id].source  # whatever the learner wrote there, the instructor's test ran
            cell.outputs = []
            if grade_id in outcomes:
                o = outcomes[grade_id]
                text = "passed\n" if o.passed else visible(o.message or "failed the hidden tests", keep="\n\t") + "\n"
                cell.outputs = [nbformat.v4.new_output("stream", name="stdout" if o.passed else "stderr", text=text)]
    for number, cell in enumerate(cells):
        cell.id = f"cell-{number}"  # new cells get random ids: the same submission makes the same copy
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = source_nb.metadata.get("kernelspec", {})
    nb.metadata["language_info"] = source_nb.metadata.get("language_info", {"name": "python"})
    return nb


def _as_text(text: str) -> str:
    """Markdown that shows ``text`` as it is, escaped, never rendered: a fenced block whose fence
    is longer than any run of backticks in it, so that no line of it can close the block."""
    text = visible(text, keep="\n\t")
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall("`+", text)), default=0))
    return f"{fence}text\n{text}\n{fence}"


def _reviewed_cell(cell, instructor: dict, tests: list[str], placed: set):
    """What the autograded copy holds in place of one of the learner's cells, or None."""
    import nbformat

    if not isinstance(cell, dict):
        return None
    source = cell.get("source", "")
    source = "".join(str(s) for s in source) if isinstance(source, list) else str(source)
    metadata = cell.get("metadata")
    meta = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    grade_id = meta.get("grade_id") if isinstance(meta, dict) else None
    if grade_id in placed and grade_id in tests:
        return None  # a duplicated test cell, which the grader did not run either
    theirs = instructor.get(grade_id) if isinstance(grade_id, str) and grade_id not in placed else None
    if theirs is not None and theirs.cell_type != cell.get("cell_type"):
        theirs = None
    if theirs is not None:
        placed.add(grade_id)
    kind = cell.get("cell_type")
    if kind == "code":
        copied = nbformat.v4.new_code_cell(source)
    elif kind == "markdown" and theirs is not None and theirs.metadata["nbgrader"].get("solution"):
        copied = nbformat.v4.new_markdown_cell(_as_text(source))  # an answer graded by hand
    elif kind == "markdown" and theirs is not None:
        copied = nbformat.v4.new_markdown_cell(theirs.source)
    else:
        return None
    if theirs is not None:
        copied.metadata["nbgrader"] = dict(theirs.metadata["nbgrader"])
    return copied


def write_autograded(root: Path, assignment: Assignment, result: Result, source_nb, timestamp: str | None,
                     secret: str | None, max_bytes: int = 64 << 20) -> Path | None:
    """The notebook, which is all of the submission nbgrader reads there, with its timestamp and
    secret beside it; None for a learner whose id is not a plain name."""
    import nbformat

    if not safe_name(result.learner):
        return None
    folder = autograded_folder(root, result.learner, assignment.name)
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(autograded_notebook(result, source_nb, max_bytes), folder / f"{assignment.notebook}.ipynb")
    write_exchange_files(folder, timestamp, secret)
    return folder
