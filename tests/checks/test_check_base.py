"""What the check base class owns: each check's seed, the hints for exceptions, the invalid cases."""
from __future__ import annotations

from typing import Any

import pytest
import torch

from autograder.checks import chapter_checks
from autograder.framework import Case, Check, CheckFailed, Hint, run_check
from tests.conftest import NOTEBOOKS

CHECKS = [check for notebook in NOTEBOOKS for check in chapter_checks(notebook).values()]


def test_no_two_checks_draw_from_the_same_seed():
    seeds = {}
    for check in CHECKS:
        for hidden in (False, True):
            seeds.setdefault(check.seed("hidden" if hidden else "visible"), []).append((check.check_id, hidden))
    assert len(seeds) == 2 * len(CHECKS), [owners for owners in seeds.values() if len(owners) > 1]


def test_every_check_judges_by_named_rules():
    """A failure says which rule failed (CheckFailed.rule, which the catalogue of mistakes states) only where
    the judge is made of rules: no check overrides the base class's judge or judge_all."""
    own = [check.check_id for check in CHECKS
           if type(check).judge is not Check.judge or type(check).judge_all is not Check.judge_all or not check.rules]
    assert not own, f"checks with a judge of their own instead of `rules` and `rules_across`: {own}"


def test_a_check_is_known_by_the_id_its_notebook_calls():
    for notebook in NOTEBOOKS:
        for function, check in chapter_checks(notebook).items():
            assert check.check_id == f"{notebook}.{function}"  # a chapter split into modules included


def test_cases_are_the_same_every_time_and_leave_the_global_generator_alone():
    before = torch.get_rng_state()
    for check in CHECKS:
        first, again = check.cases(hidden=True), check.cases(hidden=True)
        assert [c.label for c in first] == [c.label for c in again]
        for a, b in zip(first, again):
            for x, y in zip(a.args, b.args):
                assert not torch.is_tensor(x) or torch.equal(x, y), f"{check.check_id}: {a.label}"
    assert torch.equal(torch.get_rng_state(), before)


class Halve(Check):
    """A check written for this test: ``halve(x)`` is x / 2, and a negative x must be refused."""

    function = "halve"
    hints = (Hint("ZeroDivisionError", "HINT: halving never divides by zero.", containing="division"),
             Hint("KeyError", lambda name, case, result: f"{name} looked something up on {case.label}.", whole=True))
    invalid_argument = "x"
    invalid_hint = "a negative x should raise ValueError."

    def cases(self, hidden: bool) -> list[Case]:
        return [Case("x=4.0", (4.0,)), Case("x=-1.0", (-1.0,), tag="invalid")]

    def judge(self, case: Case, result: Any) -> None:
        if result != case.args[0] / 2:
            raise CheckFailed(f"`halve` returned {result} on the case {case.label}")


def _message(fn) -> str:
    with pytest.raises(CheckFailed) as failure:
        run_check(Halve(), fn)
    return str(failure.value)


def _refusing(x: float) -> float:
    if x < 0:
        raise ValueError(f"x must be at least 0, got {x}")
    return x / 2


def test_a_declared_hint_fires_and_an_unexpected_exception_gets_the_plain_report():
    assert run_check(Halve(), _refusing).startswith("✓ halve")

    def divides_by_zero(x):
        return x / 0

    message = _message(divides_by_zero)
    assert message.startswith("`halve` raised ZeroDivisionError on the case x=4.0: float division by zero")
    assert message.endswith("\nHINT: halving never divides by zero.")

    def looks_up(x):
        return {}[x]

    assert _message(looks_up) == "`halve` looked something up on x=4.0."

    def zero_division_of_another_kind(x):
        raise ZeroDivisionError("modulo by zero")  # the hint asks for "division" in the message

    def unexpected(x):
        raise IndexError("out of range")

    for fn, raised in ((zero_division_of_another_kind, "ZeroDivisionError"), (unexpected, "IndexError")):
        message = _message(fn)
        assert message.startswith(f"`halve` raised {raised} on the case x=4.0") and "HINT" not in message


