"""The same submission always gets the same grade: whatever the number of grading threads.

Two levels. The judges themselves, in every chapter: a check judged from several threads at once
gives the verdict it gives alone, and no judge touches torch's global random number generator.
Then the whole grader: one class, graded once with ``--jobs 1`` and once with ``--jobs 4``; the
gradebook, the CSVs and the feedback must be the same both times. The class is a correct and a
wrong submission (and in one chapter an unfinished and a crashing one too) in one chapter of each
kind of check (``KINDS``): what could make a grade depend on the threads is the kind of work a
check does, which the chapters of one kind share; every numbered chapter has its kind there.
"""
from __future__ import annotations

import csv
import importlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
import torch

from autograder.checks import chapter_checks
from autograder.framework import CheckFailed, Tripwires, call_learner
from autograder.sandbox import sandboxed
from course.layout import AUTOGRADED, FEEDBACK, GRADES, grades_csv, submission_folder
from course.notebook_format import complete, to_nbgrader
from tests.conftest import NOTEBOOKS, REPO, chapter_of
from tests.grader.small_class import graded_cells_only, without_demonstrations

# ---------------------------------------------------------------------------------------------
# The judges
# ---------------------------------------------------------------------------------------------

#: every numbered chapter: a new one joins the judges' tests without being listed here
CORE = [nb for nb in NOTEBOOKS if chapter_of(nb).number is not None]

#: The kinds of check, each with the chapter graded end to end for it and the chapters whose checks do
#: the same kind of work. A grade could depend on the threads through state a check shares: torch's
#: generators, the modules it builds, the course objects it hands a learner's function.
KINDS = {
    # plain values in and out, and a course model (counting its calls) handed to the learner's function;
    # the unfinished and crashing learners are graded here (ENGINE_PATHS_IN)
    "functions of tensors and of Python values": ("prerequisites", ("attention", "capstone", "hardware", "one_block")),
    # the judge draws the dropout masks it expects, from generators of its own, on modules it builds
    "modules judged in training mode": ("encoder", ("multihead", "decoder", "positional")),
    # the learner's function draws from the generator it is given (masking, sampling), and a tokenizer
    # is trained; its checks are the largest
    "functions that draw random numbers": ("bert_gpt", ()),
}
GRADED = [graded for graded, _ in KINDS.values()]


def _judgement(check, case, result) -> str:
    try:
        check.judge(case, result)
    except CheckFailed as failure:
        return f"failed: {failure}"
    return "passed"


def _verdict(check, cases, results) -> str:
    try:
        return check.verdict(cases, results)
    except CheckFailed as failure:
        return f"failed: {failure}"


def _training_judgements():
    """(name, check, case, result) for every case in training mode of every check: the reference's
    result and a catalogued mistake's, so that passes and failures alike must come out the same."""
    found = []
    for notebook in CORE:
        reference = importlib.import_module(f"reference.{notebook}")
        mistakes = importlib.import_module(f"tests.mistakes.{notebook}").MISTAKES
        for function, check in chapter_checks(notebook).items():
            wrong = next((m.fn for m in mistakes if m.check_id == f"{notebook}.{function}"), None)
            for case in (c for c in check.cases(hidden=True) if c.train):
                for who, fn in (("reference", getattr(reference, function)), ("mistake", wrong)):
                    if fn is not None:
                        found.append((f"{notebook}.{function} ({who}) on {case.label}", check, case, call_learner(fn, case)))
    return found


