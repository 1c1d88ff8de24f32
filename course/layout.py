"""Where every part of the course lives, and which chapters there are.

A chapter is an assignment folder holding exactly one instructor notebook:

    solutions/<assignment>/<stem>.py      the instructor notebook (jupytext percent script), the source
    exercises/<assignment>/<stem>.ipynb   its learner release, generated
    reference/<stem>.py                   its importable reference implementation, generated
    autograder/checks/<stem>.py           the checks its test cells call, "<stem>.<function>" (or a
                                          package <stem>/ of one module per topic)
    tests/mistakes/<stem>.py              the wrong implementations those checks must catch
    book/<assignment>.md                  its page on the website, listed in _toc.yml

The notebook's stem names the reference module and the checks, so two assignments may not share
a stem, and an assignment has one notebook: both are refused here rather than letting one file
silently replace or hide another.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: this package's own folder: an installed course (pip install) keeps its data and checkpoints here
PACKAGE = Path(__file__).resolve().parent
#: installed from a wheel or a git URL, not a clone: only a clone has the instructor notebooks
INSTALLED = not (REPO / "solutions").is_dir()
#: the CMUdict word lists and the shipped trained models: at the root of a clone, inside the package when installed
DATA = (PACKAGE if INSTALLED else REPO) / "data"
CHECKPOINTS = (PACKAGE if INSTALLED else REPO) / "checkpoints"


def runs() -> Path:
    """Where a training run's folder goes by default: runs/ in a clone, ./runs where an installed course is used."""
    return Path.cwd() / "runs" if INSTALLED else REPO / "runs"


def learner_notebooks() -> Path:
    """Where --parts mine looks for the learner's notebooks by default: the release in a clone, else here."""
    return Path.cwd() if INSTALLED else REPO / "exercises"


def learner_notebook(stem: str, folder: Path) -> Path:
    """A learner's notebook of one chapter: in the release's layout (<assignment>/<stem>.ipynb), or
    beside the others as downloaded from the site. None or several is a LayoutError."""
    found = sorted(Path(folder).glob(f"*/{stem}.ipynb")) + sorted(Path(folder).glob(f"{stem}.ipynb"))
    if not found:
        raise LayoutError(f"no notebook {stem}.ipynb under {folder}")
    if len(found) > 1:
        raise LayoutError(f"several notebooks named {stem}.ipynb under {folder}: {', '.join(map(str, found))}")
    return found[0]


SOLUTIONS = "solutions"
EXERCISES = "exercises"
REFERENCE = "reference"
BOOK = "book"
CHECKS = "autograder/checks"
MISTAKES = "tests/mistakes"
TOC = "_toc.yml"
GLOSSARY = f"{BOOK}/glossary"
NBGRADER_CONFIG = "nbgrader_config.py"
#: the instructor's secret from which hidden cases are drawn, a file in the course directory (autograder.course_secret)
COURSE_SECRET = "course_secret"

# A class's data, in nbgrader's layout (nbgrader_config.py names the same folders), under the course
# directory a grading command is given: never committed, never published.
#: submitted/<learner>/<assignment>/<notebook>.ipynb, what a learner handed in
SUBMITTED = "submitted"
#: autograded/<learner>/<assignment>/<notebook>.ipynb, nbgrader's graded copy that formgrader shows
AUTOGRADED = "autograded"
#: feedback/<learner>/<assignment>/<notebook>.html, each learner's page
FEEDBACK = "feedback"
#: grades/<assignment>.csv, grades/gradescope/<assignment>/, grades/canvas.csv
GRADES = "grades"
#: nbgrader's gradebook (SQLite) when no database URL is given
GRADEBOOK = "gradebook.db"
#: the files `nbgrader submit` leaves beside a notebook, which its exchange reads back to file the feedback
TIMESTAMP = "timestamp.txt"
SUBMISSION_SECRET = "submission_secret.txt"
#: everything grading a class reads or writes: what the website and the release must never hold
CLASS_DATA = (SUBMITTED, AUTOGRADED, FEEDBACK, GRADES, GRADEBOOK)


def submission_folder(root: Path, learner: str, assignment: str) -> Path:
    return Path(root) / SUBMITTED / learner / assignment


def autograded_folder(root: Path, learner: str, assignment: str) -> Path:
    return Path(root) / AUTOGRADED / learner / assignment


