"""The checks of every chapter, by id: "<notebook>.<function>" such as "attention.softmax".

The checks of the notebook ``<name>.ipynb`` live in ``autograder/checks/<name>.py``, which
lists its check classes in ``CHECKS``.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from ..framework import Check, Raised
from ..messages import tr


def chapter_checks(notebook: str) -> dict[str, Check]:
    if not notebook.isidentifier():
        raise KeyError(f"{notebook!r} is not a notebook name")
    try:
        module = importlib.import_module(f"{__name__}.{notebook}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{notebook}":
            raise
        raise KeyError(tr("no checks for a notebook named {notebook}").format(notebook=repr(notebook))) from None
    return {cls.function: cls() for cls in module.CHECKS}


def get(check_id: str) -> Check:
    notebook, _, function = check_id.partition(".")
    checks = chapter_checks(notebook)
    if function not in checks:
        raise KeyError(tr("no check {check}; {notebook} has {checks}").format(
            check=repr(check_id), notebook=notebook, checks=sorted(checks)))
    return checks[function]


@dataclass(frozen=True)
class Mismatch:
    """Why a learner's module could not take the case's weights (a StateMismatch)."""

    missing: tuple[str, ...]  # parameter names the exercise gives that the module lacks
    unexpected: tuple[str, ...]  # parameters the module has that the exercise does not ask for
    shared: tuple[tuple[str, str], ...]  # (alias, original): one object under two names


def state_mismatch(result: Any) -> Mismatch | None:
    """The parts of a StateMismatch result, or None when the result is something else.

    The learner's side reports the mismatch as a :class:`Raised` whose ``details`` carry the
    parameter names as data (they cross the grader's wire as fields, not as a sentence).
    """
    if not (isinstance(result, Raised) and result.type == "StateMismatch"):
        return None
    details = result.details or {}
    return Mismatch(tuple(details.get("missing", ())), tuple(details.get("unexpected", ())),
                    tuple(tuple(pair) for pair in details.get("shared", ())))
