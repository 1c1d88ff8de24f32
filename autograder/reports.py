"""What grading leaves behind: nbgrader's gradebook, a CSV of grades, a feedback page per learner.

Feedback shows the visible tests' diagnostics; for hidden tests only whether they passed and
their points. Everything that came from a submission is escaped before it goes into HTML, shows
its control characters as escapes (``\x1b``) wherever it is printed or written, and never starts
a spreadsheet formula in a CSV.
"""
from __future__ import annotations

import csv
import html
import os
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from course.notebook_format import is_graded

from .assignment import Assignment
from .engine import Result
from .submissions import safe_name


def ensure_assignment(db_url: str, assignment: Assignment, source_nb) -> None:
    """Record the assignment's notebook and grade cells in the gradebook if they are not there.

    `nbgrader generate_assignment` (run by `make release`) normally does this; a fresh database
    gets the same records from nbgrader's own preprocessors.
    """
    from .gradebook import open_gradebook

    with open_gradebook(db_url) as gradebook:
        gradebook.prepare(assignment, source_nb)


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


def write_autograded(root: Path, assignment: Assignment, results: list[Result], source_nb,
                     max_bytes: int = 64 << 20) -> list[Path]:
    """The notebook, which is all of the submission nbgrader reads there (its timestamp and secret
    are written beside it by :func:`autograder.exchange.write_exchange_files`)."""
    import nbformat

    written = []
    for r in results:
        if not safe_name(r.learner):
            continue
        folder = root / "autograded" / r.learner / assignment.name
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(autograded_notebook(r, source_nb, max_bytes), folder / f"{assignment.notebook}.ipynb")
        written.append(folder)
    return written


#: C0 and C1 control characters, the bidirectional controls and the line separators: in a
#: learner's text they would move a terminal's cursor, set its title, erase lines, or reorder
#: what a terminal or a spreadsheet shows
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def visible(text: str, keep: str = "") -> str:
    """``text`` with each control character written as its escape (ESC as ``\\x1b``), so that it
    is shown and never acted on; the characters of ``keep`` stay as they are."""
    return _CONTROLS.sub(lambda m: m[0] if m[0] in keep else m[0].encode("unicode_escape").decode("ascii"), text)


#: what makes a spreadsheet read a cell as a formula when it starts it (OWASP's list)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: str | float) -> str:
    """A CSV cell: a number as a number; text with its control characters escaped and, where a
    spreadsheet would take it for a formula, a leading ' that makes it text."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value:g}"
    if not isinstance(value, str):
        raise TypeError(f"a CSV cell is a number or text, not {type(value).__name__}")
    text = visible(value)
    return "'" + text if text.lstrip(" ").startswith(FORMULA_STARTS) else text


def write_rows(path: Path, rows) -> None:
    """A CSV of :func:`csv_cell` cells, written beside and then renamed into place, so that a
    reader (or another run writing the same file) never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    with partial.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        for row in rows:
            out.writerow([csv_cell(v) for v in row])
    partial.replace(path)


#: the course CSV's columns after the learner and the assignment: (header, value of a Result)
SUMMARY_COLUMNS: list[tuple[str, Callable[[Assignment, Result], str | float]]] = [
    ("score", lambda a, r: r.score),
    ("max_score", lambda a, r: a.max_score),
    ("status", lambda a, r: "not graded: " + r.error if r.error else "graded"),
    # what the source scan could not decide: for the instructor to read, the score is unchanged
    ("flags", lambda a, r: "; ".join(r.flags)),
]


def csv_columns(assignment: Assignment) -> list[tuple[str, Callable[[Assignment, Result], str | float]]]:
    """Every column of the course CSV: learner, assignment, one per graded test, then the summary."""
    def test_points(grade_id: str):
        return lambda a, r: next((o.points for o in r.outcomes if o.grade_id == grade_id), 0.0)

    return [("learner", lambda a, r: r.learner), ("assignment", lambda a, r: r.assignment),
            *[(t.grade_id, test_points(t.grade_id)) for t in assignment.tests], *SUMMARY_COLUMNS]


