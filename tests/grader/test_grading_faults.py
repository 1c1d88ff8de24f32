"""A fault loses nothing: the gradebook is checked first, each submission is kept as it is graded,
a rerun grades only what is missing or changed, and every file can be made again from the gradebook.

One small class of chapter 2 (solved, untouched, a wrong softmax). A gradebook whose driver is
missing stops the run before anything is graded, naming the package to install. A run killed
(SIGKILL) after its first submission keeps what it recorded, in nbgrader's tables too; the next
run grades only the rest, and a submission handed in again or late since, nothing else; `export`
makes the same CSV and feedback pages from the gradebook alone.
"""
from __future__ import annotations

import csv
import importlib.util
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder.outputs.gradebook import open_gradebook
from autograder.sandbox import sandboxed
from course.layout import FEEDBACK, GRADEBOOK, SUBMISSION_SECRET, TIMESTAMP, feedback_page, gradebook_url, grades_csv
from tests.grader import small_class as sc

pytestmark = pytest.mark.skipif(not sandboxed(), reason="bubblewrap is not installed (apt-get install bubblewrap)")

CLASS = {"alice": "solved", "bob": "untouched", "carol": "wrong_softmax"}


def _records(root: Path) -> dict[str, float]:
    with open_gradebook(gradebook_url(root)) as gradebook:
        return {r.learner: r.result.score for r in gradebook.records(sc.ASSIGNMENT)}


def _nbgrader_scores(root: Path) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook(gradebook_url(root)) as gb:
        return {s.student.id: s.score for s in gb.assignment_submissions(sc.ASSIGNMENT)}


def _csv(path: Path) -> dict[str, dict]:
    with path.open() as f:
        return {r["learner"]: r for r in csv.DictReader(f)}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = sc.course(tmp_path_factory.mktemp("course"))
    for learner, kind in CLASS.items():
        sc.hand_in(root, learner, kind)
    return root


@pytest.mark.skipif(importlib.util.find_spec("psycopg2") is not None, reason="psycopg2 is installed here")
def test_a_missing_driver_or_a_bad_url_stops_the_run_before_grading(root):
    start = time.monotonic()
    done = sc.grade(root, "--db", "postgresql+psycopg2://grader@localhost/grades")
    assert done.returncode == 4, done.stderr
    assert "needs the database driver 'psycopg2'" in done.stderr and "pip install 'psycopg2-binary'" in done.stderr
    assert "Nothing was graded" in done.stderr and "checking the set-up" not in done.stderr
    done = sc.grade(root, "--db", "not a url")
    assert done.returncode == 4 and "is not a database URL" in done.stderr
    assert time.monotonic() - start < 60
    assert not (root / GRADEBOOK).exists() and not (root / FEEDBACK).exists()


def test_a_killed_run_keeps_what_it_graded_and_the_next_grades_only_what_is_missing_or_changed(root):
    command = [sys.executable, "-m", "autograder", "grade", sc.ASSIGNMENT, "--root", str(root), "--jobs", "1", *sc.FAST]
    run = subprocess.Popen(command, env=sc.ENV, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and run.poll() is None:
        if (root / GRADEBOOK).exists() and _records(root):
            break
        time.sleep(0.2)
    run.send_signal(signal.SIGKILL)  # a crash: nothing of the grader's own runs after this
    run.wait()
    kept = _records(root)
    assert 1 <= len(kept) < len(CLASS), f"the run was to be killed after its first submission: {kept}"
    assert {k: sc.SCORES[CLASS[k]] for k in kept} == kept
    assert {k: v for k, v in _nbgrader_scores(root).items() if k in kept} == kept  # nbgrader sees them too
    for learner in kept:
        assert feedback_page(root, learner, sc.ASSIGNMENT, sc.NOTEBOOK).is_file()

    # Meanwhile bob hands in again (solved, this time) and dave hands in late: both are graded
    # with the submissions the killed run did not reach, and nothing else.
    sc.hand_in(root, "bob", "solved", timestamp="2026-12-01 11:00:00.000000 UTC")
    sc.hand_in(root, "dave", "wrong_softmax")

    # The class is known incomplete: status names who is not graded and why, export writes nothing unless told.
    status = sc.autograder(root, "status", sc.ASSIGNMENT)
    assert status.returncode == 7, status.stdout + status.stderr
    for learner in sorted({*CLASS, "dave"} - set(kept)):
        assert f"not graded: {learner} (never graded)" in status.stdout, status.stdout
    if "bob" in kept:
        assert "not graded: bob (handed in again since it was graded)" in status.stdout, status.stdout
    graded_now = len(set(kept) - {"bob"})
    assert f"4 learners submitted, {graded_now} graded, {4 - graded_now} not graded" in status.stdout, status.stdout
    exported = sc.autograder(root, "export", sc.ASSIGNMENT)
    assert exported.returncode == 7 and "nothing was written" in exported.stderr, exported.stderr
    assert not grades_csv(root, sc.ASSIGNMENT).exists()
    exported = sc.autograder(root, "export", sc.ASSIGNMENT, "--partial")
    assert exported.returncode == 0, exported.stderr
    assert set(_csv(grades_csv(root, sc.ASSIGNMENT))) == set(kept)  # the graded learners' grades as recorded

    done = sc.grade(root)
    assert done.returncode == 0, done.stderr
    assert "4 learners submitted, 4 graded, 0 not graded (the class is complete)" in done.stdout, done.stdout
    assert sc.autograder(root, "status", sc.ASSIGNMENT).returncode == 0
    unchanged = set(kept) - {"bob"}
    assert f"{len(unchanged)} submissions are graded already and unchanged since: skipped" in done.stderr
    again = len(CLASS) + 1 - len(unchanged)
    assert f"graded {again} of {again} submissions" in done.stdout
    expected = {"alice": 11.0, "bob": 11.0, "carol": 9.0, "dave": 9.0}
    assert _records(root) == expected
    assert _nbgrader_scores(root) == expected
    rows = _csv(grades_csv(root, sc.ASSIGNMENT))
    assert {k: float(r["score"]) for k, r in rows.items()} == expected
    done = sc.grade(root, "--learners", "carol,nobody")
    assert done.returncode != 0 and "no submission from nobody" in done.stderr


def test_export_makes_the_same_files_from_the_gradebook_alone(root):
    grades, page = grades_csv(root, sc.ASSIGNMENT), root / FEEDBACK / "dave" / sc.ASSIGNMENT
    before = grades.read_text(), (page / f"{sc.NOTEBOOK}.html").read_text(), (page / SUBMISSION_SECRET).read_text()
    grades.unlink()
    for f in page.iterdir():
        f.unlink()
    done = sc.autograder(root, "export", sc.ASSIGNMENT)
    assert done.returncode == 0, done.stderr
    assert (grades.read_text(), (page / f"{sc.NOTEBOOK}.html").read_text(),
            (page / SUBMISSION_SECRET).read_text()) == before
    assert (page / TIMESTAMP).read_text() == "2026-12-01 10:00:00.000000 UTC"
    assert "canvas.csv" in done.stdout and "Gradescope" in done.stdout