def _disagreements(judged, repeats: int, threads: int = 4) -> list[str]:
    """Judge everything from several threads at once; list what differs from judging alone."""
    alone = {name: _judgement(check, case, result) for name, check, case, result in judged}
    found: list[str] = []
    lock = threading.Lock()

    def judge_repeatedly() -> None:
        for _ in range(repeats):
            for name, check, case, result in judged:
                verdict = _judgement(check, case, result)
                if verdict != alone[name]:
                    with lock:
                        found.append(f"{name}: {verdict[:300]}")

    workers = [threading.Thread(target=judge_repeatedly) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return found


def test_one_dropout_case_judged_from_four_threads_never_changes_its_verdict():
    """The expected dropout masks used to come from torch's global generator, reseeded by whichever
    thread judged last: with four threads about 1 judgement in 100 of this case came out wrong."""
    check = chapter_checks("encoder")["PositionwiseFeedForward"]
    case = next(c for c in check.cases(hidden=False) if c.train)
    reference = importlib.import_module("reference.encoder").PositionwiseFeedForward
    judged = [("reference", check, case, call_learner(reference, case))]
    assert _judgement(*judged[0][1:]) == "passed"
    wrong = _disagreements(judged, repeats=1000)
    assert not wrong, f"{len(wrong)} of 4000 judgements were wrong, e.g. {wrong[0]}"


def test_every_training_case_judged_from_four_threads_keeps_its_verdict():
    judged = _training_judgements()
    verdicts = {_judgement(check, case, result).split(":")[0] for _, check, case, result in judged}
    assert verdicts == {"passed", "failed"}, "the judgements should include passes and failures"
    wrong = _disagreements(judged, repeats=20)
    assert not wrong, f"{len(wrong)} of {4 * 20 * len(judged)} judgements differed:\n" + "\n".join(wrong[:5])


@pytest.mark.parametrize("notebook", CORE)
def test_judging_leaves_the_global_generator_alone(notebook):
    """Every judge of the chapter, with the generator in an odd state: on the reference's results, and
    on every catalogued mistake's, whose diagnoses work out what other mistakes would have returned."""
    reference = importlib.import_module(f"reference.{notebook}")
    mistakes = importlib.import_module(f"tests.mistakes.{notebook}").MISTAKES
    for function, check in chapter_checks(notebook).items():
        cases = check.cases(hidden=True)
        answers = [("the reference", getattr(reference, function))]
        answers += [(m.name, m.fn) for m in mistakes if m.check_id == f"{notebook}.{function}" and not m.visible_only]
        for who, fn in answers:
            wires = Tripwires(check.forbidden, check.forbidden_ops)  # as the notebook and the worker do
            results = [call_learner(fn, c, wires) for c in cases]
            torch.manual_seed(987654321)
            before = torch.get_rng_state()
            verdict = _verdict(check, cases, results)
            assert verdict.startswith(f"✓ {function}") == (who == "the reference"), verdict
            assert torch.equal(torch.get_rng_state(), before), (
                f"judging {notebook}.{function} ({who}) drew from torch's global generator"
            )


def test_the_grader_parses_source_only_under_the_parsing_lock():
    """With --jobs 4 two threads parsed at once and CPython 3.11 failed one submission with
    "AST constructor recursion depth mismatch": every parse of the grader goes through one lock."""
    import ast as ast_module

    offenders = []
    for path in sorted([*(REPO / "autograder").rglob("*.py"), *(REPO / "course").rglob("*.py")]):
        if path.name == "source_trees.py":
            continue
        for node in ast_module.walk(ast_module.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast_module.Attribute) and (
                    (node.attr == "parse" and getattr(node.value, "id", None) == "ast")
                    or (node.attr == "symtable" and getattr(node.value, "id", None) == "symtable")):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not offenders, "parse through course.source_trees: " + ", ".join(offenders)


# ---------------------------------------------------------------------------------------------
# The whole grader, --jobs 1 against --jobs 4
# ---------------------------------------------------------------------------------------------

# Time limits are wall-clock: on a loaded machine a tight one ends a correct call, which is a
# different question from the one asked here. These are far above what any call here needs.
LIMITS = ["--call-timeout", "60", "--submission-timeout", "900", "--memory-mb", "1536"]
CHAPTERS_AT_ONCE = 3


def test_every_chapter_has_its_kind_of_check_graded_end_to_end():
    """A new chapter is placed among the kinds, or graded as a kind of its own."""
    placed = [graded for graded, _ in KINDS.values()] + [n for _, alike in KINDS.values() for n in alike]
    assert sorted(placed) == sorted(CORE), "place each numbered chapter in KINDS, once"


def _answer(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


#: Each graded chapter's own checks judge a passing and a failing submission: that is what differs from
#: kind to kind. What the engine does with an unfinished notebook (every function raises) and
#: with a cell that raises and a function that takes its process down is the same code whatever the
#: chapter, so one chapter's class has those two learners as well; grading them in every chapter
#: would only repeat it (about a third of the test's time).
ENGINE_PATHS_IN = GRADED[0]


def _class(notebook: str) -> dict[str, nbformat.NotebookNode]:
    """learner -> the notebook they hand in for this chapter."""
    chapter = chapter_of(notebook)
    release = graded_cells_only(nbformat.read(chapter.release, as_version=4))
    correct = complete(release, to_nbgrader(chapter.source))
    wrong = nbformat.from_dict(correct)
    spoiled = importlib.import_module(f"tests.mistakes.{notebook}").SPOILED
    cell = _answer(wrong, spoiled.grade_id)
    assert spoiled.right in cell.source, f"the solution of {notebook}.{spoiled.grade_id} no longer contains {spoiled.right!r}"
    cell.source = cell.source.replace(spoiled.right, spoiled.wrong)
    if notebook != ENGINE_PATHS_IN:
        return {"correct": correct, "wrong": wrong}
    crashing = nbformat.from_dict(correct)
    first = next(c for c in crashing.cells if c.metadata.get("nbgrader", {}).get("solution"))
    # A cell that raises, and a graded function that takes the worker down with it.
    crashing.cells.insert(1, nbformat.v4.new_code_cell("raise RuntimeError('a cell that fails')"))
    crashing.cells.append(nbformat.v4.new_code_cell(
        f"import os\n\n\ndef {first.metadata['nbgrader']['grade_id']}(*args, **kwargs):\n    os._exit(3)\n"))
    return {"correct": correct, "wrong": wrong, "stub": release, "crashing": crashing}


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    if not sandboxed():
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap); .ci/run installs it")
    root = tmp_path_factory.mktemp("determinism")
    shutil.copy(REPO / "nbgrader_config.py", root)
    for notebook in GRADED:
        chapter = chapter_of(notebook)
        (root / "solutions" / chapter.assignment).mkdir(parents=True)
        source = without_demonstrations(chapter.source.read_text())
        (root / "solutions" / chapter.assignment / chapter.source.name).write_text(source)
        for learner, nb in _class(notebook).items():
            folder = submission_folder(root, learner, chapter.assignment)
            folder.mkdir(parents=True)
            nbformat.write(nb, folder / f"{notebook}.ipynb")
    return root


def _gradebook(root: Path, assignment: str) -> str:
    return f"sqlite:///{root / 'gradebooks' / assignment}.db"


def _grade_everything(root: Path, jobs: int) -> dict:
    """Grade every chapter afresh; return what an instructor would read."""
    for leftover in ("gradebooks", GRADES, FEEDBACK, AUTOGRADED):
        if (root / leftover).is_dir():
            shutil.rmtree(root / leftover)
    (root / "gradebooks").mkdir()
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))

    def grade(notebook: str) -> subprocess.CompletedProcess:
        assignment = chapter_of(notebook).assignment
        return subprocess.run(
            [sys.executable, "-m", "autograder", "grade", assignment, "--jobs", str(jobs), "--root", str(root),
             "--db", _gradebook(root, assignment), *LIMITS],
            capture_output=True, text=True, timeout=900, env=env, cwd=root,
        )

    # Chapters are graded by separate processes, a few at once (most of a grading's time is spent
    # waiting for sandboxes to start); each process keeps its own --jobs threads, and its own
    # gradebook, since SQLite would not let several processes set one up at the same time.
    with ThreadPoolExecutor(max_workers=CHAPTERS_AT_ONCE) as pool:
        for done in pool.map(grade, GRADED):
            assert done.returncode == 0, done.stdout + done.stderr
    from nbgrader.api import Gradebook

    scores = {}
    for notebook in GRADED:
        assignment = chapter_of(notebook).assignment
        with Gradebook(_gradebook(root, assignment)) as gb:
            for submission in gb.assignment_submissions(assignment):
                for nb_submission in submission.notebooks:
                    for grade in nb_submission.grades:
                        scores[(assignment, submission.student.id, grade.name)] = grade.score
    csvs = {p.name: p.read_text() for p in sorted((root / GRADES).glob("*.csv"))}
    # The page says when it was written; everything else on it must not change.
    feedback = {str(p.relative_to(root)): re.sub(r"\(graded [^)]*\)", "", p.read_text())
                for p in sorted((root / FEEDBACK).rglob("*.html"))}
    return {"scores": scores, "csvs": csvs, "feedback": feedback}


