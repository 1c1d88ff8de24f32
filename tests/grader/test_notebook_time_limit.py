"""A test cell stops an endless loop with the grader's time limit and message."""
from __future__ import annotations

import time

import pytest

import autograder
from autograder import time_limit
from autograder.checks import get
from autograder.framework import CheckFailed, run_check
from autograder.sandbox import Limits


def bpe_encode_forever(text, merges):
    ids = list(text.encode("utf-8"))
    i = 0
    while i < len(ids) - 1:  # forgets to move on when no merge applies
        if (ids[i], ids[i + 1]) in merges:
            i += 1
    return ids


def test_a_notebook_check_uses_the_graders_limit():
    assert time_limit.call_seconds_default() == Limits().call_seconds


def test_an_endless_loop_in_a_test_cell_fails_with_the_graders_message(monkeypatch, capsys):
    monkeypatch.setattr(time_limit, "call_seconds_default", lambda: 0.5)
    began = time.monotonic()
    with pytest.raises(CheckFailed) as failure:
        autograder.check("bert_gpt.bpe_encode", bpe_encode_forever)  # what a notebook's test cell runs
    assert time.monotonic() - began < 5
    cases = get("bert_gpt.bpe_encode").cases(False)
    # The very words `autograder check` prints (session.py builds them with the same function), and where the
    # loop was running when it was stopped, with the counter that never moves on and its condition.
    message = str(failure.value)
    first, _, rest = message.partition("\n")
    assert first in {time_limit.endless_loop_message("bpe_encode", 0.5, c.label) for c in cases}, message
    assert "did not finish within 0.5 s" in first and "endless loop" in first
    assert "(stopped in the loop on line 18 of your `bpe_encode_forever`, `while i < len(ids) - 1:`)" in rest, message
    assert "`i`, set on line 17, `i = 0` and line 20, `i += 1`" in rest, message


def test_the_learners_except_does_not_swallow_the_limit():
    def stubborn(text, merges):
        while True:
            try:
                while True:
                    pass
            except Exception:
                continue

    with pytest.raises(CheckFailed, match="did not finish within 0.3 s"):
        run_check(get("bert_gpt.bpe_encode"), stubborn, call_seconds=0.3)


def test_a_finished_check_leaves_no_alarm_behind():
    import signal

    run_check(get("attention.softmax"), __import__("reference.attention").attention.softmax, call_seconds=5)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
