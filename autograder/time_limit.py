"""The time limit on one call of a learner's function, the same in a notebook as in the grader.

Inside the learner's process an alarm stops a call that runs past ``Limits.call_seconds``
(:mod:`harness.call_limit`), so that the message can say where it was running; the grader also
ends the learner's process, a little later, when the call has not answered (that limit is the one
enforced). A notebook runs the function in its own kernel, which must survive: there the alarm is
all there is.
"""
from __future__ import annotations

from typing import Any

from harness.call_limit import TIMED_OUT
from harness.calls import Raised
from harness.observe import Observed

from .messages import tr
from .unchecked import loop_around, unchecked


def call_seconds_default() -> float:
    """The grader's limit on one call, which the notebooks' test cells apply too."""
    from .sandbox import Limits

    return Limits().call_seconds


def case_seconds(limit: float, case) -> float:
    """The time limit of ``case``'s call: the grader's ``limit``, or the case's own where that is longer."""
    return max(limit, case.seconds or 0.0)


def endless_loop_message(function: str, seconds: float, label: str) -> str:
    return tr("`{function}` did not finish within {seconds} s on the case {case}: is there an endless loop, or a "
              "loop that never reaches its `break`?").format(function=function, seconds=f"{seconds:g}", case=label)


def stopped_message(function: str, seconds: float, label: str, result: Raised, seen: Observed | None) -> str:
    """:func:`endless_loop_message` for a call the alarm stopped, with, where the call was traced, the loop of the
    learner's it was in and what that loop depends on (its condition, the counter it reads and the lines that
    move it). The line the alarm found is chance; the loop around it is not, so that grading the same
    submission twice gives the same words."""
    message = endless_loop_message(function, seconds, label)
    stopped = result.line_at()
    if seen is None or stopped is None:
        return message
    line, at = stopped
    loop = loop_around(seen.code, at, line)
    if loop is None:
        return message
    message += "\n  " + tr("(stopped in the loop on line {line} of your `{function}`, `{source}`)").format(
        line=loop[0], function=at, source=loop[1])
    depends = unchecked(seen.code, seen.held, at, loop[0])
    return message + ("\n" + depends if depends else "")


def timed_out(result: Any) -> bool:
    """Whether a call's result is that of a call the alarm stopped."""
    return isinstance(result, Raised) and result.type == TIMED_OUT
