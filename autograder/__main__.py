"""python -m autograder grade ASSIGNMENT | export ASSIGNMENT... | check NOTEBOOK

``grade`` first grades the instructor's own solution through the same pipeline and stops, writing
nothing, when it does not get full marks; it refuses to run without bubblewrap unless given
``--no-sandbox``. Every limit option's default is the matching field of :class:`Limits`.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import course_secret

#: the command-line options that set a limit: (option, field of Limits, type, what it limits)
LIMIT_OPTIONS = (
    ("--call-timeout", "call_seconds", float, "seconds for one call of a graded function"),
    ("--cell-timeout", "cell_seconds", float, "seconds for one cell of a submission"),
    ("--submission-timeout", "submission_seconds", float, "seconds for a whole submission"),
    ("--memory-mb", "memory_mb", int, "memory limit of each process of the learner's code"),
    ("--processes", "processes", int, "processes and threads the learner's code may run at once (sandbox only)"),
    ("--scratch-mb", "scratch_mb", int, "size of the learner's /tmp (sandbox only)"),
    ("--notebook-mb", "notebook_mb", int, "largest notebook that is graded"),
    ("--source-kb", "source_kb", int, "most code (all code cells together) that is graded"),
)


def _limits(args):
    from .sandbox import Limits

    return Limits(**{field: getattr(args, field) for _, field, _, _ in LIMIT_OPTIONS})


def _source_notebook(root: Path, assignment: str):
    """The instructor's notebook of an assignment (its name and its cells, with nbgrader's metadata)."""
    from course.layout import LayoutError

    from .assignment import load_assignment

    try:
        graded, source = load_assignment(root, assignment)
    except LayoutError as exc:
        raise SystemExit(str(exc)) from None
    return graded, source


#: said after a run that used --db: nbgrader's own commands do not see that option
NBGRADER_DB = ("nbgrader's export, formgrader and generate_feedback read the gradebook named in nbgrader_config.py "
               "(c.CourseDirectory.db_url, sqlite:///gradebook.db in this course), not this one: run them with "
               "--CourseDirectory.db_url='{url}', or set that line to it")


def _open_gradebook(db_url: str):
    from .gradebook import GradebookError, open_gradebook

    try:
        return open_gradebook(db_url)
    except GradebookError as exc:
        print(f"error: {exc}\nNothing was graded or written.", file=sys.stderr)
        return None


def _selected(args, submissions):
    from .shards import ShardError, parse_learners, parse_shard, select

    try:
        named = parse_learners(args.learners) if args.learners else None
        shard = parse_shard(args.shard) if args.shard else None
        chosen = set(select([s.learner for s in submissions], named, shard))
    except ShardError as exc:
        raise SystemExit(f"error: {exc}") from None
    if shard is not None:
        print(f"shard {shard}: {len(chosen)} of {len(submissions)} learners", file=sys.stderr)
    return [s for s in submissions if s.learner in chosen]


def grade(args) -> int:
    from .submissions import find_submissions

    root = args.root.resolve()
    assignment, source = _source_notebook(root, args.assignment)
    try:
        key = course_secret.use(root)
    except course_secret.NoSecret as exc:
        print(f"error: {exc}\nNothing was graded.", file=sys.stderr)
        return 6
    # Shards and reruns must draw the same hidden cases: the fingerprint tells two secrets apart.
    print(f"hidden cases from the course secret {course_secret.fingerprint(key)}", file=sys.stderr)
    everyone = find_submissions(root, args.assignment, assignment.notebook)
    submissions = _selected(args, everyone)
    if not submissions:
        print(f"no submissions of {args.assignment} under {root / 'submitted'}" + (" in this shard" if everyone else ""))
        return 0 if everyone else 1  # a shard with no learner has nothing to do: not a failure of its batch job
    db_url = args.db or f"sqlite:///{root / 'gradebook.db'}"
    gradebook = _open_gradebook(db_url)  # before anything is graded: a wrong URL or a missing driver costs seconds
    if gradebook is None:
        return 4
    with gradebook:
        return _grade_into(gradebook, args, root, assignment, source, submissions)


def _grade_into(gradebook, args, root: Path, assignment, source, submissions) -> int:
    """The run itself, into a gradebook already checked: the sandbox, the self-check, then each submission."""
    from tqdm import tqdm

    from course.layout import REPO

    from . import reports
    from .engine import grade_all, self_check
    from .exchange import write_exchange_files
    from .gradebook import GradebookError
    from .sandbox import fallback_warning, sandbox_gaps, sandboxed, shared_by_process
    from .submissions import safe_name

    if not sandboxed():
        if not args.no_sandbox:
            print(f"error: {fallback_warning()}\nNothing was graded. To grade without the sandbox anyway (only code "
                  "you trust), pass --no-sandbox.", file=sys.stderr)
            return 2
        print("warning: " + fallback_warning(), file=sys.stderr)
    else:
        for gap in sandbox_gaps():
            print(f"warning: {gap}", file=sys.stderr)
    reason = shared_by_process()
    if reason and args.jobs > 1:
        # Graded side by side, one learner's busy processes would take the CPU its neighbours' calls need.
        print(f"warning: {reason}, so the CPU would be shared by process, not by submission: grading one submission "
              f"at a time instead of {args.jobs} (more machines or shards grade a class faster)", file=sys.stderr)
        args.jobs = 1
    limits = _limits(args)
    hidden = sorted({root, REPO, Path.home()})
    start = time.monotonic()
    # Grade the instructor's own solution first, through the same sandbox, limits and checks: a
    # set-up that cannot give it full marks would give every learner a wrong grade.
    print(f"checking the set-up: grading the instructor's solution of {args.assignment}", file=sys.stderr)
    problem = self_check(assignment, source, limits, hidden)
    if problem is not None:
        print(f"error: the set-up cannot grade {args.assignment}, so nothing was graded or written: {problem}",
              file=sys.stderr)
        return 3
    try:
        gradebook.prepare(assignment, source)
        pending, skipped = gradebook.to_grade(assignment, source, submissions, limits.notebook_mb << 20, args.regrade)
    except GradebookError as exc:
        print(f"error: {exc}\nNothing was graded.", file=sys.stderr)
        return 4
    if skipped:
        print(f"{skipped} submissions are graded already and unchanged since: skipped (--regrade grades them again)",
              file=sys.stderr)
    keys = {s.learner: key for s, key in pending}

    def keep(result) -> None:
        """Everything of one submission, as soon as it is graded: its grades first, in one transaction."""
        key = keys[result.learner]
        graded_at = gradebook.record(assignment, result, key)
        if safe_name(result.learner):
            reports.write_feedback(root, assignment, [result], graded_at)
            for folder in reports.write_autograded(root, assignment, [result], source, limits.notebook_mb << 20):
                write_exchange_files(folder, key.timestamp, key.secret)
            write_exchange_files(root / "feedback" / result.learner / assignment.name, key.timestamp, key.secret)

    results = []
    try:
        with tqdm(total=len(pending), desc=f"grading {args.assignment}", unit="submission", file=sys.stderr) as bar:
            results = grade_all(assignment, [s for s, _ in pending], limits, hidden, jobs=args.jobs, progress=bar,
                                on_result=keep)
    except (GradebookError, OSError, KeyboardInterrupt) as exc:
        reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"error: {exc}"
        print(f"{reason}\nThe submissions graded before this are kept in the gradebook {gradebook}; run the same "
              "command again to grade the rest.", file=sys.stderr)
        return 130 if isinstance(exc, KeyboardInterrupt) else 5
    csv_path = args.csv or root / "grades" / f"{args.assignment}.csv"
    recorded = [r.result for r in gradebook.records(args.assignment)]
    # The CSV holds the whole class as the gradebook has it (other shards and earlier runs too).
    reports.write_csv(csv_path, assignment, recorded)
    print(reports.summary(assignment, results, time.monotonic() - start))
    print(f"gradebook: {gradebook}\ngrades: {csv_path} ({len(recorded)} learners)\n"
          f"feedback: {root / 'feedback'}/<learner>/{args.assignment}/{assignment.notebook}.html")
    if args.db:
        print(NBGRADER_DB.format(url=gradebook))
    return 0


def export(args) -> int:
    from course.layout import LayoutError

    from .exports import export as export_all
    from .gradebook import GradebookError

    root = args.root.resolve()
    gradebook = _open_gradebook(args.db or f"sqlite:///{root / 'gradebook.db'}")
    if gradebook is None:
        return 4
    try:
        with gradebook:
            for line in export_all(root, gradebook, args.assignments):
                print(line)
    except (LayoutError, GradebookError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 4
    print(f"from the gradebook {gradebook}")
    if args.db:
        print(NBGRADER_DB.format(url=gradebook))
    return 0


def secret(args) -> int:
    root = args.root.resolve()
    try:
        path, made = course_secret.make(root)
    except (OSError, course_secret.NoSecret) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    fingerprint = course_secret.fingerprint(course_secret.read(path))
    print(f"{'made' if made else 'kept'} the course secret {path} (fingerprint {fingerprint}).\n"
          "The hidden cases are drawn from it: keep it out of everything learners receive, and give every grading "
          f"machine the same one (this file in the course directory, or its contents as {course_secret.ENV}).")
    return 0


def check(args) -> int:
    from .local import report

    return report(args.notebook, _limits(args))


def parser() -> argparse.ArgumentParser:
    from .sandbox import Limits

    parser = argparse.ArgumentParser(prog="python -m autograder", description="Grade the course's notebooks.")
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grade", help="grade every submission of an assignment (nbgrader's layout)")
    g.add_argument("assignment")
    g.add_argument("--jobs", type=int, default=2, help="submissions graded at once (default 2)")
    g.add_argument("--root", type=Path, default=Path.cwd(), help="the course directory (default: here)")
    g.add_argument("--db", help="gradebook database URL (default: sqlite:///<root>/gradebook.db)")
    g.add_argument("--csv", type=Path, help="where to write the grades (default: <root>/grades/<assignment>.csv)")
    g.add_argument("--learners", metavar="A,B,...", help="grade only these learners")
    g.add_argument("--shard", metavar="K/N",
                   help="grade only shard K (0 to N-1) of N, by a hash of the learner id; 'N' takes K from "
                        "JOB_COMPLETION_INDEX (Kubernetes) or SLURM_ARRAY_TASK_ID, 'env' takes both from Slurm")
    g.add_argument("--regrade", action="store_true",
                   help="grade every submission again, even those graded already and unchanged since")
    g.add_argument("--no-sandbox", action="store_true",
                   help="grade even without bubblewrap, with resource limits only (submitted code can then read "
                        "your files and reach the network); without this flag grading refuses to start")
    e = sub.add_parser("export", help="write the CSV, feedback pages, Gradescope and Canvas files from the gradebook")
    e.add_argument("assignments", nargs="+", metavar="assignment")
    e.add_argument("--root", type=Path, default=Path.cwd(), help="the course directory (default: here)")
    e.add_argument("--db", help="gradebook database URL (default: sqlite:///<root>/gradebook.db)")
    s = sub.add_parser("secret", help="make the course secret the hidden cases are drawn from, unless there is one")
    s.add_argument("--root", type=Path, default=Path.cwd(), help="the course directory (default: here)")
    c = sub.add_parser("check", help="run an exercise notebook's visible tests and show the score")
    c.add_argument("notebook", type=Path)
    defaults = Limits()
    for p in (g, c):
        for option, field, kind, what in LIMIT_OPTIONS:
            p.add_argument(option, dest=field, type=kind, default=getattr(defaults, field),
                           metavar=option.rsplit("-", 1)[-1].upper(), help=f"{what} (default {getattr(defaults, field):g})")
    return parser


def main(argv=None) -> int:
    arguments = parser()
    args = arguments.parse_args(argv)
    if args.command == "check" and not args.notebook.is_file():
        arguments.error(f"no such notebook: {args.notebook}")
    return {"grade": grade, "export": export, "secret": secret, "check": check}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
