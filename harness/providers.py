"""Objects a case names instead of carrying: the registry of what either side may build.

Some things a graded function needs are not plain data that can cross to the sandbox (the small
model a greedy decoder drives, a seeded ``torch.Generator``). A case carries a
:class:`Provided` instead, a name and plain arguments, and the learner's side and the grader's
side each build their own copy with the factory registered under that name, so both get the same
weights and the same draws. Only registered factories exist: a name nothing registered is an
error, never an import of whatever the name says.

The course's factories are registered by :mod:`harness.toys`, which imports this module; this
module imports none of them, so that a registry never depends on what is registered in it.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class Provided:
    """An object the grader builds on the learner's side from a name and plain arguments.

    Used for things a function under test needs that are not plain data, such as the small
    model a greedy decoder drives. Only factories registered in :data:`PROVIDERS` exist.
    """

    name: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)


PROVIDERS: dict[str, Callable[..., Any]] = {}


def provider(name: str):
    """Register a factory for :class:`Provided` objects."""

    def register(factory):
        PROVIDERS[name] = factory
        return factory

    return register


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)
