"""One learner cannot take the CPU its neighbours' calls need.

A submission that keeps 56 processes busy (within the process limit) is graded beside two solved
ones, two at a time, on one CPU, as in a pod with a CPU limit of one. The kernel shares the CPU
between sessions first, and a submission's processes cannot leave the session its worker started
(the system call filter refuses setsid), so each submission gets one share however many processes
it runs: the solved neighbours keep every point, and a call that ran out of its time because the
machine was busy is made once more before it costs any.
"""
from __future__ import annotations

import csv
import shutil
import subprocess
import sys

import nbformat
import pytest

from autograder.sandbox import sandboxed
from tests.grader import small_class as sc

pytestmark = [
    pytest.mark.skipif(not sandboxed(), reason="bubblewrap is not installed (apt-get install bubblewrap)"),
    pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset (util-linux) is missing"),
    pytest.mark.slow,  # about two minutes: three submissions on one CPU, one of them busy throughout
]

BUSY = r'''
import os
for _ in range(56):
    try:
        if os.fork() == 0:
            while True:
                pass
    except OSError:
        break
'''


def test_a_learner_who_keeps_the_cpu_busy_costs_its_neighbours_nothing(tmp_path):
    root = sc.course(tmp_path / "course")
    for learner in ("alice", "bob"):
        sc.hand_in(root, learner, "solved")
    folder = sc.hand_in(root, "mallory", "solved")
    notebook = folder / f"{sc.NOTEBOOK}.ipynb"
    nb = nbformat.read(notebook, as_version=4)
    nb.cells.insert(1, nbformat.v4.new_code_cell(BUSY))
    nbformat.write(nb, notebook)
    done = subprocess.run(["taskset", "-c", "0", sys.executable, "-m", "autograder", "grade", sc.ASSIGNMENT,
                           "--root", str(root), "--jobs", "2", "--learners", "mallory,alice,bob", *sc.FAST],
                          capture_output=True, text=True, timeout=900, env=sc.ENV, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    with (root / "grades" / f"{sc.ASSIGNMENT}.csv").open() as f:
        scores = {r["learner"]: float(r["score"]) for r in csv.DictReader(f)}
    assert scores["alice"] == scores["bob"] == sc.FULL, (scores, done.stderr[-3000:])
