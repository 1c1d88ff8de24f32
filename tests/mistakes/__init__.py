"""Catalogues of realistic wrong implementations: tests/mistakes/<notebook>.py lists MISTAKES.

Each entry is a mistake a learner really makes, written as the learner would write it, and the
words its check must use to name it, and the rule of its check that must catch it. The tests prove
every one is caught and diagnosed by that rule: a mistake that another rule catches first fails.

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
    visible_only: bool = False  # only a visible case exposes it (a case too large to run twice, public anyway)
    rule: str = ""  # the name of the check's rule that must catch it (CheckFailed.rule)



@dataclass(frozen=True)
class Spoiled:
    """One edit of a solution cell: in the answer cell ``grade_id``, ``right`` becomes ``wrong``."""

    grade_id: str
    right: str
    wrong: str
