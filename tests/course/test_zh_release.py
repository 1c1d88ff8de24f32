"""The Chinese release: every instructor notebook has a Chinese twin (zh/solutions/) with its code cells,
and zh/exercises/ holds the release with the twins' markdown, graded by the same checks
(course/tools/release.py). `tests/course/test_release.py` keeps zh/exercises/ current with the rest."""
from __future__ import annotations

import re
import subprocess

import jupytext
import nbformat
import pytest

from course.layout import REPO, chapters
from course.notebook_format import complete, secret_lines, to_nbgrader, write_notebook
from course.tools.editions import EditionError, notebook_twin_problems, sync_notebooks
from course.tools.release import zh_release
from tests.conftest import PYTHON

CHAPTERS = {c.assignment: c for c in chapters(REPO)}
CHINESE = re.compile(r"[\u4e00-\u9fff]")


def _chinese_share(text: str) -> float:
    prose = re.sub(r"\$[^$]*\$|`[^`]*`|\([^)]*\.ipynb\)", "", text)
    letters = len(CHINESE.findall(prose)) + len(re.findall(r"[A-Za-z]", prose))
    return len(CHINESE.findall(prose)) / max(letters, 1)


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_every_instructor_notebook_has_a_chinese_twin_with_its_code(assignment):
    chapter = CHAPTERS[assignment]
    assert not notebook_twin_problems(chapter), notebook_twin_problems(chapter)
    markdown = [c.source for c in jupytext.read(chapter.zh_source).cells if c.cell_type == "markdown"]
    for text in markdown:
        assert _chinese_share(text) > 0.3, f"{chapter.zh_source.name}: a markdown cell is not in Chinese: {text[:80]!r}"


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_the_chinese_release_has_the_english_releases_cells_and_its_own_words(assignment):
    chapter = CHAPTERS[assignment]
    english, chinese = (nbformat.read(p, as_version=4) for p in (chapter.release, chapter.zh_release))
    assert [c.cell_type for c in english.cells] == [c.cell_type for c in chinese.cells]
    for en, zh in zip(english.cells, chinese.cells):
        if en.cell_type == "code":
            assert (en.source, en.metadata) == (zh.source, zh.metadata), "a code cell or its grade id differs"
        else:
            assert en.metadata["nbgrader"]["grade_id"] == zh.metadata["nbgrader"]["grade_id"]
    shown = "\n".join(c.source for c in chinese.cells if c.cell_type == "markdown")
    assert f".venv/bin/python -m autograder check zh/exercises/{assignment}/" in shown
    # its words are the twin's, and the twin's markdown gives away no line of a solution or a hidden test
    leaked = [line for line in secret_lines(to_nbgrader(chapter.source)) if line in shown]
    assert not leaked, f"the Chinese release's markdown holds solution lines: {leaked[:3]}"


def test_a_twin_that_does_not_pair_with_its_notebook_is_refused(tmp_path):
    chapter = CHAPTERS["ch06_positional"]
    twin = jupytext.read(chapter.zh_source)
    code = next(c for c in twin.cells if c.cell_type == "code")
    code.source += "\nprint('only in Chinese')"  # the first code cell: counted among the code cells
    root = tmp_path / "course"
    for path in (chapter.source, chapter.release):
        target = root / path.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    (root / chapter.zh_source.relative_to(REPO)).parent.mkdir(parents=True, exist_ok=True)
    jupytext.write(twin, root / chapter.zh_source.relative_to(REPO), fmt="py:percent")
    in_copy = [c for c in chapters(root) if c.assignment == chapter.assignment][0]
    assert notebook_twin_problems(in_copy) == [f"{in_copy.zh_source.relative_to(root)}: code cell 1 differs "
                                               "from the English notebook's"]
    with pytest.raises(EditionError, match="code cell 1 differs"):
        zh_release(in_copy)
    # zh-sync puts the English code back, and leaves the twin's Chinese as it was
    markdown = [c.source for c in twin.cells if c.cell_type == "markdown"]
    assert sync_notebooks(root) == [in_copy.zh_source]
    assert notebook_twin_problems(in_copy) == [] and sync_notebooks(root) == []
    assert [c.source for c in jupytext.read(in_copy.zh_source).cells if c.cell_type == "markdown"] == markdown


def test_a_solved_chinese_notebook_gets_full_marks_and_the_stub_none(tmp_path, source_nb):
    chapter = CHAPTERS["ch06_positional"]
    released = nbformat.read(chapter.zh_release, as_version=4)
    stub = subprocess.run([PYTHON, "-m", "autograder", "check", str(chapter.zh_release)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert stub.returncode == 1 and "not implemented yet" in stub.stdout, stub.stdout + stub.stderr
    solved = tmp_path / chapter.zh_release.name
    write_notebook(complete(released, source_nb(chapter.stem)), solved)
    done = subprocess.run([PYTHON, "-m", "autograder", "check", str(solved)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "FAIL" not in done.stdout, done.stdout + done.stderr