def test_an_invalid_case_must_raise_the_declared_exception_naming_the_argument():
    assert "`halve` returned 0.0 on the case x=-1.0: raise ValueError instead" in _message(lambda x: max(x, 0.0) / 2)

    def asserts(x):
        if x < 0:
            raise AssertionError("negative")
        return x / 2

    # the line that raised the wrong exception is quoted: an IndexError in the message of the raise, say
    assert _message(asserts).startswith("`halve` raised AssertionError (negative) on the case x=-1.0; "
                                        "a negative x should raise ValueError.\n  (in your ")
    assert 'raise AssertionError("negative"))' in _message(asserts)

    def says_nothing(x):
        if x < 0:
            raise ValueError("no")
        return x / 2

    assert "right, but say which argument is wrong" in _message(says_nothing)
    # a wrong value on a valid case is the bigger news, so it is reported first
    assert _message(lambda x: x) == "`halve` returned 4.0 on the case x=4.0"


def test_a_catalogued_mistake_is_named_only_when_it_explains_every_result():
    """Several mistakes can give the same value on one case: the one named must give every result, and the
    first such in the catalogue is named."""
    cases = [Case("x=2", (2,)), Case("x=3", (3,))]
    doubled, squared, plus_two = (lambda x: 2 * x, "doubled"), (lambda x: x * x, "squared"), (lambda x: x + 2, "plus two")
    # On x=2 all three give 4; only x=3 tells them apart.
    assert Check.explaining_mistake(cases, [4, 9], [doubled, plus_two, squared]) == "squared"
    assert Check.explaining_mistake(cases, [4, 5], [doubled, squared, plus_two]) == "plus two"
    assert Check.explaining_mistake(cases, [4, 7], [doubled, squared, plus_two]) is None
    assert Check.explaining_mistake(cases[:1], [4], [doubled, squared]) == "doubled"


class Total(Check):
    """A check written for this test: ``total(x)`` is x.sum(); its last case is large, with limits of its own."""

    function = "total"

    def __init__(self, seconds: float | None = None, memory_mb: int | None = None):
        super().__init__()
        self.large = Case("x (1,) standing for a long input", (torch.ones(1),), {}, "long", seconds=seconds,
                          memory_mb=memory_mb)

    def cases(self, hidden: bool) -> list[Case]:
        return [Case("x (3,)", (torch.arange(3.0),)), self.large]

    def judge(self, case: Case, result: Any) -> None:
        if not isinstance(result, torch.Tensor) or float(result) != float(case.args[0].sum()):
            raise CheckFailed(f"`total` returned {result} on the case {case.label}")


def test_a_large_case_is_called_only_once_the_others_pass():
    called = []

    def wrong(x):
        called.append(len(x))
        return x.sum() + 1

    with pytest.raises(CheckFailed, match=r"on the case x \(3,\)"):
        run_check(Total(seconds=30.0), wrong)
    assert called == [3]  # a wrong answer is told at once, without waiting for its largest case

    def right(x):
        called.append(len(x))
        return x.sum()

    called.clear()
    assert run_check(Total(seconds=30.0), right).startswith("✓ total")
    assert called == [3, 1]


def test_a_large_case_has_its_own_time_limit():
    import time

    def slow_on_the_large_case(x):
        if len(x) == 1:
            time.sleep(1.5)
        return x.sum()

    # the grader's limit of 1 s would stop it; the case's own 5 s do not
    assert run_check(Total(seconds=5.0), slow_on_the_large_case, call_seconds=1.0).startswith("✓ total")
    with pytest.raises(CheckFailed, match="did not finish within 1 s"):
        run_check(Total(memory_mb=64), slow_on_the_large_case, call_seconds=1.0)


def test_a_large_case_may_allocate_its_budget_and_no_more():
    def allocates(x):
        if len(x) == 1:
            torch.empty(512, 2**20, dtype=torch.uint8).fill_(1)  # 512 MiB
        return x.sum()

    assert run_check(Total(memory_mb=1024), allocates).startswith("✓ total")
    message = str(pytest.raises(CheckFailed, run_check, Total(memory_mb=128), allocates).value)
    assert "can't allocate memory" in message and "on the case x (1,) standing for a long input" in message
    # and the budget ends with the call: the process may allocate as before
    torch.empty(512, 2**20, dtype=torch.uint8).fill_(1)