def feedback_page(root: Path, learner: str, assignment: str, notebook: str) -> Path:
    return Path(root) / FEEDBACK / learner / assignment / f"{notebook}.html"


def grades_csv(root: Path, assignment: str) -> Path:
    return Path(root) / GRADES / f"{assignment}.csv"


def gradescope_folder(root: Path, assignment: str) -> Path:
    """Gradescope's results, one <learner>/results.json each."""
    return Path(root) / GRADES / "gradescope" / assignment


def canvas_csv(root: Path) -> Path:
    """Canvas's gradebook import, every assignment of the class."""
    return Path(root) / GRADES / "canvas.csv"


def gradebook_url(root: Path) -> str:
    """The database URL of the course directory's own gradebook."""
    return f"sqlite:///{Path(root) / GRADEBOOK}"


#: what `make site` builds, with the execution cache a later build (and the site's tests) reuses
BUILD = "_build"
EXECUTION_CACHE = f"{BUILD}/.jupyter_cache"
#: the Chinese edition: zh/book/<page>.md is the twin of book/<page>.md (the same code cells), built
#: from zh/ (its own Sphinx project, the English table of contents) into _build/html/zh/
ZH = "zh"
ZH_BOOK = f"{ZH}/{BOOK}"
#: the instructor notebooks' Chinese twins, and the Chinese learner release made from them
ZH_SOLUTIONS = f"{ZH}/{SOLUTIONS}"
ZH_EXERCISES = f"{ZH}/{EXERCISES}"
#: where the Chinese edition's build keeps its doctrees and its output before it is placed in the site
ZH_BUILD = f"{BUILD}/zh-edition"


def zh_twin(root: Path, page: str) -> Path:
    """The Chinese twin of a page of the table of contents (book/ch02_attention -> zh/book/ch02_attention.md)."""
    return Path(root) / ZH / f"{page}.md"

#: the release generator, the chapter scaffold, the chapter tables and the website's extension
TOOLS = PACKAGE / "tools"
#: files the website's extension copies into every build
SITE_STATIC = TOOLS / "site_static"

#: chNN_topic: the number orders the chapters, the topic is a Python-friendly word or two
CHAPTER_NAME = re.compile(r"^ch(\d{2})_([a-z][a-z0-9]*(?:_[a-z0-9]+)*)$")


class LayoutError(ValueError):
    """The course's folders do not follow the layout above; the message says which file and why."""


@dataclass(frozen=True)
class Chapter:
    """One assignment and everything that belongs to it."""

    root: Path
    assignment: str
    stem: str

    @property
    def number(self) -> int | None:
        match = CHAPTER_NAME.match(self.assignment)
        return int(match.group(1)) if match else None

    @property
    def source(self) -> Path:
        return self.root / SOLUTIONS / self.assignment / f"{self.stem}.py"

    @property
    def nbgrader_source(self) -> Path:
        """nbgrader's copy of the source, which the release writes beside it."""
        return self.source.with_suffix(".ipynb")

    @property
    def release(self) -> Path:
        return self.root / EXERCISES / self.assignment / f"{self.stem}.ipynb"

    @property
    def reference_module(self) -> str:
        return reference_module(self.stem)

    @property
    def reference_path(self) -> Path:
        return self.root / REFERENCE / f"{self.stem}.py"

    @property
    def checks(self) -> Path:
        """The module of the checks, or the __init__.py of their package once split by topic."""
        package = self.root / CHECKS / self.stem / "__init__.py"
        return package if package.is_file() else self.root / CHECKS / f"{self.stem}.py"

    @property
    def mistakes(self) -> Path:
        return self.root / MISTAKES / f"{self.stem}.py"

    @property
    def page(self) -> Path:
        return self.root / BOOK / f"{self.assignment}.md"

    @property
    def toc_entry(self) -> str:
        """How _toc.yml names the page: its path from the root, without the suffix."""
        return f"{BOOK}/{self.assignment}"

    @property
    def zh_page(self) -> Path:
        """The page's Chinese twin."""
        return zh_twin(self.root, self.toc_entry)

    @property
    def zh_source(self) -> Path:
        """The instructor notebook's Chinese twin: its markdown in Chinese, its code cells the same."""
        return self.root / ZH_SOLUTIONS / self.assignment / f"{self.stem}.py"

    @property
    def zh_release(self) -> Path:
        """The Chinese learner release: the release with the twin's markdown, graded by the same checks."""
        return self.root / ZH_EXERCISES / self.assignment / f"{self.stem}.ipynb"


