"""The checks can fail: solutions pass, stubs fail, every catalogued mistake is caught and named."""
from __future__ import annotations

import importlib

import pytest

from autograder.checks import chapter_checks
from autograder.framework import CheckFailed, run_check
from coursetools.notebooks import check_calls, definitions, graded_cells
from tests.conftest import NOTEBOOKS

GRADED = [(nb, fn) for nb in NOTEBOOKS for fn in chapter_checks(nb)]
MISTAKES = [m for name in NOTEBOOKS for m in importlib.import_module(f"tests.mistakes.{name}").MISTAKES]


def test_every_chapter_has_checks_and_a_catalogue():
    assert NOTEBOOKS, "no instructor notebooks found"
    for notebook in NOTEBOOKS:
        assert chapter_checks(notebook), f"autograder/checks/{notebook}.py has no CHECKS"
        assert importlib.import_module(f"tests.mistakes.{notebook}").MISTAKES


@pytest.mark.parametrize("notebook, function", GRADED)
@pytest.mark.parametrize("hidden", [False, True], ids=["visible", "hidden"])
def test_reference_passes(notebook, function, hidden):
    reference = importlib.import_module(f"reference.{notebook}")
    line = run_check(chapter_checks(notebook)[function], getattr(reference, function), hidden=hidden)
    assert line.startswith(f"✓ {function}")


@pytest.mark.parametrize("notebook, function", GRADED)
def test_released_stub_fails(notebook, function, release_nb):
    stub = definitions(release_nb(notebook))[function]
    for hidden in (False, True):
        with pytest.raises(CheckFailed, match="not implemented yet"):
            run_check(chapter_checks(notebook)[function], stub, hidden=hidden)


@pytest.mark.parametrize("notebook, function", GRADED)
def test_solution_cell_of_the_release_notebook_is_the_reference(notebook, function, source_nb):
    """The instructor notebook's own definitions pass too (not just the generated module)."""
    fn = definitions(source_nb(notebook))[function]
    run_check(chapter_checks(notebook)[function], fn, hidden=True)


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_each_graded_function_has_one_test_cell_with_visible_and_hidden_checks(notebook, source_nb):
    nb = source_nb(notebook)
    seen = {}
    for cell in graded_cells(nb, "test"):
        calls = check_calls(cell.source)
        assert calls, f"test cell {cell.metadata['nbgrader']['grade_id']} calls no check"
        visible = cell.source.split("### BEGIN HIDDEN TESTS")[0]
        assert check_calls(visible) and not any(h for _, _, h in check_calls(visible))
        hidden_part = cell.source.split("### BEGIN HIDDEN TESTS")[1]
        assert any(h for _, _, h in check_calls(hidden_part)), "hidden tests must run the hidden cases"
        for check_id, fn, _ in calls:
            assert check_id == f"{notebook}.{fn}", f"{check_id} is called on {fn}"
            seen[fn] = cell.metadata["nbgrader"]["points"]
    assert sorted(seen) == sorted(chapter_checks(notebook)), "every check is graded, and only those"
    answers = {c.metadata["nbgrader"]["grade_id"] for c in graded_cells(nb, "solution")}
    assert answers == set(seen), "each graded function has its own answer cell named after it"


@pytest.mark.parametrize("mistake", MISTAKES, ids=[f"{m.check_id}: {m.name}" for m in MISTAKES])
def test_catalogued_mistake_is_caught_and_diagnosed(mistake):
    notebook, _, function = mistake.check_id.partition(".")
    check = chapter_checks(notebook)[function]
    runs = [True] if mistake.hidden_only else [False, True]
    if mistake.hidden_only:
        run_check(check, mistake.fn, hidden=False)  # the visible cases really miss it
    for hidden in runs:
        with pytest.raises(CheckFailed) as failure:
            run_check(check, mistake.fn, hidden=hidden)
        assert mistake.diagnosis in str(failure.value), (
            f"{mistake.name}: expected the diagnosis {mistake.diagnosis!r}, got:\n{failure.value}"
        )


@pytest.mark.parametrize("notebook, function", GRADED)
def test_at_least_five_mistakes_per_function(notebook, function):
    count = sum(m.check_id == f"{notebook}.{function}" for m in MISTAKES)
    assert count >= 5, f"{notebook}.{function} has only {count} catalogued mistakes"
