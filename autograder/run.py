"""Grading a class: every step of `python -m autograder grade` and `export` above one submission.

A run of ``grade`` finds the submissions (of this shard, of these learners), checks the course
secret and the gradebook before anything is graded, refuses to grade without the sandbox unless
told, grades the instructor's own solution first (:func:`autograder.engine.self_check`), then
hands each submission to the engine (:func:`autograder.engine.grade_submission`) and keeps what it
returns the moment it returns: its grades in the gradebook, its feedback page and autograded copy
beside it. Then it writes the CSV of the whole class and says how the run went.

This module is the only caller of the per-submission engine when a class is graded (the ``check``
command grades one notebook, the learner's own, with the same engine). It parses no argument and
chooses no exit status: it returns an :class:`Outcome`, which :mod:`autograder.__main__` maps to
one. What it prints is for the instructor who runs it.
"""
from __future__ import annotations

import enum
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from course.layout import FEEDBACK, SUBMITTED, gradebook_url, grades_csv

from . import course_secret, engine
from .assignment import Assignment
from .engine import Result
from .outputs.escapes import visible
from .sandbox import Limits
from .submissions import Submission


class Outcome(enum.Enum):
    """How a run ended; each has its own exit status (see :mod:`autograder.__main__`)."""

    DONE = "done"  # graded or exported; a shard with no learner has nothing to do, which is done too
    NOTHING_TO_GRADE = "nothing to grade"  # no submission of the assignment at all
    REFUSED = "refused"  # what was asked cannot be done (no such assignment, a wrong shard): nothing was started
    NO_SANDBOX = "no sandbox"  # bubblewrap is missing and --no-sandbox was not given
    SET_UP_FAILS = "the set-up fails"  # the instructor's solution does not get full marks
    GRADEBOOK = "gradebook"  # the gradebook cannot be opened or prepared
    STOPPED = "stopped"  # an error part-way: what was graded is kept
    NO_SECRET = "no secret"  # the course secret is missing or malformed
    INTERRUPTED = "interrupted"  # stopped by the instructor: what was graded is kept
    INCOMPLETE = "incomplete"  # some learners' submissions are not graded (export writes nothing unless told)


#: said after a run that used --db: nbgrader's own commands do not see that option
NBGRADER_DB = ("nbgrader's export, formgrader and generate_feedback read the gradebook named in nbgrader_config.py "
               "(c.CourseDirectory.db_url: $GRADEBOOK_URL, else sqlite:///gradebook.db), not this one: run them with "
               "--CourseDirectory.db_url={url}, or set that line to it")
#: said after a run whose gradebook came from $GRADEBOOK_URL
NBGRADER_ENV = ("nbgrader's export, formgrader and generate_feedback read the same gradebook through nbgrader_config.py "
                "when GRADEBOOK_URL is set as it was here: start them with it set")
#: the environment variable a gradebook URL may come from, password and all: never on a command line, which
#: every user of the machine sees (ps)
GRADEBOOK_ENV = "GRADEBOOK_URL"


def _gradebook_url(root: Path, db: str | None) -> tuple[str, str] | None:
    """The gradebook's URL (``--db``, else $GRADEBOOK_URL, else the course's SQLite file) and what to tell the
    instructor of nbgrader's commands reading it ("" for the course's own file); None, said why, for a password
    on the command line."""
    import os

    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    if db:
        try:
            password = make_url(db).password
        except ArgumentError:
            password = None  # not a URL: opening it says so
        if password:
            print(f"error: the gradebook URL given with --db holds a password, which every user of this machine can "
                  f"read on a command line (ps): put the password in ~/.pgpass (or PGPASSWORD) and leave it out of "
                  f"the URL, or give the whole URL in the environment variable {GRADEBOOK_ENV} instead of --db. "
                  "Nothing was done.", file=sys.stderr)
            return None
        return db, NBGRADER_DB.format(url=f"'{db}'")
    if os.environ.get(GRADEBOOK_ENV):
        return os.environ[GRADEBOOK_ENV], NBGRADER_ENV
    return gradebook_url(root), ""


def _source_notebook(root: Path, assignment: str):
    """The instructor's notebook of an assignment (its name and its cells, with nbgrader's metadata);
    None, said why, when there is none."""
    from course.layout import LayoutError

    from .assignment import load_assignment

    try:
        return load_assignment(root, assignment)
    except LayoutError as exc:
        print(exc, file=sys.stderr)
        return None


