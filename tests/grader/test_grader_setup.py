"""Before it grades anyone, the grader checks that it can: a broken set-up stops the run.

A grade run first grades the instructor's own solution through the same sandbox, limits and
checks; when that does not get full marks, nothing is written (no gradebook entry, CSV,
feedback or autograded copy) and the instructor is told why, with the worker's own words.
Without bubblewrap it refuses to grade unless asked to with --no-sandbox.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder import __main__ as cli
from autograder import sandbox
from autograder.assignment import Assignment
from autograder.outputs.gradebook import open_gradebook
from autograder.sandbox import Limits
from course.layout import AUTOGRADED, FEEDBACK, GRADEBOOK, GRADES, SOLUTIONS, SUBMITTED, gradebook_url, submission_folder
from course.notebook_format import complete, to_nbgrader, write_notebook
from tests.conftest import REPO, release_path, source_path

ASSIGNMENT, NOTEBOOK = "ch02_attention", "attention"
FAST = ["--call-timeout", "4", "--submission-timeout", "60"]


@pytest.fixture
def course(tmp_path):
    """A course directory with a gradebook, and one learner's solved notebook handed in."""
    root = tmp_path / "course"
    (root / "solutions" / ASSIGNMENT).mkdir(parents=True)
    shutil.copy(REPO / "solutions" / ASSIGNMENT / f"{NOTEBOOK}.py", root / "solutions" / ASSIGNMENT)
    source = to_nbgrader(source_path(NOTEBOOK))
    with open_gradebook(gradebook_url(root)) as gradebook:
        gradebook.prepare(Assignment.from_notebook(ASSIGNMENT, NOTEBOOK, source), source)
    import nbformat

    solved = complete(nbformat.read(release_path(NOTEBOOK), as_version=4), source)
    write_notebook(solved, submission_folder(root, "learner", ASSIGNMENT) / f"{NOTEBOOK}.ipynb")
    return root


def _written(root: Path) -> dict:
    """What a grade run may write, as it stands."""
    return {
        "gradebook": hashlib.sha256((root / GRADEBOOK).read_bytes()).hexdigest(),
        "folders": sorted(p.name for p in root.iterdir()),
    }


def test_a_worker_that_cannot_import_autograder_stops_the_run_at_once(course, monkeypatch, capsys):
    # The worker's Python without its site-packages: the course's package cannot be imported,
    # as when the grader runs from a checkout that was never installed.
    monkeypatch.setattr(sandbox, "worker_program", lambda: [sys.executable, "-S", "-m", "harness.worker"])
    before = _written(course)
    start = time.monotonic()
    status = cli.main(["grade", ASSIGNMENT, "--root", str(course), "--no-sandbox", *FAST] if not sandbox.sandboxed()
                      else ["grade", ASSIGNMENT, "--root", str(course), *FAST])
    seconds = time.monotonic() - start
    err = capsys.readouterr().err
    assert status != 0
    assert "the sandboxed worker cannot import harness: install the course with make setup" in err
    assert "No module named" in err  # the worker's own words
    assert "nothing was graded or written" in err
    assert seconds < 60, "a worker that dies at start-up must be reported at once, not retried until the time runs out"
    assert _written(course) == before
    for folder in (GRADES, FEEDBACK, AUTOGRADED):
        assert not (course / folder).exists()


def test_a_solution_that_does_not_get_full_marks_stops_the_run(course, monkeypatch, capsys):
    # A pipeline that loses the solution's code on the way (here: all of it) would grade everyone wrongly.
    from autograder import engine

    monkeypatch.setattr(engine, "notebook_cells", lambda nb, tests: (["raise SystemExit('nothing here')"], []))
    before = _written(course)
    status = cli.main(["grade", ASSIGNMENT, "--root", str(course), *FAST] + ([] if sandbox.sandboxed() else ["--no-sandbox"]))
    err = capsys.readouterr().err
    assert status != 0
    assert "the instructor's solution scores 0 / 11 through the grader" in err
    assert "test_softmax: there is no `softmax` in the notebook" in err
    assert _written(course) == before


def test_without_bubblewrap_grading_refuses_unless_asked(course, monkeypatch, capsys):
    monkeypatch.setattr(sandbox, "sandboxed", lambda: False)
    umask = os.umask(0o022)
    os.umask(umask)
    before = _written(course)
    status = cli.main(["grade", ASSIGNMENT, "--root", str(course), *FAST])
    err = capsys.readouterr().err
    assert status == 2
    assert "bubblewrap is not available" in err and "--no-sandbox" in err
    assert _written(course) == before

    status = cli.main(["grade", ASSIGNMENT, "--root", str(course), "--no-sandbox", *FAST])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert "warning: bubblewrap is not available" in captured.err
    # the run's files were private, and the caller's umask is its own again: what a test, or a notebook, makes
    # next is as readable as before (a sandboxed worker of a later test reads a Python installation made here)
    assert os.umask(umask) == umask
    assert "mean score 11.00 / 11" in captured.out


