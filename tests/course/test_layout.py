"""One definition of the course's layout and notebook format, used by the release and the grader alike.

`course.layout` finds the chapters and refuses an ambiguous course; `course.notebook_format`
decides which cells are tests and what they check. These tests prove that every consumer reads
the same answer from them, and that the chapter tables of README.md and the site agree with it.
"""
from __future__ import annotations

import ast
import shutil
from pathlib import Path

import nbformat
import pytest

from autograder.assignment import Assignment
from autograder.submissions import code_cells, notebook_cells
from course.layout import (
    AUTOGRADED,
    CLASS_DATA,
    FEEDBACK,
    GRADEBOOK,
    NBGRADER_CONFIG,
    REPO,
    SUBMITTED,
    TOOLS,
    LayoutError,
    chapters,
    instructor_notebook,
    sources,
    toc_pages,
)
from course.notebook_format import NotebookSourceError, calls_checks, check_calls, graded_cells, is_graded, to_nbgrader
from course.tools import release, tables
from tests.conftest import CHAPTERS, NOTEBOOKS

ONE_CHAPTER = REPO / "solutions" / "ch02_attention" / "attention.py"


def _solutions(root: Path, files: dict[str, Path]) -> Path:
    """A course directory whose solutions/ holds ``files`` (path inside solutions/ -> source)."""
    for name, source in files.items():
        dest = root / "solutions" / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, dest)
    shutil.copy(REPO / "nbgrader_config.py", root)
    return root


# ----------------------------------------------------------------------------------------
# the layout refuses what would make one file replace or hide another
# ----------------------------------------------------------------------------------------


def test_two_assignments_with_one_notebook_name_are_refused(tmp_path):
    root = _solutions(tmp_path, {"ch02_attention/attention.py": ONE_CHAPTER, "ch09_again/attention.py": ONE_CHAPTER})
    with pytest.raises(LayoutError, match=r"share the name 'attention'.*reference/attention\.py"):
        chapters(root)


def test_a_second_notebook_in_an_assignment_is_refused(tmp_path):
    root = _solutions(tmp_path, {"ch02_attention/attention.py": ONE_CHAPTER, "ch02_attention/extra.py": ONE_CHAPTER})
    with pytest.raises(LayoutError, match=r"holds 2 instructor notebooks \(attention\.py, extra\.py\)"):
        chapters(root)
    with pytest.raises(LayoutError, match="an assignment has exactly one"):
        instructor_notebook("ch02_attention", root)


def test_the_release_refuses_a_shared_name_before_writing_anything(tmp_path):
    root = _solutions(tmp_path, {"ch02_attention/attention.py": ONE_CHAPTER, "ch09_again/attention.py": ONE_CHAPTER})
    with pytest.raises(LayoutError, match="share the name"):
        release.build(root)
    assert not (root / "reference").exists() and not (root / "exercises").exists()
    assert not list((root / "solutions").rglob("*.ipynb"))


def test_drafts_and_tool_folders_are_not_notebooks(tmp_path):
    root = _solutions(tmp_path, {
        "ch02_attention/attention.py": ONE_CHAPTER,
        "ch02_attention/_draft.py": ONE_CHAPTER,
        "ch02_attention/.ipynb_checkpoints/attention-checkpoint.py": ONE_CHAPTER,
        "__pycache__/attention.py": ONE_CHAPTER,
    })
    assert [(c.assignment, c.stem) for c in chapters(root)] == [("ch02_attention", "attention")]


def test_the_instructor_notebook_of_an_assignment(tmp_path):
    chapter = next(c for c in CHAPTERS if c.assignment == "ch02_attention")
    assert instructor_notebook("ch02_attention") == chapter.source
    # A course kept as nbgrader notebooks, without percent scripts, is read too.
    folder = tmp_path / "solutions" / "hw1"
    folder.mkdir(parents=True)
    nbformat.write(to_nbgrader(ONE_CHAPTER), folder / "attention.ipynb")
    assert instructor_notebook("hw1", tmp_path) == folder / "attention.ipynb"
    with pytest.raises(LayoutError, match=r"no instructor notebook in .*'hw2'"):
        instructor_notebook("hw2", tmp_path)


def test_the_class_data_is_never_committed_never_published_and_where_nbgrader_looks():
    ignored = (REPO / ".gitignore").read_text().splitlines()
    config = (REPO / "_config.yml").read_text()
    for name in CLASS_DATA:
        assert name in ignored or f"{name}/" in ignored, f"{name} is not in .gitignore"
        assert name == GRADEBOOK or f"  - {name}/**" in config, f"{name}/ is not excluded from the website"
    nbgrader = (REPO / NBGRADER_CONFIG).read_text()
    for setting, name in (("submitted_directory", SUBMITTED), ("autograded_directory", AUTOGRADED),
                          ("feedback_directory", FEEDBACK)):
        assert f'c.CourseDirectory.{setting} = "{name}"' in nbgrader, setting


