"""What a rerun grades: what is missing, handed in again, changed, graded with other tests or
failed through the grader's fault; everything with --regrade; and a missing driver named."""
from __future__ import annotations

import importlib.util

import pytest

from autograder.engine import Result
from autograder.engine import TestOutcome as Outcome
from autograder.outputs.gradebook import GradebookError, grader_digest, open_gradebook, submission_key
from autograder.submissions import Submission
from course.layout import TIMESTAMP, gradebook_url
from tests.grader import small_class as sc


@pytest.fixture
def graded(tmp_path):
    """A class of three, all recorded as graded; returns the pieces to ask what is still to do."""
    from autograder.assignment import load_assignment

    root = sc.course(tmp_path / "course")
    assignment, source = load_assignment(root, sc.ASSIGNMENT)
    submissions = []
    for learner in ("alice", "bob", "carol"):
        folder = sc.hand_in(root, learner, "solved")
        submissions.append(Submission(learner, folder / f"{sc.NOTEBOOK}.ipynb"))
    gradebook = open_gradebook(gradebook_url(root))
    gradebook.prepare(assignment, source)
    grader = grader_digest(assignment, source)
    for s in submissions:
        outcomes = [Outcome(t.grade_id, t.points, t.points, True) for t in assignment.tests]
        error = "the grader's worker failed: it did not start" if s.learner == "carol" else None
        result = Result(s.learner, sc.ASSIGNMENT, sc.NOTEBOOK, [] if error else outcomes, error=error)
        gradebook.record(assignment, result, submission_key(s, grader, 1 << 26))
    yield gradebook, assignment, source, submissions
    gradebook.close()


def _to_grade(graded, regrade=False, source=None):
    gradebook, assignment, original, submissions = graded
    pending, skipped = gradebook.to_grade(assignment, source or original, submissions, 1 << 26, regrade)
    return sorted(s.learner for s, _ in pending), skipped


def test_a_rerun_grades_only_the_grader_s_failures(graded):
    assert _to_grade(graded) == (["carol"], 2)  # carol's grading failed through the grader: graded again


def test_a_changed_notebook_or_timestamp_is_graded_again(graded):
    _, _, _, (alice, bob, _) = graded
    alice.path.write_text(alice.path.read_text().replace("return", "return  ", 1))
    (bob.path.parent / TIMESTAMP).write_text("2026-12-02 09:00:00.000000 UTC")
    assert _to_grade(graded) == (["alice", "bob", "carol"], 0)


def test_other_tests_or_regrade_grade_everyone_again(graded):
    _, _, source, _ = graded
    changed = source.copy()
    changed.cells = [c.copy() for c in source.cells]
    cell = next(c for c in changed.cells if c.metadata.get("nbgrader", {}).get("grade"))
    cell.metadata = {**cell.metadata, "nbgrader": {**cell.metadata["nbgrader"], "points": 5}}
    assert _to_grade(graded, source=changed) == (["alice", "bob", "carol"], 0)
    assert _to_grade(graded, regrade=True) == (["alice", "bob", "carol"], 0)


@pytest.mark.skipif(importlib.util.find_spec("psycopg2") is not None, reason="psycopg2 is installed here")
def test_a_missing_driver_names_the_package():
    with pytest.raises(GradebookError, match=r"pip install 'psycopg2-binary'"):
        open_gradebook("postgresql+psycopg2://grader@localhost/grades")
    with pytest.raises(GradebookError, match="is not a database URL"):
        open_gradebook("gradebook.db")
