"""A small class of chapter 2 in nbgrader's layout, for the tests of grading at scale.

Learners are solved (11 / 11), untouched (0 / 11) or solved but for a softmax that is wrong
(9 / 11); each submission has the timestamp.txt and submission_secret.txt `nbgrader submit`
writes beside it. The notebooks, the learners' and the instructor's, keep only what is graded: the
demonstrations (plots, the paper-size model) grade nothing, and every grading of the class would run
them again (tests/grader/test_sandbox.py runs every chapter's whole notebook in the sandbox).
"""
from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from course.layout import NBGRADER_CONFIG, SOLUTIONS, SUBMISSION_SECRET, TIMESTAMP, submission_folder
from course.notebook_format import complete, to_nbgrader, write_notebook
from tests.conftest import REPO, release_path, source_path

ASSIGNMENT, NOTEBOOK = "ch02_attention", "attention"
FULL = 11.0
SCORES = {"solved": 11.0, "untouched": 0.0, "wrong_softmax": 9.0}
FAST = ["--call-timeout", "4", "--submission-timeout", "90", "--memory-mb", "1536"]
ENV = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))


def course(root: Path) -> Path:
    """A course directory with chapter 2's instructor notebook and nbgrader's configuration."""
    (root / SOLUTIONS / ASSIGNMENT).mkdir(parents=True, exist_ok=True)
    source = source_path(NOTEBOOK)
    (root / SOLUTIONS / ASSIGNMENT / source.name).write_text(without_demonstrations(source.read_text()))
    shutil.copy(REPO / NBGRADER_CONFIG, root)
    return root


def notebook(kind: str):
    release = graded_cells_only(nbformat.read(release_path(NOTEBOOK), as_version=4))
    if kind == "untouched":
        return release
    nb = complete(release, to_nbgrader(source_path(NOTEBOOK)))
    if kind == "wrong_softmax":
        cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "softmax")
        cell.source = cell.source.replace("return ", "return 2 * ", 1)
    return nb


def graded_cells_only(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook without its demonstrations (plots, the paper-size model): they cost most of the
    grading time and no grade depends on them."""
    nb = nbformat.from_dict(nb)
    nb.cells = [
        c for c in nb.cells if c.cell_type == "code" and ("nbgrader" in c.metadata or "export" in c.metadata.get("tags", []))
    ]
    return nb


def without_demonstrations(source: str) -> str:
    """The instructor's percent script without its untagged code cells: the grader's self-check runs
    every code cell of it, and those demonstrations grade nothing."""
    cells = re.split(r"(?m)^(?=# %%)", source)
    return "".join(c for c in cells if not re.match(r"# %%[ \t]*(\n|$)", c))


def hand_in(root: Path, learner: str, kind: str, timestamp: str = "2026-12-01 10:00:00.000000 UTC") -> Path:
    folder = submission_folder(root, learner, ASSIGNMENT)
    write_notebook(notebook(kind), folder / f"{NOTEBOOK}.ipynb")
    (folder / TIMESTAMP).write_text(timestamp)
    (folder / SUBMISSION_SECRET).write_text(secrets.token_hex(64))
    return folder


def grade(root: Path, *options: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", "grade", ASSIGNMENT, "--root", str(root), "--jobs", "2",
                           *FAST, *options], capture_output=True, text=True, timeout=timeout, env=ENV, cwd=root)


def autograder(root: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", *args], capture_output=True, text=True,
                          timeout=timeout, env=ENV, cwd=root)
