"""Python source as training text: the standard library of the interpreter that runs the course.

Nothing is downloaded: the text is the ``.py`` files under ``sysconfig.get_paths()["stdlib"]``.

* **Which files.** Every ``.py`` file below that folder, except those inside a folder named
  ``test``, ``tests`` or ``idle_test`` (the test suites: ``test/``, ``lib2to3/tests/``,
  ``idlelib/idle_test/``, ``unittest/test/``, ...) or ``site-packages`` / ``dist-packages``
  (installed packages, not the standard library). Files are read as UTF-8; a file that is not
  valid UTF-8 is skipped and counted.
* **Which split.** A file is held out when the SHA-256 of its path relative to that folder
  (``/``-separated, e.g. ``json/decoder.py``) read as a big-endian integer is divisible by 20:
  about 5 % of the files, the same ones on every machine that has the same Python version.
* **The texts.** Each split is its files' contents joined in the order of their paths, nothing
  added between them.

On CPython 3.11.7 this gives 734 files (39 of them held out), 11,461,458 training and 655,775
held-out characters.
"""
from __future__ import annotations

import hashlib
import platform
import sysconfig
from dataclasses import dataclass
from pathlib import Path

#: folders whose files are never used: test suites and installed packages
EXCLUDED_FOLDERS = frozenset({"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"})
#: a file is held out when the hash of its relative path is divisible by this
HOLD_OUT_ONE_IN = 20


class StdlibError(RuntimeError):
    """The standard library's sources cannot be read."""


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def is_held_out(relative: str) -> bool:
    """Whether the file at ``relative`` (a ``/``-separated path below the stdlib folder) is held out."""
    return int.from_bytes(hashlib.sha256(relative.encode("utf-8")).digest(), "big") % HOLD_OUT_ONE_IN == 0


def source_files(root: Path) -> list[str]:
    """The relative paths of the files used, sorted."""
    if not root.is_dir():
        raise StdlibError(f"{root} is not a folder: this interpreter's standard library sources are missing")
    found = []
    for path in root.rglob("*.py"):
        relative = path.relative_to(root)
        if EXCLUDED_FOLDERS.isdisjoint(relative.parts[:-1]) and path.is_file():
            found.append(relative.as_posix())
    return sorted(found)


@dataclass(frozen=True)
class StdlibText:
    """The two splits' texts and where they came from."""

    python: str  # the interpreter's version, e.g. "3.11.7"
    root: str
    train_files: tuple[str, ...]
    heldout_files: tuple[str, ...]
    train: str
    heldout: str
    skipped: tuple[str, ...] = ()  # files that are not valid UTF-8

    def summary(self) -> dict[str, object]:
        """What a run records about its data."""
        return {
            "python": self.python, "train_files": len(self.train_files), "heldout_files": len(self.heldout_files),
            "train_characters": len(self.train), "heldout_characters": len(self.heldout),
            "train_bytes": len(self.train.encode("utf-8")), "heldout_bytes": len(self.heldout.encode("utf-8")),
            "skipped_files": len(self.skipped),
        }


def load(root: Path | None = None) -> StdlibText:
    """Read and split the standard library's sources (a second or two)."""
    root = stdlib_root() if root is None else Path(root)
    texts: dict[bool, list[str]] = {False: [], True: []}
    names: dict[bool, list[str]] = {False: [], True: []}
    skipped = []
    for relative in source_files(root):
        try:
            text = (root / relative).read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            skipped.append(relative)
            continue
        held = is_held_out(relative)
        texts[held].append(text)
        names[held].append(relative)
    if not names[False] or not names[True]:
        raise StdlibError(f"{root} holds {len(names[False])} training and {len(names[True])} held-out source "
                          "files: both splits need at least one")
    return StdlibText(
        python=platform.python_version(), root=str(root), train_files=tuple(names[False]),
        heldout_files=tuple(names[True]), train="".join(texts[False]), heldout="".join(texts[True]),
        skipped=tuple(skipped),
    )