def _private(root: Path) -> None:
    """The course directory made the instructor's alone before anything is read or written (:mod:`course.privacy`)."""
    from course.privacy import make_private, said

    message = said(make_private(root))
    if message:
        print(message, file=sys.stderr)


def _open_gradebook(db_url: str):
    from .outputs.gradebook import GradebookError, open_gradebook

    try:
        return open_gradebook(db_url)
    except GradebookError as exc:
        print(f"error: {exc}\nNothing was graded or written.", file=sys.stderr)
        return None


def _selected(submissions, learners: str | None, shard: str | None):
    """The submissions this run grades; None, said why, when the learners or the shard are wrong."""
    from .shards import ShardError, parse_learners, parse_shard, select

    try:
        named = parse_learners(learners) if learners else None
        shard = parse_shard(shard) if shard else None
        chosen = set(select([s.learner for s in submissions], named, shard))
    except ShardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    if shard is not None:
        print(f"shard {shard}: {len(chosen)} of {len(submissions)} learners", file=sys.stderr)
    return [s for s in submissions if s.learner in chosen]


def grade(root: Path, name: str, limits: Limits, *, jobs: int = 2, db: str | None = None, csv: Path | None = None,
          learners: str | None = None, shard: str | None = None, regrade: bool = False,
          sandbox_required: bool = True, clear_by_hand: bool = False) -> Outcome:
    """Grade every submission of the assignment ``name`` under ``root`` (see the module's docstring); every file
    the run writes is the instructor's alone."""
    from course.privacy import private_files

    with private_files():
        return _grade(root, name, limits, jobs=jobs, db=db, csv=csv, learners=learners, shard=shard,
                      regrade=regrade, sandbox_required=sandbox_required, clear_by_hand=clear_by_hand)


def _grade(root: Path, name: str, limits: Limits, *, jobs: int, db: str | None, csv: Path | None,
           learners: str | None, shard: str | None, regrade: bool, sandbox_required: bool,
           clear_by_hand: bool) -> Outcome:
    from course.privacy import homes_said, open_homes

    from .submissions import find_submissions

    where = _gradebook_url(root, db)
    if where is None:
        return Outcome.REFUSED
    loaded = _source_notebook(root, name)
    if loaded is None:
        return Outcome.REFUSED
    assignment, source = loaded
    _private(root)
    try:
        key = course_secret.use(root)
    except course_secret.NoSecret as exc:
        print(f"error: {exc}\nNothing was graded.", file=sys.stderr)
        return Outcome.NO_SECRET
    # Shards and reruns must draw the same hidden cases: the fingerprint tells two secrets apart.
    print(f"hidden cases from the course secret {course_secret.fingerprint(key)}", file=sys.stderr)
    everyone = find_submissions(root, name, assignment.notebook)
    submissions = _selected(everyone, learners, shard)
    if submissions is None:
        return Outcome.REFUSED
    warning = homes_said(open_homes([s.learner for s in everyone]))
    if warning:
        print(warning, file=sys.stderr)
    if not submissions:
        print(f"no submissions of {name} under {root / SUBMITTED}" + (" in this shard" if everyone else ""))
        # a shard with no learner has nothing to do: not a failure of its batch job
        return Outcome.DONE if everyone else Outcome.NOTHING_TO_GRADE
    gradebook = _open_gradebook(where[0])  # before anything is graded: a wrong URL or a missing driver costs seconds
    if gradebook is None:
        return Outcome.GRADEBOOK
    with gradebook:
        return _grade_into(gradebook, root, assignment, source, submissions, limits, jobs=jobs, said=where[1], csv=csv,
                           regrade=regrade, sandbox_required=sandbox_required, everyone=everyone,
                           clear_by_hand=clear_by_hand)


