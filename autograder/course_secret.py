"""The course secret: what makes the hidden cases unknowable to a learner.

Visible cases are drawn from seeds derived from each check's id, so anyone holding the course can
rebuild them, and may. Hidden cases are drawn from an HMAC of the same parts keyed with a secret
the instructor holds: a learner with the whole release, the installed course and everything the
sandbox shows can build none of them, yet the instructor's grades stay deterministic. The whole
class shares one set of hidden cases, so that every learner is judged on the same inputs; a new
secret for a new term means nothing learned from an earlier class applies.

The secret is 32 random bytes, written in hexadecimal to ``course_secret`` in the course directory
(made by ``python -m course.tools release`` or ``python -m autograder secret``; never committed,
never in the wheel, the release or the site), or given in the environment as ``COURSE_SECRET``
(a batch system's secret store). The sandboxed worker gets neither: its environment is an
allow-list and the course directory is not mounted.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from course.layout import COURSE_SECRET, INSTALLED, REPO

ENV = "COURSE_SECRET"


class NoSecret(RuntimeError):
    """Hidden cases were asked for where the course secret is not."""


def _parse(text: str, where: str) -> bytes:
    try:
        key = bytes.fromhex(text.strip())
    except ValueError:
        raise NoSecret(f"{where} does not hold a course secret (64 hexadecimal digits)") from None
    if len(key) < 16:
        raise NoSecret(f"{where} holds a course secret of {len(key)} bytes; at least 16 are needed")
    return key


def _places(root: Path | None) -> list[Path]:
    """Where the secret file is looked for: the course directory named, else here and, in a clone, its root."""
    if root is not None:
        return [root / COURSE_SECRET]
    return [Path.cwd() / COURSE_SECRET] + ([] if INSTALLED else [REPO / COURSE_SECRET])


_chosen: bytes | None = None


def use(root: Path) -> bytes:
    """Fix the secret for this process to the course directory ``root``'s (or the environment's)."""
    global _chosen
    _chosen = load(root)
    return _chosen


def load(root: Path | None = None) -> bytes:
    """The course secret: ``COURSE_SECRET`` if set, else the file in the course directory."""
    if os.environ.get(ENV):
        return _parse(os.environ[ENV], f"the environment variable {ENV}")
    for path in _places(root):
        if path.is_file():
            return read(path)
    folders = " or ".join(str(p.parent) for p in _places(root))
    raise NoSecret(
        f"the hidden cases are drawn from the course secret, and there is none here: no {ENV} in the "
        f"environment and no {COURSE_SECRET} file in {folders}. The instructor makes one with "
        "`python -m autograder secret` (or `python -m course.tools release`) and keeps it out of "
        "everything learners receive; a learner's notebook runs the visible cases only.")


def read(path: Path) -> bytes:
    return _parse(path.read_text(errors="replace"), str(path))


def current() -> bytes:
    """The secret hidden cases are keyed with (framework.stable_seed): the one ``use`` fixed, else ``load``'s."""
    return _chosen if _chosen is not None else load()


def fingerprint(key: bytes | None = None) -> str:
    """A short name of the secret that reveals nothing of it: it tells two secrets apart in a record."""
    return hmac.new(key if key is not None else current(), b"fingerprint", hashlib.sha256).hexdigest()[:16]


def make(root: Path) -> tuple[Path, bool]:
    """Write a new secret to ``root``/course_secret unless one is there; (its path, whether it is new).

    Only the owner may read it; made with O_EXCL, so two runs at once on a shared folder keep one."""
    path = root / COURSE_SECRET
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        read(path)
        return path, False
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    return path, True
