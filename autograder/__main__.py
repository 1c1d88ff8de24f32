"""python -m autograder grade ASSIGNMENT | check NOTEBOOK

``grade`` first grades the instructor's own solution through the same pipeline and stops, writing
nothing, when it does not get full marks; it refuses to run without bubblewrap unless given
``--no-sandbox``. Every limit option's default is the matching field of :class:`Limits`.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

#: the command-line options that set a limit: (option, field of Limits, type, what it limits)
LIMIT_OPTIONS = (
    ("--call-timeout", "call_seconds", float, "seconds for one call of a graded function"),
    ("--cell-timeout", "cell_seconds", float, "seconds for one cell of a submission"),
    ("--submission-timeout", "submission_seconds", float, "seconds for a whole submission"),
    ("--memory-mb", "memory_mb", int, "memory limit of each process of the learner's code"),
    ("--processes", "processes", int, "processes and threads the learner's code may run at once (sandbox only)"),
    ("--scratch-mb", "scratch_mb", int, "size of the learner's /tmp (sandbox only)"),
    ("--notebook-mb", "notebook_mb", int, "largest notebook that is graded"),
)


def _limits(args):
    from .sandbox import Limits

    return Limits(**{field: getattr(args, field) for _, field, _, _ in LIMIT_OPTIONS})


def _source_notebook(root: Path, assignment: str):
    """The instructor's notebook of an assignment (its name and its cells, with nbgrader's metadata)."""
    from course.layout import LayoutError, instructor_notebook
    from course.notebook_format import read_instructor_notebook

    try:
        path = instructor_notebook(assignment, root)
    except LayoutError as exc:
        raise SystemExit(str(exc)) from None
    return path.stem, read_instructor_notebook(path)


def grade(args) -> int:
    import os

    from tqdm import tqdm

    from course.layout import REPO

    from . import reports
    from .engine import Assignment, grade_all, self_check
    from .sandbox import fallback_warning, sandbox_gaps, sandboxed
    from .submissions import find_submissions

    # nbgrader's gradebook runs the `alembic` program that sits beside this Python.
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    root = args.root.resolve()
    notebook, source = _source_notebook(root, args.assignment)
    assignment = Assignment.from_notebook(args.assignment, notebook, source)
    submissions = find_submissions(root, args.assignment, notebook)
    if not submissions:
        print(f"no submissions of {args.assignment} under {root / 'submitted'}")
        return 1
    if not sandboxed():
        if not args.no_sandbox:
            print(f"error: {fallback_warning()}\nNothing was graded. To grade without the sandbox anyway (only code "
                  "you trust), pass --no-sandbox.", file=sys.stderr)
            return 2
        print("warning: " + fallback_warning(), file=sys.stderr)
    else:
        for gap in sandbox_gaps():
            print(f"warning: {gap}", file=sys.stderr)
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
    with tqdm(total=len(submissions), desc=f"grading {args.assignment}", unit="submission", file=sys.stderr) as bar:
        results = grade_all(assignment, submissions, limits, hidden, jobs=args.jobs, progress=bar)
    db_url = args.db or f"sqlite:///{root / 'gradebook.db'}"
    reports.ensure_assignment(db_url, assignment, source)
    reports.write_gradebook(db_url, assignment, results)
    csv_path = args.csv or root / "grades" / f"{args.assignment}.csv"
    reports.write_csv(csv_path, assignment, results)
    reports.write_feedback(root, assignment, results)
    reports.write_autograded(root, assignment, results, source, limits.notebook_mb << 20)
    print(reports.summary(assignment, results, time.monotonic() - start))
    print(f"gradebook: {db_url}\ngrades: {csv_path}\nfeedback: {root / 'feedback'}/<learner>/{args.assignment}/{notebook}.html")
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
    g.add_argument("--no-sandbox", action="store_true",
                   help="grade even without bubblewrap, with resource limits only (submitted code can then read "
                        "your files and reach the network); without this flag grading refuses to start")
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
    return grade(args) if args.command == "grade" else check(args)


if __name__ == "__main__":
    sys.exit(main())
