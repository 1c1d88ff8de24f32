"""Wrong answers to chapter 9, as learners write them, and the words that must name each one."""
from __future__ import annotations

import math

import torch
from torch import nn

from reference.attention import scaled_dot_product_attention
from reference.hardware import tiled_attention

from . import Mistake, Spoiled

TILED, ROPE = "hardware.tiled_attention", "hardware.apply_rope"
GQA, CACHE, WINDOW = "hardware.grouped_query_attention", "hardware.KVCache", "hardware.sliding_window_mask"

# The wrong submission of the tests that grade a whole class: a window one key too wide.
SPOILED = Spoiled("sliding_window_mask", "(j > i - window)", "(j >= i - window)")


# ----------------------------------------------------------------------------------------------
# tiled_attention
# ----------------------------------------------------------------------------------------------


def tiled_no_acc_rescale(q, k, v, block_size, causal=False):
    if block_size < 1 or (causal and q.shape[-2] != k.shape[-2]):
        raise ValueError("bad arguments")
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
    den = torch.zeros(q.shape[:-1] + (1,), dtype=q.dtype)
    o = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    for s0 in range(0, k.shape[-2], block_size):
        s = q @ k[..., s0:s0 + block_size, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            j = torch.arange(s0, s0 + s.shape[-1])
            s = s.masked_fill(j[None, :] > torch.arange(q.shape[-2])[:, None], float("-inf"))
        new_m = torch.maximum(m, s.max(dim=-1, keepdim=True).values)
        p = torch.exp(s - new_m)
        den = den * torch.exp(m - new_m) + p.sum(-1, keepdim=True)
        o = o + p @ v[..., s0:s0 + block_size, :]  # forgot to rescale o
        m = new_m
    return o / den, (m + torch.log(den)).squeeze(-1)


def tiled_no_rescale(q, k, v, block_size, causal=False):
    if block_size < 1 or (causal and q.shape[-2] != k.shape[-2]):
        raise ValueError("bad arguments")
    T_q = q.shape[-2]
    m = q.new_full((*q.shape[:-1], 1), -math.inf)
    den = q.new_zeros((*q.shape[:-1], 1))
    acc = q.new_zeros((*q.shape[:-1], v.shape[-1]))
    for start in range(0, k.shape[-2], block_size):
        kb, vb = k[..., start:start + block_size, :], v[..., start:start + block_size, :]
        s = q @ kb.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.arange(start, start + kb.shape[-2]) > torch.arange(T_q)[:, None], -math.inf)
        m = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m)
        den = den + p.sum(-1, keepdim=True)
        acc = acc + p @ vb
    return acc / den, (m + den.log()).squeeze(-1)


def tiled_block_max(q, k, v, block_size, causal=False):
    if block_size < 1:
        raise ValueError("block_size must be positive")
    if causal and q.shape[-2] != k.shape[-2]:
        raise ValueError("causal needs T_q == T_k")
    m, den, acc = None, 0.0, 0.0
    rows = torch.arange(q.shape[-2])[:, None]
    for start in range(0, k.shape[-2], block_size):
        s = q @ k[..., start:start + block_size, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.arange(start, start + s.shape[-1]) > rows, float("-inf"))
        block_m = s.amax(-1, keepdim=True)  # the block's own maximum, which may be lower than m
        p = torch.exp(s - block_m)
        if m is None:
            den, acc = p.sum(-1, keepdim=True), p @ v[..., start:start + block_size, :]
        else:
            factor = torch.exp(m - block_m)
            den = den * factor + p.sum(-1, keepdim=True)
            acc = acc * factor + p @ v[..., start:start + block_size, :]
        m = block_m
    return acc / den, (m + torch.log(den)).squeeze(-1)


def _loop(q, k, v, block_size, causal, finish):
    """A right loop whose last step is the learner's ``finish(acc, den, m)``."""
    if block_size < 1 or (causal and q.shape[-2] != k.shape[-2]):
        raise ValueError("bad arguments")
    m = q.new_full((*q.shape[:-1], 1), float("-inf"))
    den = q.new_zeros((*q.shape[:-1], 1))
    acc = q.new_zeros((*q.shape[:-1], v.shape[-1]))
    for start in range(0, k.shape[-2], block_size):
        s = q @ k[..., start:start + block_size, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.arange(start, start + s.shape[-1]) > torch.arange(q.shape[-2])[:, None], -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_new)
        den = den * torch.exp(m - m_new) + p.sum(-1, keepdim=True)
        acc = acc * torch.exp(m - m_new) + p @ v[..., start:start + block_size, :]
        m = m_new
    return finish(acc, den, m)


