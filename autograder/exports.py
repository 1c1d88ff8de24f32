"""Grades and feedback made from the gradebook alone, in the formats where courses publish them.

    python -m autograder export ASSIGNMENT [ASSIGNMENT ...] [--db URL]

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
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from .assignment import Assignment, load_assignment
from .engine import Result
from .exchange import write_exchange_files
from .gradebook import Gradebook, Record
from .reports import HIDDEN_ONLY, write_csv, write_feedback, write_rows
from .submissions import safe_name

CANVAS_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")


def gradescope_results(assignment: Assignment, result: Result, seconds: float | None = None) -> dict:
    """One submission in Gradescope's results.json format. Every test cell is a test the learner
    sees; what a hidden case tried is never in its output."""
    hidden = {t.grade_id for t in assignment.tests if any(h for _, _, h in t.calls)}
    tests = []
    for number, outcome in enumerate(result.outcomes, start=1):
        if outcome.passed:
            output = "passed"
        elif outcome.hidden_failed:
            output = HIDDEN_ONLY  # whether it passed, never what it tried
        else:
            output = outcome.message
        name = outcome.grade_id + (" (visible and hidden tests)" if outcome.grade_id in hidden else "")
        tests.append({"name": name, "number": str(number), "score": outcome.points, "max_score": outcome.max_points,
                      "status": "passed" if outcome.passed else "failed", "visibility": "visible", "output": output})
    lines = ([f"Not graded: {result.error}"] if result.error else []) + list(result.notes)
    return {
        "score": result.score,
        "execution_time": round(seconds if seconds is not None else result.seconds, 1),
        "output": "\n".join(lines),
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {"learner": result.learner, "assignment": assignment.name, "max_score": assignment.max_score},
    }


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


def write_gradescope(folder: Path, assignment: Assignment, records: list[Record]) -> list[Path]:
    written = []
    for record in records:
        if safe_name(record.learner):
            path = folder / record.learner / "results.json"
            _atomic_write(path, json.dumps(gradescope_results(assignment, record.result), indent=1) + "\n")
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


def write_feedback_pages(root: Path, assignment: Assignment, records: list[Record]) -> list[Path]:
    """Every learner's page and the files nbgrader's release_feedback reads beside it."""
    written = []
    for record in records:
        written += write_feedback(root, assignment, [record.result], record.graded_at)
        if safe_name(record.learner):
            write_exchange_files(root / "feedback" / record.learner / assignment.name, record.timestamp, record.secret)
    return written


def export(root: Path, gradebook: Gradebook, names: list[str]) -> list[str]:
    """Every file above, from the gradebook; returns what was written, in words."""
    done, assignments, records = [], [], {}
    for name in names:
        assignment, _ = load_assignment(root, name)
        rows = gradebook.records(name)
        assignments.append(assignment)
        records[name] = rows
        csv_path = root / "grades" / f"{name}.csv"
        write_csv(csv_path, assignment, [r.result for r in rows])
        pages = write_feedback_pages(root, assignment, rows)
        results = write_gradescope(root / "grades" / "gradescope" / name, assignment, rows)
        done.append(f"{name}: {len(rows)} learners: {csv_path}; {len(pages)} feedback pages under {root / 'feedback'}; "
                    f"{len(results)} Gradescope results under {root / 'grades' / 'gradescope' / name}")
    people = learners(gradebook, {r.learner for rs in records.values() for r in rs})
    canvas = root / "grades" / "canvas.csv"
    write_canvas(canvas, assignments, records, people)
    done.append(f"Canvas gradebook import ({len(people)} learners, {len(assignments)} assignments): {canvas}")
    return done
