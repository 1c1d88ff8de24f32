"""The time limit on one call of a learner's function, the same in a notebook as in the grader.

The grader ends the learner's process when a call runs past ``Limits.call_seconds``. A notebook
runs the function in its own kernel, which must survive, so there the limit is an alarm signal
that interrupts the call; it works on the main thread of a Unix process (a Jupyter kernel runs
cells there), and elsewhere the call simply runs without a limit.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


def call_seconds_default() -> float:
    """The grader's limit on one call, which the notebooks' test cells apply too."""
    from .sandbox import Limits

    return Limits().call_seconds


def endless_loop_message(function: str, seconds: float, label: str) -> str:
    return (f"`{function}` did not finish within {seconds:g} s on the case {label}: "
            "is there an endless loop, or a loop that never reaches its `break`?")


class CallTimedOut(BaseException):
    """Raised inside the learner's call when its time is up; a BaseException, so that the learner's
    own ``except Exception`` does not swallow it."""


@contextlib.contextmanager
def call_time_limit(seconds: float) -> Iterator[None]:
    """Interrupt the body with :class:`CallTimedOut` after ``seconds`` where signals allow it."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise CallTimedOut

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