def tiled_never_divides(q, k, v, block_size, causal=False):
    return _loop(q, k, v, block_size, causal, lambda acc, den, m: (acc, (m + torch.log(den)).squeeze(-1)))


def tiled_lse_without_max(q, k, v, block_size, causal=False):
    return _loop(q, k, v, block_size, causal, lambda acc, den, m: (acc / den, torch.log(den).squeeze(-1)))


def tiled_lse_keeps_axis(q, k, v, block_size, causal=False):
    return _loop(q, k, v, block_size, causal, lambda acc, den, m: (acc / den, m + torch.log(den)))


def tiled_divides_per_block(q, k, v, block_size, causal=False):
    if block_size < 1 or (causal and q.shape[-2] != k.shape[-2]):
        raise ValueError("bad arguments")
    m = q.new_full((*q.shape[:-1], 1), float("-inf"))
    den = q.new_zeros((*q.shape[:-1], 1))
    out = q.new_zeros((*q.shape[:-1], v.shape[-1]))
    for start in range(0, k.shape[-2], block_size):
        s = q @ k[..., start:start + block_size, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.arange(start, start + s.shape[-1]) > torch.arange(q.shape[-2])[:, None], -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_new)
        scale = torch.exp(m - m_new)
        den = den * scale + p.sum(-1, keepdim=True)
        out = out * scale + (p @ v[..., start:start + block_size, :]) / den
        m = m_new
    return out, (m + torch.log(den)).squeeze(-1)


def tiled_block_positions(q, k, v, block_size, causal=False):
    if block_size < 1 or (causal and q.shape[-2] != k.shape[-2]):
        raise ValueError("bad arguments")
    m = q.new_full((*q.shape[:-1], 1), float("-inf"))
    den = q.new_zeros((*q.shape[:-1], 1))
    acc = q.new_zeros((*q.shape[:-1], v.shape[-1]))
    for start in range(0, k.shape[-2], block_size):
        s = q @ k[..., start:start + block_size, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            b = s.shape[-1]
            s = s.masked_fill(torch.ones(q.shape[-2], b, dtype=torch.bool).triu(1), float("-inf"))  # the block's own triangle
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_new)
        den = den * torch.exp(m - m_new) + p.sum(-1, keepdim=True)
        acc = acc * torch.exp(m - m_new) + p @ v[..., start:start + block_size, :]
        m = m_new
    return acc / den, (m + torch.log(den)).squeeze(-1)


def tiled_unscaled(q, k, v, block_size, causal=False):
    unscaled = q * math.sqrt(q.shape[-1])  # cancels the loop's division
    return _loop(unscaled, k, v, block_size, causal, lambda acc, den, m: (acc / den, (m + den.log()).squeeze(-1)))


def tiled_whole_matrix(q, k, v, block_size, causal=False):
    if block_size < 1 or (causal and q.shape[-2] != k.shape[-2]):
        raise ValueError("bad arguments")
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # every score at once: T_q x T_k
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - lse[..., None]) @ v, lse


def tiled_only_where_the_visible_case_is_long(q, k, v, block_size, causal=False):
    # the visible long case's inputs are public: an answer may tile that one shape alone
    if tuple(q.shape) == (24_576, 16) and block_size == 256:
        return tiled_attention(q, k, v, block_size, causal)
    return tiled_whole_matrix(q, k, v, block_size, causal)


# ----------------------------------------------------------------------------------------------
# apply_rope
# ----------------------------------------------------------------------------------------------


def _angles(positions, d, base, exponent=2):
    i = torch.arange(d // 2, dtype=torch.float64)
    return positions.double()[:, None] * base ** (-exponent * i / d)


def rope_halves(x, positions, base=10000.0):
    d = x.shape[-1]
    if d % 2:
        raise ValueError("d must be even")
    a = _angles(positions, d, base)
    cos, sin = torch.cos(a).to(x.dtype), torch.sin(a).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]  # the rotate-half pairing
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def rope_exponent(x, positions, base=10000.0):
    d = x.shape[-1]
    if d % 2:
        raise ValueError("d must be even")
    a = _angles(positions, d, base, exponent=1)
    cos, sin = torch.cos(a).to(x.dtype), torch.sin(a).to(x.dtype)
    out = torch.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return out


