"""PyTorch's own layers loaded with a course module's weights: the oracles of chapters 3 to 5.

The course's modules name their parameters after the paper, and every exercise uses exactly
these names (the checks load weights by them):

=====================  ==========================================================
MultiHeadAttention     w_q, w_k, w_v, w_o                    (nn.Linear(d_model, d_model))
PositionwiseFeedForward w_1 (d_model -> d_ff), w_2 (d_ff -> d_model)
LayerNorm              gamma, beta                           (shape (d_model,))
EncoderLayer           self_attn, feed_forward, norm1, norm2
DecoderLayer           self_attn, cross_attn, feed_forward, norm1, norm2, norm3
Encoder, Decoder       layers.0, layers.1, ...
=====================  ==========================================================

Masks follow one rule throughout the course: an attention mask is True where a query *may*
attend; a key-padding mask is True where a key *is padding*. PyTorch's nn layers want the
opposite for boolean attention masks, which :func:`torch_attn_mask` translates.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

State = dict[str, torch.Tensor]


def _linear(g: torch.Generator, fan_in: int, fan_out: int, prefix: str, bias: bool = True) -> State:
    bound = 1.0 / math.sqrt(fan_in)
    state = {f"{prefix}weight": (torch.rand(fan_out, fan_in, generator=g) * 2 - 1) * bound}
    if bias:
        state[f"{prefix}bias"] = (torch.rand(fan_out, generator=g) * 2 - 1) * bound
    return state


def mha_state(g: torch.Generator, d_model: int, prefix: str = "", bias: bool = True) -> State:
    state: State = {}
    for name in ("w_q", "w_k", "w_v", "w_o"):
        state |= _linear(g, d_model, d_model, f"{prefix}{name}.", bias)
    return state


def ffn_state(g: torch.Generator, d_model: int, d_ff: int, prefix: str = "") -> State:
    return _linear(g, d_model, d_ff, f"{prefix}w_1.") | _linear(g, d_ff, d_model, f"{prefix}w_2.")


def layer_norm_state(g: torch.Generator, d_model: int, prefix: str = "") -> State:
    # Not ones and zeros: a LayerNorm that ignores gamma or beta must be caught.
    return {
        f"{prefix}gamma": 1.0 + 0.2 * torch.randn(d_model, generator=g),
        f"{prefix}beta": 0.2 * torch.randn(d_model, generator=g),
    }


def encoder_layer_state(g: torch.Generator, d_model: int, d_ff: int, prefix: str = "") -> State:
    return (
        mha_state(g, d_model, f"{prefix}self_attn.")
        | ffn_state(g, d_model, d_ff, f"{prefix}feed_forward.")
        | layer_norm_state(g, d_model, f"{prefix}norm1.")
        | layer_norm_state(g, d_model, f"{prefix}norm2.")
    )


def decoder_layer_state(g: torch.Generator, d_model: int, d_ff: int, prefix: str = "") -> State:
    return (
        mha_state(g, d_model, f"{prefix}self_attn.")
        | mha_state(g, d_model, f"{prefix}cross_attn.")
        | ffn_state(g, d_model, d_ff, f"{prefix}feed_forward.")
        | layer_norm_state(g, d_model, f"{prefix}norm1.")
        | layer_norm_state(g, d_model, f"{prefix}norm2.")
        | layer_norm_state(g, d_model, f"{prefix}norm3.")
    )


def stack_state(layer_state, g: torch.Generator, N: int, *args, prefix: str = "") -> State:
    state: State = {}
    for i in range(N):
        state |= layer_state(g, *args, prefix=f"{prefix}layers.{i}.")
    return state


# ---------------------------------------------------------------------------------------------
# The same layers as functions of such a state (in the dtype of x): for working out what a
# known mistake would have returned
# ---------------------------------------------------------------------------------------------


def linear(state: State, prefix: str, x: torch.Tensor) -> torch.Tensor:
    bias = state.get(f"{prefix}bias")
    return F.linear(x, state[f"{prefix}weight"].to(x.dtype), None if bias is None else bias.to(x.dtype))


def feed_forward(state: State, x: torch.Tensor, prefix: str = "") -> torch.Tensor:
    """max(0, x W_1 + b_1) W_2 + b_2."""
    return linear(state, f"{prefix}w_2.", torch.relu(linear(state, f"{prefix}w_1.", x)))  # (..., d_model)


def layer_norm(state: State, x: torch.Tensor, prefix: str = "", eps: float = 1e-5) -> torch.Tensor:
    gamma, beta = state[f"{prefix}gamma"].to(x.dtype), state[f"{prefix}beta"].to(x.dtype)
    return F.layer_norm(x, x.shape[-1:], gamma, beta, eps)


# ---------------------------------------------------------------------------------------------
# Loading those weights into PyTorch's layers (float64, dropout off)
# ---------------------------------------------------------------------------------------------


def _load_mha(target: nn.MultiheadAttention, state: State, prefix: str) -> None:
    with torch.no_grad():
        target.in_proj_weight.copy_(torch.cat([state[f"{prefix}w_{n}.weight"] for n in "qkv"]))
        target.out_proj.weight.copy_(state[f"{prefix}w_o.weight"])
        if target.in_proj_bias is not None:
            target.in_proj_bias.copy_(torch.cat([state[f"{prefix}w_{n}.bias"] for n in "qkv"]))
            target.out_proj.bias.copy_(state[f"{prefix}w_o.bias"])


def _load_linear(target: nn.Linear, state: State, prefix: str) -> None:
    with torch.no_grad():
        target.weight.copy_(state[f"{prefix}weight"])
        target.bias.copy_(state[f"{prefix}bias"])


def _load_norm(target: nn.LayerNorm, state: State, prefix: str) -> None:
    with torch.no_grad():
        target.weight.copy_(state[f"{prefix}gamma"])
        target.bias.copy_(state[f"{prefix}beta"])


def torch_mha(state: State, d_model: int, h: int, prefix: str = "") -> nn.MultiheadAttention:
    bias = f"{prefix}w_q.bias" in state
    mha = nn.MultiheadAttention(d_model, h, dropout=0.0, bias=bias, batch_first=True, dtype=torch.float64)
    _load_mha(mha, state, prefix)
    return mha.eval()


def torch_encoder_layer(state: State, d_model: int, h: int, d_ff: int, prefix: str = "") -> nn.TransformerEncoderLayer:
    layer = nn.TransformerEncoderLayer(
        d_model, h, d_ff, dropout=0.0, activation="relu", batch_first=True, norm_first=False, dtype=torch.float64
    )
    _load_mha(layer.self_attn, state, f"{prefix}self_attn.")
    _load_linear(layer.linear1, state, f"{prefix}feed_forward.w_1.")
    _load_linear(layer.linear2, state, f"{prefix}feed_forward.w_2.")
    _load_norm(layer.norm1, state, f"{prefix}norm1.")
    _load_norm(layer.norm2, state, f"{prefix}norm2.")
    return layer.eval()


def torch_decoder_layer(state: State, d_model: int, h: int, d_ff: int, prefix: str = "") -> nn.TransformerDecoderLayer:
    layer = nn.TransformerDecoderLayer(
        d_model, h, d_ff, dropout=0.0, activation="relu", batch_first=True, norm_first=False, dtype=torch.float64
    )
    _load_mha(layer.self_attn, state, f"{prefix}self_attn.")
    _load_mha(layer.multihead_attn, state, f"{prefix}cross_attn.")
    _load_linear(layer.linear1, state, f"{prefix}feed_forward.w_1.")
    _load_linear(layer.linear2, state, f"{prefix}feed_forward.w_2.")
    for i in (1, 2, 3):
        _load_norm(getattr(layer, f"norm{i}"), state, f"{prefix}norm{i}.")
    return layer.eval()


def torch_encoder(state: State, N: int, d_model: int, h: int, d_ff: int, prefix: str = "") -> nn.TransformerEncoder:
    layer = nn.TransformerEncoderLayer(d_model, h, d_ff, dropout=0.0, batch_first=True, dtype=torch.float64)
    encoder = nn.TransformerEncoder(layer, N, enable_nested_tensor=False)
    for i in range(N):
        encoder.layers[i] = torch_encoder_layer(state, d_model, h, d_ff, f"{prefix}layers.{i}.")
    return encoder.eval()


def torch_decoder(state: State, N: int, d_model: int, h: int, d_ff: int, prefix: str = "") -> nn.TransformerDecoder:
    layer = nn.TransformerDecoderLayer(d_model, h, d_ff, dropout=0.0, batch_first=True, dtype=torch.float64)
    decoder = nn.TransformerDecoder(layer, N)
    for i in range(N):
        decoder.layers[i] = torch_decoder_layer(state, d_model, h, d_ff, f"{prefix}layers.{i}.")
    return decoder.eval()


def torch_attn_mask(attn_mask: torch.Tensor | None, h: int) -> torch.Tensor | None:
    """The course's attention mask (True = may attend) as nn layers want it (True = blocked).

    (T_q, T_k) stays 2-D; (B, T_q, T_k) becomes (B * h, T_q, T_k), one copy per head.
    """
    if attn_mask is None:
        return None
    blocked = ~attn_mask.bool()
    if blocked.dim() == 3:
        blocked = blocked.repeat_interleave(h, dim=0)
    return blocked


def double_state(state: State) -> State:
    return {k: v.double() for k, v in state.items()}
