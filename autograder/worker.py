"""The learner's side of grading: `python -m autograder.worker`, run inside the sandbox.

It executes the submission's cells one request at a time and calls the graded functions on the
cases the grader sends, replying with plain data. It never judges anything: whatever the
learner's code does to this process (patching torch, printing, exiting) can change only the
learner's own results, which the grader then judges in its own process.

Requests arrive on stdin and replies leave on stdout, both framed by :mod:`autograder.wire`;
before any learner code runs, those two descriptors are moved aside, standard input becomes
empty and everything printed goes to stderr, which the grader caps and discards.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys
import traceback


def _private_streams():
    requests = os.fdopen(os.dup(0), "rb", buffering=0)
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # input() meets end of file instead of waiting forever
    os.dup2(2, 1)  # prints join stderr, away from the replies
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False, buffering=1)
    return requests, replies


class _InMemory(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the course's reference modules from text the grader sent: no file of them is
    visible in the sandbox, and once loaded, the text is dropped."""

    def __init__(self, sources: dict[str, str]):
        self.sources = sources

    def find_spec(self, name, path=None, target=None):
        if name not in self.sources:
            return None
        package = name.count(".") == 0
        return importlib.util.spec_from_loader(name, self, is_package=package)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        source = self.sources[module.__name__]
        exec(compile(source, f"<{module.__name__}>", "exec"), module.__dict__)  # noqa: S102


def _load_reference(sources: dict[str, str]) -> None:
    finder = _InMemory(dict(sources))
    sys.meta_path.insert(0, finder)
    try:
        for name in sorted(sources, key=lambda n: n.count(".")):
            importlib.import_module(name)
    finally:
        sys.meta_path.remove(finder)
        finder.sources.clear()


def _where(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith("<cell")]
    return f"{frames[-1].filename} line {frames[-1].lineno}: {frames[-1].line}" if frames else ""


def main() -> None:
    requests, replies = _private_streams()

    import torch

    from . import wire
    from .framework import Tripwires, call_learner, raised

    torch.set_num_threads(1)
    namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__}
    wires: Tripwires | None = None
    reference = None

    while True:
        try:
            request = wire.receive(requests)
        except EOFError:
            return
        op = request.get("op")
        try:
            if op == "setup":
                _load_reference(request.get("modules", {}))
                # Installed before any learner code, so that early imports get the wrapped names.
                wires = Tripwires(request.get("forbidden", [])).install()
                if request.get("reference"):
                    reference = sys.modules.get(f"reference.{request['reference']}")
                torch.manual_seed(0)
                reply = {"ok": True}
            elif op == "cell":
                try:
                    exec(compile(request["source"], f"<cell {request['index']}>", "exec"), namespace)  # noqa: S102
                    reply = {"ok": True}
                except BaseException as exc:  # SystemExit included: a cell may not end the worker
                    reply = {"error": [type(exc).__name__, str(exc)[:1000], _where(exc)]}
            elif op == "call":
                name = request["function"]
                fn = namespace.get(name)
                if fn is None:
                    reply = {"missing": True}
                else:
                    # The grader's versions of the other graded functions, so that one mistake is
                    # charged once: a wrong softmax does not also sink attention.
                    injected = {n: getattr(reference, n) for n in request.get("inject", []) if hasattr(reference, n)}
                    saved = {n: namespace.get(n) for n in injected}
                    namespace.update(injected)
                    torch.manual_seed(0)
                    try:
                        case = wire.decode(request["case"])
                        result = call_learner(fn, case, wires, request.get("forbidden", []))
                    except BaseException as exc:
                        result = raised(exc)
                    finally:
                        for n, v in saved.items():
                            if v is None:
                                namespace.pop(n, None)
                            else:
                                namespace[n] = v
                    reply = {"result": wire.encode(result)}
            elif op == "exit":
                return
            else:
                reply = {"error": ["ProtocolError", f"unknown request {op!r}", ""]}
        except BaseException as exc:  # the worker itself must answer, whatever happened
            reply = {"error": [type(exc).__name__, str(exc)[:1000], ""]}
        try:
            wire.send(replies, reply)
        except BaseException:
            return


if __name__ == "__main__":
    main()