@pytest.mark.slow
def test_grades_do_not_depend_on_the_number_of_jobs(course):
    start = time.monotonic()
    # Two gradings: a difference between threads and one from run to run both show as a difference
    # between them (the judges' own run-to-run behaviour under threads is tested above, 80 times each).
    runs = {(jobs, i): _grade_everything(course, jobs) for jobs, i in ((1, 0), (4, 0))}
    first = runs[(1, 0)]
    # The class really is mixed: every chapter has full marks and partial marks, one has zeros too.
    for notebook in GRADED:
        assignment = chapter_of(notebook).assignment
        with grades_csv(course, assignment).open() as f:
            rows = {r["learner"]: r for r in csv.DictReader(f)}
        assert float(rows["correct"]["score"]) == float(rows["correct"]["max_score"]), assignment
        assert 0 < float(rows["wrong"]["score"]) < float(rows["wrong"]["max_score"]), assignment
        if notebook == ENGINE_PATHS_IN:
            assert float(rows["stub"]["score"]) == 0, assignment
            assert float(rows["crashing"]["score"]) < float(rows["crashing"]["max_score"]), assignment
    assert len(first["feedback"]) == sum(len(_class(notebook)) for notebook in GRADED)
    for key, run in runs.items():
        for part in ("scores", "csvs", "feedback"):
            differing = sorted(k for k in set(run[part]) | set(first[part]) if run[part].get(k) != first[part].get(k))
            assert not differing, f"--jobs {key[0]}, run {key[1] + 1}: {part} differ from --jobs 1, run 1: {differing[:5]}"
    print(f"\n{len(runs)} gradings of {len(GRADED)} chapters took {time.monotonic() - start:.0f} s")
