"""PyTorch's own layers holding a case's weights (float64, dropout off): the independent oracles.

Each is built on the meta device (no random initialisation, which would advance torch's global
generator) and then given the weights of a state under the course's names.
"""
from __future__ import annotations

import torch
from torch import nn

from .states import State


def blank(cls, *args, **kwargs):
    """A PyTorch layer without random initialisation: built on the meta device, then given
    uninitialised memory that the caller fills. Random initialisation would advance torch's
    global generator, which nothing in a judge may touch."""
    return cls(*args, device="meta", **kwargs).to_empty(device="cpu")


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


def _load_feed_forward_and_norms(layer: nn.Module, state: State, prefix: str, norms: int) -> None:
    """What PyTorch's encoder and decoder layers name alike: linear1, linear2 and norm1..norm<norms>."""
    _load_linear(layer.linear1, state, f"{prefix}feed_forward.w_1.")
    _load_linear(layer.linear2, state, f"{prefix}feed_forward.w_2.")
    for i in range(1, norms + 1):
        _load_norm(getattr(layer, f"norm{i}"), state, f"{prefix}norm{i}.")


def torch_mha(state: State, d_model: int, h: int, prefix: str = "") -> nn.MultiheadAttention:
    bias = f"{prefix}w_q.bias" in state
    mha = blank(nn.MultiheadAttention, d_model, h, dropout=0.0, bias=bias, batch_first=True, dtype=torch.float64)
    _load_mha(mha, state, prefix)
    return mha.eval()


def torch_feed_forward(state: State, d_model: int, d_ff: int, prefix: str = "") -> nn.Sequential:
    """nn.Linear, nn.ReLU, nn.Linear: the feed-forward half of nn.TransformerEncoderLayer."""
    first = blank(nn.Linear, d_model, d_ff, dtype=torch.float64)
    second = blank(nn.Linear, d_ff, d_model, dtype=torch.float64)
    _load_linear(first, state, f"{prefix}w_1.")
    _load_linear(second, state, f"{prefix}w_2.")
    return nn.Sequential(first, nn.ReLU(), second).eval()


def torch_layer_norm(state: State | None, d_model: int, eps: float = 1e-5, prefix: str = "") -> nn.LayerNorm:
    """nn.LayerNorm holding gamma and beta (its own ones and zeros when ``state`` is None)."""
    norm = nn.LayerNorm(d_model, eps=eps, dtype=torch.float64)  # initialised to constants, not at random
    if state is not None:
        _load_norm(norm, state, prefix)
    return norm.eval()


def torch_encoder_layer(state: State, d_model: int, h: int, d_ff: int, prefix: str = "",
                        norm_first: bool = False) -> nn.TransformerEncoderLayer:
    """The paper's post-norm encoder layer; with ``norm_first`` the pre-norm block of GPT-2."""
    layer = blank(nn.TransformerEncoderLayer, d_model, h, d_ff, dropout=0.0, activation="relu", batch_first=True,
                   norm_first=norm_first, dtype=torch.float64)
    _load_mha(layer.self_attn, state, f"{prefix}self_attn.")
    _load_feed_forward_and_norms(layer, state, prefix, norms=2)
    return layer.eval()


def torch_decoder_layer(state: State, d_model: int, h: int, d_ff: int, prefix: str = "") -> nn.TransformerDecoderLayer:
    layer = blank(nn.TransformerDecoderLayer, d_model, h, d_ff, dropout=0.0, activation="relu", batch_first=True,
                   norm_first=False, dtype=torch.float64)
    _load_mha(layer.self_attn, state, f"{prefix}self_attn.")
    _load_mha(layer.multihead_attn, state, f"{prefix}cross_attn.")
    _load_feed_forward_and_norms(layer, state, prefix, norms=3)
    return layer.eval()


def torch_encoder(state: State, N: int, d_model: int, h: int, d_ff: int, prefix: str = "") -> nn.TransformerEncoder:
    layers = [torch_encoder_layer(state, d_model, h, d_ff, f"{prefix}layers.{i}.") for i in range(N)]
    encoder = nn.TransformerEncoder(layers[0], N, enable_nested_tensor=False)  # copies the layer N times
    for i, layer in enumerate(layers):
        encoder.layers[i] = layer
    return encoder.eval()


def torch_decoder(state: State, N: int, d_model: int, h: int, d_ff: int, prefix: str = "") -> nn.TransformerDecoder:
    layers = [torch_decoder_layer(state, d_model, h, d_ff, f"{prefix}layers.{i}.") for i in range(N)]
    decoder = nn.TransformerDecoder(layers[0], N)
    for i, layer in enumerate(layers):
        decoder.layers[i] = layer
    return decoder.eval()
