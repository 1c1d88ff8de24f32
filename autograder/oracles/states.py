"""The weights of a case, drawn from the case's own generator, under the names the course's modules use
(see :mod:`autograder.oracles` for the table of names): one function per module, and ``stack_state`` for N
layers of one kind. ``State`` is a state dict: parameter name -> tensor.
"""
from __future__ import annotations

import math

import torch

State = dict[str, torch.Tensor]


def _linear_state(g: torch.Generator, fan_in: int, fan_out: int, prefix: str, bias: bool = True) -> State:
    bound = 1.0 / math.sqrt(fan_in)
    state = {f"{prefix}weight": (torch.rand(fan_out, fan_in, generator=g) * 2 - 1) * bound}
    if bias:
        state[f"{prefix}bias"] = (torch.rand(fan_out, generator=g) * 2 - 1) * bound
    return state


def mha_state(g: torch.Generator, d_model: int, prefix: str = "", bias: bool = True) -> State:
    state: State = {}
    for name in ("w_q", "w_k", "w_v", "w_o"):
        state |= _linear_state(g, d_model, d_model, f"{prefix}{name}.", bias)
    return state


def ffn_state(g: torch.Generator, d_model: int, d_ff: int, prefix: str = "") -> State:
    return _linear_state(g, d_model, d_ff, f"{prefix}w_1.") | _linear_state(g, d_ff, d_model, f"{prefix}w_2.")


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


def double_state(state: State) -> State:
    return {k: v.double() for k, v in state.items()}
