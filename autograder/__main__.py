"""python -m autograder grade ASSIGNMENT | check NOTEBOOK"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def _limits(args):
    from .sandbox import Limits

    return Limits(call_seconds=args.call_timeout, submission_seconds=args.submission_timeout, memory_mb=args.memory_mb)


def _source_notebook(root: Path, assignment: str):
    """The instructor's notebook of an assignment: a percent script or an nbgrader .ipynb."""
    import nbformat

    from coursetools.notebooks import to_nbgrader

    folder = root / "solutions" / assignment
    scripts = sorted(p for p in folder.glob("*.py") if not p.name.startswith("_"))
    if scripts:
        return scripts[0].stem, to_nbgrader(scripts[0])
    notebooks = sorted(folder.glob("*.ipynb"))
    if notebooks:
        return notebooks[0].stem, nbformat.read(notebooks[0], as_version=4)
    raise SystemExit(f"no instructor notebook in {folder}: is {assignment!r} the assignment's name, and --root the course directory?")


def grade(args) -> int:
    import os

    from tqdm import tqdm

    from . import reports
    from .engine import Assignment, grade_all
    from .sandbox import REPO, fallback_warning, sandboxed
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
        print("warning: " + fallback_warning(), file=sys.stderr)
    hidden = sorted({root, REPO, Path.home()})
    start = time.monotonic()
    with tqdm(total=len(submissions), desc=f"grading {args.assignment}", unit="submission", file=sys.stderr) as bar:
        results = grade_all(assignment, submissions, _limits(args), hidden, jobs=args.jobs, progress=bar)
    db_url = args.db or f"sqlite:///{root / 'gradebook.db'}"
    reports.ensure_assignment(db_url, assignment, source)
    reports.write_gradebook(db_url, assignment, results)
    csv_path = args.csv or root / "grades" / f"{args.assignment}.csv"
    reports.write_csv(csv_path, assignment, results)
    reports.write_feedback(root, assignment, results)
    reports.write_autograded(root, assignment, results, source)
    print(reports.summary(assignment, results, time.monotonic() - start))
    print(f"gradebook: {db_url}\ngrades: {csv_path}\nfeedback: {root / 'feedback'}/<learner>/{args.assignment}/{notebook}.html")
    return 0


def check(args) -> int:
    from .local import report

    return report(args.notebook, _limits(args))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder", description="Grade the course's notebooks.")
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grade", help="grade every submission of an assignment (nbgrader's layout)")
    g.add_argument("assignment")
    g.add_argument("--jobs", type=int, default=2, help="submissions graded at once (default 2)")
    g.add_argument("--root", type=Path, default=Path.cwd(), help="the course directory (default: here)")
    g.add_argument("--db", help="gradebook database URL (default: sqlite:///<root>/gradebook.db)")
    g.add_argument("--csv", type=Path, help="where to write the grades (default: <root>/grades/<assignment>.csv)")
    c = sub.add_parser("check", help="run an exercise notebook's visible tests and show the score")
    c.add_argument("notebook", type=Path)
    for p in (g, c):
        p.add_argument("--call-timeout", type=float, default=10.0, help="seconds for one call of a graded function")
        p.add_argument("--submission-timeout", type=float, default=300.0, help="seconds for a whole submission")
        p.add_argument("--memory-mb", type=int, default=2048, help="memory limit of the learner's code")
    args = parser.parse_args(argv)
    if args.command == "check" and not args.notebook.is_file():
        parser.error(f"no such notebook: {args.notebook}")
    return grade(args) if args.command == "grade" else check(args)


if __name__ == "__main__":
    sys.exit(main())