def test_nbgrader_reads_the_gradebook_the_grader_reads(tmp_path, monkeypatch):
    # the course's SQLite file, or the one GRADEBOOK_URL names as `grade` reads it: formgrader started with it set
    # reads the same gradebook, and no password need be on a command line
    from traitlets.config import Config

    shutil.copy(REPO / NBGRADER_CONFIG, tmp_path)  # run where it finds no percent scripts to write sources from

    def db_url() -> str:
        config = Config()
        exec(compile((tmp_path / NBGRADER_CONFIG).read_text(), str(tmp_path / NBGRADER_CONFIG), "exec"),  # noqa: S102
             {"get_config": lambda: config, "__file__": str(tmp_path / NBGRADER_CONFIG)})
        return config.CourseDirectory.db_url

    monkeypatch.delenv("GRADEBOOK_URL", raising=False)
    assert db_url() == f"sqlite:///{GRADEBOOK}"
    monkeypatch.setenv("GRADEBOOK_URL", "postgresql://grader@dbhost/grades")
    assert db_url() == "postgresql://grader@dbhost/grades"


def test_the_layout_names_every_part_of_a_chapter():
    assert NOTEBOOKS and sources() == [c.source for c in CHAPTERS]
    for c in CHAPTERS:
        assert c.source.is_file() and c.release.is_file() and c.reference_path.is_file(), c
        assert c.checks.is_file() and c.mistakes.is_file(), c
        assert c.reference_module == f"reference.{c.stem}"


# ----------------------------------------------------------------------------------------
# the notebook format: one reading of test cells for the release, the grader and the checker
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.stem)
def test_submission_and_release_agree_on_every_cell(chapter):
    source = to_nbgrader(chapter.source)
    release_nb = nbformat.read(chapter.release, as_version=4)
    for nb in (source, release_nb):
        # The authoring rule: the graded cells are the ones that run checks, and only they.
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert is_graded(cell) == calls_checks(cell.source), cell.source[:200]
    tests = Assignment.from_notebook(chapter.assignment, chapter.stem, source).test_ids
    # What the grader runs of a submission is exactly the release minus its graded tests, known
    # by their grade ids ...
    ran, notes = code_cells(chapter.release, 1 << 30, tests)
    assert notes == []
    assert ran == [c.source for c in release_nb.cells if c.cell_type == "code" and not is_graded(c)]
    # ... so a copy that lost its metadata runs every cell: its check(...) calls do nothing there.
    bare = nbformat.from_dict(release_nb)
    for cell in bare.cells:
        cell.metadata = {}
    assert notebook_cells(bare, tests)[0] == [c.source for c in release_nb.cells if c.cell_type == "code"]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.stem)
def test_the_grader_reads_the_tests_the_notebook_declares(chapter):
    source = to_nbgrader(chapter.source)
    assignment = Assignment.from_notebook(chapter.assignment, chapter.stem, source)
    cells = graded_cells(source, "test")
    assert [t.grade_id for t in assignment.tests] == [c.metadata["nbgrader"]["grade_id"] for c in cells]
    assert [t.points for t in assignment.tests] == [c.metadata["nbgrader"]["points"] for c in cells]
    assert [list(t.calls) for t in assignment.tests] == [check_calls(c.source) for c in cells]
    released = Assignment.from_notebook(chapter.assignment, chapter.stem, nbformat.read(chapter.release, as_version=4))
    assert [t.grade_id for t in released.tests] == [t.grade_id for t in assignment.tests]
    assert released.functions == assignment.functions


def test_check_calls_are_recognised_however_they_are_written():
    source = 'check("attention.softmax", softmax)\nautograder.check("attention.softmax", softmax, hidden=True)\n'
    assert check_calls(source) == [("attention.softmax", "softmax", False), ("attention.softmax", "softmax", True)]
    assert calls_checks("autograder.check('x.f', f)") and not calls_checks("def f(:")


@pytest.mark.parametrize("text, message", [
    ('# %% tags=["test"] grade_id="test_f" points=1\nprint("no check here")\n', "calls no check"),
    ('# %%\ncheck("attention.softmax", softmax)\n', "only a test cell"),
])
def test_a_check_call_belongs_in_a_test_cell_and_nowhere_else(tmp_path, text, message):
    path = tmp_path / "nb.py"
    path.write_text(text)
    with pytest.raises(NotebookSourceError, match=message):
        to_nbgrader(path)


def _imports(path: Path) -> set[str]:
    """Every module a file imports by its absolute name, and each of the packages above it."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        modules = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
        for module in modules:
            parts = module.split(".")
            names |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    return names


def test_the_grader_and_the_generator_share_only_the_course_package():
    """course/ is the layout and the notebook format, which both read; course/tools/ (the release
    generator, the scaffold, the site's extension) is a consumer of it like the grader."""
    for path in (REPO / "autograder").rglob("*.py"):
        assert "course.tools" not in _imports(path), f"{path.relative_to(REPO)} imports the release generator"
    for path in (REPO / "course").rglob("*.py"):
        if TOOLS not in path.parents:
            assert not _imports(path) & {"autograder", "course.tools"}, f"{path.relative_to(REPO)} depends on a consumer"


# ----------------------------------------------------------------------------------------
# the chapter tables of README.md and book/intro.md
# ----------------------------------------------------------------------------------------


def test_chapter_tables_agree_with_the_course():
    problems = tables.problems(REPO)
    assert not problems, "\n".join(problems) + "\nrun `python -m course.tools tables`"


def _table_course(root: Path) -> Path:
    """What the tables are made from: the notebooks, the pages, the toc, the two files."""
    for path in [*(c.source for c in CHAPTERS), *(REPO / "book").glob("*.md"), REPO / "_toc.yml", REPO / "README.md"]:
        dest = root / path.relative_to(REPO)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, dest)
    return root


