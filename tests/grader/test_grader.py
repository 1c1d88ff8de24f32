"""The grader cannot be fooled: a class of adversarial submissions, graded end to end.

One run of `python -m autograder grade ch02_attention` over a course directory in which every
learner of the catalogue `tests/grader/attacks.py` tries something: its entries say what each one
does and the score and message it must get. Here the class is handed in and graded once, and each
entry's verdict is asserted; the honest learners in the same run are graded normally; nothing leaves
the sandbox (no connection, no foreign file read, no process left); no submitted file changes. That
grading the same class again gives the same grades is the determinism test's
(tests/grader/test_determinism.py).
"""
from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from autograder.assignment import Assignment
from autograder.outputs.gradebook import open_gradebook
from autograder.sandbox import sandboxed
from course.layout import (
    AUTOGRADED,
    FEEDBACK,
    NBGRADER_CONFIG,
    REPO,
    SOLUTIONS,
    SUBMITTED,
    feedback_page,
    gradebook_url,
    grades_csv,
)
from course.notebook_format import secret_lines
from tests.grader.attacks import (
    ASSIGNMENT,
    ATTACKS,
    CALL_TIMEOUT,
    CHAPTER,
    FULL,
    GRADED,
    NOTEBOOK,
    REFUSED,
    UNREADABLE,
    Target,
    hand_in_all,
    source,
)
from tests.grader.small_class import without_demonstrations

# A cell of this class defines functions and runs in well under a second: the looping cell is stopped at
# 10 s instead of the default 30, which it would spend spinning on a core.
LIMITS = ["--call-timeout", str(CALL_TIMEOUT), "--cell-timeout", "10", "--submission-timeout", "90", "--memory-mb", "1536"]

GRADED_ATTACKS = {a.learner: a for a in ATTACKS if a.verdict == GRADED}
UNREADABLE_ATTACKS = {a.learner: a for a in ATTACKS if a.verdict == UNREADABLE}
REFUSED_ATTACKS = {a.learner: a for a in ATTACKS if a.verdict == REFUSED}