def reference_module(stem: str) -> str:
    """The import name of a notebook's reference implementation."""
    return f"{REFERENCE}.{stem}"


def _visible(path: Path) -> bool:
    # Editors and tools leave .ipynb_checkpoints/, __pycache__/ and _drafts behind: not course files.
    return not path.name.startswith((".", "_"))


def _notebooks_in(folder: Path, pattern: str) -> list[Path]:
    return sorted(p for p in folder.glob(pattern) if p.is_file() and _visible(p))


def _single(folder: Path, found: list[Path]) -> Path:
    if len(found) > 1:
        names = ", ".join(p.name for p in found)
        raise LayoutError(
            f"{folder} holds {len(found)} instructor notebooks ({names}); an assignment has exactly one. "
            "Move the others to assignments of their own, or prefix a draft's name with '_'."
        )
    return found[0]


def chapters(root: Path = REPO) -> list[Chapter]:
    """Every assignment with its instructor notebook, in the order of their folder names."""
    base = root / SOLUTIONS
    if not base.is_dir():
        return []
    found: list[Chapter] = []
    by_stem: dict[str, Chapter] = {}
    for folder in sorted(p for p in base.iterdir() if p.is_dir() and _visible(p)):
        scripts = _notebooks_in(folder, "*.py")
        if not scripts:
            continue
        chapter = Chapter(root, folder.name, _single(folder, scripts).stem)
        if chapter.stem in by_stem:
            other = by_stem[chapter.stem]
            raise LayoutError(
                f"{other.source.relative_to(root)} and {chapter.source.relative_to(root)} share the name "
                f"{chapter.stem!r}; the reference module reference/{chapter.stem}.py and the checks "
                f"autograder/checks/{chapter.stem}.py are named after the notebook, so each notebook needs its own name."
            )
        by_stem[chapter.stem] = chapter
        found.append(chapter)
    return found


def chapter(assignment: str, root: Path = REPO) -> Chapter:
    known = chapters(root)
    for c in known:
        if c.assignment == assignment:
            return c
    raise LayoutError(
        f"no instructor notebook for {assignment!r} under {root / SOLUTIONS}; known: {[c.assignment for c in known]}"
    )


def sources(root: Path = REPO) -> list[Path]:
    """Every instructor notebook: solutions/<assignment>/<stem>.py."""
    return [c.source for c in chapters(root)]


def assignments(root: Path = REPO) -> list[str]:
    return [c.assignment for c in chapters(root)]


def instructor_notebook(assignment: str, root: Path = REPO) -> Path:
    """The instructor's notebook of one assignment: its percent script, or else an nbgrader .ipynb.

    A course directory other than this repository may keep its sources as nbgrader notebooks;
    here the .ipynb beside a percent script is generated from it, so the script wins.
    """
    folder = root / SOLUTIONS / assignment
    for pattern in ("*.py", "*.ipynb"):
        found = _notebooks_in(folder, pattern)
        if found:
            return _single(folder, found)
    raise LayoutError(
        f"no instructor notebook in {folder}: is {assignment!r} the assignment's name, and {root} the course directory?"
    )


def toc_pages(root: Path = REPO) -> list[str]:
    """Every page _toc.yml lists, as written there (book/ch02_attention), in reading order: the root first."""
    import yaml  # the instructor's tools have it; a learner's installed course never reads the table of contents

    found: dict[str, None] = {}

    def walk(node) -> None:
        if isinstance(node, dict):
            for key in sorted(node, key=lambda k: k != "root"):
                if key in ("file", "root") and isinstance(node[key], str):
                    found[node[key].removesuffix(".md")] = None
                else:
                    walk(node[key])
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(yaml.safe_load((root / TOC).read_text(encoding="utf-8")))
    return list(found)


def markdown_pages(root: Path = REPO) -> list[str]:
    """The pages of :func:`toc_pages` written as MyST markdown (``<page>.md``), in reading order: the ones the
    pages' own rules read as text."""
    return [p for p in toc_pages(root) if (root / f"{p}.md").is_file()]
