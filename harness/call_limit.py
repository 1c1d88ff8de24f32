"""The alarm that stops a learner's call when its time is up, inside the learner's process.

It raises :class:`CallTimedOut` in the learner's code, so that the call ends as a crash would: at
the learner's line where it was running, with its trace, which the feedback uses to say where a loop
did not end. It works on the main thread of a Unix process (a Jupyter kernel runs cells there, and
so does the grader's worker); elsewhere the call simply runs without it. It is advisory, like all
that runs beside the learner's code: the grader also ends the worker from outside a little later.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


class CallTimedOut(BaseException):
    """Raised inside the learner's call when its time is up; a BaseException, so that the learner's
    own ``except Exception`` does not swallow it."""


#: the type of the :class:`harness.calls.Raised` a call stopped by the alarm gives
TIMED_OUT = CallTimedOut.__name__


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