def _grade_into(gradebook, root: Path, assignment: Assignment, source, submissions: list[Submission], limits: Limits, *,
                jobs: int, said: str, csv: Path | None, regrade: bool, sandbox_required: bool,
                everyone: list[Submission], clear_by_hand: bool = False) -> Outcome:
    """The run itself, into a gradebook already checked: the sandbox, the self-check, then each submission."""
    from tqdm import tqdm

    from course.layout import REPO

    from .engine import self_check
    from .outputs.autograded import write_autograded
    from .outputs.feedback import write_feedback
    from .outputs.grade_files import write_csv
    from .outputs.gradebook import GradebookError, with_by_hand
    from .sandbox import fallback_warning, sandbox_gaps, sandboxed, shared_by_process

    if not sandboxed():
        if sandbox_required:
            print(f"error: {fallback_warning()}\nNothing was graded. To grade without the sandbox anyway (only code "
                  "you trust), pass --no-sandbox.", file=sys.stderr)
            return Outcome.NO_SANDBOX
        print("warning: " + fallback_warning(), file=sys.stderr)
    else:
        for gap in sandbox_gaps():
            print(f"warning: {gap}", file=sys.stderr)
    reason = shared_by_process()
    if reason and jobs > 1:
        # Graded side by side, one learner's busy processes would take the CPU its neighbours' calls need.
        print(f"warning: {reason}, so the CPU would be shared by process, not by submission: grading one submission "
              f"at a time instead of {jobs} (more machines or shards grade a class faster)", file=sys.stderr)
        jobs = 1
    hidden = sorted({root, REPO, Path.home()})
    start = time.monotonic()
    # Grade the instructor's own solution first, through the same sandbox, limits and checks: a
    # set-up that cannot give it full marks would give every learner a wrong grade.
    print(f"checking the set-up: grading the instructor's solution of {assignment.name}", file=sys.stderr)
    problem = self_check(assignment, source, limits, hidden)
    if problem is not None:
        print(f"error: the set-up cannot grade {assignment.name}, so nothing was graded or written: {problem}",
              file=sys.stderr)
        return Outcome.SET_UP_FAILS
    try:
        gradebook.prepare(assignment, source)
        pending, skipped = gradebook.to_grade(assignment, source, submissions, limits.notebook_mb << 20, regrade)
    except GradebookError as exc:
        print(f"error: {exc}\nNothing was graded.", file=sys.stderr)
        return Outcome.GRADEBOOK
    if skipped:
        print(f"{skipped} submissions are graded already and unchanged since: skipped (--regrade grades them again)",
              file=sys.stderr)
    keys = {s.learner: key for s, key in pending}
    # what the instructor gave by hand, read once: each page holds the grade as every file does (kept, unless cleared)
    by_hand = {} if clear_by_hand else gradebook.by_hand(assignment.name, set(keys))

    def keep(result) -> None:
        """Everything of one submission, as soon as it is graded: its grades first, in one transaction."""
        key = keys[result.learner]
        graded_at = gradebook.record(assignment, result, key, keep_by_hand=not clear_by_hand)
        write_feedback(root, assignment, with_by_hand(result, by_hand.get(result.learner)), graded_at, key.timestamp,
                       key.secret)
        write_autograded(root, assignment, result, source, key.timestamp, key.secret, limits.notebook_mb << 20)

    results = []
    try:
        with tqdm(total=len(pending), desc=f"grading {assignment.name}", unit="submission", file=sys.stderr) as bar:
            results = grade_all(assignment, [s for s, _ in pending], limits, hidden, jobs=jobs, progress=bar,
                                on_result=keep)
    except (GradebookError, OSError, KeyboardInterrupt) as exc:
        reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"error: {exc}"
        print(f"{reason}\nThe submissions graded before this are kept in the gradebook {gradebook}; run the same "
              "command again to grade the rest.", file=sys.stderr)
        return Outcome.INTERRUPTED if isinstance(exc, KeyboardInterrupt) else Outcome.STOPPED
    csv_path = csv or grades_csv(root, assignment.name)
    recorded = [r.result for r in gradebook.graded(assignment.name)]
    # The CSV holds the whole class as the gradebook has it (other shards and earlier runs too).
    write_csv(csv_path, assignment, recorded)
    print(summary(assignment, results, time.monotonic() - start))
    # the whole class, every shard's learners: whether the CSV covers it
    status = gradebook.status(assignment, source, everyone, limits.notebook_mb << 20)
    print("\n".join(status.lines()))
    print(f"gradebook: {gradebook}\ngrades: {csv_path} ({len(recorded)} learners"
          + ("" if status.complete else f", {len(status.not_graded)} not graded yet") + ")\n"
          f"feedback: {root / FEEDBACK}/<learner>/{assignment.name}/{assignment.notebook}.html")
    if said:  # which gradebook nbgrader's own commands read
        print(said)
    return Outcome.DONE


