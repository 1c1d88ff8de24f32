"""The grade files: grades made from the gradebook alone, in the formats where courses publish them.

    python -m autograder export ASSIGNMENT [ASSIGNMENT ...] [--db URL]

(`grade` writes the course's CSV too, at the end of every run, through :func:`write_csv`.)

From the course's records in the gradebook (every test's verdict and message, written as each
submission was graded), for each assignment:

- ``grades/<assignment>.csv``: the course's CSV (one row per learner, one column per test);
- ``feedback/<learner>/<assignment>/<notebook>.html``: each learner's page, with the
  ``timestamp.txt`` and ``submission_secret.txt`` that `nbgrader release_feedback` needs;
- ``grades/gradescope/<assignment>/<learner>/results.json``: Gradescope's autograder results
  format (a score, and per test its name, score, max_score, visibility and output);

and ``grades/canvas.csv``, a Canvas gradebook import: Student, ID, SIS User ID, SIS Login ID,
Section, then one column per assignment, headed by its name, with the "Points Possible" row
Canvas's own export has. A learner not graded in an assignment gets an empty cell there (Canvas
leaves an empty cell's grade as it is), never a zero.

A text cell of either CSV that a spreadsheet would read as a formula starts with a ``'`` instead,
and shows its control characters as escapes (:func:`csv_cell`).
"""
from __future__ import annotations

import csv
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from course.files import atomic_write
from course.layout import FEEDBACK, canvas_csv, grades_csv, gradescope_folder

from ..assignment import Assignment, load_assignment
from ..engine import Result
from ..messages import tr
from ..submissions import safe_name
from .escapes import visible
from .feedback import HIDDEN_ONLY, write_feedback
from .gradebook import Gradebook, Record

CANVAS_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")  # english: Canvas's own headers
#: what makes a spreadsheet read a cell as a formula when it starts it (OWASP's list)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: str | float) -> str:
    """A CSV cell: a number as a number; text with its control characters escaped and, where a
    spreadsheet would take it for a formula, a leading ' that makes it text."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value:g}"
    if not isinstance(value, str):
        raise TypeError(f"a CSV cell is a number or text, not {type(value).__name__}")  # english: a programming error
    text = visible(value)
    return "'" + text if text.lstrip(" ").startswith(FORMULA_STARTS) else text


def write_rows(path: Path, rows) -> None:
    """A CSV of :func:`csv_cell` cells, written so that a reader (or another run writing the same
    file) never sees half of it."""
    def write(partial: Path) -> None:
        with partial.open("w", newline="", encoding="utf-8") as f:
            out = csv.writer(f)
            for row in rows:
                out.writerow([csv_cell(v) for v in row])

    atomic_write(path, write)


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


def gradescope_results(assignment: Assignment, result: Result, seconds: float | None = None) -> dict:
    """One submission in Gradescope's results.json format. Every test cell is a test the learner
    sees; what a hidden case tried is never in its output."""
    hidden = {t.grade_id for t in assignment.tests if any(h for _, _, h in t.calls)}
    tests = []
    for number, outcome in enumerate(result.outcomes, start=1):
        if outcome.passed:
            output = tr("passed")
        elif outcome.hidden_failed:
            output = tr(HIDDEN_ONLY)  # whether it passed, never what it tried
        else:
            output = outcome.message
        name = outcome.grade_id + (tr(" (visible and hidden tests)") if outcome.grade_id in hidden else "")
        tests.append({"name": name, "number": str(number), "score": outcome.points, "max_score": outcome.max_points,
                      "status": "passed" if outcome.passed else "failed", "visibility": "visible", "output": output})
    lines = ([tr("Not graded: {error}").format(error=result.error)] if result.error else []) + list(result.notes)
    return {
        "score": result.score,
        "execution_time": round(seconds if seconds is not None else result.seconds, 1),
        "output": "\n".join(lines),
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {"learner": result.learner, "assignment": assignment.name, "max_score": assignment.max_score},
    }


def write_gradescope(folder: Path, assignment: Assignment, records: list[Record]) -> list[Path]:
    written = []
    for record in records:
        if safe_name(record.learner):
            path = folder / record.learner / "results.json"
            text = json.dumps(gradescope_results(assignment, record.result), indent=1) + "\n"
            atomic_write(path, lambda partial, text=text: partial.write_text(text, encoding="utf-8"))
            written.append(path)
    return written


@dataclass(frozen=True)
class Learner:
    id: str
    first_name: str | None = None
    last_name: str | None = None
    lms_user_id: str | None = None

    @property
    def display(self) -> str:
        """Canvas's "Student" column: "Last, First" where nbgrader knows the names."""
        if self.last_name and self.first_name:
            return f"{self.last_name}, {self.first_name}"
        return self.last_name or self.first_name or self.id


def learners(gradebook: Gradebook, ids: set[str]) -> dict[str, Learner]:
    """What nbgrader's gradebook knows of each learner (names and LMS id, when the instructor added them)."""
    from nbgrader import api
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    with Session(gradebook.engine) as session:
        rows = session.scalars(select(api.Student).where(api.Student.id.in_(ids))).all() if ids else []
        known = {s.id: Learner(s.id, s.first_name, s.last_name, s.lms_user_id) for s in rows}
    return {i: known.get(i, Learner(i)) for i in ids}


def write_canvas(path: Path, assignments: list[Assignment], records: dict[str, list[Record]],
                 people: dict[str, Learner]) -> None:
    """A Canvas gradebook import of the given assignments."""
    scores = {(a, r.learner): r.result.score for a, rs in records.items() for r in rs}
    rows = [[*CANVAS_COLUMNS, *(a.name for a in assignments)],
            ["Points Possible", "", "", "", "", *(a.max_score for a in assignments)]]
    for learner in sorted(people):
        person = people[learner]
        cells = [scores.get((a.name, learner), "") for a in assignments]
        rows.append([person.display, person.lms_user_id or "", "", learner, "", *cells])
    write_rows(path, rows)


def export(root: Path, gradebook: Gradebook, names: list[str]) -> list[str]:
    """Every file above, from the gradebook; returns what was written, in words."""
    done, assignments, records = [], [], {}
    for name in names:
        assignment, _ = load_assignment(root, name)
        rows = gradebook.graded(name)  # with what the instructor gave by hand in formgrader
        assignments.append(assignment)
        records[name] = rows
        csv_path = grades_csv(root, name)
        write_csv(csv_path, assignment, [r.result for r in rows])
        pages = [write_feedback(root, assignment, r.result, r.graded_at, r.timestamp, r.secret) for r in rows]
        pages = [p for p in pages if p is not None]
        results = write_gradescope(gradescope_folder(root, name), assignment, rows)
        done.append(f"{name}: {len(rows)} learners: {csv_path}; {len(pages)} feedback pages under {root / FEEDBACK}; "
                    f"{len(results)} Gradescope results under {gradescope_folder(root, name)}")  # english: the instructor's
    people = learners(gradebook, {r.learner for rs in records.values() for r in rs})
    canvas = canvas_csv(root)
    write_canvas(canvas, assignments, records, people)
    counts = f"{len(people)} learners, {len(assignments)} assignments"
    done.append(f"Canvas gradebook import ({counts}): {canvas}")  # english: the instructor's
    return done
