"""nbgrader's whole exchange on the course's layout, with real learner accounts.

As root, the test creates two accounts (each its own uid: nbgrader names a submission by the
user who made it) and removes them afterwards. On a course directory as a fresh clone has it
(percent scripts only): generate_assignment, release_assignment; each learner fetches, works and
submits; collect; `python -m autograder grade`; generate_feedback --force; release_feedback;
each learner fetches their feedback, which must be the course's page (their score, no hidden
test's source); export.
"""
from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from autograder.sandbox import sandboxed
from course.layout import feedback_page, gradebook_url
from course.notebook_format import secret_lines, to_nbgrader, write_notebook
from tests.conftest import source_path
from tests.grader import small_class as sc

COURSE_ID = "attention-is-all-you-need"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="creating learner accounts (useradd) needs root"),
    pytest.mark.skipif(not shutil.which("useradd"), reason="useradd is not installed"),
    pytest.mark.skipif(not sandboxed(), reason="bubblewrap is not installed (apt-get install bubblewrap)"),
]


def _closed_folder(path: Path) -> Path | None:
    """The outermost folder on the way to ``path`` that other users may not enter, if any."""
    return next((p for p in [*reversed(path.parents), path] if p.exists() and not os.stat(p).st_mode & 0o001), None)


def _as(user: pwd.struct_passwd, command: list[str]) -> list[str]:
    """``command`` run as ``user``. Where this Python or its environment lives below a folder other users may
    not enter (root's home, the course directory, which is the instructor's alone), a mount namespace shows them
    only those paths of it: the environment learners are given to read, as the README asks an instructor to
    give them one; never the course directory itself."""
    drop = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--"]
    needed = {Path(sys.executable).resolve().parent.parent, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    closed = {c for c in map(_closed_folder, needed) if c is not None}
    closed = sorted(c for c in closed if not any(o in c.parents for o in closed))  # the outermost of each
    if not closed:
        return [*drop, *command]
    opened = sorted(p for p in needed if any(c == p or c in p.parents for c in closed))
    hide = [arg for c in closed for arg in ("--tmpfs", str(c))]
    # the folders between a hidden one and what is shown of it are made anew, open to all: bubblewrap would
    # otherwise copy their modes, and a clone made mode 700 (the course directory) would stay closed
    between = sorted({q for p in opened for c in closed if c in p.parents for q in p.parents if c in q.parents})
    folders = [arg for q in between for arg in ("--perms", "0755", "--dir", str(q))]
    binds = [arg for p in opened for arg in ("--ro-bind", str(p), str(p))]
    return ["bwrap", "--dev-bind", "/", "/", *hide, *folders, *binds, "--", *drop, *command]


@pytest.fixture(scope="module")
def learners():
    names = [f"aiayn{secrets.token_hex(3)}{i}" for i in range(2)]
    made = []
    try:
        for name in names:
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", name], check=True, capture_output=True)
            made.append(name)
        yield [pwd.getpwnam(n) for n in names]
    finally:
        for name in made:
            subprocess.run(["userdel", "--remove", name], capture_output=True)


def _nbgrader(cwd: Path, exchange: Path, *args: str, user=None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "nbgrader", *args, f"--Exchange.root={exchange}", f"--CourseDirectory.course_id={COURSE_ID}"]
    env = dict(sc.ENV)
    if user is not None:
        env.update(HOME=user.pw_dir, USER=user.pw_name, LOGNAME=user.pw_name)
        command = _as(user, command)
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"nbgrader {args[0]} failed:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def exchanged(learners):
    base = Path(tempfile.mkdtemp(prefix="aiayn-exchange-"))
    os.chmod(base, 0o755)
    try:
        root, exchange = sc.course(base / "course"), base / "exchange"
        exchange.mkdir(mode=0o777)
        os.chmod(exchange, 0o777)
        assert not list((root / "solutions").rglob("*.ipynb"))  # as a fresh clone has it
        _nbgrader(root, exchange, "generate_assignment", sc.ASSIGNMENT)
        _nbgrader(root, exchange, "release_assignment", sc.ASSIGNMENT)
        kinds = dict(zip([u.pw_name for u in learners], ("solved", "wrong_softmax")))
        for user in learners:
            home = Path(user.pw_dir)
            _nbgrader(home, exchange, "fetch_assignment", sc.ASSIGNMENT, user=user)
            fetched = home / sc.ASSIGNMENT / f"{sc.NOTEBOOK}.ipynb"
            assert fetched.is_file()
            write_notebook(sc.notebook(kinds[user.pw_name]), fetched)  # the learner's work
            os.chown(fetched, user.pw_uid, user.pw_gid)
            _nbgrader(home, exchange, "submit", sc.ASSIGNMENT, user=user)
        _nbgrader(root, exchange, "collect", sc.ASSIGNMENT)
        graded = sc.grade(root)
        assert graded.returncode == 0, graded.stdout + graded.stderr
        ours = {u.pw_name: feedback_page(root, u.pw_name, sc.ASSIGNMENT, sc.NOTEBOOK).read_text()
                for u in learners}
        regenerated = _nbgrader(root, exchange, "generate_feedback", sc.ASSIGNMENT, "--force")
        after_generate = {u.pw_name: feedback_page(root, u.pw_name, sc.ASSIGNMENT, sc.NOTEBOOK).read_text()
                          for u in learners}
        _nbgrader(root, exchange, "release_feedback", sc.ASSIGNMENT)
        fetched = {}
        for user in learners:
            _nbgrader(Path(user.pw_dir), exchange, "fetch_feedback", sc.ASSIGNMENT, user=user)
            pages = list((Path(user.pw_dir) / sc.ASSIGNMENT / "feedback").rglob("*.html"))
            fetched[user.pw_name] = [p.read_text() for p in pages]
        exported = sc.autograder(root, "export", sc.ASSIGNMENT)
        yield {"root": root, "kinds": kinds, "ours": ours, "fetched": fetched, "exported": exported,
               "regenerated": regenerated, "after_generate": after_generate, "graded": graded, "exchange": exchange}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_every_learner_fetches_the_course_page_with_their_own_score(exchanged):
    for learner, kind in exchanged["kinds"].items():
        pages = exchanged["fetched"][learner]
        assert len(pages) == 1, f"{learner} fetched {len(pages)} feedback pages"
        assert pages[0] == exchanged["ours"][learner]
        assert f"feedback for {learner}</h1>" in pages[0]
        assert f"Score: <b>{sc.SCORES[kind]:g} / {sc.FULL:g}</b>" in pages[0]


def test_the_fetched_feedback_shows_no_hidden_test(exchanged):
    hidden = secret_lines(to_nbgrader(source_path(sc.NOTEBOOK)))
    assert hidden
    for pages in exchanged["fetched"].values():
        for line in hidden:
            assert line not in pages[0], f"the feedback shows a hidden line: {line!r}"


def test_generate_feedback_writes_the_course_page_again(exchanged):
    assert "Writing" in exchanged["regenerated"].stderr  # not skipped: it ran, and wrote ...
    assert exchanged["after_generate"] == exchanged["ours"]  # ... the course's page, as it was


def test_the_export_agrees_with_nbgrader(exchanged):
    from nbgrader.api import Gradebook

    assert exchanged["exported"].returncode == 0, exchanged["exported"].stderr
    with Gradebook(gradebook_url(exchanged["root"])) as gb:
        scores = {s.student.id: s.score for s in gb.assignment_submissions(sc.ASSIGNMENT)}
    assert scores == {learner: sc.SCORES[kind] for learner, kind in exchanged["kinds"].items()}


def test_no_learner_reads_another_learners_work_or_feedback_nor_any_instructor_file(exchanged, learners):
    from course.layout import GRADEBOOK, grades_csv, submission_folder

    root, exchange = exchanged["root"], exchanged["exchange"]
    assert not os.stat(root).st_mode & 0o077, "grade makes the course directory the instructor's alone"
    opened = {u.pw_name for u in learners if os.stat(u.pw_dir).st_mode & 0o005 == 0o005}
    if opened:  # useradd's homes follow the umask: grade warns, naming the learners, as the README says
        assert "are open to every user of this machine" in exchanged["graded"].stderr
        assert all(name in exchanged["graded"].stderr for name in opened)
    for user in learners:
        os.chmod(user.pw_dir, 0o700)  # what the warning and the README ask
    for reader, other in (learners, reversed(learners)):
        name = other.pw_name
        secrets_ = list(Path(other.pw_dir).rglob("submission_secret*"))
        assert secrets_, "nbgrader keeps the submission's secret in the learner's home"
        instructor = [root / GRADEBOOK, next((root / "solutions").rglob("*.py")), grades_csv(root, sc.ASSIGNMENT)]
        theirs = [feedback_page(root, name, sc.ASSIGNMENT, sc.NOTEBOOK),
                  *submission_folder(root, name, sc.ASSIGNMENT).glob("*"), *secrets_]
        for path in [*instructor, *theirs]:
            assert path.is_file(), path
            done = subprocess.run(_as(reader, ["cat", str(path)]), capture_output=True, text=True)
            assert done.returncode != 0 and "Permission denied" in done.stderr, (reader.pw_name, path, done.stdout)
        # the exchange's released feedback cannot be listed: its file names come from the secrets above
        listed = subprocess.run(_as(reader, ["ls", str(exchange / COURSE_ID / "feedback")]), capture_output=True)
        assert listed.returncode != 0
