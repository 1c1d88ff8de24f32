"""Checks for the course's exercises, and the engine that grades them.

In a notebook::

    from autograder import check
    check("attention.softmax", softmax)

prints one line when the function is right and raises :class:`CheckFailed`, with a message
that says what is wrong and where to look, when it is not. The checks compare with PyTorch
and closed-form mathematics only; they never import the course's solutions.

None of this package runs beside a submission while it is graded: the sandbox holds only
:mod:`harness`, the learner's side of grading, which computes nothing a check could ask for.
"""
from .framework import CheckFailed, run_check


def check(check_id: str, fn, hidden: bool = False) -> None:
    """Run the check ``check_id`` ("<chapter notebook>.<function>") on the learner's ``fn``.

    When it fails and ``fn`` uses another graded function of the notebook that fails its own
    check, the message says so first: that helper is the mistake to fix.
    """
    from .checks import get
    from .source.helpers import blame_helpers

    try:
        verdict = run_check(get(check_id), fn, hidden=hidden)
    except CheckFailed as failure:
        message = blame_helpers(check_id, fn, str(failure))
        if message == str(failure):
            raise
        blamed = CheckFailed(message)
        blamed.learner_frames = failure.learner_frames
        raise blamed from None
    print(verdict)


__all__ = ["check", "CheckFailed"]