def write_csv(path: Path, assignment: Assignment, results: list[Result], columns=None) -> None:
    """The grades, one row per learner (see :func:`write_rows`)."""
    columns = csv_columns(assignment) if columns is None else columns
    write_rows(path, [[header for header, _ in columns], *([value(assignment, r) for _, value in columns] for r in results)])


STYLE = """
body{font-family:system-ui,sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem;color:#222}
h1{font-size:1.4rem} table{border-collapse:collapse;width:100%}
td,th{padding:.4rem .6rem;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}
.pass{color:#176c2e;font-weight:600} .fail{color:#a4161a;font-weight:600}
pre{white-space:pre-wrap;background:#f6f6f6;padding:.5rem;margin:.3rem 0 0}
.note{background:#fff8e1;padding:.5rem .8rem;border-left:4px solid #f0b429;margin:.5rem 0}
"""


#: all that is said of a test failed on hidden cases only
HIDDEN_ONLY = ("Your function passes the visible tests but not the hidden ones: check cases the visible tests "
               "do not try (other shapes, dtypes, masks, extreme values).")


def feedback_html(assignment: Assignment, result: Result, graded_at: datetime | None = None) -> str:
    def e(text: str) -> str:
        # A page saved or read in a terminal must not act on the learner's escapes either.
        return html.escape(visible(text, keep="\n\t"))

    rows = []
    hidden_ids = {t.grade_id for t in assignment.tests if any(h for _, _, h in t.calls)}
    for o in result.outcomes:
        verdict = '<span class="pass">passed</span>' if o.passed else '<span class="fail">failed</span>'
        detail = ""
        if not o.passed and o.message and not o.hidden_failed:  # a hidden case is never described
            detail = f"<pre>{e(o.message)}</pre>"
        elif o.hidden_failed:
            detail = f"<pre>{HIDDEN_ONLY}</pre>"
        hidden = " (visible and hidden tests)" if o.grade_id in hidden_ids else ""
        score = f"{o.points:g} / {o.max_points:g}"
        rows.append(f"<tr><td>{e(o.grade_id)}{hidden}</td><td>{verdict}{detail}</td><td>{score}</td></tr>")
    notes = "".join(f'<div class="note">{e(n)}</div>' for n in result.notes)
    if result.flags:  # the learner is told too: the instructor will read this code
        notes += f'<div class="note"><b>For the instructor to review:</b> {e("; ".join(result.flags))}</div>'
    error = f'<div class="note"><b>Not graded:</b> {e(result.error)}</div>' if result.error else ""
    when = (graded_at or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{e(assignment.name)}: feedback for {e(result.learner)}</title>"
        f"<style>{STYLE}</style></head><body>"
        f"<h1>{e(assignment.name)} / {e(assignment.notebook)}.ipynb: feedback for {e(result.learner)}</h1>"
        f"<p>Score: <b>{result.score:g} / {assignment.max_score:g}</b> (graded {when})</p>{error}{notes}"
        "<table><tr><th>test</th><th>result</th><th>points</th></tr>" + "".join(rows) + "</table>"
        "<p>Hidden tests are reported as passed or failed only. Each function is graded on its own: where it "
        "calls another graded function of this notebook, the course's version of that function is used, so "
        "one mistake costs its own points only.</p></body></html>"
    )


def write_feedback(root: Path, assignment: Assignment, results: list[Result],
                   graded_at: datetime | None = None) -> list[Path]:
    written = []
    for r in results:
        if not safe_name(r.learner):
            continue
        path = root / "feedback" / r.learner / assignment.name / f"{assignment.notebook}.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(feedback_html(assignment, r, graded_at), encoding="utf-8")
        written.append(path)
    return written
