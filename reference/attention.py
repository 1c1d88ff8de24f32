"""Reference implementation: Chapter 2 exercises: attention

Generated from solutions/ch02_attention/attention.py by `python -m course.tools release`.
Do not edit: change the instructor notebook and regenerate.
"""


import math

import torch


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable softmax of ``x`` along ``dim``."""
    # The maximum of each slice, not of the whole tensor: slices may live on very different scales.
    shifted = x - x.amax(dim=dim, keepdim=True)
    exps = torch.exp(shifted)
    return exps / exps.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T / sqrt(d_k)) v, with masked keys given zero weight."""
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., T_q, T_k)
    if mask is None:
        weights = softmax(scores, dim=-1)  # (..., T_q, T_k)
    else:
        visible = mask.any(dim=-1, keepdim=True)  # (..., T_q, 1): does the query see any key?
        scores = scores.masked_fill(~mask, float("-inf"))
        # A row of nothing but -inf would give 0/0; give it finite scores and zero it afterwards,
        # which also keeps its gradient free of NaN.
        scores = scores.masked_fill(~visible, 0.0)
        weights = softmax(scores, dim=-1) * visible  # (..., T_q, T_k)
    return weights @ v, weights  # (..., T_q, d_v), (..., T_q, T_k)


def additive_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    W_q: torch.Tensor,
    W_k: torch.Tensor,
    w_v: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Bahdanau attention: softmax over keys of w_v . tanh(q W_q + k W_k), then weights @ v."""
    features = (q @ W_q).unsqueeze(-2) + (k @ W_k).unsqueeze(-3)  # (..., T_q, T_k, d_a)
    scores = torch.tanh(features) @ w_v  # (..., T_q, T_k)
    if mask is None:
        weights = softmax(scores, dim=-1)  # (..., T_q, T_k)
    else:
        visible = mask.any(dim=-1, keepdim=True)  # (..., T_q, 1)
        scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~visible, 0.0)
        weights = softmax(scores, dim=-1) * visible  # (..., T_q, T_k)
    return weights @ v, weights  # (..., T_q, d_v), (..., T_q, T_k)


def score_variance(q: torch.Tensor, k: torch.Tensor, scaled: bool = False) -> float:
    """Sample variance of the row-wise scores q_i . k_i, optionally divided by sqrt(d_k)."""
    scores = (q * k).sum(dim=-1)  # (n,)
    if scaled:
        scores = scores / math.sqrt(q.shape[-1])
    return scores.var().item()
