"""Grading: each submission's code runs in a sandboxed worker, every verdict is made here.

For each graded test cell of the instructor's notebook (never the submission's copy, which may
have been edited, deleted or duplicated) the grader builds the check's cases, sends them to the
worker, receives plain data back, and judges it with the same checks the learner ran in the
notebook. A test cell scores its points when all its checks pass, visible and hidden.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from .checks import get
from .framework import Check, CheckFailed
from .sandbox import REPO, Limits, Worker, WorkerGone, WorkerTimeout
from .submissions import Submission, Unreadable, code_cells
from . import wire


@dataclass(frozen=True)
class GradedTest:
    """One graded test cell: its id, its points and the checks it runs."""

    grade_id: str
    points: float
    calls: tuple[tuple[str, str, bool], ...]  # (check id, function name, hidden)


@dataclass(frozen=True)
class Assignment:
    name: str
    notebook: str
    tests: tuple[GradedTest, ...]

    @property
    def functions(self) -> list[str]:
        return list(dict.fromkeys(fn for t in self.tests for _, fn, _ in t.calls))

    @property
    def max_score(self) -> float:
        return sum(t.points for t in self.tests)

    @classmethod
    def from_notebook(cls, name: str, notebook: str, nb) -> "Assignment":
        """From a notebook carrying nbgrader metadata: the instructor's source, or a release."""
        from coursetools.notebooks import check_calls, graded_cells

        tests = []
        for cell in graded_cells(nb, "test"):
            meta = cell.metadata["nbgrader"]
            calls = tuple((c, f, h) for c, f, h in check_calls(cell.source) if c and f)
            tests.append(GradedTest(meta["grade_id"], float(meta.get("points", 0)), calls))
        return cls(name, notebook, tuple(tests))

    def forbidden(self, function: str) -> tuple[str, ...]:
        """What ``function`` may not call: the built-ins it rebuilds, and the course's own answer."""
        own = f"reference.{self.notebook}.{function}"
        checks = {get(c) for t in self.tests for c, f, _ in t.calls if f == function}
        return tuple(dict.fromkeys([n for ch in checks for n in ch.forbidden] + [own]))


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

    @property
    def score(self) -> float:
        return sum(o.points for o in self.outcomes)

    @property
    def max_score(self) -> float:
        return sum(o.max_points for o in self.outcomes)


def reference_sources(folder: Path = REPO / "reference") -> dict[str, str]:
    """The reference package as text, for the worker to load without seeing the files."""
    sources = {}
    if (folder / "__init__.py").is_file():
        sources["reference"] = (folder / "__init__.py").read_text(encoding="utf-8")
        for path in sorted(folder.glob("*.py")):
            if path.name != "__init__.py":
                sources[f"reference.{path.stem}"] = path.read_text(encoding="utf-8")
    return sources


def _cell_name(index: int, source: str) -> str:
    """How a learner finds a cell again: its position and its first line."""
    first = next((line.strip() for line in source.splitlines() if line.strip()), "")
    return f"code cell {index + 1} (`{first[:60]}{'…' if len(first) > 60 else ''}`)"


class _Session:
    """The worker of one submission, restarted without the offending cell when one kills it."""

    def __init__(self, assignment: Assignment, cells: list[str], limits: Limits, hidden_paths: list[Path], notes: list[str]):
        self.assignment, self.cells, self.limits = assignment, cells, limits
        self.hidden_paths, self.notes = hidden_paths, notes
        self.skip: set[int] = set()
        self.deadline = time.monotonic() + limits.submission_seconds
        self.worker: Worker | None = None
        self.forbidden_all = sorted({n for f in assignment.functions for n in assignment.forbidden(f)})
        self.modules = reference_sources()

    def left(self, cap: float) -> float:
        return max(min(cap, self.deadline - time.monotonic()), 0.0)

    def ensure(self) -> Worker:
        while self.worker is None:
            if self.left(1) <= 0:
                raise TimeoutError
            worker = Worker(self.limits, self.hidden_paths)
            try:
                worker.request({"op": "setup", "forbidden": self.forbidden_all, "reference": self.assignment.notebook,
                                "modules": self.modules}, timeout=self.left(120))
                for index, source in enumerate(self.cells):
                    if index in self.skip:
                        continue
                    try:
                        reply = worker.request({"op": "cell", "index": index + 1, "source": source},
                                               timeout=self.left(self.limits.cell_seconds))
                    except WorkerTimeout:
                        self.skip.add(index)
                        self.notes.append(f"{_cell_name(index, source)} ran longer than {self.limits.cell_seconds:g} s and was skipped")
                        raise
                    except WorkerGone:
                        self.skip.add(index)
                        self.notes.append(f"{_cell_name(index, source)} ended the Python process (exit, kill or crash) and was skipped")
                        raise
                    if "error" in reply:
                        kind, message, _ = reply["error"]
                        self.notes.append(f"{_cell_name(index, source)} raised {kind}" + (f": {message[:300]}" if message else ""))
                self.worker = worker
            except (WorkerTimeout, WorkerGone):
                worker.stop()
                if self.left(1) <= 0:
                    raise TimeoutError from None
        return self.worker

    def call(self, function: str, case) -> object:
        """The learner's result for one case, or a message explaining why there is none."""
        worker = self.ensure()
        request = {
            "op": "call", "function": function, "case": wire.encode(case),
            "forbidden": list(self.assignment.forbidden(function)),
            "inject": [f for f in self.assignment.functions if f != function],
        }
        try:
            reply = worker.request(request, timeout=self.left(self.limits.call_seconds))
        except WorkerTimeout:
            self.worker = None
            if self.left(1) <= 0:
                raise TimeoutError from None
            return _Failure(
                f"`{function}` did not finish within {self.limits.call_seconds:g} s on the case {case.label}: "
                "is there an endless loop, or a loop that never reaches its `break`?"
            )
        except WorkerGone:
            self.worker = None
            return _Failure(
                f"`{function}` ended the Python process on the case {case.label} (sys.exit, os._exit, "
                "a signal, or more than the memory limit): a graded function must return its result."
            )
        if reply.get("missing"):
            return _Failure(f"there is no `{function}` in the notebook: keep the name the exercise gives it.")
        if "error" in reply:
            return _Failure(f"`{function}` could not be called: {reply['error'][1]}")
        try:
            return wire.decode(reply["result"])
        except (wire.WireError, KeyError, TypeError, ValueError) as exc:
            return _Failure(f"`{function}` returned something that cannot be read as data ({exc}).")

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None


