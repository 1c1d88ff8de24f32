"""Two ways to compute the model's attention, with the same parameters.

* ``"course"``: the chapters' own ``scaled_dot_product_attention``, which also keeps the
  attention weights for the pictures (``attn_weights``). The default: it is the code the learner
  wrote and can read.
* ``"fused"``: PyTorch's ``F.scaled_dot_product_attention``, which picks a fused kernel
  (FlashAttention or memory-efficient attention on a GPU) and never materialises the weights.
  Faster, and the same function: a test checks outputs and gradients against the course path.

Both take the course's masks (True where a query may attend), which is also the meaning
PyTorch gives a boolean ``attn_mask``. A query that may attend to no key at all (which the
capstone's masks never produce) gets zeros on the course path and NaN on the fused one.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from .kernel_paths import path_of, switch
from .parts import course_part

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
