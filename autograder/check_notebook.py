"""`python -m autograder check NOTEBOOK`: a learner's notebook, checked the way it is graded.

The same engine as the class grader runs the notebook's code in a separate process and judges
its visible tests here; the score is out of the visible points. The learner's own notebook is the
only copy of the tests here, so its graded cells are the tests; nothing is written anywhere.
"""
from __future__ import annotations

from pathlib import Path

from course.layout import REPO, SOLUTIONS, ZH_SOLUTIONS

from .assignment import Assignment
from .engine import grade_cells
from .messages import tr
from .sandbox import Limits, sandboxed
from .submissions import Unreadable, check_code_size, notebook_cells, read_submission


def report(path: Path, limits: Limits = Limits()) -> int:
    if not sandboxed():
        # A learner checking their own notebook needs no protection from it; the class grader,
        # which runs other people's code, refuses to work this way unless asked.
        print(tr("note: bubblewrap is not installed, so the notebook runs with resource limits only; "
                 "that is fine for your own code"))
    try:
        nb, notes = read_submission(path, limits.notebook_mb << 20)
    except Unreadable as exc:
        print(tr("{path} is not a readable notebook: {error}").format(path=path, error=exc))
        return 2
    # The learner's own notebook is the only copy of the tests here: its graded cells are the tests.
    assignment = Assignment.from_notebook(path.resolve().parent.name, path.stem, nb)
    if not assignment.tests:
        print(tr("{path} has no graded test cells: is it an exercise notebook from exercises/?").format(path=path))
        return 2
    cells, cell_notes = notebook_cells(nb, assignment.test_ids)
    try:
        check_code_size(cells, limits.source_kb << 10)
    except Unreadable as exc:
        print(tr("{path} is not graded: {error}").format(path=path, error=exc))
        return 2
    notes += cell_notes
    outcomes, run_notes = grade_cells(assignment, cells, limits, [REPO / SOLUTIONS, REPO / ZH_SOLUTIONS],
                                       include_hidden=False)
    for note in notes + run_notes:
        print(tr("note: {note}").format(note=note))
    width = max(len(o.grade_id) for o in outcomes)
    for o in outcomes:
        print(f"{'pass' if o.passed else 'FAIL'}  {o.grade_id:<{width}}  {o.points:g}/{o.max_points:g}")
        for line in o.message.splitlines():
            print(f"        {line}")
    score = sum(o.points for o in outcomes)
    total = sum(o.max_points for o in outcomes)
    print(tr("score on the visible tests: {score} / {total}").format(score=f"{score:g}", total=f"{total:g}"))
    return 0 if score == total else 1