def test_every_limit_option_defaults_to_its_field_of_limits():
    defaults = Limits()
    parser = cli.parser()
    for command in (["grade", ASSIGNMENT], ["check", "notebook.ipynb"]):
        args = parser.parse_args(command)
        assert cli._limits(args) == defaults
    args = parser.parse_args(["grade", ASSIGNMENT, "--memory-mb", "512", "--processes", "8", "--notebook-mb", "3",
                              "--source-kb", "64"])
    assert cli._limits(args) == Limits(memory_mb=512, processes=8, notebook_mb=3, source_kb=64)


@pytest.mark.skipif(not sandbox.sandboxed(), reason="bubblewrap is not installed (apt-get install bubblewrap)")
def test_grading_from_a_second_copy_of_the_course_names_both_copies(course, tmp_path):
    # A second copy of the course, run with the environment installed from this one: its own
    # harness/ (the current folder) shadows the installed one, and the sandbox mounts the copy the
    # grader found, where the worker's Python does not look.
    import subprocess

    copy = tmp_path / "copy"
    for package in ("autograder", "harness", "course"):
        shutil.copytree(REPO / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    for folder in (SOLUTIONS, SUBMITTED):
        shutil.copytree(course / folder, copy / folder)
    done = subprocess.run([sys.executable, "-m", "autograder", "grade", ASSIGNMENT, *FAST], cwd=copy,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stderr
    assert f"the grader runs the course found in the current folder, {copy.resolve()}" in done.stderr
    assert f"has the course installed from {REPO}, which the worker needs" in done.stderr
    assert "nothing was graded or written" in done.stderr


def test_without_the_course_secret_nothing_is_graded(course, monkeypatch, capsys):
    monkeypatch.delenv("COURSE_SECRET")
    before = _written(course)
    status = cli.main(["grade", ASSIGNMENT, "--root", str(course), "--no-sandbox", *FAST])
    err = capsys.readouterr().err
    assert status == 6 and "python -m autograder secret" in err and "Nothing was graded" in err, err
    assert _written(course) == before
    assert cli.main(["secret", "--root", str(course)]) == 0
    assert "made the course secret" in capsys.readouterr().out


@pytest.mark.parametrize("memberships, below_root, group", [
    ("9:name=systemd:/\n2:cpuacct:/\n1:cpu:/\n0::/\n", "", "/"),  # a machine's own processes: autogroups apply
    ("4:cpu,cpuacct:/slurm/uid_0/job_7\n0::/\n", "", "/slurm/uid_0/job_7"),  # a batch job's CPU limit (v1)
    ("0::/kubepods/burstable/pod1/abc\n", "cpu io memory pids", "/kubepods/burstable/pod1/abc"),  # a pod (v2)
    ("0::/user.slice\n", "memory pids", "/"),  # v2 without its CPU controller: the CPU is not grouped
])
def test_the_cpu_cgroup_is_read_from_proc(memberships, below_root, group):
    assert sandbox.cpu_cgroup(memberships, below_root) == group


def test_where_the_cpu_is_shared_by_process_submissions_are_graded_one_at_a_time(course, monkeypatch, capsys):
    from autograder import engine, run

    monkeypatch.setattr(sandbox, "shared_by_process", lambda: "the grader runs in the CPU cgroup /kubepods/pod1")
    monkeypatch.setattr(engine, "self_check", lambda *args: None)
    used = []
    monkeypatch.setattr(run, "grade_all", lambda *args, jobs, **kwargs: used.append(jobs) or [])
    cli.main(["grade", ASSIGNMENT, "--root", str(course), "--jobs", "4", *FAST]
             + ([] if sandbox.sandboxed() else ["--no-sandbox"]))
    assert used == [1]
    assert "grading one submission at a time instead of 4" in capsys.readouterr().err


def test_the_graders_start_builds_no_parser_it_never_uses():
    """Every grading run and every `autograder check` starts by importing the grader, which reads
    notebooks (nbformat, then jsonschema). From 4.25 jsonschema builds an Earley parser for IRIs
    (rfc3987-syntax, with lark) when it is imported: 1.1 s of CPU each time, for a format no notebook
    uses; requirements.txt keeps a jsonschema that does not."""
    done = subprocess.run([sys.executable, "-c", "import sys, autograder.__main__, autograder.run, autograder.engine; "
                           "print(sorted(m for m in ('rfc3987_syntax', 'lark') if m in sys.modules))"],
                          capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout
