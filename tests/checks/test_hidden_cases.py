"""Hidden cases that no learner can compute: drawn from the course secret, not from the course.

A learner holds the whole course (every check's code, the release, the installed wheel), so every
hidden input must depend on something the course does not hold. These tests draw the hidden cases
under several secrets and ask that each one beyond the visible cases changes with the secret, and
that without a secret none can be built at all.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import subprocess
import sys
from collections.abc import Mapping

import pytest
import torch

from autograder import course_secret
from autograder.checks import chapter_checks
from autograder.framework import run_check
from tests.conftest import NOTEBOOKS, REPO

SECRETS = ("11" * 32, "22" * 32, "33" * 32, "44" * 32)

#: hidden cases that stay the same under every secret, each for a reason: an input with nothing to
#: draw, or one crafted so that several mistakes end apart, which a drawn input rarely does
FIXED = {
    "capstone.edit_distance": {"a=[], b=[]": "two empty sequences: nothing to draw"},
    "decoder.subsequent_mask": {
        "size=0 (an empty sequence)": "nothing to draw",
        "size=2": "the smallest sizes, where several mistakes give one mask; the drawn sizes come first",
        "size=3": "as size=2",
    },
    "positional.sinusoidal_encoding": {"max_len=1, d_model=1": "a single entry, sin(0)"},
    "prerequisites.receptive_field": {"kernel_sizes=[], strides=[], dilations=[]": "an empty stack"},
    "capstone.beam_search": {
        "a source of length 3, beam_size=3, max_len=10, alpha=2.0, vocabulary of 8, bos_id=1, eos_id=2":
            "a toy translator and source crafted so that three beam mistakes end on different hypotheses",
    },
}


def _content(x):
    """A case's inputs as plain comparable values (labels and tags left out)."""
    if isinstance(x, torch.Tensor):
        return ("tensor", str(x.dtype), tuple(x.shape), x.detach().contiguous().view(-1).numpy().tobytes())
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return (type(x).__name__,) + tuple(_content(getattr(x, f.name)) for f in dataclasses.fields(x)
                                           if f.name not in ("label", "tag"))
    if isinstance(x, Mapping):
        return tuple(sorted((k, _content(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return tuple(_content(v) for v in x)
    return repr(x)


def _checks():
    return [check for notebook in NOTEBOOKS for check in chapter_checks(notebook).values()]


@pytest.mark.parametrize("check", _checks(), ids=lambda c: c.check_id)
def test_every_hidden_case_is_drawn_from_the_secret(check, monkeypatch):
    drawn = []
    for key in SECRETS:
        monkeypatch.setenv(course_secret.ENV, key)
        drawn.append([(c.label, c.tag, _content(c)) for c in check.cases(hidden=True)])
    visible = {_content(c) for c in check.cases(hidden=False)}
    fixed = {label for label, tag, content in drawn[0]
             if tag != "invalid" and content not in visible
             and all(any(other == content for _, _, other in cases) for cases in drawn[1:])}
    allowed = FIXED.get(check.check_id, {})
    assert fixed <= set(allowed), (
        f"{check.check_id}: these hidden cases are the same under every secret, so any learner can compute "
        f"them: {sorted(fixed - set(allowed))}")
    assert len(fixed) < len([1 for _, tag, _ in drawn[0] if tag != "invalid"]) / 2


def test_without_the_secret_no_hidden_case_can_be_built(monkeypatch, tmp_path):
    monkeypatch.delenv(course_secret.ENV)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(course_secret, "INSTALLED", True)  # no clone around: as for the installed course
    for check in _checks():
        check.cases(hidden=False)  # the visible cases need no secret
        with pytest.raises(course_secret.NoSecret, match="python -m autograder secret"):
            check.cases(hidden=True)


def test_a_malformed_secret_is_refused_with_where_it_was(monkeypatch, tmp_path):
    monkeypatch.setenv(course_secret.ENV, "not hexadecimal")
    with pytest.raises(course_secret.NoSecret, match="COURSE_SECRET does not hold"):
        course_secret.load()
    monkeypatch.delenv(course_secret.ENV)
    (tmp_path / "course_secret").write_text("abcd\n")
    with pytest.raises(course_secret.NoSecret, match="2 bytes"):
        course_secret.load(tmp_path)


def test_the_secret_is_made_once_readable_by_its_owner_only(tmp_path):
    done = subprocess.run([sys.executable, "-m", "autograder", "secret", "--root", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    path = tmp_path / "course_secret"
    assert "made the course secret" in done.stdout and os.stat(path).st_mode & 0o077 == 0
    first = path.read_text()
    again = subprocess.run([sys.executable, "-m", "autograder", "secret", "--root", str(tmp_path)],
                           capture_output=True, text=True, timeout=120)
    assert "kept the course secret" in again.stdout and path.read_text() == first
    assert course_secret.fingerprint(course_secret.read(path)) in again.stdout
    assert first.strip() not in again.stdout  # the fingerprint names it without showing it


@pytest.mark.parametrize("key", SECRETS[:2])
def test_the_course_passes_its_hidden_cases_under_any_secret(key, monkeypatch):
    # The hidden cases change with the secret: no draw may make the course's own answer fail
    # (the self-check of a grading run would then refuse to grade).
    monkeypatch.setenv(course_secret.ENV, key)
    for notebook in NOTEBOOKS:
        reference = importlib.import_module(f"reference.{notebook}")
        for function, check in chapter_checks(notebook).items():
            assert run_check(check, getattr(reference, function), hidden=True).startswith(f"✓ {function}")


def test_the_secret_file_is_never_committed():
    # (nor packaged: it lives at the root, in no package; tests/grader/test_install.py builds the wheel)
    ignored = subprocess.run(["git", "check-ignore", "-q", course_secret.COURSE_SECRET], cwd=REPO)
    assert ignored.returncode == 0, "course_secret must be in .gitignore"