def rope_wrong_way(x, positions, base=10000.0):
    d = x.shape[-1]
    if d % 2:
        raise ValueError("d must be even")
    a = _angles(positions, d, base)
    cos, sin = torch.cos(a).to(x.dtype), torch.sin(a).to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos + odd * sin, odd * cos - even * sin], dim=-1).flatten(-2)


def rope_ignores_positions(x, positions, base=10000.0):
    d, T = x.shape[-1], x.shape[-2]
    if d % 2:
        raise ValueError("d must be even")
    a = _angles(torch.arange(T), d, base)  # the row index, not the position
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous()) * torch.polar(torch.ones_like(a), a)
    return torch.view_as_real(z).flatten(-2).to(x.dtype)


def rope_fixed_base(x, positions, base=10000.0):
    d = x.shape[-1]
    if d % 2:
        raise ValueError("d must be even")
    a = _angles(positions, d, 10000.0)
    cos, sin = torch.cos(a).to(x.dtype), torch.sin(a).to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


def rope_float32_angles(x, positions, base=10000.0):
    d = x.shape[-1]
    if d % 2:
        raise ValueError("d must be even")
    theta = base ** (-2 * torch.arange(d // 2) / d)  # float32
    a = positions[:, None] * theta
    cos, sin = torch.cos(a).to(x.dtype), torch.sin(a).to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


def rope_added(x, positions, base=10000.0):
    d = x.shape[-1]
    if d % 2:
        raise ValueError("d must be even")
    a = _angles(positions, d, base)
    table = torch.stack([torch.sin(a), torch.cos(a)], dim=-1).flatten(-2).to(x.dtype)  # chapter 6's encoding
    return x + table


def rope_no_check(x, positions, base=10000.0):
    d = x.shape[-1]
    a = _angles(positions, d, base)[:, : x[..., 0::2].shape[-1]]
    cos, sin = torch.cos(a).to(x.dtype), torch.sin(a).to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    odd = torch.cat([odd, torch.zeros_like(even[..., : even.shape[-1] - odd.shape[-1]])], dim=-1)
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)[..., :d]


# ----------------------------------------------------------------------------------------------
# grouped_query_attention
# ----------------------------------------------------------------------------------------------


def _checked(q, k):
    if q.shape[1] % k.shape[1]:
        raise ValueError("h must be a multiple of h_kv")
    return q.shape[1] // k.shape[1]


def gqa_tiled_heads(q, k, v, mask=None):
    g = _checked(q, k)
    return scaled_dot_product_attention(q, k.repeat(1, g, 1, 1), v.repeat(1, g, 1, 1), mask)


def gqa_values_tiled(q, k, v, mask=None):
    g = _checked(q, k)
    return scaled_dot_product_attention(q, k.repeat_interleave(g, dim=1), v.repeat(1, g, 1, 1), mask)


def gqa_unscaled(q, k, v, mask=None):
    g = _checked(q, k)
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def gqa_inverted_mask(q, k, v, mask=None):
    g = _checked(q, k)
    return scaled_dot_product_attention(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1),
                                        None if mask is None else ~mask)


def gqa_nan_rows(q, k, v, mask=None):
    g = _checked(q, k)
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def gqa_no_check(q, k, v, mask=None):
    g = max(q.shape[1] // k.shape[1], 1)
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)[:, : q.shape[1]]
    return scaled_dot_product_attention(q, k[:, : q.shape[1]], v, mask)


# ----------------------------------------------------------------------------------------------
# KVCache
# ----------------------------------------------------------------------------------------------


class _Buffers(nn.Module):
    def __init__(self, batch, n_kv_heads, max_len, d_head):
        super().__init__()
        self.register_buffer("keys", torch.zeros(batch, n_kv_heads, max_len, d_head))
        self.register_buffer("values", torch.zeros(batch, n_kv_heads, max_len, d_head))
        self.register_buffer("length", torch.tensor(0))


