"""Checks for the course's exercises, and the engine that grades them.

In a notebook::

    from autograder import check
    check("attention.softmax", softmax)

prints one line when the function is right and raises :class:`CheckFailed`, with a message
that says what is wrong and where to look, when it is not. The checks compare with PyTorch
and closed-form mathematics only; they never import the course's solutions.
"""
from .framework import CheckFailed, run_check


def check(check_id: str, fn, hidden: bool = False) -> None:
    """Run the check ``check_id`` ("<chapter notebook>.<function>") on the learner's ``fn``."""
    from .checks import get

    print(run_check(get(check_id), fn, hidden=hidden))


__all__ = ["check", "CheckFailed"]
