"""Grading one submission: its code runs in a sandboxed worker, every verdict is made here.

For each graded test cell of the instructor's notebook (never the submission's copy, which may
have been edited, deleted or duplicated) the grader builds the check's cases, sends them to the
submission's sandboxed worker (:mod:`autograder.session`), receives plain data back, and judges
it with the same checks the learner ran in the notebook. A test cell scores its points when all
its checks pass, visible and hidden. Before a class is graded, :func:`self_check` grades the
instructor's own solution the same way.

Nothing here knows of a class, a gradebook or a file written for anyone: :mod:`autograder.run`
grades a class one submission at a time with :func:`grade_submission` and keeps each result.
"""
from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .assignment import Assignment
from .checks import get
from .framework import Check, CheckFailed, called_and_judged
from .messages import tr
from .sandbox import Limits, WorkerBroken
from .session import Failure, Session
from .source.helpers import substitution_notes
from .source.shortcuts import OutOfTime, scan
from .submissions import Submission, Unreadable, code_cells, notebook_cells


@dataclass
class TestOutcome:
    grade_id: str
    points: float
    max_points: float
    passed: bool
    message: str = ""  # a visible diagnostic; empty when passed
    hidden_failed: bool = False  # failed only on hidden cases: no details are given


@dataclass
class Result:
    learner: str
    assignment: str
    notebook: str
    outcomes: list[TestOutcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None  # why the submission could not be graded at all
    seconds: float = 0.0
    path: Path | None = None
    #: what the instructor should review: constructs of the source the grader cannot judge
    flags: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        return sum(o.points for o in self.outcomes)

    @property
    def max_score(self) -> float:
        return sum(o.max_points for o in self.outcomes)


class _Unanswered(Exception):
    """A call that gave no result to judge, with the message that says why."""


def _run_check(session: Session, check: Check, function: str, hidden: bool, own: tuple[str, ...] = ()) -> str | None:
    """None when the check passes, else the message for the learner."""
    cases = check.cases(hidden)
    plan = check.probe_plan(cases) if not hidden else [()] * len(cases)

    def call(index: int) -> tuple[Any, Any]:
        observed: list = []
        result = session.call(function, cases[index], own, trace=check.traces(cases[index], hidden), observed=observed,
                              probes=plan[index], source=not hidden)
        if isinstance(result, Failure):
            raise _Unanswered(result.message)
        return result, observed[0] if observed else None

    try:
        called_and_judged(check, cases, call)
    except _Unanswered as unanswered:
        return str(unanswered)
    except CheckFailed as failure:
        return str(failure)
    except Exception as exc:  # a result so odd that a judge tripped over it is still a wrong result
        return tr("`{function}` returned results the checks could not interpret ({error}: {message}).").format(
            function=function, error=type(exc).__name__, message=exc)
    return None


def grade_cells(assignment: Assignment, cells: list[str], limits: Limits, hidden_paths: list[Path],
                include_hidden: bool = True, output: list[str] | None = None,
                flags: list[str] | None = None) -> tuple[list[TestOutcome], list[str]]:
    """Grade a submission's code cells: every test's outcome, and notes for the learner.
    ``output``, when given, receives what the sandboxed worker printed; ``flags`` what the
    instructor should review (constructs the scan of the source cannot decide)."""
    notes: list[str] = []
    # The submission's clock starts first: reading the source is part of its time.
    deadline = time.monotonic() + limits.submission_seconds
    try:
        shortcuts = scan(cells, {f: (assignment.forbidden(f), assignment.forbidden_ops(f)) for f in assignment.functions},
                         assignment.given, deadline=deadline)
    except OutOfTime:
        message = tr("the grading time for this submission ({seconds} s) ran out while the grader "
                     "read its source, before any test").format(seconds=f"{limits.submission_seconds:g}")
        return [TestOutcome(t.grade_id, 0.0, t.points, False, message) for t in assignment.tests], notes
    if flags is not None:
        flags += shortcuts.flags()
    session = Session(assignment, cells, limits, hidden_paths, notes, needs=shortcuts.needs, deadline=deadline)
    outcomes = []
    try:
        for test in assignment.tests:
            message, hidden_failed = "", False
            try:
                for check_id, function, hidden in test.calls:
                    if hidden and not include_hidden:
                        continue
                    problem = shortcuts.message(function) or _run_check(session, get(check_id), function, hidden)
                    if problem is not None:
                        hidden_failed = hidden
                        message = "" if hidden else problem
                        break
            except TimeoutError:
                message = tr("the grading time for this submission ({seconds} s) ran out before this test").format(
                    seconds=f"{limits.submission_seconds:g}")
                hidden_failed = False
            passed = not message and not hidden_failed
            points = test.points if passed else 0.0
            outcomes.append(TestOutcome(test.grade_id, points, test.points, passed, message, hidden_failed))
        # A function that passed only with the course's version of a failing helper fails in the notebook: say why.
        notes += substitution_notes(assignment.tests, outcomes, cells, include_hidden,
                                    lambda c, f, h, helper: _run_check(session, get(c), f, h, (helper,)) is None)
    finally:
        session.close()
        if output is not None:
            output.append(session.output)
    return outcomes, notes


def grade_submission(assignment: Assignment, submission: Submission, limits: Limits, hidden_paths: list[Path]) -> Result:
    start = time.monotonic()
    result = Result(submission.learner, assignment.name, assignment.notebook, notes=list(submission.notes), path=submission.path)
    if submission.rejected:
        result.error = submission.rejected
    else:
        try:
            cells, notes = code_cells(submission.path, limits.notebook_mb << 20, assignment.test_ids,
                                      limits.source_kb << 10)
            result.notes += notes
            outcomes, run_notes = grade_cells(assignment, cells, limits, hidden_paths, flags=result.flags)
            result.outcomes, result.notes = outcomes, result.notes + run_notes
        except Unreadable as exc:
            result.error = str(exc)
        except WorkerBroken as exc:
            result.error = tr("the grader's worker failed: {error}").format(error=exc)
        except Exception as exc:  # one submission's failure must not stop the class: report it as its own
            traceback.print_exc()
            result.error = tr("the grader failed on this submission ({error}: {message})").format(
                error=type(exc).__name__, message=str(exc)[:300])
    if result.error:
        why = tr("not graded: {error}").format(error=result.error)
        result.outcomes = [TestOutcome(t.grade_id, 0.0, t.points, False, why) for t in assignment.tests]
    result.seconds = time.monotonic() - start
    return result


def self_check(assignment: Assignment, source_nb, limits: Limits, hidden_paths: list[Path]) -> str | None:
    """None when the instructor's own solution gets full marks through the whole pipeline (the
    same sandbox, limits and checks as the submissions); otherwise why not, in words.

    A set-up that cannot grade (a worker that cannot import the course, a sandbox that hides
    the Python installation, checks that reject their own solution) would otherwise give every
    learner the same wrong grade.
    """
    cells, _ = notebook_cells(source_nb, assignment.test_ids)
    session_output: list[str] = []
    try:
        outcomes, notes = grade_cells(assignment, cells, limits, hidden_paths, output=session_output)
    except WorkerBroken as exc:
        return str(exc) + (f"; the worker printed:\n{exc.printed}" if exc.printed.strip() else "")  # english: the instructor's
    failed = [o for o in outcomes if not o.passed]
    if not failed:
        return None
    score = sum(o.points for o in outcomes)
    lines = [f"the instructor's solution scores {score:g} / {assignment.max_score:g} through the grader:"]  # english: instructor
    lines += [f"  {o.grade_id}: {o.message or 'it fails the hidden tests'}" for o in failed]  # english: the instructor's
    lines += [f"  note: {n}" for n in notes]
    output = "\n".join("".join(session_output).strip().splitlines()[-15:])
    if output:
        lines.append(f"the sandboxed worker printed:\n{output}")  # english: the instructor's
    return "\n".join(lines)
