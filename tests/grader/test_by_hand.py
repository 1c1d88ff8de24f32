"""What an instructor gives by hand in formgrader is part of the grade everywhere the course writes one.

Formgrader records a score given by hand, extra credit and comments in nbgrader's tables (its API handlers
set ``manual_score``, ``extra_credit`` and ``manual_comment`` and commit, as done here through nbgrader's own
``Gradebook``). The course's grades (the CSV, Canvas, Gradescope, the feedback page) are read from its own
records with those applied; a regrade keeps them unless told to clear them. Only what needs a person is left
``needs_manual_grade``, and a submission the course flags for review is flagged where formgrader shows flags.
"""
from __future__ import annotations

import dataclasses

import pytest
from nbgrader.api import Gradebook as NbgraderGradebook

from autograder.outputs.feedback import feedback_html
from autograder.outputs.grade_files import gradescope_results
from autograder.outputs.gradebook import SubmissionKey, open_gradebook
from course.layout import gradebook_url
from tests.grader.postgres import postgres_server
from tests.grader.test_gradebook_concurrency import ASSIGNMENT, NOTEBOOK, _assignment, _result

LEARNER = "learner05"  # passes some tests, fails others (see _result)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    if request.param == "sqlite":
        yield gradebook_url(tmp_path)
    else:
        with postgres_server() as new_database:
            yield new_database()


def test_scores_extra_credit_and_comments_given_by_hand_reach_every_grade_and_survive_a_regrade(url):
    assignment, source = _assignment()
    result = dataclasses.replace(_result(assignment, LEARNER), flags=["calls torch.allclose on its own result"])
    failed = next(o for o in result.outcomes if not o.passed)
    passed = next(o for o in result.outcomes if o.passed)
    with open_gradebook(url) as gradebook:
        gradebook.prepare(assignment, source)
        gradebook.record(assignment, result, SubmissionKey("digest", "grader"))

    with NbgraderGradebook(url) as gb:
        grades = [g for nb in gb.find_submission(ASSIGNMENT, LEARNER).notebooks for g in nb.grades]
        assert grades and not any(g.needs_manual_grade for g in grades)  # every test was graded by the course
        assert gb.find_submission_notebook(NOTEBOOK, ASSIGNMENT, LEARNER).flagged  # formgrader's "Flagged?"
        # as formgrader's API handlers do
        gb.find_grade(failed.grade_id, NOTEBOOK, ASSIGNMENT, LEARNER).manual_score = failed.max_points / 2
        gb.find_grade(passed.grade_id, NOTEBOOK, ASSIGNMENT, LEARNER).extra_credit = 1.0
        solution = gb.find_notebook(NOTEBOOK, ASSIGNMENT).solution_cells[0].name
        gb.find_comment(solution, NOTEBOOK, ASSIGNMENT, LEARNER).manual_comment = "Neat, but name the axis."
        gb.db.commit()

    expected = result.score + failed.max_points / 2 + 1.0
    with open_gradebook(url) as gradebook:
        (record,) = gradebook.graded(ASSIGNMENT)
        assert record.result.score == expected
        page = feedback_html(assignment, record.result)
        assert f"{failed.grade_id}: {failed.max_points / 2:g} / {failed.max_points:g}, given by the instructor" in page
        assert f"The instructor&#x27;s comment on {solution}: Neat, but name the axis." in page
        assert gradescope_results(assignment, record.result)["score"] == expected
        # graded again (a regrade, or a submission handed in again): what was given by hand stays
        gradebook.record(assignment, result, SubmissionKey("digest", "grader"))
        assert gradebook.graded(ASSIGNMENT)[0].result.score == expected
        # unless the instructor asks to clear it
        gradebook.record(assignment, result, SubmissionKey("digest", "grader"), keep_by_hand=False)
        assert gradebook.graded(ASSIGNMENT)[0].result.score == result.score
        assert gradebook.by_hand(ASSIGNMENT) == {}
