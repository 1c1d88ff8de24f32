"""Two ways to compute the model's layer normalisation, with the same parameters.

* ``"course"``: chapter 4's own ``LayerNorm``, written as the formula reads (mean, centre,
  variance, divide, scale, shift). The default: it is the code the learner wrote and can read.
* ``"fused"``: PyTorch's ``F.layer_norm``, one kernel forward and one backward. The same function
  (the variance divides by d_model, eps inside the square root): a test checks outputs and gradients
  against the course path.

Why it matters: at the capstone's width (128 features, a few thousand tokens a batch) the course's
element-wise operations and their backward passes are a large part of a CPU step, because each
reads and writes the whole activation. At the CPU preset's settings the fused kernel trained 1.23
times as many tokens a second on one thread and 1.06 to 1.19 times on two (benchmarks/RESULTS.md);
the preset keeps the course's code, since the extra steps did not lower a ten-minute run's error.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .kernel_paths import path_of, switch
from .parts import course_part

# The course's layer normalisation, from the chapter that grades it (transformer.parts.ROLES)
LayerNorm = course_part("LayerNorm")


class FusedLayerNorm(LayerNorm):
    """The course's LayerNorm computed by PyTorch's kernel; no new parameters."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_model) -> (..., d_model)."""
        return F.layer_norm(x, self.gamma.shape, self.gamma, self.beta, self.eps)


def use_norm(model: nn.Module, path: str) -> nn.Module:
    """Switch every course LayerNorm of ``model`` to ``path`` ("course" or "fused"), in place."""
    return switch(model, path, LayerNorm, FusedLayerNorm, "layer-norm")


def norm_path(model: nn.Module) -> str:
    return path_of(model, LayerNorm, FusedLayerNorm)
