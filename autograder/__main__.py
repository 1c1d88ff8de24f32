"""python -m autograder grade ASSIGNMENT | export ASSIGNMENT... | status ASSIGNMENT... | secret | check NOTEBOOK

This module reads the command line and turns how a command ended into an exit status; nothing
else. Grading a class, exporting its grades and making the course secret are in
:mod:`autograder.run`, checking a learner's own notebook in :mod:`autograder.check_notebook`.
Every limit option's default is the matching field of :class:`Limits`.
"""
from __future__ import annotations

import argparse
import sys
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
    ("--source-kb", "source_kb", int, "most code (all code cells together) that is graded"),
)


def _limits(args):
    from .sandbox import Limits

    return Limits(**{field: getattr(args, field) for _, field, _, _ in LIMIT_OPTIONS})


def exit_status(outcome) -> int:
    """The exit status of each way a run can end: 0 when it did its work, the rest tell a batch system why not."""
    from .run import Outcome

    return {Outcome.DONE: 0, Outcome.NOTHING_TO_GRADE: 1, Outcome.REFUSED: 1, Outcome.NO_SANDBOX: 2,
            Outcome.SET_UP_FAILS: 3, Outcome.GRADEBOOK: 4, Outcome.STOPPED: 5, Outcome.NO_SECRET: 6,
            Outcome.INCOMPLETE: 7, Outcome.INTERRUPTED: 130}[outcome]


def grade(args) -> int:
    from .run import grade

    return exit_status(grade(args.root.resolve(), args.assignment, _limits(args), jobs=args.jobs, db=args.db,
                             csv=args.csv, learners=args.learners, shard=args.shard, regrade=args.regrade,
                             sandbox_required=not args.no_sandbox, clear_by_hand=args.clear_by_hand))


def export(args) -> int:
    from .run import export

    return exit_status(export(args.root.resolve(), args.assignments, args.db, partial=args.partial))


def status(args) -> int:
    from .run import export

    return exit_status(export(args.root.resolve(), args.assignments, args.db, write=False))


def secret(args) -> int:
    from .run import make_secret

    return exit_status(make_secret(args.root.resolve()))


def check(args) -> int:
    from .check_notebook import report

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
    g.add_argument("--clear-by-hand", action="store_true",
                   help="forget what was given by hand in formgrader (scores, extra credit, comments) for the "
                        "submissions this run grades; by default it is kept")
    g.add_argument("--no-sandbox", action="store_true",
                   help="grade even without bubblewrap, with resource limits only (submitted code can then read "
                        "your files and reach the network); without this flag grading refuses to start")
    e = sub.add_parser("export", help="write the CSV, feedback pages, Gradescope and Canvas files from the gradebook")
    e.add_argument("assignments", nargs="+", metavar="assignment")
    e.add_argument("--root", type=Path, default=Path.cwd(), help="the course directory (default: here)")
    e.add_argument("--db", help="gradebook database URL (default: sqlite:///<root>/gradebook.db)")
    e.add_argument("--partial", action="store_true",
                   help="write the files even though some submissions are not graded (they are left out)")
    t = sub.add_parser("status", help="say, from the gradebook, which learners are graded, not graded or failed")
    t.add_argument("assignments", nargs="+", metavar="assignment")
    t.add_argument("--root", type=Path, default=Path.cwd(), help="the course directory (default: here)")
    t.add_argument("--db", help="gradebook database URL (default: sqlite:///<root>/gradebook.db)")
    s = sub.add_parser("secret", help="make the course secret the hidden cases are drawn from, unless there is one")
    s.add_argument("--root", type=Path, default=Path.cwd(), help="the course directory (default: here)")
    c = sub.add_parser("check", help="run an exercise notebook's visible tests and show the score")
    c.add_argument("notebook", type=Path)
    for p in (g, c, e):  # export writes the feedback pages again, around the messages grading wrote
        p.add_argument("--lang", metavar="LANG", help="the language of what learners read (the checks' messages, the "
                                                       "feedback page): en, or zh for Chinese (default: as COURSE_LANG "
                                                       "or LANG say; see autograder/messages.py)")
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
    if getattr(args, "lang", None):
        from .messages import LANGUAGES, language_code, set_language

        if args.lang.split("_")[0].split("-")[0].lower() != "en" and language_code(args.lang) is None:
            arguments.error(f"no messages in {args.lang!r}: the checks speak en and {', '.join(LANGUAGES)}")
        set_language(args.lang)
    return {"grade": grade, "export": export, "status": status, "secret": secret, "check": check}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