def grade_all(assignment: Assignment, submissions: Iterable[Submission], limits: Limits, hidden_paths: list[Path],
              jobs: int = 1, progress=None, on_result: Callable[[Result], None] | None = None) -> list[Result]:
    """Every submission's Result, sorted by learner. ``on_result`` receives each one as soon as it
    is graded (to record it); when it raises, or the run is interrupted, no further submission is
    started and the exception propagates: what was handed to ``on_result`` is kept."""
    import torch

    # The judges work on small tensors; extra threads would only fight the workers for the cores.
    torch.set_num_threads(1)
    submissions = list(submissions)
    results: list[Result] = []
    pool = ThreadPoolExecutor(max_workers=max(jobs, 1))
    try:
        futures = [pool.submit(engine.grade_submission, assignment, s, limits, hidden_paths) for s in submissions]
        for future in as_completed(futures):
            result = future.result()
            if on_result is not None:
                on_result(result)
            results.append(result)
            if progress is not None:
                progress.update(1)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return sorted(results, key=lambda r: r.learner)


def summary(assignment: Assignment, results: list[Result], seconds: float) -> str:
    graded = [r for r in results if not r.error]
    failed = [r for r in results if r.error]
    lines = [f"{assignment.name}: graded {len(graded)} of {len(results)} submissions in {seconds:.1f} s"]
    if graded:
        mean = sum(r.score for r in graded) / len(graded)
        lines.append(f"mean score {mean:.2f} / {assignment.max_score:g} ({100 * mean / assignment.max_score:.0f}%)")
    for r in failed:
        lines.append(f"failed to grade {r.learner!r}: {visible(r.error)}")
    for r in results:
        if r.flags:
            lines.append(f"to review in {r.learner!r}: {visible('; '.join(r.flags))}")
    return "\n".join(lines)


def _statuses(root: Path, gradebook, names: list[str]) -> list:
    """How far each assignment's grading is (:class:`ClassStatus`), the class being everyone who submitted."""
    from .assignment import load_assignment
    from .submissions import find_submissions

    out = []
    for name in names:
        assignment, source = load_assignment(root, name)
        everyone = find_submissions(root, name, assignment.notebook)
        out.append(gradebook.status(assignment, source, everyone, Limits().notebook_mb << 20))
    return out


def export(root: Path, names: list[str], db: str | None = None, partial: bool = False, write: bool = True) -> Outcome:
    """Say how far each of the assignments ``names`` is graded, then write every grade file and feedback page of
    them from the gradebook alone: nothing when a learner's submission is not graded, unless ``partial``; nothing
    at all without ``write`` (the status command), which then ends DONE only for a complete class."""
    from course.layout import LayoutError
    from course.privacy import private_files

    from .outputs.grade_files import export as export_all
    from .outputs.gradebook import GradebookError

    where = _gradebook_url(root, db)
    if where is None:
        return Outcome.REFUSED
    if write:
        _private(root)
    gradebook = _open_gradebook(where[0])
    if gradebook is None:
        return Outcome.GRADEBOOK
    try:
        with gradebook, private_files():
            statuses = _statuses(root, gradebook, names)
            for status in statuses:
                print("\n".join(status.lines()))
            incomplete = [s.assignment for s in statuses if not s.complete]
            if not write:
                return Outcome.INCOMPLETE if incomplete else Outcome.DONE
            if incomplete and not partial:
                print(f"error: not every submission of {', '.join(incomplete)} is graded, so nothing was written: "
                      "grade the rest (python -m autograder grade ASSIGNMENT), or pass --partial to write the "
                      "grades of those graded", file=sys.stderr)
                return Outcome.INCOMPLETE
            for line in export_all(root, gradebook, names):
                print(line)
    except (LayoutError, GradebookError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return Outcome.GRADEBOOK
    print(f"from the gradebook {gradebook}")
    if where[1]:
        print(where[1])
    return Outcome.DONE


def make_secret(root: Path) -> Outcome:
    """The course secret in ``root``, made unless there is one, and said which it is."""
    try:
        path, made = course_secret.make(root)
    except (OSError, course_secret.NoSecret) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return Outcome.REFUSED
    fingerprint = course_secret.fingerprint(course_secret.read(path))
    print(f"{'made' if made else 'kept'} the course secret {path} (fingerprint {fingerprint}).\n"
          "The hidden cases are drawn from it: keep it out of everything learners receive, and give every grading "
          f"machine the same one (this file in the course directory, or its contents as {course_secret.ENV}).")
    return Outcome.DONE
