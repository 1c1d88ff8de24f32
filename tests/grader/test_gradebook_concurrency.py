"""Several grading processes writing into one gradebook at the same instant lose and duplicate nothing.

Three processes, released together by a barrier, open a gradebook that does not exist yet
(SQLite, and a real PostgreSQL server), create its schema and the assignment, and record
overlapping sets of learners (two shards and a run over some of both), each submission in its
own transaction. The gradebook they leave must equal the one a single process writes into a
fresh SQLite database: every learner once, with the same score in nbgrader's tables and in the
course's records. Before schema and assignment creation were serialised, a process crashed with
UniqueViolation (pg_type_typname_nsp_index, assignment_name_key) and its learners were lost.
"""
from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path

import pytest

from autograder.assignment import Assignment
from autograder.engine import Result
from autograder.engine import TestOutcome as Outcome
from autograder.outputs.gradebook import SubmissionKey, open_gradebook
from course.layout import gradebook_url
from course.notebook_format import to_nbgrader
from tests.conftest import source_path
from tests.grader.postgres import postgres_server

ASSIGNMENT, NOTEBOOK = "ch02_attention", "attention"
LEARNERS = [f"learner{i:02d}" for i in range(12)]
#: what each process writes: two disjoint shards, and a third run over learners of both
PARTS = [LEARNERS[:6], LEARNERS[6:], LEARNERS[3:9]]


def _assignment():
    source = to_nbgrader(source_path(NOTEBOOK))
    return Assignment.from_notebook(ASSIGNMENT, NOTEBOOK, source), source


def _result(assignment: Assignment, learner: str) -> Result:
    """A graded submission whose points depend on the learner (which tests it passes)."""
    n = int(learner[-2:])
    outcomes = [Outcome(t.grade_id, t.points if (n >> i) & 1 else 0.0, t.points, bool((n >> i) & 1),
                            "" if (n >> i) & 1 else f"wrong in {t.grade_id}") for i, t in enumerate(assignment.tests)]
    return Result(learner, ASSIGNMENT, NOTEBOOK, outcomes, notes=[f"note for {learner}"])


def write(db_url: str, learners: list[str], barrier=None) -> None:
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    assignment, source = _assignment()
    if barrier is not None:
        barrier.wait(timeout=120)  # every process meets a database that is not there yet
    with open_gradebook(db_url) as gradebook:
        gradebook.prepare(assignment, source)
        if barrier is not None:
            barrier.wait(timeout=120)
        for learner in learners:
            gradebook.record(assignment, _result(assignment, learner), SubmissionKey(f"digest-{learner}", "grader"))


def _run_concurrently(db_url: str) -> None:
    # Forked: each writer starts at once, with the modules already imported, and opens its own
    # connections (none is open in this process when it forks).
    fork = multiprocessing.get_context("fork")
    barrier = fork.Barrier(len(PARTS))
    processes = [fork.Process(target=write, args=(db_url, part, barrier)) for part in PARTS]
    for p in processes:
        p.start()
    for p in processes:
        p.join(timeout=300)
    assert [p.exitcode for p in processes] == [0] * len(PARTS), "a grading process failed (see its traceback above)"


def _contents(db_url: str) -> dict:
    """What the gradebook holds: nbgrader's submissions and scores, and the course's records."""
    from nbgrader.api import Gradebook as NbgraderGradebook

    with NbgraderGradebook(db_url) as gb:
        submissions = gb.assignment_submissions(ASSIGNMENT)
        scores = sorted((s.student.id, s.score, s.max_score) for s in submissions)
        students = sorted(s.id for s in gb.students)
        assignments = [a.name for a in gb.assignments]
        cells = sorted((g.name, g.max_score) for g in gb.find_notebook(NOTEBOOK, ASSIGNMENT).grade_cells)
    with open_gradebook(db_url) as gradebook:
        records = [(r.learner, r.submission, r.result.score, [o.message for o in r.result.outcomes], r.result.notes)
                   for r in gradebook.records(ASSIGNMENT)]
    return {"scores": scores, "students": students, "assignments": assignments, "cells": cells, "records": records}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    url = gradebook_url(tmp_path_factory.mktemp('one'))
    write(url, list(dict.fromkeys(learner for part in PARTS for learner in part)))
    return _contents(url)


def test_the_reference_holds_every_learner_once(reference):
    assert reference["students"] == LEARNERS
    assert [s[0] for s in reference["scores"]] == LEARNERS
    assert {s[1] for s in reference["scores"]} != {0.0}  # real, varied scores
    assert reference["assignments"] == [ASSIGNMENT]


def test_concurrent_runs_into_a_new_sqlite_gradebook(tmp_path, reference):
    url = gradebook_url(tmp_path)
    _run_concurrently(url)
    assert _contents(url) == reference


def test_concurrent_runs_into_a_new_postgresql_gradebook(reference):
    with postgres_server() as new_database:
        url = new_database()
        _run_concurrently(url)
        assert _contents(url) == reference
        # A second round into the existing database (schema, course and assignment there) changes nothing.
        _run_concurrently(url)
        assert _contents(url) == reference


def test_creating_the_assignment_leaves_the_source_notebook_as_it_was(tmp_path):
    # nbgrader's preprocessors write checksums into the notebook they are given: the shard that created the
    # assignment made its learners' autograded copies from a changed source, unlike every other shard
    import copy

    assignment, source = _assignment()
    before = copy.deepcopy(source)
    url = gradebook_url(tmp_path)
    with open_gradebook(url) as gradebook:
        gradebook.prepare(assignment, source)
    assert _contents(url)["cells"], "the assignment and its grade cells were created by this call"
    assert source == before


def test_a_database_outage_is_waited_out_and_a_longer_one_ends_with_a_clear_message(capsys):
    import threading
    import time

    from autograder.outputs.gradebook import GradebookError

    assignment, source = _assignment()
    with postgres_server() as new_database:
        url = new_database()
        with open_gradebook(url) as gradebook:
            gradebook.prepare(assignment, source)
            gradebook.record(assignment, _result(assignment, "learner01"), SubmissionKey("digest-1", "grader"))
            new_database.stop()
            # back after about 3 s: the next write waits for it rather than ending the run
            threading.Timer(3.0, new_database.start).start()
            os.environ["AUTOGRADER_DB_WAIT"] = "60"
            try:
                gradebook.record(assignment, _result(assignment, "learner02"), SubmissionKey("digest-2", "grader"))
                assert "the gradebook does not answer" in capsys.readouterr().err
                assert [r.learner for r in gradebook.records(ASSIGNMENT)] == ["learner01", "learner02"]
                new_database.stop()
                os.environ["AUTOGRADER_DB_WAIT"] = "1.5"
                start = time.monotonic()
                with pytest.raises(GradebookError, match="the gradebook did not answer for 1.5 s"):
                    gradebook.record(assignment, _result(assignment, "learner03"), SubmissionKey("digest-3", "grader"))
                assert time.monotonic() - start < 30
            finally:
                del os.environ["AUTOGRADER_DB_WAIT"]
                new_database.start()