class Listener:
    """A TCP server on loopback that records whether anyone connected."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while self.running:
            try:
                conn, _ = self.sock.accept()
                self.connections += 1
                conn.close()
            except OSError:
                continue

    def close(self):
        self.running = False
        self.thread.join(timeout=2)
        self.sock.close()


def _digest(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.sha256(f.read(1 << 20)).hexdigest() + str(path.stat().st_size)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    if not sandboxed():
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap); .ci/run installs it")
    root = tmp_path_factory.mktemp("course")
    (root / SOLUTIONS / ASSIGNMENT).mkdir(parents=True)
    (root / SOLUTIONS / ASSIGNMENT / CHAPTER.source.name).write_text(without_demonstrations(CHAPTER.source.read_text()))
    shutil.copy(REPO / NBGRADER_CONFIG, root)
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    # A gradebook already there, as in a real course, so that snooping has a target.
    with open_gradebook(gradebook_url(root)) as gradebook:
        gradebook.prepare(Assignment.from_notebook(ASSIGNMENT, NOTEBOOK, source()), source())
    # Another copy of the course on the same machine, which no submission may read.
    elsewhere = tmp_path_factory.mktemp("another_copy") / SOLUTIONS / ASSIGNMENT / f"{NOTEBOOK}.py"
    elsewhere.parent.mkdir(parents=True)
    shutil.copy(CHAPTER.source, elsewhere)
    listener = Listener()
    hand_in_all(Target(root, listener.port, elsewhere))

    before = {p: _digest(p) for p in (root / SUBMITTED).rglob("*") if p.is_file() and not p.is_symlink()}
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", ASSIGNMENT, "--jobs", "2", "--root", str(root), *LIMITS],
        capture_output=True, text=True, timeout=1200, env=env, cwd=root,
    )
    listener.close()
    assert done.returncode == 0, done.stdout + done.stderr
    after = {p: _digest(p) for p in before}
    with grades_csv(root, ASSIGNMENT).open() as f:
        rows = {r["learner"]: r for r in csv.DictReader(f)}
    return {"root": root, "rows": rows, "stdout": done.stdout, "stderr": done.stderr, "before": before,
            "after": after, "connections": listener.connections}


def feedback(graded, learner) -> str:
    return feedback_page(graded["root"], learner, ASSIGNMENT, NOTEBOOK).read_text()


def score(graded, learner) -> float:
    return float(graded["rows"][learner]["score"])


@pytest.mark.parametrize("learner", sorted(GRADED_ATTACKS))
def test_each_submission_gets_the_expected_score_and_message(graded, learner):
    attack = GRADED_ATTACKS[learner]
    assert score(graded, learner) == pytest.approx(attack.score), graded["rows"][learner]
    assert attack.phrase in feedback(graded, learner)


@pytest.mark.parametrize("learner", sorted(UNREADABLE_ATTACKS))
def test_a_broken_notebook_scores_zero_with_the_reason(graded, learner):
    phrase = UNREADABLE_ATTACKS[learner].phrase
    assert score(graded, learner) == 0
    assert phrase in graded["rows"][learner]["status"]
    assert phrase in feedback(graded, learner)
    assert f"failed to grade {learner!r}" in graded["stdout"]


def test_names_and_links_that_reach_outside_are_refused(graded):
    for learner, reason in ((a.learner, a.phrase) for a in REFUSED_ATTACKS.values()):
        assert f"failed to grade {learner!r}" in graded["stdout"]
        assert reason in graded["stdout"].split(f"failed to grade {learner!r}")[1].splitlines()[0]
        assert learner not in graded["rows"] or float(graded["rows"][learner]["score"]) == 0
    assert not (graded["root"] / FEEDBACK / "x; rm -rf ~").exists()


def test_no_network_and_no_foreign_files_from_the_sandbox(graded):
    assert graded["connections"] == 0
    assert score(graded, "snoops") == FULL  # its answer would be off by 1000 for each file it could read


def test_no_process_outlives_its_submission(graded):
    left = subprocess.run(["pgrep", "-f", "sleep 313[12]"], capture_output=True, text=True).stdout.split()
    assert not left, f"processes started by a submission are still running: {left}"


def test_submitted_files_are_unchanged(graded):
    assert graded["before"] == graded["after"]


def test_only_the_notebook_is_copied_to_autograded(graded):
    folder = graded["root"] / AUTOGRADED / "sparse_files" / ASSIGNMENT
    assert sorted(p.name for p in folder.iterdir()) == [f"{NOTEBOOK}.ipynb"]  # the sparse timestamp is no timestamp
    on_disk = sum(p.stat().st_blocks * 512 for p in (graded["root"] / AUTOGRADED).rglob("*") if p.is_file())
    assert on_disk < 64 << 20, on_disk
    assert not (graded["root"] / AUTOGRADED / "huge" / ASSIGNMENT / f"{NOTEBOOK}.ipynb").read_text().count("x" * 1000)


def test_the_set_up_is_checked_before_grading(graded):
    assert "grading the instructor's solution" in graded["stderr"]


def test_forged_files_do_not_touch_the_real_grades(graded):
    assert "forged" not in grades_csv(graded["root"], ASSIGNMENT).read_text()
    assert not (graded["root"] / "results.json").exists()


def test_feedback_never_shows_hidden_tests(graded):
    secrets = secret_lines(source())
    hidden_labels = ["rows sit near +2000", "every entry equal", "(2, 2, 3, 7, 32)"]
    for path in (graded["root"] / FEEDBACK).rglob("*.html"):
        text = path.read_text()
        assert "hidden=True" not in text
        # Feedback may quote a learner's own line; a solution line they did not write is a leak.
        learner = path.relative_to(graded["root"] / FEEDBACK).parts[0]
        written = "".join(p.read_text() for p in (graded["root"] / SUBMITTED / learner).rglob("*.ipynb"))
        assert not [s for s in secrets if s in text and json.dumps(s)[1:-1] not in written], path
        assert not [s for s in hidden_labels if s in text], path


def test_the_gradebook_holds_every_graded_learner(graded):
    from nbgrader.api import Gradebook

    with Gradebook(gradebook_url(graded["root"])) as gb:
        scores = {s.student.id: s.score for s in gb.assignment_submissions(ASSIGNMENT)}
    for learner, attack in GRADED_ATTACKS.items():
        assert scores[learner] == pytest.approx(attack.score), learner
    assert "x; rm -rf ~" not in scores


def test_what_cannot_be_judged_from_the_source_is_flagged_for_review(graded):
    assert "gc" in graded["rows"]["unwraps_tripwire"]["flags"]  # it searched memory with gc.get_objects
    assert graded["rows"]["perfect"]["flags"] == ""
    assert "For the instructor to review" in feedback(graded, "unwraps_tripwire")
    assert "to review in 'unwraps_tripwire'" in graded["stdout"]


def test_the_run_ends_with_a_summary(graded):
    assert "graded" in graded["stdout"] and "mean score" in graded["stdout"]
    assert "grading ch02_attention" in graded["stderr"]  # the progress bar
