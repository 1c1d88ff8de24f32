"""The website, built once per test run for every test that reads it (the `site` fixture).

The build runs what `python -m course.tools site` runs (the English edition, then the Chinese one) at
the root of a copy of the repository into which decoys have been planted where an instructor's class
data lives (submitted/, autograded/, feedback/, the gradebook) and where nbgrader's generated solution
notebooks sit. Nothing of
theirs may reach the site (tests/site/test_site.py checks that).
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import nbformat

from course.layout import AUTOGRADED, BUILD, EXECUTION_CACHE, FEEDBACK, GRADEBOOK, REPO, SUBMITTED, feedback_page, sources
from course.notebook_format import to_nbgrader, write_notebook
from course.tools import editions

DECOY = "DECOY-4b1d9e"
BUILD_LOG = "build-output.txt"


def project_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    return [f for f in listed if f and (REPO / f).is_file()]


def _decoy_notebook(label: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {DECOY} {label}"), nbformat.v4.new_code_cell(f"print('{DECOY}')")]
    return nb


def build_site(root: Path) -> Path:
    """Copy the project to `root`, plant the decoys, build; the path of the built HTML."""
    for name in project_files():
        dest = root / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest)
    for src in sources(root):  # what `python -m course.tools release` leaves in solutions/
        write_notebook(to_nbgrader(src), src.with_suffix(".ipynb"))
    for folder in (SUBMITTED, AUTOGRADED, FEEDBACK):
        write_notebook(_decoy_notebook(folder), root / folder / "mallory" / "ch02_attention" / "attention.ipynb")
    feedback_page(root, "mallory", "ch02_attention", "attention").write_text(f"<p>{DECOY}</p>")
    (root / GRADEBOOK).write_bytes(f"SQLite format 3\0{DECOY} gradebook".encode())
    (root / "notes.md").write_text(f"# {DECOY} a stray page outside the table of contents\n")
    # A contributor's `make site` leaves executed pages in the cache; a page whose code and inputs
    # are unchanged need not run again (the cache keeps the digest of those inputs beside it).
    cache = REPO / EXECUTION_CACHE
    if cache.is_dir():
        shutil.copytree(cache, root / EXECUTION_CACHE)
    try:
        site, printed = editions.build(root)
    except editions.EditionError as exc:
        raise AssertionError(str(exc)) from None
    # What the builds printed, beside the published site (tests read its warnings).
    (root / BUILD / BUILD_LOG).write_text(printed, encoding="utf-8")
    return site


def build_log(site: Path) -> str:
    """What the build of `site` (a `build_site` result) printed."""
    return (site.parent / BUILD_LOG).read_text(encoding="utf-8")
