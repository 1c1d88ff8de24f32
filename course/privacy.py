"""The course directory is the instructor's alone, on a machine learners share.

It holds what no learner may read: the instructor's notebooks and the course's reference solutions,
the course secret the hidden cases are drawn from, every learner's submission, autograded copy,
feedback page and grade, and the gradebook. A clone made with the usual umask (022) lets every user
of the machine read all of it. So the directory itself is made the instructor's only (mode 700: no
one else may enter it, whatever the files inside allow), and so is each of those parts, in case the
directory is opened again later; the grader makes its files with umask 077 too (:func:`private_files`). ``make setup``
and every ``grade`` and ``export`` do this and say what they changed.

Learners reach the course's code through an environment of their own (the course's wheel installed
where they can read it, or JupyterHub), never through this directory; see the README.
"""
from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

from course.layout import CLASS_DATA, COURSE_SECRET, REFERENCE, SOLUTIONS, ZH_SOLUTIONS

#: the parts of the course directory that only the instructor may read (the instructor notebooks' Chinese
#: twins hold the same solutions)
INSTRUCTOR_ONLY = (SOLUTIONS, ZH_SOLUTIONS, REFERENCE, COURSE_SECRET, *CLASS_DATA)


def open_to_others(path: Path) -> bool:
    """Whether users other than the owner may read, write or enter ``path``."""
    return bool(path.stat().st_mode & 0o077)


@contextlib.contextmanager
def private_files() -> Iterator[None]:
    """What the process makes meanwhile is its owner's alone (umask 077); the umask before is restored after,
    so that a caller in the same process (a test, a notebook) keeps its own."""
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


def make_private(root: Path) -> list[str]:
    """Make the course directory and its instructor-only parts the owner's alone; return what was changed, in
    words. Symbolic links are left as they are: their own mode means nothing."""
    changed = []
    for path in (root, *(root / name for name in INSTRUCTOR_ONLY)):
        if path.is_symlink() or not path.exists() or not open_to_others(path):
            continue
        mode = stat.S_IMODE(path.stat().st_mode)
        path.chmod(mode & 0o700)
        changed.append(f"{path} (mode {mode:o} -> {mode & 0o700:o})")
    return changed


def open_homes(learners: list[str]) -> list[str]:
    """The learners, among ``learners``, who are users of this machine with a home directory other users may
    enter and read. nbgrader keeps each submission's secret there (in its cache), and the secret names that
    learner's feedback in the exchange: anyone who reads it reads the feedback."""
    import pwd

    found = []
    for learner in learners:
        try:
            home = Path(pwd.getpwnam(learner).pw_dir)
            if home.is_dir() and home.stat().st_mode & 0o005 == 0o005:
                found.append(learner)
        except (KeyError, OSError):
            continue  # not a user of this machine (JupyterHub, an LMS export): nothing here to check
    return found


def homes_said(learners: list[str]) -> str:
    """A warning about :func:`open_homes`, or ""."""
    if not learners:
        return ""
    named = ", ".join(learners[:5]) + (f" and {len(learners) - 5} more" if len(learners) > 5 else "")
    return (f"warning: the home directories of {named} are open to every user of this machine: nbgrader keeps "
            "each submission's secret there, which names that learner's feedback in the exchange, so others can "
            "read it. Make them private (chmod 700 /home/LEARNER; DIR_MODE=0700 in /etc/adduser.conf, or "
            "HOME_MODE 0700 in /etc/login.defs for useradd, for new accounts).")


def said(changed: list[str]) -> str:
    """What :func:`make_private` changed, as a sentence for the instructor; "" for nothing."""
    if not changed:
        return ""
    return ("made the course's files readable by you only, as other users of this machine must not read "
            "solutions, submissions, feedback or grades: " + "; ".join(changed))


def main(argv: list[str] | None = None) -> int:
    """``python -m course.privacy [COURSE_DIR]``: make the course directory private (``make setup`` runs it)."""
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0] if args else ".").resolve()
    message = said(make_private(root))
    print(message or f"the course directory {root} is readable by you only")
    return 0


if __name__ == "__main__":
    sys.exit(main())