@dataclass(frozen=True)
class _Failure:
    message: str


def _run_check(session: _Session, check: Check, function: str, hidden: bool) -> str | None:
    """None when the check passes, else the message for the learner."""
    cases = check.cases(hidden)
    results = []
    for case in cases:
        result = session.call(function, case)
        if isinstance(result, _Failure):
            return result.message
        results.append(result)
    try:
        check.verdict(cases, results)
    except CheckFailed as failure:
        return str(failure)
    except Exception as exc:  # a result so odd that a judge tripped over it is still a wrong result
        return f"`{function}` returned results the checks could not interpret ({type(exc).__name__}: {exc})."
    return None


def grade_cells(assignment: Assignment, cells: list[str], limits: Limits, hidden_paths: list[Path],
                include_hidden: bool = True) -> tuple[list[TestOutcome], list[str]]:
    notes: list[str] = []
    session = _Session(assignment, cells, limits, hidden_paths, notes)
    outcomes = []
    try:
        for test in assignment.tests:
            message, hidden_failed = "", False
            try:
                for check_id, function, hidden in test.calls:
                    if hidden and not include_hidden:
                        continue
                    problem = _run_check(session, get(check_id), function, hidden)
                    if problem is not None:
                        hidden_failed = hidden
                        message = "" if hidden else problem
                        break
            except TimeoutError:
                message = f"the grading time for this submission ({limits.submission_seconds:g} s) ran out before this test"
                hidden_failed = False
            passed = not message and not hidden_failed
            outcomes.append(TestOutcome(test.grade_id, test.points if passed else 0.0, test.points, passed, message, hidden_failed))
    finally:
        session.close()
    return outcomes, notes


def grade_submission(assignment: Assignment, submission: Submission, limits: Limits, hidden_paths: list[Path],
                     max_bytes: int = 64 << 20) -> Result:
    start = time.monotonic()
    result = Result(submission.learner, assignment.name, assignment.notebook, notes=list(submission.notes), path=submission.path)
    if submission.rejected:
        result.error = submission.rejected
    else:
        try:
            cells, notes = code_cells(submission.path, max_bytes)
            result.notes += notes
            outcomes, run_notes = grade_cells(assignment, cells, limits, hidden_paths)
            result.outcomes, result.notes = outcomes, result.notes + run_notes
        except Unreadable as exc:
            result.error = str(exc)
    if result.error:
        result.outcomes = [TestOutcome(t.grade_id, 0.0, t.points, False, "not graded: " + result.error) for t in assignment.tests]
    result.seconds = time.monotonic() - start
    return result


def grade_all(assignment: Assignment, submissions: Iterable[Submission], limits: Limits, hidden_paths: list[Path],
              jobs: int = 1, progress=None) -> list[Result]:
    import torch

    # The judges work on small tensors; extra threads would only fight the workers for the cores.
    torch.set_num_threads(1)
    submissions = list(submissions)
    results: list[Result] = []
    with ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
        futures = [pool.submit(grade_submission, assignment, s, limits, hidden_paths) for s in submissions]
        for future in as_completed(futures):
            results.append(future.result())
            if progress is not None:
                progress.update(1)
    return sorted(results, key=lambda r: r.learner)
