"""Catalogues of realistic wrong implementations: tests/mistakes/<notebook>.py lists MISTAKES.

Each entry is a mistake a learner really makes, written as the learner would write it, and the
words its check must use to name it. The tests prove every one is caught and diagnosed.

Each catalogue also names one edit (``SPOILED``) that turns the chapter's solution into a wrong
submission, so that the tests which grade a whole class build one for every chapter there is.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Mistake:
    check_id: str  # "<notebook>.<function>"
    name: str  # what the learner did wrong, in a few words
    fn: Callable
    diagnosis: str  # a phrase the check's message must contain
    hidden_only: bool = False  # only the hidden cases are expected to expose it



@dataclass(frozen=True)
class Spoiled:
    """One edit of a solution cell: in the answer cell ``grade_id``, ``right`` becomes ``wrong``."""

    grade_id: str
    right: str
    wrong: str