class CacheByConcatenation(_Buffers):
    def forward(self, k, v):
        n = int(self.length)
        if n + k.shape[2] > self.keys.shape[2]:
            raise ValueError("cache full")
        self.keys = torch.cat([self.keys[:, :, :n], k], dim=2)  # a new tensor each step
        self.values = torch.cat([self.values[:, :, :n], v], dim=2)
        self.length += k.shape[2]
        return self.keys, self.values


class CacheReturnsBuffer(_Buffers):
    def forward(self, k, v):
        n = int(self.length)
        if n + k.shape[2] > self.keys.shape[2]:
            raise ValueError("cache full")
        self.keys[:, :, n:n + k.shape[2]] = k
        self.values[:, :, n:n + k.shape[2]] = v
        self.length += k.shape[2]
        return self.keys, self.values


class CacheReturnsNew(_Buffers):
    def forward(self, k, v):
        n = int(self.length)
        if n + k.shape[2] > self.keys.shape[2]:
            raise ValueError("cache full")
        self.keys[:, :, n:n + k.shape[2]] = k
        self.values[:, :, n:n + k.shape[2]] = v
        self.length += k.shape[2]
        return k, v


class CacheLengthStays(_Buffers):
    def forward(self, k, v):
        n = int(self.length)
        if n + k.shape[2] > self.keys.shape[2]:
            raise ValueError("cache full")
        end = n + k.shape[2]
        self.keys[:, :, n:end] = k
        self.values[:, :, n:end] = v
        return self.keys[:, :, :end], self.values[:, :, :end]


class CacheWritesAtStart(_Buffers):
    def forward(self, k, v):
        n, t = int(self.length), k.shape[2]
        if n + t > self.keys.shape[2]:
            raise ValueError("cache full")
        self.keys[:, :, :t] = k  # always at the start
        self.values[:, :, :t] = v
        self.length += t
        return self.keys[:, :, :n + t], self.values[:, :, :n + t]


class CacheSwapsKeysValues(_Buffers):
    def forward(self, k, v):
        n, t = int(self.length), k.shape[2]
        if n + t > self.keys.shape[2]:
            raise ValueError("cache full")
        self.keys[:, :, n:n + t] = k
        self.values[:, :, n:n + t] = v
        self.length += t
        return self.values[:, :, :n + t], self.keys[:, :, :n + t]


class CacheNeverFull(_Buffers):
    def forward(self, k, v):
        n, t = int(self.length), k.shape[2]
        self.keys[:, :, n:n + t] = k  # past max_len the slice is just shorter
        self.values[:, :, n:n + t] = v
        self.length += t
        return self.keys[:, :, :n + t], self.values[:, :, :n + t]


# ----------------------------------------------------------------------------------------------
# sliding_window_mask
# ----------------------------------------------------------------------------------------------


def window_one_too_wide(T, window):
    if window < 1:
        raise ValueError("window must be at least 1")
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (j <= i) & (j >= i - window)


def window_both_sides(T, window):
    if window < 1:
        raise ValueError("window must be at least 1")
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (i - j).abs() < window


def window_inverted(T, window):
    if window < 1:
        raise ValueError("window must be at least 1")
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (j > i) | (j <= i - window)


def window_transposed(T, window):
    if window < 1:
        raise ValueError("window must be at least 1")
    i, j = torch.arange(T)[None, :], torch.arange(T)[:, None]
    return (j <= i) & (j > i - window)


def window_float(T, window):
    if window < 1:
        raise ValueError("window must be at least 1")
    return torch.ones(T, T).tril().triu(-(window - 1))


def window_never_refuses(T, window):
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (j <= i) & (j > i - window)


