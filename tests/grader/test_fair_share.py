"""One learner cannot take the CPU its neighbours' calls need.

A submission that keeps 56 processes busy (within the process limit) is graded beside two solved
ones with `--jobs 2`, in a CPU cgroup limited to one CPU, as a pod with a CPU limit of one is. In
such a cgroup the kernel shares the CPU by process, so graded side by side the busy learner would
take most of it; the grader sees where it runs and grades one submission at a time there. The
solved neighbours keep every point.
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
from tests.grader import small_class as sc

CPU_CGROUPS = Path("/sys/fs/cgroup/cpu")
pytestmark = [
    pytest.mark.skipif(not sandboxed(), reason="bubblewrap is not installed (apt-get install bubblewrap)"),
    pytest.mark.skipif(not os.access(CPU_CGROUPS, os.W_OK), reason="no writable cgroup v1 CPU controller here"),
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
    group = CPU_CGROUPS / f"grading-test-{os.getpid()}"
    group.mkdir()
    try:
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text("100000")  # one CPU
        command = [sys.executable, "-m", "autograder", "grade", sc.ASSIGNMENT, "--root", str(root), "--jobs", "2",
                   "--learners", "mallory,alice,bob", *sc.FAST]
        inside = ["sh", "-c", f'echo $$ > {group / "cgroup.procs"} && exec "$@"', "sh", *command]
        done = subprocess.run(inside, capture_output=True, text=True, timeout=900, env=sc.ENV, cwd=root)
    finally:
        group.rmdir()
    assert done.returncode == 0, done.stderr[-3000:]
    assert "grading one submission at a time instead of 2" in done.stderr
    with (root / "grades" / f"{sc.ASSIGNMENT}.csv").open() as f:
        scores = {r["learner"]: float(r["score"]) for r in csv.DictReader(f)}
    assert scores["alice"] == scores["bob"] == sc.FULL, (scores, done.stderr[-3000:])
