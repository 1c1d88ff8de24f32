"""`python -m course.tools new-chapter`: a chapter that the release, the checks and the tables pick up at once.

The command runs in a copy of the repository (only what it reads), and the course's own tests
then run there on the new chapter.
"""
from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest
import yaml

from course.layout import REPO, Chapter, LayoutError, chapters
from course.notebook_format import graded_cells, secret_lines, to_nbgrader
from course.tools import release, tables
from course.tools.scaffold import MARKER, ScaffoldError, add_to_toc, plan, unfinished
from tests.conftest import CHAPTERS

# The first chapter number the course does not use, so that the test never collides with a real one.
NUMBER = min(set(range(1, 100)) - {c.number for c in CHAPTERS})
NAME, STEM, TITLE = f"ch{NUMBER:02d}_scaffolded", "scaffolded", "Scaffolded example"
NEEDED = ("autograder/", "course/", "harness/", "solutions/", "reference/", "exercises/", "book/", "tests/", "transformer/",
          "_toc.yml", "_config.yml", "README.md", "nbgrader_config.py")
ENV = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))


def _copy(root: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    for name in listed:
        if name.startswith(NEEDED) and (REPO / name).is_file():
            dest = root / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest)


def _test_file(name: str) -> str:
    """Where the suite keeps one of its test files, relative to the root (tests/ mirrors the packages)."""
    (found,) = (REPO / "tests").rglob(name)
    return str(found.relative_to(REPO))


def _passed(done: subprocess.CompletedProcess) -> int:
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return int(done.stdout.strip().splitlines()[-1].split(" passed")[0].split()[-1])


