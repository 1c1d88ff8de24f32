"""Dropout as the learner's modules draw it, reproduced from a private generator per case."""
from __future__ import annotations

from collections.abc import Sequence

import torch


class Dropout:
    """The masks nn.Dropout draws in the learner's process, reproduced without global state.

    A module case runs right after ``torch.manual_seed(seed)``, so every nn.Dropout in the
    learner's module draws its mask from the default generator in the order the forward pass
    reaches it. On the CPU that mask is ``empty_like(input).bernoulli_(1 - p)`` scaled by
    ``1 / (1 - p)``; drawn here from a private generator with the same seed, calls in the same
    order give bit for bit the same masks, whatever other threads do meanwhile. Like nn.Dropout,
    p = 0 and p = 1 draw nothing. ``dtype`` is the dtype of the learner's tensors, which must be
    contiguous, as the course's modules make them: bernoulli_ fills memory in storage order, so a
    transposed input would get the same numbers in other places.
    """

    def __init__(self, p: float, dtype: torch.dtype = torch.float32, seed: int = 0,
                 generator: torch.Generator | None = None):
        self.p, self.dtype = p, dtype
        self.generator = torch.Generator().manual_seed(seed) if generator is None else generator

    def at(self, p: float) -> Dropout:
        """Another nn.Dropout of the same module, with probability p: it draws from the same stream."""
        return Dropout(p, self.dtype, generator=self.generator)

    def mask(self, shape: Sequence[int]) -> torch.Tensor:
        """The next scaled mask (0 or 1 / (1 - p) per entry), as float64."""
        if self.p == 0:
            return torch.ones(tuple(shape), dtype=torch.float64)
        if self.p == 1:
            return torch.zeros(tuple(shape), dtype=torch.float64)
        kept = torch.empty(tuple(shape), dtype=self.dtype).bernoulli_(1 - self.p, generator=self.generator)
        return kept.div_(1 - self.p).double()  # scaled in the learner's dtype, as nn.Dropout scales it

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.mask(x.shape).to(x.dtype)


def drop(dropout: Dropout | None, x: torch.Tensor) -> torch.Tensor:
    return x if dropout is None else dropout(x)