def test_a_table_that_lists_a_chapter_not_written_is_caught_and_regenerated(tmp_path):
    root = _table_course(tmp_path)
    expected = tables.render(root)
    intro = root / "book" / "intro.md"
    text = intro.read_text(encoding="utf-8")
    first = CHAPTERS[0]
    row = next(line for line in text.splitlines() if line.startswith(f"| {first.number} |"))
    # A chapter listed as if it existed, and a chapter's link with the wrong title.
    bogus = "| 42 | A chapter nobody wrote | everything |"
    intro.write_text(text.replace(row, row.replace("](", " and more](", 1) + "\n" + bogus), encoding="utf-8")
    readme = root / "README.md"
    readme_text = readme.read_text(encoding="utf-8")
    functions = tables.graded_functions(to_nbgrader(first.source))
    readme.write_text(readme_text.replace(f"`{functions[0]}`, ", "", 1), encoding="utf-8")

    problems = "\n".join(tables.problems(root))
    assert "book/intro.md: the chapter table disagrees" in problems and "-" + bogus in problems
    assert "README.md: the chapter table disagrees" in problems
    assert sorted(tables.write(root)) == ["README.md", "book/intro.md"]
    assert {name: (root / name).read_text(encoding="utf-8") for name in expected} == expected


def test_the_site_lists_only_chapters_on_the_site(tmp_path):
    root = _table_course(tmp_path)
    last = [c for c in CHAPTERS if c.toc_entry in toc_pages(REPO)][-1]
    toc = root / "_toc.yml"
    kept = [line for line in toc.read_text(encoding="utf-8").splitlines() if line.strip() != f"- file: {last.toc_entry}"]
    toc.write_text("\n".join(kept) + "\n", encoding="utf-8")
    rendered = tables.render(root)
    assert f"]({last.page.name})" not in rendered["book/intro.md"], "the site links a page it does not publish"
    readme_row = next(line for line in rendered["README.md"].splitlines() if line.startswith(f"| {last.number} |"))
    assert "| not yet |" in readme_row
    assert ", ".join(f"`{f}`" for f in tables.graded_functions(to_nbgrader(last.source))) in readme_row
    for line in rendered["book/intro.md"].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0].isdigit() and "](" not in cells[1]:
            assert tables.PLANNED in cells[1], f"{line} reads as if the chapter existed"


def test_every_grader_command_the_readme_gives_is_one_the_grader_takes():
    # the instructor's section is followed by hand; what can be checked here is that each command it gives
    # parses as written (placeholders filled in), so that an option renamed or removed fails here first
    import re
    import shlex

    from autograder.__main__ import parser

    readme = (REPO / "README.md").read_text()
    blocks = re.findall(r"```(?:bash|text)?\n(.*?)```", readme, flags=re.S)
    commands = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()
                if "-m autograder " in line.split("#")[0]]
    commands += re.findall(r"`((?:\.venv/bin/)?python -m autograder [^`]+)`", readme)
    assert len(commands) > 10, commands
    for command in commands:
        if "grade|" in command:
            continue  # the layout's list of the commands, not a command
        words = shlex.split(command.replace("ASSIGNMENT...", "ch02_attention").replace("ASSIGNMENT", "ch02_attention")
                            .replace("NOTEBOOK", "x.ipynb").replace("...", ""))
        args = words[words.index("autograder") + 1:]
        if len(args) == 1 and args[0] != "secret":
            continue  # a command named in a sentence, without its arguments
        try:
            parser().parse_args(args)
        except SystemExit:
            pytest.fail(f"the README gives a command the grader does not take: {command}")


def test_the_exchange_the_readme_names_is_the_installed_nbgraders_default():
    import re

    from nbgrader.exchange.default.exchange import Exchange
    from traitlets.config import Config

    readme = (REPO / "README.md").read_text()
    named = set(re.findall(r"(/[\w/]+/nbgrader/exchange)\b", readme))
    assert named == {Exchange(config=Config()).root}, named
    # and the course's nbgrader_config.py leaves the exchange where nbgrader puts it
    assert "Exchange.root" not in (REPO / "nbgrader_config.py").read_text()


def test_every_package_of_the_course_is_in_the_wheel():
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(init.parent.relative_to(REPO).parts)
             for top in ("autograder", "harness", "course", "reference", "transformer")
             for init in (REPO / top).rglob("__init__.py")}
    assert found - listed == set(), "packages a wheel would leave out"