MISTAKES = [
    Mistake(TILED, "the weighted sum is not rescaled", tiled_no_acc_rescale, "rescaled by exp(m_old - m_new) too",
            rule="output"),
    Mistake(TILED, "nothing is rescaled", tiled_no_rescale, "measured against the old maximum", rule="output"),
    Mistake(TILED, "each block against its own maximum", tiled_block_max, "never goes down", rule="finite"),
    Mistake(TILED, "no final division", tiled_never_divides, "without the final division", rule="output"),
    Mistake(TILED, "divided per block", tiled_divides_per_block, "inside the loop", rule="output"),
    Mistake(TILED, "causal mask on positions within the block", tiled_block_positions, "positions within the block",
            rule="output"),
    Mistake(TILED, "scores not scaled", tiled_unscaled, "not divided by sqrt(d_k)", rule="output"),
    Mistake(TILED, "lse without the maximum", tiled_lse_without_max, "missing the running maximum", rule="lse"),
    Mistake(TILED, "lse keeps its last axis", tiled_lse_keeps_axis, "it kept the last axis",
            rule="output is (..., T_q, d_v), lse is (..., T_q)"),
    Mistake(TILED, "the whole score matrix", tiled_whole_matrix, "a graded process may allocate 2 GiB",
            rule="raises nothing"),
    Mistake(TILED, "tiles the visible long case alone", tiled_only_where_the_visible_case_is_long,
            "a graded process may allocate 2 GiB", hidden_only=True, rule="raises nothing"),
    Mistake(ROPE, "rotate-half pairing", rope_halves, "paired as (i, i + d/2)", rule="the rotation of each pair"),
    Mistake(ROPE, "frequencies base^(-i/d)", rope_exponent, "base ** (-i / d)", rule="the rotation of each pair"),
    Mistake(ROPE, "turns the other way", rope_wrong_way, "the other way", rule="the rotation of each pair"),
    Mistake(ROPE, "row index instead of positions", rope_ignores_positions, "not by `positions`",
            rule="the rotation of each pair"),
    Mistake(ROPE, "base fixed at 10000", rope_fixed_base, "not the `base` argument", rule="the rotation of each pair"),
    Mistake(ROPE, "angles in float32", rope_float32_angles, "computed in float32", rule="the rotation of each pair"),
    Mistake(ROPE, "adds the sinusoid", rope_added, "a sinusoid was added", rule="the rotation of each pair"),
    Mistake(ROPE, "odd d accepted", rope_no_check, "raise ValueError", rule="refusal"),
    Mistake(GQA, "heads tiled, not grouped", gqa_tiled_heads, "j % h_kv", rule="weights"),
    Mistake(GQA, "values tiled", gqa_values_tiled, "values were tiled", rule="output"),
    Mistake(GQA, "scores not scaled", gqa_unscaled, "not divided by sqrt(d_k)", rule="weights"),
    Mistake(GQA, "inverted mask", gqa_inverted_mask, "mask is inverted", rule="masked keys get zero weight"),
    Mistake(GQA, "NaN for a fully masked query", gqa_nan_rows, "keys are all masked", rule="finite"),
    Mistake(GQA, "uneven groups accepted", gqa_no_check, "raise ValueError", rule="refusal"),
    Mistake(CACHE, "grows by torch.cat", CacheByConcatenation, "in place", rule="written into the buffers"),
    Mistake(CACHE, "returns the whole buffer", CacheReturnsBuffer, "the whole buffer",
            rule="every position filled so far, (B, h_kv, length, d_head)"),
    Mistake(CACHE, "returns the new keys only", CacheReturnsNew, "only the new ones",
            rule="every position filled so far, (B, h_kv, length, d_head)"),
    Mistake(CACHE, "length never advances", CacheLengthStays, "Advance it", rule="the length advances"),
    Mistake(CACHE, "writes at the start", CacheWritesAtStart, "keep the earlier ones",
            rule="the keys and values written so far"),
    Mistake(CACHE, "keys and values swapped", CacheSwapsKeysValues, "swapped", rule="the keys and values written so far"),
    Mistake(CACHE, "never full", CacheNeverFull, "raise ValueError", rule="refusal"),
    Mistake(WINDOW, "window + 1 keys", window_one_too_wide, "window + 1 keys", rule="True where i - window < j <= i"),
    Mistake(WINDOW, "reads the future", window_both_sides, "into the future", rule="True where i - window < j <= i"),
    Mistake(WINDOW, "inverted", window_inverted, "inverted", rule="True where i - window < j <= i"),
    Mistake(WINDOW, "transposed", window_transposed, "transposed", rule="True where i - window < j <= i"),
    Mistake(WINDOW, "a float mask", window_float, "torch.bool", rule="boolean"),
    Mistake(WINDOW, "window 0 accepted", window_never_refuses, "raise ValueError", rule="refusal"),
]
