"""Catalogues of realistic wrong implementations: tests/mistakes/<notebook>.py lists MISTAKES.

Each entry is a mistake a learner really makes, written as the learner would write it, and the
words its check must use to name it. The tests prove every one is caught and diagnosed.
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

