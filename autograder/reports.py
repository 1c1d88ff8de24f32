"""What grading leaves behind: nbgrader's gradebook, a CSV of grades, a feedback page per learner.

Feedback shows the visible tests' diagnostics; for hidden tests only whether they passed and
their points. Everything that came from a submission is escaped before it goes into HTML.
"""
from __future__ import annotations

import csv
import html
from datetime import UTC, datetime
from pathlib import Path

from .engine import Assignment, Result
from .submissions import safe_name


def ensure_assignment(db_url: str, assignment: Assignment, source_nb) -> None:
    """Record the assignment's notebook and grade cells in the gradebook if they are not there.

    `nbgrader generate_assignment` (run by `make release`) normally does this; a fresh database
    gets the same records from nbgrader's own preprocessors.
    """
    from nbgrader.api import Gradebook, MissingEntry
    from nbgrader.preprocessors import ComputeChecksums, SaveCells

    with Gradebook(db_url) as gb:
        try:
            gb.find_notebook(assignment.notebook, assignment.name)
            return
        except MissingEntry:
            gb.update_or_create_assignment(assignment.name)
    resources = {"nbgrader": {"notebook": assignment.notebook, "assignment": assignment.name, "db_url": db_url}}
    nb, resources = ComputeChecksums().preprocess(source_nb, resources)
    SaveCells().preprocess(nb, resources)


def _timestamp_text(result: Result) -> str | None:
    """The submission's timestamp.txt as nbgrader writes it (one short line), or None.

    Read with a bound: the file is the learner's, and may be a link, a folder or a huge (sparse) file.
    """
    stamp = result.path.parent / "timestamp.txt" if result.path else None
    if not stamp or stamp.is_symlink() or not stamp.is_file():
        return None
    try:
        with stamp.open("rb") as f:
            raw = f.read(101)
    except OSError:
        return None
    if len(raw) > 100:
        return None
    text = raw.decode("utf-8", "replace").strip()
    return text if text.isprintable() else None


def _timestamp(result: Result) -> datetime | None:
    from nbgrader.utils import parse_utc

    text = _timestamp_text(result)
    if text is None:
        return None
    try:
        return parse_utc(text)
    except Exception:  # a malformed timestamp is only a missing one
        return None


def write_gradebook(db_url: str, assignment: Assignment, results: list[Result]) -> None:
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gb:
        for result in results:
            if not safe_name(result.learner):
                continue  # never an id in the gradebook
            gb.update_or_create_student(result.learner)
            kwargs = {}
            stamp = _timestamp(result)
            if stamp is not None:
                kwargs["timestamp"] = stamp
            gb.update_or_create_submission(assignment.name, result.learner, **kwargs)
            for outcome in result.outcomes:
                grade = gb.find_grade(outcome.grade_id, assignment.notebook, assignment.name, result.learner)
                grade.auto_score = outcome.points
            gb.db.commit()


def autograded_notebook(result: Result, source_nb, max_bytes: int = 64 << 20):
    """nbgrader's autograded/ copy of a submission, for formgrader's manual review.

    The learner's cells as handed in, except that every graded test cell is the instructor's
    (restored if it was edited or deleted) and shows this grader's verdict as its output. A
    notebook over ``max_bytes`` is not read: formgrader gets the instructor's cells.
    """
    import nbformat

    outcomes = {o.grade_id: o for o in result.outcomes}
    tests = {c.metadata["nbgrader"]["grade_id"]: c for c in source_nb.cells if c.metadata.get("nbgrader", {}).get("grade")}
    try:
        if result.path is None or result.path.is_symlink() or result.path.stat().st_size > max_bytes:
            raise ValueError("not read")
        nb = nbformat.read(result.path, as_version=4)
    except Exception:  # unreadable: formgrader gets the instructor's cells with the reason
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"**Not graded:** {result.error}")])
    placed = set()
    cells = []
    for cell in nb.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in tests:
            if grade_id in placed:
                continue  # a duplicated test cell
            cell = nbformat.from_dict(tests[grade_id])
            placed.add(grade_id)
        cells.append(cell)
    cells += [nbformat.from_dict(tests[g]) for g in tests if g not in placed]
    for cell in cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in tests and grade_id in outcomes:
            o = outcomes[grade_id]
            text = "passed\n" if o.passed else (o.message or "failed the hidden tests") + "\n"
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout" if o.passed else "stderr", text=text)]
            cell.execution_count = None
    nb.cells = cells
    nb.metadata["kernelspec"] = source_nb.metadata.get("kernelspec", {})
    return nb


