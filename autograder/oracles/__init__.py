"""The checks' oracle toolkit: PyTorch's own layers holding a course module's weights, and the
same computations as functions, able to make a learner's known mistakes on purpose. This module
holds the layers of chapters 3 to 6; chapter 7's rules live beside it: byte-pair encoding
(:mod:`.bpe`), sampling (:mod:`.sampling`) and the GPT block and its generation (:mod:`.gpt`).

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

Two kinds of oracle live here. PyTorch's layers (``torch_*``) give the expected values: they are
independent of the course. The functions (:func:`multi_head_attention`, :func:`feed_forward`,
:func:`layer_norm`, :func:`sublayer`) compute the same thing in the dtype of their inputs, with
keyword options that reproduce a known mistake, so that a check can name a wrong answer; each
takes the state first, then its tensors, then keyword-only options. The masks of a case come from
:func:`padding_mask` and :func:`causal_mask`, and :func:`allowed` combines them as attention does.

Nothing here touches torch's global random number generator, and nothing is cached: judges run
in several threads at once, and each case must be judged the same way every time. PyTorch's
layers are built on the meta device (no random initialisation) and then given the case's
weights; dropout masks come from :class:`Dropout`, a private generator per case.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..locate import Stage

State = dict[str, torch.Tensor]

# ---------------------------------------------------------------------------------------------
# Weights for a case, drawn from the case's own generator
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# Masks
# ---------------------------------------------------------------------------------------------


def padding_mask(lengths: Sequence[int], T: int) -> torch.Tensor:
    """(B, T) key-padding mask of right-padded sequences, True where a position is padding."""
    return torch.arange(T)[None, :] >= torch.tensor(list(lengths))[:, None]


def causal_mask(T: int) -> torch.Tensor:
    """(T, T) attention mask, True where query i may attend to key j, i.e. j <= i."""
    return torch.arange(T)[None, :] <= torch.arange(T)[:, None]


def allowed(attn_mask: torch.Tensor | None = None, key_padding_mask: torch.Tensor | None = None, *,
            attn_rule: str = "right", padding_rule: str = "right") -> torch.Tensor | None:
    """One boolean mask, True where a query may attend, broadcastable to (B, h, T_q, T_k).

    The rules reproduce mistakes: ``"ignored"`` or ``"inverted"`` for either mask,
    ``"no-head-axis"`` for a 3-D attention mask lined up with the heads, ``"head-axis"`` for a
    padding mask lined up with the heads.
    """
    allow = None
    if attn_mask is not None and attn_rule != "ignored":
        am = ~attn_mask if attn_rule == "inverted" else attn_mask
        if am.dim() == 3 and attn_rule != "no-head-axis":
            am = am[:, None]  # (B, 1, T_q, T_k)
        allow = am
    if key_padding_mask is not None and padding_rule != "ignored":
        keep = key_padding_mask if padding_rule == "inverted" else ~key_padding_mask
        keep = keep[:, None, :] if padding_rule == "head-axis" else keep[:, None, None, :]  # (B, 1, 1, T_k)
        allow = keep if allow is None else allow & keep
    return allow


# ---------------------------------------------------------------------------------------------
# Dropout, as the learner's modules draw it
# ---------------------------------------------------------------------------------------------


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


def _drop(dropout: Dropout | None, x: torch.Tensor) -> torch.Tensor:
    return x if dropout is None else dropout(x)


# ---------------------------------------------------------------------------------------------
# The layers as functions of a state, in the dtype of their inputs (pass float64 for an oracle)
# ---------------------------------------------------------------------------------------------


def linear(state: State, x: torch.Tensor, *, prefix: str) -> torch.Tensor:
    """x W^T + b with the weights stored under ``prefix`` ("w_q.", "feed_forward.w_1.", ...)."""
    bias = state.get(f"{prefix}bias")
    return F.linear(x, state[f"{prefix}weight"].to(x.dtype), None if bias is None else bias.to(x.dtype))


def feed_forward(state: State, x: torch.Tensor, *, prefix: str = "", dropout: Dropout | None = None,
                 activation: Callable[[torch.Tensor], torch.Tensor] = torch.relu) -> torch.Tensor:
    """max(0, x W_1 + b_1) W_2 + b_2, with dropout on the hidden activations (training mode)."""
    hidden = activation(linear(state, x, prefix=f"{prefix}w_1."))  # (..., d_ff)
    return linear(state, _drop(dropout, hidden), prefix=f"{prefix}w_2.")  # (..., d_model)


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
        return y.reshape(B, T, h, d_k).transpose(1, 2)  # (B, h, T, d_k)

    q, k, v = heads(query, projections[0]), heads(key, projections[1]), heads(value, projections[2])
    scores = q @ k.transpose(-2, -1) / SCALES[scale](d_k, d_model)  # (B, h, T_q, T_k)
    allow = allowed(attn_mask, key_padding_mask, attn_rule=attn_rule, padding_rule=padding_rule)
    if allow is not None:
        scores = scores.masked_fill(~allow, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(nan=0.0)  # (B, h, T_q, T_k)
    context = _drop(dropout, weights) @ v  # (B, h, T_q, d_k)
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
        return _drop(dropout, z) if dropout_at == where else z

    if wiring == "pre":
        return x + d(f(n(x)), "sublayer")
    if wiring == "inner":
        return x + n(d(f(x), "sublayer"))
    if wiring == "none":
        return n(d(f(x), "sublayer"))
    out = d(f(x), "sublayer")
    return d(n(d(x + out, "sum")), "norm")


def post_norm_stages(state: State, x: torch.Tensor, blocks: Sequence[tuple[str, Callable, str]]) -> list[Stage]:
    """The stages of a stack of post-norm sub-layers, for locating a learner's wrong value: for each
    (what the sub-layer is called, its function, its norm's name), its output, the residual sum and the
    norm's output. Every norm's output is also the input of what follows."""
    stages = []
    for label, f, norm in blocks:
        out = f(x)
        total = x + out
        x = layer_norm(state, total, prefix=f"{norm}.")
        stages += [Stage.of(f"{label}'s output", out), Stage.of(f"the residual sum x + {label}(x)", total),
                   Stage.of(f"{norm}'s output, {norm}(x + {label}(x))", x)]
    return stages


def stack_stages(x: torch.Tensor, n_layers: int, layer: Callable[[int, torch.Tensor], torch.Tensor],
                 owner: str) -> list[Stage]:
    """The stages of a stack of layers applied in turn (``layer(i, x)``), for locating a learner's
    wrong value: each layer's output, the last one being the ``owner``'s output."""
    stages = []
    for i in range(n_layers):
        with torch.no_grad():
            x = layer(i, x)
        stages.append(Stage.of(f"the output of layers[{i}]" + (f", the {owner}'s output" if i == n_layers - 1 else ""),
                               x))
    return stages


def layer_norm_stages(state: State | None, x: torch.Tensor, eps: float, prefix: str = "") -> list[Stage]:
    """The stages of a LayerNorm over the last axis, for locating a learner's wrong value."""
    mean = x.mean(-1, keepdim=True)
    centred = x - mean
    var = centred.pow(2).mean(-1, keepdim=True)
    std = (var + eps).sqrt()
    x_hat = centred / std
    gamma = torch.ones(x.shape[-1], dtype=x.dtype) if state is None else state[f"{prefix}gamma"].to(x.dtype)
    return [
        Stage.of("the mean over the last axis (keepdim=True)", mean),
        Stage.of("the centred values x - mean", centred),
        Stage.of("the variance over the last axis, dividing by d_model (keepdim=True)", var),
        Stage.of("var + eps", var + eps),
        Stage.of("the standard deviation sqrt(var + eps)", std),
        Stage.of("the normalised values (x - mean) / sqrt(var + eps)", x_hat),
        Stage.of("gamma * x_hat", gamma * x_hat),
        Stage.of("the output gamma * x_hat + beta", layer_norm(state, x, prefix=prefix, eps=eps)),
    ]


# ---------------------------------------------------------------------------------------------
# PyTorch's layers holding a state (float64, dropout off): the independent oracles
# ---------------------------------------------------------------------------------------------


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
    _load_linear(layer.linear1, state, f"{prefix}feed_forward.w_1.")
    _load_linear(layer.linear2, state, f"{prefix}feed_forward.w_2.")
    _load_norm(layer.norm1, state, f"{prefix}norm1.")
    _load_norm(layer.norm2, state, f"{prefix}norm2.")
    return layer.eval()


def torch_decoder_layer(state: State, d_model: int, h: int, d_ff: int, prefix: str = "") -> nn.TransformerDecoderLayer:
    layer = blank(nn.TransformerDecoderLayer, d_model, h, d_ff, dropout=0.0, activation="relu", batch_first=True,
                   norm_first=False, dtype=torch.float64)
    _load_mha(layer.self_attn, state, f"{prefix}self_attn.")
    _load_mha(layer.multihead_attn, state, f"{prefix}cross_attn.")
    _load_linear(layer.linear1, state, f"{prefix}feed_forward.w_1.")
    _load_linear(layer.linear2, state, f"{prefix}feed_forward.w_2.")
    for i in (1, 2, 3):
        _load_norm(getattr(layer, f"norm{i}"), state, f"{prefix}norm{i}.")
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
