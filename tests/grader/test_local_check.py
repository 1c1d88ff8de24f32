"""`python -m autograder check`: what a learner runs on a whole notebook."""
from __future__ import annotations

import subprocess

import nbformat
import pytest

from course.notebook_format import complete, write_notebook
from tests.conftest import NOTEBOOKS, PYTHON, release_path

NOTEBOOK = "attention" if "attention" in NOTEBOOKS else NOTEBOOKS[0]


def _check(path, cwd):
    return subprocess.run([PYTHON, "-m", "autograder", "check", str(path)], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_untouched_exercise_scores_zero_and_says_what_to_do(tmp_path):
    done = _check(release_path(NOTEBOOK), tmp_path)
    assert done.returncode == 1
    assert "not implemented yet" in done.stdout
    assert "score on the visible tests: 0 /" in done.stdout


def test_completed_exercise_scores_full_marks(tmp_path, source_nb, release_nb):
    path = tmp_path / f"{NOTEBOOK}.ipynb"
    write_notebook(complete(release_nb(NOTEBOOK), source_nb(NOTEBOOK)), path)
    done = _check(path, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAIL" not in done.stdout


def test_one_wrong_function_costs_only_its_points(tmp_path, source_nb, release_nb):
    """The wrong function returns the right values, cut off from the autograd graph: the probe that
    sees it runs beside the learner's code in the sandbox, and its finding reaches the message."""
    nb = complete(release_nb(NOTEBOOK), source_nb(NOTEBOOK))
    answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
    lines = answer.source.splitlines()
    last = max(i for i, line in enumerate(lines) if line.strip().startswith("return "))
    body = lines[last].split("return ", 1)
    lines[last] = f"{body[0]}return ({body[1]}).detach()"
    answer.source = "\n".join(lines)
    path = tmp_path / f"{NOTEBOOK}.ipynb"  # its name says which chapter's functions stand in for the learner's
    write_notebook(nb, path)
    done = _check(path, tmp_path)
    assert done.returncode == 1
    assert done.stdout.count("FAIL") == 1 and "pass" in done.stdout
    assert "does not require a gradient" in done.stdout, done.stdout


@pytest.mark.parametrize("content", ["{not json", ""])
def test_a_malformed_notebook_gets_a_sentence_not_a_traceback(tmp_path, content):
    path = tmp_path / "broken.ipynb"
    path.write_text(content)
    done = _check(path, tmp_path)
    assert done.returncode != 0
    assert "is not a readable notebook" in (done.stdout + done.stderr)
    assert "Traceback" not in done.stderr


def test_without_bubblewrap_a_learner_can_still_check_and_is_told(tmp_path, source_nb, release_nb, monkeypatch, capsys):
    # A learner's own code needs no sandbox; only the class grader refuses to run without one.
    from autograder import check_notebook, sandbox

    monkeypatch.setattr(sandbox, "sandboxed", lambda: False)
    monkeypatch.setattr(check_notebook, "sandboxed", lambda: False)
    path = tmp_path / f"{NOTEBOOK}.ipynb"
    write_notebook(complete(release_nb(NOTEBOOK), source_nb(NOTEBOOK)), path)
    assert check_notebook.report(path) == 0
    out = capsys.readouterr().out
    assert "note: bubblewrap is not installed" in out and "FAIL" not in out


def test_the_notebook_size_cap_is_the_graders(tmp_path, source_nb, release_nb):
    from autograder.sandbox import Limits

    nb = complete(release_nb(NOTEBOOK), source_nb(NOTEBOOK))
    nb.cells.insert(0, nbformat.v4.new_code_cell("# " + "x" * ((Limits().notebook_mb << 20) + 1024)))
    path = tmp_path / "huge.ipynb"
    write_notebook(nb, path)
    done = _check(path, tmp_path)
    assert done.returncode != 0
    assert f"over the {Limits().notebook_mb} MB limit" in done.stdout
