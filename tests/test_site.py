"""The website: built from the table of contents alone, executed, and free of anything secret.

The build runs `jupyter-book build .` at the root of a copy of the repository into which
decoys have been planted where an instructor's class data lives (submitted/, autograded/,
feedback/, the gradebook) and where nbgrader's generated solution notebooks sit. Nothing of
theirs may reach the site.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

from course.layout import sources
from course.notebook_format import secret_lines, to_nbgrader, write_notebook
from tests.conftest import REPO

DECOY = "DECOY-4b1d9e"


def _project_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    return [f for f in listed if f and (REPO / f).is_file()]


def _decoy_notebook(label: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {DECOY} {label}"), nbformat.v4.new_code_cell(f"print('{DECOY}')")]
    return nb


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("site")
    for name in _project_files():
        dest = root / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest)
    for src in sources(root):  # what `python -m coursetools release` leaves in solutions/
        write_notebook(to_nbgrader(src), src.with_suffix(".ipynb"))
    for folder in ("submitted", "autograded", "feedback"):
        write_notebook(_decoy_notebook(folder), root / folder / "mallory" / "ch02_attention" / "attention.ipynb")
    (root / "feedback" / "mallory" / "ch02_attention" / "attention.html").write_text(f"<p>{DECOY}</p>")
    (root / "gradebook.db").write_bytes(f"SQLite format 3\0{DECOY} gradebook".encode())
    (root / "notes.md").write_text(f"# {DECOY} a stray page outside the table of contents\n")
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    done = subprocess.run(
        [str(Path(sys.executable).parent / "jupyter-book"), "build", "."],
        cwd=root, env=env, capture_output=True, text=True, timeout=1500,
    )
    assert done.returncode == 0, f"jupyter-book build failed:\n{done.stdout[-6000:]}\n{done.stderr[-4000:]}"
    assert "Traceback" not in done.stdout, done.stdout[-6000:]
    return root / "_build" / "html"


def _toc_pages() -> list[str]:
    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        pages += [c["file"] for c in part["chapters"]]
    return pages


def test_every_page_of_the_table_of_contents_is_built(site):
    assert (site / "index.html").is_file()
    for page in _toc_pages():
        assert (site / f"{page}.html").is_file(), f"{page} was not built"


def test_only_the_table_of_contents_is_built(site):
    built = {p.relative_to(site).with_suffix("").as_posix() for p in site.rglob("*.html") if "_static" not in p.parts}
    stray = built - set(_toc_pages()) - {"index", "genindex", "search"}
    assert not stray, f"pages outside the table of contents were built: {sorted(stray)}"


def test_chapters_have_figures_made_by_code(site):
    for page in _toc_pages()[1:]:
        html = (site / f"{page}.html").read_text(encoding="utf-8")
        assert html.count("<img") >= 2, f"{page} has no figures"
        assert "Traceback" not in html, f"{page} shows a traceback"


def test_nothing_secret_is_published(site):
    secrets = set()
    for src in sources(REPO):
        secrets |= secret_lines(to_nbgrader(src))
    assert secrets
    for path in site.rglob("*"):
        if not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        where = path.relative_to(site)
        assert DECOY not in text, f"{where} contains class data or a stray page"
        for marker in ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS"):
            assert marker not in text, f"{where} contains {marker}"
        leaked = [s for s in secrets if s in text]
        assert not leaked, f"{where} contains solution or hidden-test code: {leaked[:3]}"
    for folder in ("solutions", "exercises", "submitted", "autograded", "feedback", "tests", "autograder", "reference"):
        assert not (site / folder).exists(), f"{folder}/ was published"


def test_cells_marked_remove_input_keep_their_code_off_the_site(site):
    import jupytext

    hidden = set()
    for page in _toc_pages():
        path = REPO / f"{page}.md"
        for cell in jupytext.read(path).cells:
            if cell.cell_type == "code" and "remove-input" in cell.metadata.get("tags", []):
                hidden |= {line.strip() for line in cell.source.splitlines() if len(line.strip()) >= 24}
    for path in site.rglob("*"):
        if path.is_file():
            text = path.read_bytes().decode("utf-8", errors="replace")
            leaked = [line for line in hidden if line in text]
            assert not leaked, f"{path.relative_to(site)} publishes code of a remove-input cell: {leaked[:2]}"


def test_every_internal_link_and_image_resolves(site):
    import re
    from urllib.parse import unquote, urlparse

    broken = []
    for page in site.rglob("*.html"):
        if "_static" in page.parts:
            continue
        html = page.read_text(encoding="utf-8")
        for target in re.findall(r'(?:href|src)="([^"]+)"', html):
            url = urlparse(target)
            if url.scheme or url.netloc or target.startswith(("#", "mailto:", "javascript:", "data:")):
                continue
            path = (page.parent / unquote(url.path)).resolve() if url.path else page
            if not path.exists():
                broken.append(f"{page.relative_to(site)} -> {target}")
    assert not broken, "broken links or images:\n" + "\n".join(broken[:20])
