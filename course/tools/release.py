"""Make everything that is generated from solutions/: nbgrader notebooks, exercises/, reference/, and the
Chinese release zh/exercises/ from the instructor notebooks' Chinese twins in zh/solutions/.

    python -m course.tools release           remake them in the repository
    python -m course.tools release --check   fail if what is committed is stale
"""
from __future__ import annotations

import difflib
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jupytext
import nbformat
from tqdm import tqdm

from course.layout import EXERCISES, REFERENCE, REPO, ZH_EXERCISES, chapters
from course.notebook_format import cell_role, strip_solution_markers, to_nbgrader, write_notebook

REFERENCE_HEADER = '''"""Reference implementation: {title}

Generated from solutions/{assignment}/{stem}.py by `python -m course.tools release`.
Do not edit: change the instructor notebook and regenerate.
"""
'''

REFERENCE_INIT = '''"""The course's reference implementations, one module per chapter notebook.

Generated from the instructor notebooks in solutions/ by `python -m course.tools release`;
later chapters and the capstone import these instead of keeping copies.
"""
'''


COURSE_PACKAGE = r'''# The course's Python package holds the checks this notebook's test cells call.
try:
    import autograder  # noqa: F401
except ModuleNotFoundError:
    raise ModuleNotFoundError(
        "This notebook needs the course's package in the environment its kernel runs in. Install it "
        "(in a cell: %pip install ...), then restart the kernel:\n"
        {install}
        "or, in a clone of the repository, run: make setup"
    ) from None'''
# How the first cell tells a learner to install the course: from its public repository once
# _config.yml names one, until then from the wheel an instructor hands out.
INSTALL_FROM_GIT = '"    pip install \\"attention-course @ git+{url}\\"\\n"'
INSTALL_FROM_WHEEL = '"    pip install attention_course-<version>-py3-none-any.whl   (the wheel your instructor hands out)\\n"'


def repository_url(root: Path) -> str:
    """`repository: url:` of the course's _config.yml (this repository's, for a partial copy without one);
    empty while the course has no public address."""
    import yaml

    config = root / "_config.yml" if (root / "_config.yml").is_file() else REPO / "_config.yml"
    return (yaml.safe_load(config.read_text(encoding="utf-8")).get("repository") or {}).get("url") or ""


def course_package_cell(url: str) -> dict:
    """The first code cell of every released notebook: it finds the course's package or says how to install it."""
    return {"cell_type": "code", "id": "course-package", "execution_count": None, "outputs": [],
            "metadata": {"nbgrader": {"grade": False, "solution": False, "locked": True, "task": False,
                                      "grade_id": "course-package", "schema_version": 3}},
            "source": COURSE_PACKAGE.format(install=INSTALL_FROM_GIT.format(url=url) if url else INSTALL_FROM_WHEEL)}


def reference_source(source: Path) -> str:
    """The importable module of a notebook: its exported and solution cells, nothing else.

    Tests and demonstrations stay behind, so importing a reference module runs no test.
    """
    nb = jupytext.read(source)
    title = next((c.source.splitlines()[0].lstrip("# ").strip() for c in nb.cells if c.cell_type == "markdown"), source.stem)
    parts = [REFERENCE_HEADER.format(title=title, assignment=source.parent.name, stem=source.stem)]
    for cell in nb.cells:
        if cell_role(cell) in ("export", "solution"):
            parts.append(strip_solution_markers(cell.source).strip("\n") + "\n")
    return "\n\n".join(parts)


def _nbgrader(root: Path, *args: str) -> None:
    env = dict(os.environ)
    # nbgrader runs `alembic` as a program: the environment's bin/ must be on PATH.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args], cwd=root, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


def nbgrader_source(root: Path, chapter) -> nbformat.NotebookNode:
    """The instructor notebook in nbgrader's format, its first code cell the course-package cell."""
    nb = to_nbgrader(chapter.source)
    first_code = next(i for i, x in enumerate(nb.cells) if x.cell_type == "code")
    nb.cells.insert(first_code, nbformat.from_dict(course_package_cell(repository_url(root))))
    return nb


def write_nbgrader_sources(root: Path, only: list[str] | None = None, stale_only: bool = True) -> list[Path]:
    """nbgrader's .ipynb of each instructor notebook (generated, never committed), written where it is
    missing or older than its percent script; nbgrader_config.py runs this before every nbgrader command,
    so that `nbgrader generate_assignment` works on a fresh clone."""
    written = []
    for c in chapters(root):
        if only is not None and c.assignment not in only:
            continue
        target = c.nbgrader_source
        if stale_only and target.exists() and target.stat().st_mtime >= c.source.stat().st_mtime:
            continue
        write_notebook(nbgrader_source(root, c), target)
        written.append(target)
    return written


