"""Manual grading in formgrader itself, in a real Jupyter server, counts everywhere the course writes a grade.

A small class is graded by the course into a SQLite gradebook and into a real PostgreSQL one, set up by
following the README's own lines (a role with a password, a database it owns, the password in ~/.pgpass, the
URL in GRADEBOOK_URL, which nbgrader_config.py passes on to formgrader); the password is never on a command
line nor in anything the course or formgrader prints. Then formgrader's own
REST API, the one its pages call, is used as an instructor's browser would: it lists the submission (nothing
left needing a manual grade; the flagged one flagged), a score is given by hand with extra credit, and a
comment. `python -m autograder export` then writes that grade in the CSV and Gradescope's results, and the
feedback page says what the instructor gave.
"""
from __future__ import annotations

import csv
import json
import secrets
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest

from autograder.sandbox import sandboxed
from course.layout import feedback_page, grades_csv, gradescope_folder, submission_folder
from tests.conftest import free_port
from tests.grader import small_class as sc
from tests.grader.postgres import postgres_server, readme_set_up

pytestmark = pytest.mark.skipif(not sandboxed(), reason="bubblewrap is not installed (apt-get install bubblewrap)")

CLASS = {"alice": "solved", "carol": "wrong_softmax", "dave": "solved"}
#: what dave adds to his softmax cell: a construct the grader cannot follow, which it flags for the instructor
FLAGGED = "from math import *\n"


def _hand_in_flagged(root: Path, learner: str) -> None:
    path = submission_folder(root, learner, sc.ASSIGNMENT) / f"{sc.NOTEBOOK}.ipynb"
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "softmax")
    cell.source = FLAGGED + cell.source
    nbformat.write(nb, path)



@contextmanager
def formgrader(root: Path, env: dict[str, str], printed: list[str]):
    """A Jupyter server with nbgrader's formgrader in the course directory; yields a call of its REST API. What
    the server printed is added to ``printed`` when it stops."""
    port, token = free_port(), secrets.token_hex(16)
    server = subprocess.Popen([sys.executable, "-m", "jupyter", "server", "--no-browser", f"--port={port}",
                               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--allow-root"],
                              cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def api(path: str, body: dict | None = None, method: str = "GET"):
        request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"Authorization": f"token {token}"})
        with urllib.request.urlopen(request, timeout=30) as reply:  # noqa: S310 (a local server of the test's)
            return json.loads(reply.read() or b"null")

    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                api("/formgrader/api/status")
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the Jupyter server did not start: {server.stderr.read()[-2000:]}") from None
                time.sleep(0.3)
        yield api
    finally:
        server.terminate()
        try:
            printed.append(server.communicate(timeout=20)[1])
        except subprocess.TimeoutExpired:
            server.kill()


@contextmanager
def command_lines():
    """Collects every process's command line on this machine while the block runs, as any user could with `ps`."""
    seen: set[str] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    seen.add(cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
                except OSError:
                    pass
            done.wait(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield seen
    finally:
        done.set()
        watcher.join()


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_a_grade_given_in_formgrader_reaches_every_file_of_the_course(tmp_path, database):
    with (postgres_server(tcp=True) if database == "postgresql" else _nothing()) as new_database:
        env, password = dict(sc.ENV), None
        if new_database is not None:
            home = tmp_path / "home"
            home.mkdir()
            exported, password = readme_set_up(new_database, home)
            env.update(exported, HOME=str(home))
            assert password not in env["GRADEBOOK_URL"]
        root = sc.course(tmp_path / "course")
        for learner, kind in CLASS.items():
            sc.hand_in(root, learner, kind)
        _hand_in_flagged(root, "dave")
        with command_lines() as seen:
            graded = subprocess.run([sys.executable, "-m", "autograder", "grade", sc.ASSIGNMENT, "--root", str(root),
                                     *sc.FAST], capture_output=True, text=True, env=env, cwd=root, timeout=900)
        assert graded.returncode == 0, graded.stderr
        printed = [graded.stdout + graded.stderr]

        with formgrader(root, env, printed) as api:
            listed = {s["student"]: s for s in api(f"/formgrader/api/submitted_notebooks/{sc.ASSIGNMENT}/{sc.NOTEBOOK}")}
            assert set(listed) == set(CLASS)  # formgrader reads the gradebook the course graded into
            assert not any(s["needs_manual_grade"] for s in listed.values())
            # the submission the course flags for review is flagged where formgrader shows flags, and only it
            assert {name for name, s in listed.items() if s["flagged"]} == {"dave"}
            carol = listed["carol"]
            assert carol["score"] == sc.SCORES["wrong_softmax"]
            grades = api(f"/formgrader/api/grades?submission_id={carol['id']}")
            failed = next(g for g in grades if g["auto_score"] < g["max_score"])
            passed = next(g for g in grades if g["auto_score"] == g["max_score"] and g["max_score"] > 0)
            api(f"/formgrader/api/grade/{failed['id']}", {"manual_score": failed["max_score"]}, "PUT")
            api(f"/formgrader/api/grade/{passed['id']}", {"extra_credit": 1}, "PUT")
            comment = api(f"/formgrader/api/comments?submission_id={carol['id']}")[0]
            api(f"/formgrader/api/comment/{comment['id']}", {"manual_comment": "Good recovery."}, "PUT")

        expected = sc.SCORES["wrong_softmax"] + (failed["max_score"] - failed["auto_score"]) + 1
        exported = subprocess.run([sys.executable, "-m", "autograder", "export", sc.ASSIGNMENT, "--root", str(root)],
                                  capture_output=True, text=True, env=env, cwd=root, timeout=300)
        assert exported.returncode == 0, exported.stderr
        printed.append(exported.stdout + exported.stderr)
        if password is not None:
            assert seen and not any(password in line for line in seen)
            assert not any(password in text for text in printed)
        with grades_csv(root, sc.ASSIGNMENT).open() as f:
            scores = {row["learner"]: float(row["score"]) for row in csv.DictReader(f)}
        assert scores == {"alice": sc.SCORES["solved"], "carol": expected, "dave": sc.SCORES["solved"]}
        page = feedback_page(root, "carol", sc.ASSIGNMENT, sc.NOTEBOOK).read_text()
        assert f"{failed['name']}: {failed['max_score']:g} / {failed['max_score']:g}, given by the instructor" in page
        assert "Good recovery." in page
        results = gradescope_folder(root, sc.ASSIGNMENT) / "carol" / "results.json"
        assert json.loads(results.read_text())["score"] == expected


@contextmanager
def _nothing():
    yield None
