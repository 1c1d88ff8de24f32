"""One learner cannot take the CPU its neighbours' calls need.

A submission that keeps 56 processes busy (within the process limit) is graded beside two solved
ones with `--jobs 2`, in a CPU cgroup limited to one CPU, as a pod with a CPU limit of one is. In
such a cgroup the kernel shares the CPU by process, so graded side by side the busy learner would
take most of it; the grader sees where it runs and grades one submission at a time there. The
solved neighbours keep every point.

The limits are what makes the test able to fail. With the grader made to grade side by side here all
the same (`autograder.sandbox.shared_by_process` replaced by one that finds nothing), the neighbour
graded beside the busy learner lost 2 to 5 of its 11 points in each of 4 runs (AMD EPYC, 2 cores, call
limits of 1, 1.5 and 2 s); with a call limit of 4 s it lost none, since a retried call of chapter 2
finishes even with a 57th of the CPU. The busy learner's own grading ends at its submission limit.
"""
from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.sandbox import sandboxed
from course.layout import grades_csv
from tests.grader import small_class as sc

CPU_CGROUPS = Path("/sys/fs/cgroup/cpu")
pytestmark = [
    pytest.mark.skipif(not sandboxed(), reason="bubblewrap is not installed (apt-get install bubblewrap)"),
    pytest.mark.skipif(not os.access(CPU_CGROUPS, os.W_OK), reason="no writable cgroup v1 CPU controller here"),
    pytest.mark.slow,  # about 40 s: three submissions on one CPU, one of them busy for its 30 s
]

# The fork is reached through a computed import, which the source rules only flag for review, so that
# the busy processes do run; the softmax then runs past its time limit at every call, so that the busy
# learner's grading lasts until its submission limit, and its processes stay busy throughout.
BUSY = r'''
import importlib, time
_os = vars(importlib.import_module("o" + "s"))
for _ in range(56):
    try:
        if _os["fork"]() == 0:
            while True:
                pass
    except OSError:
        break
'''
#: a call limit short enough that a neighbour graded beside the busy learner would lose points (see above)
LIMITS = ["--call-timeout", "2", "--submission-timeout", "30", "--memory-mb", "1536"]
SLOW = r'''
_softmax = softmax
def softmax(x, dim=-1):
    start = time.monotonic()
    while time.monotonic() - start < 2.5:
        pass
    return _softmax(x, dim)
'''


def test_a_learner_who_keeps_the_cpu_busy_costs_its_neighbours_nothing(tmp_path):
    root = sc.course(tmp_path / "course")
    folder = sc.hand_in(root, "abe", "solved")  # first in the order of grading, beside the first neighbour
    for learner in ("bea", "cal"):
        sc.hand_in(root, learner, "solved")
    notebook = folder / f"{sc.NOTEBOOK}.ipynb"
    nb = nbformat.read(notebook, as_version=4)
    nb.cells.insert(1, nbformat.v4.new_code_cell(BUSY))
    nb.cells.append(nbformat.v4.new_code_cell(SLOW))
    nbformat.write(nb, notebook)
    group = CPU_CGROUPS / f"grading-test-{os.getpid()}"
    group.mkdir()
    try:
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text("100000")  # one CPU
        command = [sys.executable, "-m", "autograder", "grade", sc.ASSIGNMENT, "--root", str(root), "--jobs", "2",
                   *LIMITS]
        inside = ["sh", "-c", f'echo $$ > {group / "cgroup.procs"} && exec "$@"', "sh", *command]
        done = subprocess.run(inside, capture_output=True, text=True, timeout=900, env=sc.ENV, cwd=root)
    finally:
        group.rmdir()
    assert done.returncode == 0, done.stderr[-3000:]
    assert "grading one submission at a time instead of 2" in done.stderr
    with grades_csv(root, sc.ASSIGNMENT).open() as f:
        scores = {r["learner"]: float(r["score"]) for r in csv.DictReader(f)}
    assert scores["bea"] == scores["cal"] == sc.FULL, (scores, done.stderr[-3000:])