def build(root: Path, only: list[str] | None = None) -> None:
    """Generate nbgrader notebooks, the release and the reference package under `root`.

    ``only`` limits the work to some assignments (the others are left as they are).
    """
    every = chapters(root)  # refuses a shared notebook name or a second notebook before anything is written
    known = [c.assignment for c in every]
    unknown = set(only or ()) - set(known)
    if unknown:
        raise SystemExit(f"no instructor notebooks for {sorted(unknown)}; known: {known}")
    chosen = [c for c in every if only is None or c.assignment in only]
    write_nbgrader_sources(root, [c.assignment for c in chosen], stale_only=False)
    for assignment in tqdm(
        [c.assignment for c in chosen], desc="generating the release", unit="assignment", disable=len(chosen) < 2
    ):
        _nbgrader(root, "generate_assignment", assignment, "--force")
        for nb_path in sorted((root / EXERCISES / assignment).glob("*.ipynb")):
            # One canonical serialisation, so that a regenerated file is byte-identical.
            write_notebook(nbformat.read(nb_path, as_version=4), nb_path)
    ref = root / REFERENCE
    ref.mkdir(exist_ok=True)
    (ref / "__init__.py").write_text(REFERENCE_INIT, encoding="utf-8")
    if only is None:  # a full build also drops modules whose notebook is gone
        keep = {c.reference_path.name for c in every} | {"__init__.py"}
        for old in ref.glob("*.py"):
            if old.name not in keep:
                old.unlink()
    for c in chosen:
        c.reference_path.write_text(reference_source(c.source), encoding="utf-8")
        if c.zh_source.is_file():
            write_notebook(zh_release(c), c.zh_release)


def zh_release(chapter) -> nbformat.NotebookNode:
    """The Chinese release: the English release, whose cells nbgrader made, with the twin's markdown in
    place of each markdown cell (its checksum computed again); its code, grade ids and tests are the English
    release's, so the same checks grade it."""
    from nbgrader.utils import compute_checksum

    from .editions import EditionError, notebook_twin_problems

    problems = notebook_twin_problems(chapter)
    if problems:
        raise EditionError("\n".join(problems))
    release_nb = nbformat.read(chapter.release, as_version=4)
    chinese = [c.source for c in jupytext.read(chapter.zh_source).cells if c.cell_type == "markdown"]
    places = [i for i, c in enumerate(release_nb.cells) if c.cell_type == "markdown"]
    if len(places) != len(chinese):
        raise EditionError(f"{chapter.release} has {len(places)} markdown cells where its twin has {len(chinese)}")
    for index, text in zip(places, chinese):
        cell = release_nb.cells[index]
        cell.source = text
        if "checksum" in cell.metadata.get("nbgrader", {}):
            cell.metadata["nbgrader"]["checksum"] = compute_checksum(cell)
    return release_nb


def _stage(root: Path) -> Path:
    """A scratch course directory holding only what the build reads."""
    tmp = Path(tempfile.mkdtemp(prefix="course-release-"))
    shutil.copy(root / "nbgrader_config.py", tmp / "nbgrader_config.py")
    shutil.copy(root / "_config.yml", tmp / "_config.yml")  # the repository the notebooks install from
    for chapter in chapters(root):
        for src in (chapter.source, chapter.zh_source):  # the instructor notebook and its Chinese twin
            if src.is_file():
                dest = tmp / src.relative_to(root)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(src, dest)
    return tmp


def _tree(path: Path) -> dict[str, Path]:
    if not path.exists():
        return {}
    return {
        str(p.relative_to(path)): p
        for p in path.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and ".ipynb_checkpoints" not in p.parts
    }


def fresh_build(root: Path = REPO) -> Path:
    """A scratch course directory with a fresh release of `root`'s instructor notebooks (and the
    gradebook nbgrader fills while generating it); the caller removes it."""
    tmp = _stage(root)
    try:
        build(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def differences(fresh_root: Path, root: Path = REPO) -> list[str]:
    """What differs between the generated files committed in `root` and those of a fresh build."""
    problems = []
    for folder in (EXERCISES, REFERENCE, ZH_EXERCISES):
        fresh, committed = _tree(fresh_root / folder), _tree(root / folder)
        for name in sorted(fresh.keys() | committed.keys()):
            where = f"{folder}/{name}"
            if name not in committed:
                problems.append(f"{where} is missing")
            elif name not in fresh:
                problems.append(f"{where} is not generated from any instructor notebook")
            elif not filecmp.cmp(fresh[name], committed[name], shallow=False):
                diff = difflib.unified_diff(
                    committed[name].read_text(errors="replace").splitlines(),
                    fresh[name].read_text(errors="replace").splitlines(),
                    "committed", "regenerated", lineterm="", n=1,
                )
                problems.append(f"{where} is stale:\n" + "\n".join(list(diff)[:40]))
    return problems


def stale(root: Path = REPO) -> list[str]:
    """What differs between the committed generated files and a fresh build: empty when current."""
    tmp = fresh_build(root)
    try:
        return differences(tmp, root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def release(root: Path = REPO, only: list[str] | None = None) -> None:
    build(root, only)
