"""The release is generated, current and free of secrets; the reference modules are importable."""
from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

from course.notebook_format import secret_lines
from course.tools.release import differences
from tests.conftest import NOTEBOOKS, PYTHON, REPO, release_path

MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


def test_generated_files_are_current(fresh_release):
    problems = differences(fresh_release, REPO)
    assert not problems, "\n".join(problems) + "\nrun `python -m course.tools release`"


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_release_has_no_solution_code_or_hidden_tests(notebook, source_nb):
    text = release_path(notebook).read_text(encoding="utf-8")
    for marker in MARKERS:
        assert marker not in text
    secrets = secret_lines(source_nb(notebook))
    assert secrets, "the instructor notebook should have solution regions and hidden tests"
    leaked = [s for s in secrets if s in text]
    assert not leaked, f"published in exercises/: {leaked[:5]}"


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_importing_a_reference_module_runs_no_test(notebook, tmp_path):
    probe = f"import sys, reference.{notebook}; assert 'autograder' not in sys.modules, 'imported the checks'"
    done = subprocess.run([PYTHON, "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "", f"importing reference.{notebook} printed:\n{done.stdout}"


def _imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_learner_checks_never_import_the_solutions():
    """The checks ship beside the exercises: their oracle is PyTorch and mathematics."""
    for path in (REPO / "autograder").rglob("*.py"):
        for name in _imported_modules(path):
            assert name.split(".")[0] not in ("reference", "solutions", "tests"), f"{path} imports {name}"


def test_the_checks_import_from_any_working_directory(tmp_path):
    done = subprocess.run(
        [PYTHON, "-c", "from autograder import check; print('ok')"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.stdout.strip() == "ok", done.stderr
