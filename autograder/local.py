"""`python -m autograder check NOTEBOOK`: a learner's notebook, checked the way it is graded.

The same engine as the class grader runs the notebook's code in a separate process and judges
its visible tests here; the score is out of the visible points.
"""
from __future__ import annotations

from pathlib import Path

from course.layout import REPO, SOLUTIONS

from .engine import Assignment, grade_cells
from .sandbox import Limits, sandboxed
from .submissions import Unreadable, code_cells


def report(path: Path, limits: Limits = Limits()) -> int:
    import nbformat

    if not sandboxed():
        # A learner checking their own notebook needs no protection from it; the class grader,
        # which runs other people's code, refuses to work this way unless asked.
        print("note: bubblewrap is not installed, so the notebook runs with resource limits only; "
              "that is fine for your own code")
    try:
        cells, notes = code_cells(path, limits.notebook_mb << 20, limits.source_kb << 10)
        nb = nbformat.read(path, as_version=4)
    except Unreadable as exc:
        print(f"{path} is not a readable notebook: {exc}")
        return 2
    assignment = Assignment.from_notebook(path.resolve().parent.name, path.stem, nb)
    if not assignment.tests:
        print(f"{path} has no graded test cells: is it an exercise notebook from exercises/?")
        return 2
    outcomes, run_notes = grade_cells(assignment, cells, limits, [REPO / SOLUTIONS], include_hidden=False)
    for note in notes + run_notes:
        print(f"note: {note}")
    width = max(len(o.grade_id) for o in outcomes)
    for o in outcomes:
        print(f"{'pass' if o.passed else 'FAIL'}  {o.grade_id:<{width}}  {o.points:g}/{o.max_points:g}")
        for line in o.message.splitlines():
            print(f"        {line}")
    score = sum(o.points for o in outcomes)
    total = sum(o.max_points for o in outcomes)
    print(f"score on the visible tests: {score:g} / {total:g}")
    return 0 if score == total else 1
