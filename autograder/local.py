"""`python -m autograder check NOTEBOOK`: a learner's whole notebook, checked locally.

It runs the notebook top to bottom in a fresh kernel, as a grader would, and reports each
graded test cell with the checks' own message and the score out of the visible points.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError


@dataclass
class TestResult:
    grade_id: str
    points: float
    passed: bool
    message: str


def _error_text(cell) -> str | None:
    for output in cell.get("outputs", []):
        if output.output_type == "error":
            return f"{output.ename}: {output.evalue}"
    return None


def check_notebook(path: Path, timeout: int = 120) -> list[TestResult]:
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as exc:  # a malformed file deserves a sentence, not a traceback
        raise SystemExit(f"{path} is not a readable notebook: {exc}") from None
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", allow_errors=True,
        resources={"metadata": {"path": str(path.parent.resolve())}},
    )
    try:
        client.execute()
    except (CellTimeoutError, DeadKernelError) as exc:
        print(f"the notebook stopped early: {type(exc).__name__}: {exc}")
    results = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade"):
            continue
        error = _error_text(cell)
        ran = cell.get("execution_count") is not None
        passed = ran and error is None
        message = error or ("" if ran else "this cell did not run (an earlier cell stopped the notebook)")
        results.append(TestResult(meta.get("grade_id", "?"), float(meta.get("points", 0)), passed, message))
    return results


def report(path: Path) -> int:
    results = check_notebook(path)
    if not results:
        print(f"{path} has no graded test cells: is it an exercise notebook from exercises/?")
        return 2
    width = max(len(r.grade_id) for r in results)
    for r in results:
        mark = "pass" if r.passed else "FAIL"
        print(f"{mark}  {r.grade_id:<{width}}  {r.points if r.passed else 0:g}/{r.points:g}")
        if not r.passed:
            for line in r.message.splitlines():
                print(f"        {line}")
    score = sum(r.points for r in results if r.passed)
    total = sum(r.points for r in results)
    print(f"score on the visible tests: {score:g} / {total:g}")
    return 0 if score == total else 1