def write_autograded(root: Path, assignment: Assignment, results: list[Result], source_nb,
                     max_bytes: int = 64 << 20) -> None:
    """The notebook and its timestamp, which is all nbgrader reads there; nothing else of the
    submission's folder is copied, and the timestamp only as the short line it should be."""
    import nbformat

    for r in results:
        if not safe_name(r.learner):
            continue
        folder = root / "autograded" / r.learner / assignment.name
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(autograded_notebook(r, source_nb, max_bytes), folder / f"{assignment.notebook}.ipynb")
        stamp = _timestamp_text(r)
        if stamp is not None:
            (folder / "timestamp.txt").write_text(stamp + "\n", encoding="utf-8")


def write_csv(path: Path, assignment: Assignment, results: list[Result]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    ids = [t.grade_id for t in assignment.tests]
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(["learner", "assignment", *ids, "score", "max_score", "status", "flags"])
        for r in results:
            points = {o.grade_id: o.points for o in r.outcomes}
            status = "not graded: " + r.error if r.error else "graded"
            scores = [f"{points.get(i, 0):g}" for i in ids]
            out.writerow([r.learner, r.assignment, *scores, f"{r.score:g}", f"{assignment.max_score:g}", status,
                          "; ".join(r.flags)])


STYLE = """
body{font-family:system-ui,sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem;color:#222}
h1{font-size:1.4rem} table{border-collapse:collapse;width:100%}
td,th{padding:.4rem .6rem;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}
.pass{color:#176c2e;font-weight:600} .fail{color:#a4161a;font-weight:600}
pre{white-space:pre-wrap;background:#f6f6f6;padding:.5rem;margin:.3rem 0 0}
.note{background:#fff8e1;padding:.5rem .8rem;border-left:4px solid #f0b429;margin:.5rem 0}
"""


def feedback_html(assignment: Assignment, result: Result) -> str:
    e = html.escape
    rows = []
    hidden_ids = {t.grade_id for t in assignment.tests if any(h for _, _, h in t.calls)}
    for o in result.outcomes:
        verdict = '<span class="pass">passed</span>' if o.passed else '<span class="fail">failed</span>'
        detail = ""
        if not o.passed and o.message:
            detail = f"<pre>{e(o.message)}</pre>"
        elif o.hidden_failed:
            detail = (
                "<pre>Your function passes the visible tests but not the hidden ones: check cases the visible tests "
                "do not try (other shapes, dtypes, masks, extreme values).</pre>"
            )
        hidden = " (visible and hidden tests)" if o.grade_id in hidden_ids else ""
        score = f"{o.points:g} / {o.max_points:g}"
        rows.append(f"<tr><td>{e(o.grade_id)}{hidden}</td><td>{verdict}{detail}</td><td>{score}</td></tr>")
    notes = "".join(f'<div class="note">{e(n)}</div>' for n in result.notes)
    if result.flags:  # the learner is told too: the instructor will read this code
        notes += f'<div class="note"><b>For the instructor to review:</b> {e("; ".join(result.flags))}</div>'
    error = f'<div class="note"><b>Not graded:</b> {e(result.error)}</div>' if result.error else ""
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
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


def write_feedback(root: Path, assignment: Assignment, results: list[Result]) -> list[Path]:
    written = []
    for r in results:
        if not safe_name(r.learner):
            continue
        path = root / "feedback" / r.learner / assignment.name / f"{assignment.notebook}.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(feedback_html(assignment, r), encoding="utf-8")
        written.append(path)
    return written


def summary(assignment: Assignment, results: list[Result], seconds: float) -> str:
    graded = [r for r in results if not r.error]
    failed = [r for r in results if r.error]
    lines = [f"{assignment.name}: graded {len(graded)} of {len(results)} submissions in {seconds:.1f} s"]
    if graded:
        mean = sum(r.score for r in graded) / len(graded)
        lines.append(f"mean score {mean:.2f} / {assignment.max_score:g} ({100 * mean / assignment.max_score:.0f}%)")
    for r in failed:
        lines.append(f"failed to grade {r.learner!r}: {r.error}")
    for r in results:
        if r.flags:
            lines.append(f"to review in {r.learner!r}: {'; '.join(r.flags)}")
    return "\n".join(lines)
