"""One submission's run: a sandboxed worker, and a fresh learner process per graded function.

Each graded function is served by its own learner process, forked from the submission's warm
worker: it loads the course's reference modules without that function, runs the submission's
cells, and answers that function's cases. A cell that runs too long or ends its process is
noted once and skipped from then on; the learner process is started again without it, which
costs a fork, not a new interpreter.

Everything a learner process sends is read with bounds (:mod:`harness.wire`). A reply that
cannot be read, whatever wrote it, fails the call it answers (or skips the cell it answers), and
grading goes on.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course.layout import reference_module
from harness import wire
from harness.probes import PROBE_SECONDS

from .assignment import Assignment
from .messages import tr
from .sandbox import Channel, Limits, Worker, WorkerBroken, WorkerGone, WorkerTimeout
from .source.references import imported_modules, reference_sources
from .submissions import cell_name
from .time_limit import case_seconds, endless_loop_message, stopped_message, timed_out

#: restarts of the worker itself (not of learner processes) before the submission is given up
MAX_WORKER_STARTS = 3
#: how often a call that runs out of time is made, each time in a fresh process, before it costs
#: points: on a machine shared with other submissions, a neighbour's processes may have had the CPU
CALL_TRIES = 2
#: how long after the call's limit the learner's process is ended when its own alarm has not answered (code
#: that catches BaseException, or a loop inside one C call)
STOP_GRACE = 2.0


@dataclass(frozen=True)
class Failure:
    """Why there is no result: the message for the learner."""

    message: str


class _Retry(Exception):
    """A cell was skipped: start the learner process again."""


def _cell_error(reply: Any) -> tuple[str, str] | None:
    """(type, message) of a cell that raised, None when it ran; WireError when it is neither."""
    if reply == {"ok": True}:
        return None
    error = reply.get("error") if isinstance(reply, dict) else None
    if isinstance(error, list) and len(error) == 3 and all(isinstance(e, str) for e in error):
        return error[0][:200], error[1][:1000]
    raise wire.WireError("not a reply to a cell")


class Session:
    """The worker of one submission and its current learner process."""

    def __init__(self, assignment: Assignment, cells: list[str], limits: Limits, hidden_paths: list[Path],
                 notes: list[str], *, needs: dict[str, set[str]] | None, deadline: float):
        """``needs``: graded function -> the other graded functions it uses (see
        :attr:`autograder.source.shortcuts.Scan.needs`), None for all of them; ``deadline``: when
        the submission's time ends (on :func:`time.monotonic`'s clock), which began before its
        source was read."""
        self.assignment, self.cells, self.limits = assignment, cells, limits
        self.hidden_paths, self.notes = hidden_paths, notes
        self.skip: set[int] = set()
        self.noted: set[int] = set()
        self.ran: set[int] = set()  # cells that have run once: only that first run is reported
        self.deadline = deadline
        self.worker: Worker | None = None
        self.worker_starts = 0
        self.output = ""  # what the last worker printed, for an instructor who wonders why
        self.child: Channel | None = None
        self.key: tuple | None = None
        self.needs = needs
        #: the reference modules the submission imports: the others are not sent
        self.imports = frozenset(imported_modules(cells))

    def left(self, cap: float) -> float:
        return max(min(cap, self.deadline - time.monotonic()), 0.0)

    # -- the worker ---------------------------------------------------------------------------

    def _worker(self) -> Worker:
        if self.worker is None:
            if self.left(1) <= 0:
                raise TimeoutError
            if self.worker_starts >= MAX_WORKER_STARTS:
                raise WorkerBroken(f"the worker stopped {self.worker_starts} times",  # english: a grader fault
                                   printed=self.output[-1500:])
            self.worker_starts += 1
            self.worker = Worker(self.limits, self.hidden_paths, preload=self.assignment.imports)
        return self.worker

    def _drop_worker(self) -> None:
        if self.worker is not None:
            self.worker.stop()
            self.output = self.worker.text_output()
            self.worker = None
        self.child, self.key = None, None

    def _end_child(self) -> None:
        if self.child is None:
            return
        self.child.close()
        self.child, self.key = None, None
        try:
            self.worker.end_children(timeout=10)
        except (WorkerGone, WorkerTimeout):
            self._drop_worker()

    # -- a learner process --------------------------------------------------------------------

    def _child(self, function: str, own: tuple[str, ...]) -> Channel:
        key = (function, tuple(sorted(own)))
        if self.child is not None and self.key == key:
            return self.child
        self._end_child()
        while True:
            if self.left(1) <= 0:
                raise TimeoutError
            worker = self._worker()
            try:
                child = worker.fork(timeout=self.left(30))
            except (WorkerGone, WorkerTimeout):
                self._drop_worker()
                continue
            self.child, self.key = child, key
            try:
                self._prepare(child, function, own)
                return child
            except _Retry:
                self._end_child()

    def _prepare(self, child: Channel, function: str, own: tuple[str, ...]) -> None:
        notebook, functions = self.assignment.notebook, self.assignment.functions
        needs = None if self.needs is None else frozenset(self.needs.get(function, ())) - set(own)
        setup = {
            "op": "setup", "function": function, "reference": reference_module(notebook),
            "modules": reference_sources(notebook, function, graded=frozenset(functions), needs=needs,
                                         imports=self.imports),
            "forbidden": list(self.assignment.forbidden(function)),
            "ops": list(self.assignment.forbidden_ops(function)),
            "inject": [f for f in functions if f != function and f not in own and (needs is None or f in needs)],
        }
        try:
            reply = child.request(setup, timeout=self.left(self.limits.startup_seconds))
        except (WorkerGone, WorkerTimeout, wire.WireError) as exc:
            # No learner code has run in this process yet: this is the grader's set-up failing.
            self._drop_worker()
            raise WorkerBroken(f"a learner process could not be set up ({type(exc).__name__}: {exc})",  # english: a grader fault
                               printed=self.output[-1500:]) from None
        if reply != {"ok": True}:
            loaded = str(reply)[:1500]
            raise WorkerBroken(f"a learner process could not load the course's code: {loaded}")  # english: a grader fault
        for index, source in enumerate(self.cells):
            if index in self.skip:
                continue
            name = cell_name(index, source)
            try:
                error = _cell_error(child.request({"op": "cell", "index": index + 1, "source": source},
                                                  timeout=self.left(self.limits.cell_seconds)))
            except WorkerTimeout:
                if self.left(1) <= 0:
                    raise TimeoutError from None
                self._skip(index, tr("{cell} ran longer than {seconds} s and was skipped").format(
                    cell=name, seconds=f"{self.limits.cell_seconds:g}"))
            except WorkerGone:
                self._skip(index, tr("{cell} ended the Python process (exit, kill or crash) and was skipped").format(cell=name))
            except wire.WireError as exc:
                self._skip(index, tr("{cell} sent the grader something that is not a reply ({error}) and was skipped").format(
                    cell=name, error=exc))
            first = index not in self.ran
            self.ran.add(index)
            # A later run may know what earlier learner processes were sent (hidden cases among
            # them): only what a cell says the first time, before any case, reaches the feedback.
            if error is not None and first and index not in self.noted:
                self.noted.add(index)
                kind, message = error
                self.notes.append(tr("{cell} raised {error}: {message}").format(cell=name, error=kind, message=message[:300])
                                  if message else tr("{cell} raised {error}").format(cell=name, error=kind))

    def _skip(self, index: int, note: str) -> None:
        self.skip.add(index)
        if index not in self.noted:
            self.noted.add(index)
            self.notes.append(note)
        raise _Retry

    # -- calls --------------------------------------------------------------------------------

    def call(self, function: str, case, own: tuple[str, ...] = (), trace: bool = False,
             observed: list | None = None, probes: tuple[str, ...] = (), source: bool = False) -> Any:
        """The learner's result for one case, or a :class:`Failure` explaining why there is none;
        the graded functions in ``own`` stay the learner's instead of the course's. What the call did
        besides returning (its trace when ``trace``, what the ``probes`` found) is appended to
        ``observed``, when given."""
        seconds = case_seconds(self.limits.call_seconds, case)
        for attempt in range(1, CALL_TRIES + 1):
            child = self._child(function, own)
            try:
                # The call's own limit ends when the function returns; the probes that follow have a limit of
                # their own, so that a function that never returns is stopped at the call's limit. The learner's
                # process stops the call itself at that limit, to say where it was running; it is ended from here
                # when it has not answered a little later.
                request = {"op": "call", "case": wire.encode(case), "trace": trace, "probe": list(probes),
                           "seconds": seconds, "source": source}
                reply = child.request(request, timeout=self.left(seconds + STOP_GRACE))
                if probes and reply == wire.CALLED:
                    reply = child.receive(timeout=self.left(PROBE_SECONDS))
            except WorkerTimeout:
                self._end_child()
                if self.left(1) <= 0:
                    raise TimeoutError from None
                if attempt == CALL_TRIES:
                    return Failure(endless_loop_message(function, seconds, case.label))
                continue
            except WorkerGone:
                self._end_child()
                return Failure(tr(
                    "`{function}` ended the Python process on the case {case} (sys.exit, os._exit, "
                    "a signal, or more than the memory limit): a graded function must return its result."
                ).format(function=function, case=case.label))
            except wire.WireError as exc:
                self._end_child()
                return Failure(self._unreadable(function, case, exc))
            read = self._read_reply(function, case, reply)
            if isinstance(read, Failure):
                return read
            result, seen = read
            if timed_out(result):
                self._end_child()
                if self.left(1) <= 0:
                    raise TimeoutError
                if attempt < CALL_TRIES:
                    continue
                return Failure(stopped_message(function, seconds, case.label, result, seen))
            if observed is not None:
                observed.append(seen)
            return result
        raise AssertionError("unreachable: the last attempt returns")  # english: never raised

    def _read_reply(self, function: str, case, reply: dict) -> tuple[Any, Any] | Failure:
        """A call's reply as (result, what the call did besides), or the Failure that says why it cannot be read."""
        if reply.get("missing") is True and len(reply) == 1:
            return Failure(tr("there is no `{function}` in the notebook: keep the name the exercise gives it.").format(
                function=function))
        error = reply.get("error")
        if isinstance(error, list) and len(error) == 3 and all(isinstance(e, str) for e in error) and len(reply) == 1:
            return Failure(tr("`{function}` could not be called: {error}").format(function=function, error=error[1][:1000]))
        if set(reply) not in ({"result"}, {"result", "observed"}):
            self._end_child()
            return Failure(self._unreadable(function, case, wire.WireError("not a reply to a call")))
        try:
            result = wire.decode(reply["result"], wire.REPLY_TAGS)
            seen = wire.decode_observed(reply["observed"]) if "observed" in reply else None
        except wire.WireError as exc:
            return Failure(self._unreadable(function, case, exc))
        return result, seen

    @staticmethod
    def _unreadable(function: str, case, exc: Exception) -> str:
        return tr("`{function}`'s process sent the grader a reply it cannot read on the case {case} ({error}): "
                  "a graded function must return plain results (tensors, numbers, tuples), and nothing in the "
                  "notebook may write to the grader's channel.").format(function=function, case=case.label, error=exc)

    def close(self) -> None:
        if self.child is not None:
            self.child.close()
            self.child, self.key = None, None
        if self.worker is not None:
            self.worker.stop()
            self.output = self.worker.text_output()
            self.worker = None
