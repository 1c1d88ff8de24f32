"""Wrong answers to chapter 3, as learners write them, and the words that must name each one."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from . import Mistake, Spoiled

SPLIT = "multihead.split_heads"
MERGE = "multihead.merge_heads"
MHA = "multihead.MultiHeadAttention"


SPOILED = Spoiled("merge_heads", "x.transpose(1, 2).reshape(B, T, h * d_k)", "x.reshape(B, T, h * d_k)")


# ----------------------------------------------------------------------------------------
# split_heads
# ----------------------------------------------------------------------------------------


def _check(d_model, h):
    if d_model % h != 0:
        raise ValueError(f"d_model={d_model} is not divisible by h={h}")


def split_view_without_transpose(x, h):
    B, T, d_model = x.shape
    _check(d_model, h)
    return x.view(B, h, T, d_model // h)


def split_forgets_transpose(x, h):
    B, T, d_model = x.shape
    _check(d_model, h)
    return x.view(B, T, h, d_model // h)


def split_strided_features(x, h):
    B, T, d_model = x.shape
    _check(d_model, h)
    return x.view(B, T, d_model // h, h).permute(0, 3, 1, 2)


def split_wrong_permute(x, h):
    B, T, d_model = x.shape
    _check(d_model, h)
    return x.view(B, T, h, d_model // h).permute(0, 2, 3, 1)


def split_h_and_d_k_swapped(x, h):
    B, T, d_model = x.shape
    _check(d_model, h)
    return x.view(B, T, d_model // h, h).transpose(1, 2)


def split_no_value_error(x, h):
    B, T, d_model = x.shape
    return x.view(B, T, h, d_model // h).transpose(1, 2)


def split_assert_instead_of_value_error(x, h):
    B, T, d_model = x.shape
    assert d_model % h == 0, "d_model must be divisible by h"
    return x.view(B, T, h, d_model // h).transpose(1, 2)


def split_value_error_without_numbers(x, h):
    B, T, d_model = x.shape
    if d_model % h:
        raise ValueError("d_model must be divisible by h")
    return x.view(B, T, h, d_model // h).transpose(1, 2)


# ----------------------------------------------------------------------------------------
# merge_heads
# ----------------------------------------------------------------------------------------


def merge_without_transpose(x):
    B, h, T, d_k = x.shape
    return x.reshape(B, T, h * d_k)


def merge_interleaved(x):
    B, h, T, d_k = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, T, h * d_k)


def merge_view_after_transpose(x):
    B, h, T, d_k = x.shape
    return x.transpose(1, 2).view(B, T, h * d_k)


def merge_sums_heads(x):
    return x.sum(dim=1)


def merge_averages_heads(x):
    return x.mean(dim=1)


def merge_cat_along_positions(x):
    return torch.cat(x.unbind(dim=1), dim=1)


def merge_forgets_flatten(x):
    return x.transpose(1, 2)


# ----------------------------------------------------------------------------------------
# MultiHeadAttention
# ----------------------------------------------------------------------------------------


def _split(x, h):
    B, T, d_model = x.shape
    return x.view(B, T, h, d_model // h).transpose(1, 2)  # (B, h, T, d_k)


def _merge(x):
    B, h, T, d_k = x.shape
    return x.transpose(1, 2).reshape(B, T, h * d_k)  # (B, T, d_model)


def _attention(q, k, v, mask, scale):
    scores = q @ k.transpose(-2, -1) / scale  # (B, h, T_q, T_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1).nan_to_num(0.0)  # (B, h, T_q, T_k)


class _Layer(nn.Module):
    """A right layer, written the way a learner would; each mistake below overrides one step."""

    def __init__(self, d_model: int, h: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if d_model % h != 0:
            raise ValueError(f"d_model={d_model} is not a multiple of h={h}")
        self.h, self.d_k = h, d_model // h
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.attn_weights = None

    def split(self, x):
        return _split(x, self.h)

    def merge(self, x):
        return _merge(x)

    def project(self, query, key, value):
        return self.w_q(query), self.w_k(key), self.w_v(value)

    def mask(self, attn_mask, key_padding_mask):
        mask = None
        if attn_mask is not None:
            mask = attn_mask.unsqueeze(1) if attn_mask.dim() == 3 else attn_mask
        if key_padding_mask is not None:
            keep = ~key_padding_mask[:, None, None, :]
            mask = keep if mask is None else mask & keep
        return mask

    def scale(self):
        return math.sqrt(self.d_k)

    def drop_weights(self, weights):
        return self.dropout(weights)

    def keep_weights(self, weights):
        self.attn_weights = weights.detach()

    def output(self, merged):
        return self.w_o(merged)

    def forward(self, query, key, value, attn_mask=None, key_padding_mask=None):
        q, k, v = (self.split(t) for t in self.project(query, key, value))
        weights = _attention(q, k, v, self.mask(attn_mask, key_padding_mask), self.scale())
        self.keep_weights(weights)
        return self.output(self.merge(self.drop_weights(weights) @ v))


class MHASplitWithoutTranspose(_Layer):
    def split(self, x):
        B, T, d_model = x.shape
        return x.view(B, self.h, T, self.d_k)


class MHAMergeWithoutTranspose(_Layer):
    def merge(self, x):
        B, h, T, d_k = x.shape
        return x.reshape(B, T, h * d_k)


class MHAViewsOnly(MHASplitWithoutTranspose, MHAMergeWithoutTranspose):
    pass


class MHAMergeInterleaved(_Layer):
    def merge(self, x):
        B, h, T, d_k = x.shape
        return x.permute(0, 2, 3, 1).reshape(B, T, h * d_k)


class MHANoOutputProjection(_Layer):
    def output(self, merged):
        return merged


class MHAScaleByDModel(_Layer):
    def scale(self):
        return math.sqrt(self.h * self.d_k)


class MHAScaleTwice(_Layer):
    def scale(self):
        return self.d_k  # q scaled by 1/sqrt(d_k) by hand, then again inside the attention


class MHASharedProjection(_Layer):
    def project(self, query, key, value):
        return self.w_q(query), self.w_q(key), self.w_q(value)


class MHAValueThroughWk(_Layer):
    def project(self, query, key, value):
        return self.w_q(query), self.w_k(key), self.w_k(value)


class MHAIgnoresPadding(_Layer):
    def mask(self, attn_mask, key_padding_mask):
        return super().mask(attn_mask, None)


class MHAInvertedPadding(_Layer):
    def mask(self, attn_mask, key_padding_mask):
        return super().mask(attn_mask, None if key_padding_mask is None else ~key_padding_mask)


class MHAPaddingOnHeadAxis(_Layer):
    def mask(self, attn_mask, key_padding_mask):
        mask = super().mask(attn_mask, None)
        if key_padding_mask is not None:
            keep = ~key_padding_mask.unsqueeze(1)  # (B, 1, T_k): lines B up with the heads
            mask = keep if mask is None else mask & keep
        return mask


class MHAInvertedAttnMask(_Layer):
    def mask(self, attn_mask, key_padding_mask):
        return super().mask(None if attn_mask is None else ~attn_mask, key_padding_mask)


class MHAIgnoresAttnMask(_Layer):
    def mask(self, attn_mask, key_padding_mask):
        return super().mask(None, key_padding_mask)


class MHAMaskWithoutHeadAxis(_Layer):
    def mask(self, attn_mask, key_padding_mask):
        mask = attn_mask
        if key_padding_mask is not None:
            keep = ~key_padding_mask[:, None, None, :]
            mask = keep if mask is None else mask & keep
        return mask


class MHADropoutOnOutput(_Layer):
    def drop_weights(self, weights):
        return weights

    def output(self, merged):
        return self.dropout(self.w_o(merged))


class MHADropoutNeverUsed(_Layer):
    def drop_weights(self, weights):
        return weights


class MHAFunctionalDropoutAlwaysOn(_Layer):
    def drop_weights(self, weights):
        return F.dropout(weights, self.dropout.p)  # training=True by default, even after .eval()


class MHAStoresDroppedWeights(_Layer):
    def forward(self, query, key, value, attn_mask=None, key_padding_mask=None):
        q, k, v = (self.split(t) for t in self.project(query, key, value))
        weights = self.dropout(_attention(q, k, v, self.mask(attn_mask, key_padding_mask), self.scale()))
        self.attn_weights = weights.detach()  # kept after the dropout
        return self.output(self.merge(weights @ v))


class MHAOtherAttributeNames(_Layer):
    def __init__(self, d_model: int, h: int, dropout: float = 0.0, bias: bool = True):
        super().__init__(d_model, h, dropout, bias)
        self.num_heads, self.head_dim = self.h, self.d_k
        del self.h, self.d_k

    def split(self, x):
        return _split(x, self.num_heads)

    def scale(self):
        return math.sqrt(self.head_dim)


class MHANoAttnWeights(_Layer):
    def keep_weights(self, weights):
        pass


class MHAAveragedAttnWeights(_Layer):
    def keep_weights(self, weights):
        self.attn_weights = weights.mean(dim=1).detach()


class MHAStoresScores(_Layer):
    def keep_weights(self, weights):
        self.attn_weights = torch.log(weights).detach()


class MHANoValueErrorInInit(_Layer):
    def __init__(self, d_model: int, h: int, dropout: float = 0.0, bias: bool = True):
        nn.Module.__init__(self)
        self.h, self.d_k = h, d_model // h
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)


MISTAKES = [
    Mistake(SPLIT, "reshaped straight to (B, h, T, d_k) without the transpose", split_view_without_transpose,
            "without the transpose", rule="head i holds block i of the features"),
    Mistake(SPLIT, "reshaped to (B, T, h, d_k) and stopped there", split_forgets_transpose,
            "move the head axis in front of the positions", rule="shape (B, h, T, d_k)"),
    Mistake(SPLIT, "each head takes every h-th feature", split_strided_features, "every h-th feature",
            rule="head i holds block i of the features"),
    Mistake(SPLIT, "permuted the wrong axes", split_wrong_permute, "swap axes 1 and 2", rule="shape (B, h, T, d_k)"),
    Mistake(SPLIT, "h and d_k swapped in the reshape", split_h_and_d_k_swapped, "h and d_k are swapped",
            rule="shape (B, h, T, d_k)"),
    Mistake(SPLIT, "no ValueError: the reshape fails instead", split_no_value_error, "raise ValueError", rule="refusal"),
    Mistake(SPLIT, "assert instead of ValueError", split_assert_instead_of_value_error, "raise ValueError", rule="refusal"),
    Mistake(SPLIT, "ValueError whose message names neither number", split_value_error_without_numbers, "name both numbers",
            rule="refusal names the argument"),
    Mistake(MERGE, "reshaped without moving the heads back", merge_without_transpose, "not moved back behind the positions",
            rule="the heads side by side"),
    Mistake(MERGE, "features of the heads interleaved", merge_interleaved, "interleaved", rule="the heads side by side"),
    Mistake(MERGE, ".view after the transpose", merge_view_after_transpose, "use `.reshape(...)`", rule="raises nothing"),
    Mistake(MERGE, "heads summed", merge_sums_heads, "The heads were summed", rule="shape (B, T, h * d_k)"),
    Mistake(MERGE, "heads averaged", merge_averages_heads, "The heads were averaged", rule="shape (B, T, h * d_k)"),
    Mistake(MERGE, "heads concatenated along the positions", merge_cat_along_positions, "stacked along the positions",
            rule="shape (B, T, h * d_k)"),
    Mistake(MERGE, "heads moved back but not flattened", merge_forgets_flatten, "not flattened", rule="shape (B, T, h * d_k)"),
    Mistake(MHA, "heads split without the transpose", MHASplitWithoutTranspose, "straight to (B, h, T, d_k)", rule="output"),
    Mistake(MHA, "heads merged without the transpose", MHAMergeWithoutTranspose, "without first moving the head axis back",
            rule="output"),
    Mistake(MHA, "split and merge by reshapes alone", MHAViewsOnly, "reshapes alone", rule="output"),
    Mistake(MHA, "heads merged interleaved", MHAMergeInterleaved, "interleaved", rule="output"),
    Mistake(MHA, "W^O missing", MHANoOutputProjection, "W^O is missing", rule="output"),
    Mistake(MHA, "scores scaled by sqrt(d_model)", MHAScaleByDModel, "divided by sqrt(d_model)", rule="output"),
    Mistake(MHA, "scores scaled twice", MHAScaleTwice, "twice", rule="output"),
    Mistake(MHA, "one projection shared by Q, K and V", MHASharedProjection, "one projection was shared by Q, K and V",
            rule="output"),
    Mistake(MHA, "value projected with w_k", MHAValueThroughWk, "the value was projected with w_k", rule="output"),
    Mistake(MHA, "key_padding_mask ignored", MHAIgnoresPadding, "key_padding_mask was ignored", rule="output"),
    Mistake(MHA, "key_padding_mask inverted", MHAInvertedPadding, "key_padding_mask is inverted", rule="output"),
    Mistake(MHA, "key_padding_mask on the head axis", MHAPaddingOnHeadAxis, "key_padding_mask was lined up with the heads",
            rule="output"),
    Mistake(MHA, "attn_mask inverted", MHAInvertedAttnMask, "attn_mask is inverted", rule="output"),
    Mistake(MHA, "attn_mask ignored", MHAIgnoresAttnMask, "attn_mask was ignored", rule="output"),
    Mistake(MHA, "3-D attn_mask without a head axis", MHAMaskWithoutHeadAxis, "a head axis, attn_mask.unsqueeze(1)",
            rule="output"),
    Mistake(MHA, "dropout on the output instead of the weights", MHADropoutOnOutput, "applied dropout to the output",
            rule="output"),
    Mistake(MHA, "dropout never used", MHADropoutNeverUsed, "ignored dropout in training mode", rule="output"),
    Mistake(MHA, "functional dropout left on in eval mode", MHAFunctionalDropoutAlwaysOn,
            "dropout is active although the layer is in eval mode", rule="output"),
    Mistake(MHA, "attn_weights stored after dropout", MHAStoresDroppedWeights, "holds the weights after dropout",
            rule="attn_weights"),
    Mistake(MHA, "self.num_heads and self.head_dim instead of self.h and self.d_k", MHAOtherAttributeNames,
            "store the number of heads as self.h", rule="h and d_k stored"),
    Mistake(MHA, "attn_weights not stored", MHANoAttnWeights, "did not set self.attn_weights", rule="attn_weights"),
    Mistake(MHA, "attn_weights averaged over the heads", MHAAveragedAttnWeights, "rather than averaging them",
            rule="attn_weights"),
    Mistake(MHA, "attn_weights hold log-weights", MHAStoresScores, "do not sum to 1", rule="attn_weights"),
    Mistake(MHA, "no ValueError in __init__", MHANoValueErrorInInit, "did not raise", rule="refusal"),
]
