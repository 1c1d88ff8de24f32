"""The sandbox on its own: output is capped, limits hold, and the fallback still grades."""
from __future__ import annotations

import nbformat
import pytest

from autograder import sandbox
from autograder.engine import Assignment, grade_cells
from autograder.sandbox import Limits, Worker, WorkerTimeout
from coursetools.notebooks import complete, to_nbgrader
from tests.conftest import REPO, release_path, source_path

LIMITS = Limits(call_seconds=3, cell_seconds=3, submission_seconds=60, memory_mb=1024, output_kb=16)


def _worker() -> Worker:
    worker = Worker(LIMITS, [REPO])
    worker.request({"op": "setup", "forbidden": [], "modules": {}}, timeout=60)
    return worker


def test_output_is_capped_and_the_rest_discarded():
    worker = _worker()
    try:
        reply = worker.request({"op": "cell", "index": 1, "source": "for _ in range(2000):\n    print('x' * 999)\n"}, timeout=30)
        assert reply == {"ok": True}
        worker.request({"op": "cell", "index": 2, "source": "import sys; sys.stdout.flush()"}, timeout=30)
    finally:
        worker.stop()
    assert len(worker.output) <= LIMITS.output_kb << 10
    assert worker.output_dropped > 0


def test_a_cell_past_its_time_stops_the_worker():
    worker = _worker()
    with pytest.raises(WorkerTimeout):
        worker.request({"op": "cell", "index": 1, "source": "while True:\n    pass\n"}, timeout=LIMITS.cell_seconds)
    assert worker.process.poll() is not None


def test_memory_beyond_the_limit_is_refused():
    worker = _worker()
    try:
        reply = worker.request({"op": "cell", "index": 1, "source": "block = bytearray(4 << 30)\n"}, timeout=30)
    finally:
        worker.stop()
    assert reply["error"][0] == "MemoryError"


def _solved_cells():
    nb = complete(nbformat.read(release_path("attention"), as_version=4), to_nbgrader(source_path("attention")))
    return [c.source for c in nb.cells if c.cell_type == "code" and not c.metadata.get("nbgrader", {}).get("grade")]


def test_without_bubblewrap_grading_falls_back_and_says_so(monkeypatch):
    monkeypatch.setattr(sandbox, "sandboxed", lambda: False)
    assert "bubblewrap is not available" in sandbox.fallback_warning()
    assignment = Assignment.from_notebook("ch02_attention", "attention", to_nbgrader(source_path("attention")))
    outcomes, _ = grade_cells(assignment, _solved_cells(), LIMITS, [REPO], include_hidden=False)
    assert all(o.passed for o in outcomes), [o.message for o in outcomes]
    looping = _solved_cells() + ["def softmax(x, dim=-1):\n    while True:\n        pass\n"]
    outcomes, _ = grade_cells(assignment, looping, LIMITS, [REPO], include_hidden=False)
    verdict = {o.grade_id: o for o in outcomes}
    assert not verdict["test_softmax"].passed and "did not finish" in verdict["test_softmax"].message
    assert verdict["test_score_variance"].passed
