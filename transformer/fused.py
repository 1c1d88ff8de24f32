"""The kernel switch: each of a model's layers computed by the course's code or by PyTorch's kernel for the
same function, with the same parameters.

A path is a pair of classes with the same parameters and buffers, the course's and a subclass whose
``forward`` calls PyTorch's kernel; switching changes each layer's class in place, so a model (and a
checkpoint) is the same whichever path computes it. ``"course"`` is the default: it is the code the learner
wrote and can read. The course has two:

Attention (:func:`use_attention`).

* ``"course"``: the chapters' own ``scaled_dot_product_attention``, which also keeps the
  attention weights for the pictures (``attn_weights``).
* ``"fused"``: PyTorch's ``F.scaled_dot_product_attention``, which picks a fused kernel
  (FlashAttention or memory-efficient attention on a GPU) and never materialises the weights.
  Faster, and the same function: a test checks outputs and gradients against the course path.

Both take the course's masks (True where a query may attend), which is also the meaning
PyTorch gives a boolean ``attn_mask``. A query that may attend to no key at all (which the
capstone's masks never produce) gets a zero context on both paths, the course's convention: chapter 2
shows PyTorch's kernel returning zeros for such a row, and with the pinned torch on a CPU the fused path
gives zeros, with finite gradients, through the math backend and the flash kernel alike.

Layer normalisation (:func:`use_norm`).

* ``"course"``: chapter 4's own ``LayerNorm``, written as the formula reads (mean, centre,
  variance, divide, scale, shift).
* ``"fused"``: PyTorch's ``F.layer_norm``, one kernel forward and one backward. The same function
  (the variance divides by d_model, eps inside the square root): a test checks outputs and gradients
  against the course path.

Why it matters: at the capstone's width (128 features, a few thousand tokens a batch) the course's
element-wise operations and their backward passes are a large part of a CPU step, because each
reads and writes the whole activation. At the CPU preset's settings the fused kernel trained 1.23
times as many tokens a second on one thread and 1.06 to 1.19 times on two (benchmarks/RESULTS.md);
the CPU preset takes it, with Adam's fused kernel (with ``--parts mine`` the learner's LayerNorm runs
instead).
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from .parts import course_part

PATHS = ("course", "fused")


def switch(model: nn.Module, path: str, course: type[nn.Module], fused: type[nn.Module], what: str) -> nn.Module:
    """Every layer of ``model`` that is exactly ``course`` or ``fused`` becomes ``path``'s class, in place."""
    if path not in PATHS:
        raise ValueError(f"unknown {what} path {path!r}; choose one of {', '.join(PATHS)}")
    target = fused if path == "fused" else course
    for module in model.modules():
        if type(module) in (course, fused):  # a learner's own class, or a subclass, is left alone
            module.__class__ = target
    return model


def path_of(model: nn.Module, course: type[nn.Module], fused: type[nn.Module]) -> str:
    """"course", "fused", "mixed", or "none" when the model has no such layer."""
    kinds = {type(m) for m in model.modules() if type(m) in (course, fused)}
    if kinds == {fused}:
        return "fused"
    if kinds == {course}:
        return "course"
    return "mixed" if kinds else "none"


# ---------------------------------------------------------------------------------------------
# attention
# ---------------------------------------------------------------------------------------------

# The course's multi-head attention, from the chapter that grades it (transformer.parts.ROLES): the one
# attention class whose path can be switched; a chapter that adds no attention class adds nothing here.
MultiHeadAttention = course_part("MultiHeadAttention")
split_heads, merge_heads = course_part("split_heads"), course_part("merge_heads")

#: On a CPU, keys up to this many are attended with PyTorch's math backend rather than its CPU
#: flash kernel, whose blocking costs more than it saves on short sequences. Measured with the
#: capstone's CPU preset (about 12 tokens a word, 2 threads, benchmarks/RESULTS.md): 37,611 training
#: tokens/s with the math backend, 32,371 with the flash kernel, 36,758 with the course's own
#: attention. At chapter 7's 128-byte windows the flash kernel was the faster; the limit lies
#: between the two measured lengths.
CPU_MATH_MAX_KEYS = 32


class FusedMultiHeadAttention(MultiHeadAttention):
    """The course's multi-head attention with PyTorch's fused kernel inside; no new parameters."""

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        q = split_heads(self.w_q(query), self.h)  # (B, h, T_q, d_k)
        k = split_heads(self.w_k(key), self.h)  # (B, h, T_k, d_k)
        v = split_heads(self.w_v(value), self.h)  # (B, h, T_k, d_k)
        mask = None
        if attn_mask is not None:
            mask = attn_mask.unsqueeze(1) if attn_mask.dim() == 3 else attn_mask  # (B, 1, T_q, T_k) or (T_q, T_k)
        if key_padding_mask is not None:
            real_key = ~key_padding_mask[:, None, None, :]  # (B, 1, 1, T_k)
            mask = real_key if mask is None else mask & real_key  # (B, 1, T_q, T_k)
        dropout = self.dropout.p if self.training else 0.0
        short_on_cpu = q.device.type == "cpu" and k.shape[-2] <= CPU_MATH_MAX_KEYS
        with sdpa_kernel(SDPBackend.MATH) if short_on_cpu else contextlib.nullcontext():
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)  # (B, h, T_q, d_k)
        self.attn_weights = None  # the fused kernel never forms them
        return self.w_o(merge_heads(context))  # (B, T_q, d_model)


def use_attention(model: nn.Module, path: str) -> nn.Module:
    """Switch every course attention layer of ``model`` to ``path`` ("course" or "fused"), in place."""
    return switch(model, path, MultiHeadAttention, FusedMultiHeadAttention, "attention")


def attention_path(model: nn.Module) -> str:
    return path_of(model, MultiHeadAttention, FusedMultiHeadAttention)


# ---------------------------------------------------------------------------------------------
# layer normalisation
# ---------------------------------------------------------------------------------------------

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
