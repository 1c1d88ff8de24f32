"""What the checks of functions that draw at random share: the acceptance bounds of a count, the
learner's generator given as a seed, and the groups of cases drawn again with one seed or another.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ...framework import Case, Provided
from ...messages import N_

#: half-width of an acceptance interval, in standard deviations of the binomial count
SIGMAS = 5.0
#: draws added to every interval, for counts whose expectation is a handful or less
SLACK = 3.0


def bound(n: int, p: float) -> float:
    """How far a Binomial(n, p) count may stray from n * p before a check calls it wrong."""
    return SIGMAS * math.sqrt(max(n * p * (1.0 - p), 0.0)) + SLACK


def seeded_generator(seed: int) -> Provided:
    return Provided("generator", {"seed": seed})


#: what the checks of chapter 7 tell a learner whose function returned on arguments it must refuse
RETURNED = N_("{name} returned a result on the case {label}: raise ValueError instead, with a message that says what "
              "is wrong with `{argument}`.")


def seed_groups(cases: Sequence[Case], results: Sequence[Any]) -> list[dict[str, tuple[Case, Any]]]:
    """The cases tagged "main", each with the "again" and "other-seed" cases that follow it."""
    groups: list[dict[str, tuple[Case, Any]]] = []
    for c, r in zip(cases, results):
        if c.tag == "main":
            groups.append({"main": (c, r)})
        elif c.tag in ("again", "other-seed") and groups:
            groups[-1][c.tag] = (c, r)
    return groups
