"""Stock `nbgrader autograde` agrees: a completed exercise gets full marks, the untouched release zero."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from course.layout import assignments, chapters, gradebook_url, submission_folder
from course.notebook_format import complete, to_nbgrader, write_notebook
from tests.grader.small_class import graded_cells_only


@pytest.fixture(scope="module")
def course(fresh_release, tmp_path_factory) -> Path:
    # The release the release check made (nbgrader's own generate_assignment filled its gradebook),
    # copied so that grading in it changes nothing another test reads.
    root = tmp_path_factory.mktemp("nbgrader") / "course"
    shutil.copytree(fresh_release, root)
    for chapter in chapters(root):
        # What nbgrader is asked here is the score of the graded cells; the demonstrations run in
        # the notebook tests (tests/course/test_notebooks.py) and the site build.
        release = graded_cells_only(nbformat.read(chapter.release, as_version=4))
        submitted = {"alice": complete(release, to_nbgrader(chapter.source)), "bob": release}
        for learner, nb in submitted.items():
            write_notebook(nb, submission_folder(root, learner, chapter.assignment) / f"{chapter.stem}.ipynb")
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    # Every assignment in one run ("*" is a pattern nbgrader matches against the submitted folders): one
    # start of nbgrader instead of one per chapter.
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", "autograde", "*", "--create", "--force"],
        cwd=root, env=env, capture_output=True, text=True, timeout=1200,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return root


def _scores(root: Path) -> dict:
    with Gradebook(gradebook_url(root)) as gb:
        return {
            (a, s.student.id): (s.score, s.max_score)
            for a in assignments(root)
            for s in gb.assignment_submissions(a)
        }


def test_completed_exercise_gets_full_marks(course):
    scores = _scores(course)
    for assignment in assignments(course):
        score, max_score = scores[(assignment, "alice")]
        assert max_score > 0
        assert score == pytest.approx(max_score), f"{assignment}: {score}/{max_score}"


def test_untouched_release_scores_zero(course):
    scores = _scores(course)
    for assignment in assignments(course):
        assert scores[(assignment, "bob")][0] == 0