def _run(root: Path, *args: str) -> subprocess.CompletedProcess:
    # Run from the copy's root, so that its own packages are the ones imported.
    return subprocess.run([sys.executable, *args], cwd=root, env=ENV, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("course")
    _copy(root)
    done = _run(root, "-m", "course.tools", "new-chapter", NAME, "--title", TITLE)
    assert done.returncode == 0, done.stdout + done.stderr
    return root


@pytest.fixture(scope="module")
def chapter(course) -> Chapter:
    return Chapter(course, NAME, STEM)


def test_every_part_of_the_chapter_is_written(course, chapter):
    for path in (chapter.source, chapter.checks, chapter.mistakes, chapter.page, chapter.release, chapter.reference_path):
        assert path.is_file(), f"{path.relative_to(course)} was not written"
    assert [(c.assignment, c.stem) for c in chapters(course) if c.number == NUMBER] == [(NAME, STEM)]
    page = jupytext.read(chapter.page)
    assert page.cells[0].source.startswith(f"# {TITLE}")
    assert sum(c.cell_type == "code" for c in page.cells) >= 3, "a setup cell and two figures"
    published = chapter.page.read_text(encoding="utf-8")
    assert not [s for s in secret_lines(to_nbgrader(chapter.source)) if s in published]


def test_the_toc_lists_the_page_in_chapter_order(course, chapter):
    toc = yaml.safe_load((course / "_toc.yml").read_text(encoding="utf-8"))
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    assert chapter.toc_entry in files
    numbers = [int(Path(f).stem[2:4]) for f in files if Path(f).stem[:2] == "ch" and Path(f).stem[2:4].isdigit()]
    assert numbers == sorted(numbers)


def test_the_release_picks_it_up(course, chapter):
    released = nbformat.read(chapter.release, as_version=4)
    stub = graded_cells(released, "solution")
    assert [c.metadata["nbgrader"]["grade_id"] for c in stub] == ["masked_mean"]
    assert "raise NotImplementedError()" in stub[0].source and "BEGIN SOLUTION" not in chapter.release.read_text()
    # What the command left is what a fresh release of the copy makes.
    stage = release._stage(course)
    try:
        release.build(stage, [NAME])
        fresh = stage / "exercises" / NAME / f"{STEM}.ipynb"
        assert filecmp.cmp(fresh, chapter.release, shallow=False)
        assert filecmp.cmp(stage / "reference" / f"{STEM}.py", chapter.reference_path, shallow=False)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def test_the_course_tests_pass_on_the_example(course):
    """Solution passes, released stub fails, every catalogued mistake is caught, at least five of them."""
    done = _run(course, "-m", "pytest", "-q", "-p", "no:cacheprovider", _test_file("test_checks.py"), "-k", STEM)
    assert _passed(done) >= 2 + 1 + 1 + 1 + 5 + 1, done.stdout[-2000:]


def test_the_example_check_uses_the_base_class_seams_and_states_its_rules(course):
    """The example check locates wrong values (stages), explains an exception (hints), declares the rules
    the base class probes, and lists the rules its instructions state, each held by a visible case."""
    shown = _run(course, "-c", f"from autograder.checks.{STEM} import CHECKS, STATED; from autograder.framework import Check; "
                 "c = CHECKS[0]; print(c.function in STATED, c.stages is not Check.stages, bool(c.hints), c.trained_through)")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert shown.stdout.split() == ["True"] * 4
    done = _run(course, "-m", "pytest", "-q", "-p", "no:cacheprovider", _test_file("test_stated_rules.py"),
                "-k", f"{STEM} or lists_its_stated_rules or rules_for_a_function")
    assert _passed(done) >= 4 + 2, done.stdout[-2000:]


def test_the_whole_class_gradings_pick_it_up(course):
    """The determinism tests list the chapters from the layout, and the chapter's catalogue names the
    edit that spoils its solution; a class for the new chapter can be made from it, and the whole-class
    test asks for the chapter's kind of check."""
    done = _run(course, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", _test_file("test_determinism.py"))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert f"test_judging_leaves_the_global_generator_alone[{STEM}]" in done.stdout, done.stdout[-2000:]
    made = _run(course, "-c", f"from tests.grader.test_determinism import _class; print(sorted(_class({STEM!r})))")
    assert made.returncode == 0, made.stdout + made.stderr
    assert made.stdout.strip() == "['correct', 'wrong']"
    # The whole-class grading takes one chapter per kind of check: the new one waits to be placed.
    unplaced = _run(course, "-m", "pytest", "-q", "-p", "no:cacheprovider", _test_file("test_determinism.py"),
                    "-k", "has_its_kind")
    assert unplaced.returncode == 1 and "place each numbered chapter in KINDS" in unplaced.stdout, unplaced.stdout[-2000:]


def test_the_page_checks_and_the_glossary_pick_it_up(course, chapter):
    """The page checks and the glossary's read the pages from _toc.yml, where new-chapter listed it:
    the scaffolded page is checked like every other page (its code's width), and the glossary's
    rules hold with it among the pages."""
    pages = _run(course, "-c", "from tests.site.test_glossary import _pages; print(sorted(_pages()))")
    assert pages.returncode == 0 and repr(chapter.toc_entry) in pages.stdout, pages.stdout + pages.stderr
    files = [_test_file(name) for name in ("test_code_width.py", "test_glossary.py")]
    done = _run(course, "-m", "pytest", "-v", "-p", "no:cacheprovider", *files, "-k", f"{STEM} or glossary")
    ran = {line.split("::")[1].split(" ")[0] for line in done.stdout.splitlines() if " PASSED" in line}
    assert {f"test_no_visible_code_line_is_wider_than_the_column[{chapter.toc_entry}]",
            "test_every_term_role_names_a_glossary_term"} <= ran, done.stdout[-3000:]
    assert _passed(done) == len(ran)


def test_the_page_s_figures_have_captions_alt_text_and_the_site_s_resolution(chapter):
    """The site's figure rules (tests/site/test_figures.py), applied to the scaffolded page."""
    from tests.site.test_figures import DPI, DRAWS, problems

    drawn = [cell for cell in jupytext.read(chapter.page).cells if cell.cell_type == "code" and DRAWS.search(cell.source)]
    assert len(drawn) == 2
    assert not [p for cell in drawn for p in problems(chapter.toc_entry, cell)]
    assert "page_setup()" in chapter.page.read_text(encoding="utf-8") and DPI == 92


def test_the_page_has_its_chinese_twin_to_be_written(course, chapter):
    """The twin has the page's code cells (the Chinese build needs it); its prose is the scaffold's until written."""
    from course.tools import editions

    assert chapter.zh_page.read_text(encoding="utf-8") == chapter.page.read_text(encoding="utf-8")
    assert editions.twin_problems(course, chapter.toc_entry) == []


def test_the_parts_registries_pick_it_up(course):
    """--parts mine's registry lists every chapter of the layout, the example among them with no part of
    any command (it adds none by design), and the attention path keeps the course's one attention class;
    the test of the roles holds with the new chapter, untouched in transformer/."""
    shown = _run(course, "-c", "from transformer.parts import registry; from transformer import fused as a; "
                 f"print(registry()[{STEM!r}], a.MultiHeadAttention.__module__)")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert shown.stdout.split() == ["{}", "reference.multihead"]
    done = _run(course, "-m", "pytest", "-q", "-p", "no:cacheprovider", _test_file("test_parts.py"), "-k", "roles or registries")
    assert _passed(done) == 2


def test_the_chapter_tables_pick_it_up(course, chapter):
    readme = (course / "README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines() if line.startswith(f"| {NUMBER} |"))
    assert "| ✓ | `masked_mean` |" in row, row
    intro = (course / "book" / "intro.md").read_text(encoding="utf-8")
    assert f"| {NUMBER} | [{TITLE}]({NAME}.md) |" in intro
    rendered = tables.render(course)
    assert rendered["README.md"] == readme and rendered["book/intro.md"] == intro


def test_the_example_is_flagged_until_it_is_replaced(course, chapter):
    left = "\n".join(unfinished(course))
    for path in (chapter.source, chapter.checks, chapter.mistakes, chapter.page, chapter.zh_page):
        assert str(path.relative_to(course)) in left


def test_no_chapter_of_the_course_is_left_as_scaffolded():
    left = unfinished(REPO)
    assert not left, "\n".join(left) + f"\nreplace the example and every {MARKER} line"


@pytest.mark.parametrize("name, message", [
    ("chapter7", "not a chapter name"),
    ("ch7_topic", "not a chapter name"),
    ("ch07_Topic", "not a chapter name"),
    (f"ch{NUMBER:02d}_class", "a Python keyword"),
    (f"{CHAPTERS[0].assignment[:4]}_other", "exists already"),
    (f"ch{NUMBER:02d}_{CHAPTERS[0].stem}", "exists already"),
])
def test_a_bad_name_is_refused_before_anything_is_written(name, message):
    with pytest.raises(ScaffoldError, match=message):
        plan(name, REPO)
    assert issubclass(ScaffoldError, LayoutError)


def test_the_command_says_why_it_refuses(course):
    done = _run(course, "-m", "course.tools", "new-chapter", NAME)
    assert done.returncode == 2 and "exists already" in done.stderr


def test_toc_entries_go_before_the_first_later_chapter():
    toc = "parts:\n  - chapters:\n      - file: book/ch02_a\n      - file: book/ch05_b\n      - file: book/extra\n"
    assert add_to_toc(toc, Chapter(REPO, "ch03_c", "c")).splitlines()[3] == "      - file: book/ch03_c"
    assert add_to_toc(toc, Chapter(REPO, "ch09_d", "d")).splitlines()[-1] == "      - file: book/ch09_d"
