"""Finding and reading submitted notebooks without trusting anything about them.

nbgrader's layout: ``submitted/<learner>/<assignment>/<notebook>.ipynb``. A learner's folder
name becomes an id in the gradebook and a path for the feedback, so only plain names are
accepted; links are never followed; a file too large, not JSON, not a notebook, or of an old
format is reported in a sentence. Nothing here writes to the submission.
"""
from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course.layout import SUBMITTED

from .messages import tr

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,63}$")


class Unreadable(Exception):
    """A submission that cannot be graded, with the reason in words."""


@dataclass
class Submission:
    learner: str
    path: Path | None
    notes: list[str] = field(default_factory=list)
    rejected: str | None = None


def safe_name(name: str) -> bool:
    return bool(SAFE_NAME.match(name)) and ".." not in name


def find_submissions(root: Path, assignment: str, notebook: str) -> list[Submission]:
    """Every learner's submission of ``assignment``, sorted by learner."""
    base = root / SUBMITTED
    if not base.is_dir():
        return []
    found = []
    for folder in sorted(base.iterdir(), key=lambda p: p.name):
        learner = folder.name
        if folder.is_symlink() or not folder.is_dir():
            if folder.is_symlink():
                found.append(Submission(learner, None, rejected=tr("the learner's folder is a link; links are not followed")))
            continue
        if not safe_name(learner):
            found.append(Submission(learner, None, rejected=tr("the learner folder name {name} is not a plain name").format(
                name=repr(learner))))
            continue
        work = folder / assignment
        if work.is_symlink():
            found.append(Submission(learner, None, rejected=tr("the assignment folder is a link; links are not followed")))
            continue
        if not work.is_dir():
            continue  # this learner handed in other assignments only
        found.append(_pick_notebook(learner, work, notebook))
    return found


def _pick_notebook(learner: str, work: Path, notebook: str) -> Submission:
    expected = work / f"{notebook}.ipynb"
    if expected.is_symlink():
        return Submission(learner, None,
                          rejected=tr("{notebook}.ipynb is a link; links are not followed").format(notebook=notebook))
    if expected.is_file():
        return Submission(learner, expected)
    candidates = [p for p in sorted(work.glob("*.ipynb")) if p.is_file() and not p.is_symlink()]
    if len(candidates) == 1:
        return Submission(
            learner, candidates[0],
            notes=[tr("graded {graded} in place of {notebook}.ipynb: keep the notebook's name when you hand it in").format(
                graded=repr(candidates[0].name), notebook=notebook)],
        )
    if not candidates:
        return Submission(learner, None, rejected=tr("no {notebook}.ipynb in the submission").format(notebook=notebook))
    names = ", ".join(repr(p.name) for p in candidates)
    return Submission(learner, None, rejected=tr(
        "no {notebook}.ipynb, and several other notebooks ({names}): which one is it?").format(notebook=notebook, names=names))


def _without_magics(source: str) -> tuple[str, bool]:
    """IPython's %magics and !shell lines mean nothing to plain Python: comment them out."""
    lines, changed = [], False
    for line in source.splitlines():
        if line.lstrip().startswith(("%", "!")):
            lines.append("# " + line)
            changed = True
        else:
            lines.append(line)
    return "\n".join(lines), changed


def code_cells(path: Path, max_bytes: int, tests: Collection[str],
               max_code_bytes: int | None = None) -> tuple[list[str], list[str]]:
    """The sources of the cells to run (the cells of the graded ``tests`` left out), and notes for the
    learner. A notebook over ``max_bytes``, or whose code is over ``max_code_bytes``, is Unreadable."""
    nb, notes = read_submission(path, max_bytes)
    sources, cell_notes = notebook_cells(nb, tests)
    if max_code_bytes is not None:
        check_code_size(sources, max_code_bytes)
    return sources, notes + cell_notes


def check_code_size(sources: list[str], max_bytes: int) -> None:
    # The grader reads every line of code before any of it runs; a bound on the code bounds that
    # reading, whatever the code's shape.
    size = sum(len(source.encode()) for source in sources)
    if size > max_bytes:
        raise Unreadable(tr(
            "the notebook's code is {size} KB, over the {limit} KB the grader reads: "
            "keep long data (pasted output, large literals) out of code cells and hand it in again"
        ).format(size=f"{size / 1024:.0f}", limit=f"{max_bytes / 1024:.0f}"))


def read_submission(path: Path, max_bytes: int):
    """A submitted notebook, as nbformat 4, and notes for the learner; :class:`Unreadable` says why not."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise Unreadable(tr("the notebook cannot be read: {error}").format(error=exc.strerror)) from None
    if size == 0:
        raise Unreadable(tr("the notebook file is empty"))
    if size > max_bytes:
        raise Unreadable(tr(
            "the notebook is {size} MB, over the {limit} MB limit: "
            "clear its outputs (Kernel, Restart & Clear Output) and hand it in again"
        ).format(size=f"{size / 2**20:.0f}", limit=f"{max_bytes / 2**20:.0f}"))
    raw = path.read_bytes()
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise Unreadable(tr("the notebook is not valid JSON ({error}); it may have been truncated or edited by hand")
                         .format(error=exc)) from None
    if not isinstance(data, dict) or "cells" not in data and "worksheets" not in data:
        raise Unreadable(tr("the file is JSON but not a notebook"))
    notes = []
    major = data.get("nbformat")
    if major != 4:
        if major == 3:
            notes.append(tr("the notebook is in the old nbformat 3; it was converted to read it"))
        else:
            raise Unreadable(tr("the notebook format version {version} is not supported").format(version=repr(major)))
    try:
        nb = nbformat.reads(raw.decode("utf-8"), as_version=4)
    except Exception as exc:  # nbformat raises several types for a broken structure
        raise Unreadable(tr("the notebook's structure is broken: {error}").format(error=exc)) from None
    return nb, notes


def cell_name(index: int, source: str) -> str:
    """How a learner finds a cell again: its position and its first line."""
    first = next((line.strip() for line in source.splitlines() if line.strip()), "")
    return tr("code cell {number} (`{first_line}`)").format(number=index + 1,
                                                           first_line=first[:60] + ("…" if len(first) > 60 else ""))


def notebook_cells(nb, tests: Collection[str]) -> tuple[list[str], list[str]]:
    """The sources of a notebook's code cells to run, and notes for the learner.

    A cell is left out when its nbgrader grade_id is one of ``tests``, the instructor's graded
    test cells, which the grader runs in their place. What a cell calls decides nothing: a
    learner's answer cell that also runs a check, as the test cell below it does, is theirs and
    runs (``check`` does nothing in the sandbox).
    """
    if isinstance(tests, str):
        raise TypeError("tests is a collection of grade ids, not one string")  # english: a programming error
    tests = frozenset(tests)
    sources, notes, magics = [], [], False
    for cell in nb.get("cells", []):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list):
            source = "".join(str(s) for s in source)
        if not isinstance(source, str):
            continue
        metadata = cell.get("metadata")
        meta = metadata.get("nbgrader") if isinstance(metadata, dict) else None
        if isinstance(meta, dict) and isinstance(meta.get("grade_id"), str) and meta["grade_id"] in tests:
            continue
        source, had_magics = _without_magics(source)
        if had_magics and not magics:
            magics = True
            notes.append(tr("lines starting with % or ! (IPython magics, shell commands) were not run"))
        sources.append(source)
    return sources, notes
