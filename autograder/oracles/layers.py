"""The layers as functions of a state, in the dtype of their inputs (pass float64 for an oracle).

Each computes what a course module computes, with keyword options that reproduce a known mistake, so
that a check can name a wrong answer; each takes the state first, then its tensors, then keyword-only
options.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from .dropout import Dropout, drop
from .masks import allowed
from .states import State


def linear(state: State, x: torch.Tensor, *, prefix: str) -> torch.Tensor:
    """x W^T + b with the weights stored under ``prefix`` ("w_q.", "feed_forward.w_1.", ...)."""
    bias = state.get(f"{prefix}bias")
    return F.linear(x, state[f"{prefix}weight"].to(x.dtype), None if bias is None else bias.to(x.dtype))


def split_heads(y: torch.Tensor, h: int) -> torch.Tensor:
    """(B, T, d_model) -> (B, h, T, d_k): the features cut into h blocks, the head axis before the positions."""
    B, T, d_model = y.shape
    return y.reshape(B, T, h, d_model // h).transpose(1, 2)


def feed_forward(state: State, x: torch.Tensor, *, prefix: str = "", dropout: Dropout | None = None,
                 activation: Callable[[torch.Tensor], torch.Tensor] = torch.relu) -> torch.Tensor:
    """max(0, x W_1 + b_1) W_2 + b_2, with dropout on the hidden activations (training mode)."""
    hidden = activation(linear(state, x, prefix=f"{prefix}w_1."))  # (..., d_ff)
    return linear(state, drop(dropout, hidden), prefix=f"{prefix}w_2.")  # (..., d_model)


def layer_norm(
    state: State | None,
    x: torch.Tensor,
    *,
    prefix: str = "",
    eps: float = 1e-5,
    dims: Sequence[int] = (-1,),
    unbiased: bool = False,
    eps_outside: bool = False,
    sqrt: bool = True,
    naive_variance: bool = False,
    scale: bool = True,
    shift: bool = True,
    swap_affine: bool = False,
) -> torch.Tensor:
    """gamma * (x - mean) / sqrt(var + eps) + beta over the last axis, biased variance.

    ``state`` None means a fresh LayerNorm (gamma ones, beta zeros). The keyword options reproduce
    mistakes: other ``dims``, the ``unbiased`` variance, eps outside the square root, no square
    root, the variance as E[x^2] - E[x]^2, gamma or beta left out, or the two swapped.
    """
    d = x.shape[-1]
    gamma = torch.ones(d, dtype=x.dtype) if state is None else state[f"{prefix}gamma"].to(x.dtype)
    beta = torch.zeros(d, dtype=x.dtype) if state is None else state[f"{prefix}beta"].to(x.dtype)
    dims = tuple(dims)
    plain = dims == (-1,) and not (unbiased or eps_outside or naive_variance) and sqrt
    if plain and scale and shift and not swap_affine:
        return F.layer_norm(x, (d,), gamma, beta, eps)
    mean = x.mean(dim=dims, keepdim=True)
    if naive_variance:
        var = (x * x).mean(dim=dims, keepdim=True) - mean * mean  # loses its digits far from zero
    else:
        var = x.var(dim=dims, keepdim=True, unbiased=unbiased)
    if eps_outside:
        x_hat = (x - mean) / (var.sqrt() + eps)
    else:
        x_hat = (x - mean) / ((var + eps).sqrt() if sqrt else var + eps)
    if swap_affine:
        gamma, beta = beta, gamma
    return (gamma * x_hat if scale else x_hat) + (beta if shift else 0.0)


SCALES = {
    "d_k": lambda d_k, d_model: math.sqrt(d_k),
    "d_model": lambda d_k, d_model: math.sqrt(d_model),
    "d_k-linear": lambda d_k, d_model: d_k,
    "d_model-linear": lambda d_k, d_model: d_model,
    "none": lambda d_k, d_model: 1.0,
}


def multi_head_attention(
    state: State,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    h: int,
    prefix: str = "",
    attn_mask: torch.Tensor | None = None,
    key_padding_mask: torch.Tensor | None = None,
    dropout: Dropout | None = None,
    split: str = "right",
    merge: str = "right",
    use_w_o: bool = True,
    scale: str = "d_k",
    projections: tuple[str, str, str] = ("w_q", "w_k", "w_v"),
    attn_rule: str = "right",
    padding_rule: str = "right",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-head attention with the course's names and masks: (output, weights before dropout).

    A query that may attend to no key gets zero weights, hence the output w_o's bias. In
    training mode ``dropout`` drops attention weights, as PyTorch and the course's layer do.
    The keyword options reproduce mistakes: ``split``/``merge`` ``"no-transpose"`` (and merge
    ``"interleaved"``), ``use_w_o=False``, a ``scale`` from :data:`SCALES`, other
    ``projections``, and the mask rules of :func:`allowed`.
    """
    B, T_q, d_model = query.shape
    d_k = d_model // h

    def heads(x: torch.Tensor, name: str) -> torch.Tensor:
        y = linear(state, x, prefix=f"{prefix}{name}.")  # (B, T, d_model)
        T = y.shape[1]
        if split == "no-transpose":
            return y.reshape(B, h, T, d_k)  # positions mixed into heads
        return split_heads(y, h)  # (B, h, T, d_k)

    q, k, v = heads(query, projections[0]), heads(key, projections[1]), heads(value, projections[2])
    scores = q @ k.transpose(-2, -1) / SCALES[scale](d_k, d_model)  # (B, h, T_q, T_k)
    allow = allowed(attn_mask, key_padding_mask, attn_rule=attn_rule, padding_rule=padding_rule)
    if allow is not None:
        scores = scores.masked_fill(~allow, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(nan=0.0)  # (B, h, T_q, T_k)
    context = drop(dropout, weights) @ v  # (B, h, T_q, d_k)
    if merge == "no-transpose":
        merged = context.reshape(B, T_q, d_model)
    elif merge == "interleaved":
        merged = context.permute(0, 2, 3, 1).reshape(B, T_q, d_model)  # (B, T_q, d_k, h) flattened
    else:
        merged = context.transpose(1, 2).reshape(B, T_q, d_model)  # (B, T_q, d_model)
    out = linear(state, merged, prefix=f"{prefix}w_o.") if use_w_o else merged
    return out, weights


def sublayer(
    state: State,
    x: torch.Tensor,
    f: Callable[[torch.Tensor], torch.Tensor],
    *,
    norm: str,
    wiring: str = "post",
    dropout: Dropout | None = None,
    dropout_at: str = "sublayer",
) -> torch.Tensor:
    """One residual sub-layer of the paper: LayerNorm(x + Dropout(f(x))), the norm's weights under ``norm``.

    ``wiring`` reproduces mistakes: ``"pre"`` x + f(LayerNorm(x)); ``"inner"`` x + LayerNorm(f(x));
    ``"none"`` LayerNorm(f(x)), no residual. ``dropout_at`` says where the dropout went:
    ``"sublayer"`` (right), ``"sum"`` (on x + f(x)), ``"norm"`` (after the norm) or ``"none"``.
    """
    def n(z: torch.Tensor) -> torch.Tensor:
        return layer_norm(state, z, prefix=f"{norm}.")

    def d(z: torch.Tensor, where: str) -> torch.Tensor:
        return drop(dropout, z) if dropout_at == where else z

    if wiring == "pre":
        return x + d(f(n(x)), "sublayer")
    if wiring == "inner":
        return x + n(d(f(x), "sublayer"))
    if wiring == "none":
        return n(d(f(x), "sublayer"))
    out = d(f(x), "sublayer")
    return d(n(d(x + out, "sum")), "norm")
