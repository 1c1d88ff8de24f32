"""Chapter 9's checks give full marks to right answers written in other styles than the course's solutions.

Tiled attention has the most ways to be right: FlashAttention-2's two loops (blocks of queries, then blocks
of keys), a running log-sum-exp instead of a running maximum and sum, or blocks of queries alone, each
against every key, which holds T_q_block x T_k scores and so passes the long case too.
"""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from autograder.checks import get
from autograder.framework import run_check


def _refuse(q, k, block_size, causal):
    if block_size < 1 or (causal and q.shape[-2] != k.shape[-2]):
        raise ValueError("block_size must be positive, and causal attention needs T_q == T_k")


def tiled_two_loops(q, k, v, block_size, causal=False):
    _refuse(q, k, block_size, causal)
    T_q, T_k = q.shape[-2], k.shape[-2]
    outs, lses = [], []
    for i0 in range(0, T_q, block_size):
        qi = q[..., i0:i0 + block_size, :] / math.sqrt(q.shape[-1])
        rows = torch.arange(i0, i0 + qi.shape[-2], device=q.device)[:, None]
        m = torch.full((*qi.shape[:-1], 1), -math.inf, dtype=q.dtype, device=q.device)
        den = torch.zeros_like(m)
        acc = torch.zeros(*qi.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
        for j0 in range(0, T_k, block_size):
            if causal and j0 > i0 + qi.shape[-2] - 1:
                break  # every later key comes after every query of this block
            s = torch.einsum("...qd,...kd->...qk", qi, k[..., j0:j0 + block_size, :])
            if causal:
                s = torch.where(torch.arange(j0, j0 + s.shape[-1], device=q.device) <= rows, s, torch.tensor(-math.inf))
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            p = (s - m_new).exp()
            alpha = (m - m_new).exp()
            den = alpha * den + p.sum(-1, keepdim=True)
            acc = alpha * acc + torch.einsum("...qk,...kd->...qd", p, v[..., j0:j0 + block_size, :])
            m = m_new
        outs.append(acc / den)
        lses.append((m + den.log())[..., 0])
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)


def tiled_running_lse(q, k, v, block_size, causal=False):
    _refuse(q, k, block_size, causal)
    lse = q.new_full(q.shape[:-1], -math.inf)
    out = q.new_zeros(*q.shape[:-1], v.shape[-1])
    positions = torch.arange(q.shape[-2], device=q.device).unsqueeze(-1)
    for start in range(0, k.shape[-2], block_size):
        s = q @ k[..., start:start + block_size, :].mT / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.arange(start, start + s.shape[-1], device=q.device) > positions, -math.inf)
        block_lse = torch.logsumexp(s, dim=-1)
        new_lse = torch.logaddexp(lse, block_lse)
        # the old output and the block's own softmax output, each weighted by its share of the total
        block_out = torch.exp(s - block_lse.unsqueeze(-1)).nan_to_num(0.0) @ v[..., start:start + block_size, :]
        old_share = torch.exp(lse - new_lse).unsqueeze(-1)
        block_share = torch.exp(block_lse - new_lse).unsqueeze(-1)
        out = old_share * out + block_share * block_out
        lse = new_lse
    return out, lse


def tiled_query_blocks(q, k, v, block_size, causal=False):
    _refuse(q, k, block_size, causal)
    outs, lses = [], []
    for i0 in range(0, q.shape[-2], block_size):
        s = q[..., i0:i0 + block_size, :] @ k.transpose(-2, -1) / q.shape[-1] ** 0.5  # (..., b, T_k)
        if causal:
            rows = torch.arange(i0, i0 + s.shape[-2], device=q.device)[:, None]
            s = s.masked_fill(torch.arange(k.shape[-2], device=q.device) > rows, float("-inf"))
        lse = torch.logsumexp(s, dim=-1, keepdim=True)
        outs.append(torch.exp(s - lse) @ v)
        lses.append(lse.squeeze(-1))
    return torch.cat(outs, -2), torch.cat(lses, -1)


def rope_complex(x, positions, base=10000.0):
    d = x.shape[-1]
    if d % 2 == 1:
        raise ValueError("apply_rope needs an even number of features")
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d))
    angles = torch.outer(positions.double(), inv_freq)
    turn = torch.polar(torch.ones_like(angles), angles)
    pairs = torch.view_as_complex(x.double().unflatten(-1, (d // 2, 2)).contiguous())
    return torch.view_as_real(pairs * turn).flatten(-2).to(x.dtype)


def rope_matrix(x, positions, base=10000.0):
    d = x.shape[-1]
    if d % 2:
        raise ValueError("odd d")
    angles = positions.double()[:, None] * base ** (-torch.arange(0, d, 2, device=x.device).double() / d)  # (T, d/2)
    c, s = angles.cos(), angles.sin()
    rotation = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2).to(x.dtype)  # (T, d/2, 2, 2)
    return (rotation @ x.unflatten(-1, (d // 2, 2)).unsqueeze(-1)).squeeze(-1).flatten(-2)


def gqa_einsum(q, k, v, mask=None):
    B, h, T_q, d = q.shape
    h_kv = k.shape[1]
    if h % h_kv != 0:
        raise ValueError("query heads must split evenly into key/value groups")
    qg = q.reshape(B, h_kv, h // h_kv, T_q, d)
    scores = torch.einsum("bngqd,bnkd->bngqk", qg, k) / math.sqrt(d)
    scores = scores.reshape(B, h, T_q, -1)
    if mask is not None:
        mask = mask.expand_as(scores)
        scores = scores.masked_fill(~mask, -math.inf)
    weights = torch.softmax(scores, -1)
    if mask is not None:
        weights = torch.where(mask.any(-1, keepdim=True), weights, torch.zeros_like(weights))
    out = torch.einsum("bngqk,bnkd->bngqd", weights.reshape(B, h_kv, h // h_kv, T_q, -1), v)
    return out.reshape(B, h, T_q, -1), weights


class CacheIndexCopy(nn.Module):
    """Buffers kept out of the state_dict, written with index_copy_."""

    def __init__(self, batch, n_kv_heads, max_len, d_head):
        super().__init__()
        self.register_buffer("keys", torch.zeros(batch, n_kv_heads, max_len, d_head), persistent=False)
        self.register_buffer("values", torch.zeros(batch, n_kv_heads, max_len, d_head), persistent=False)
        self.register_buffer("length", torch.tensor(0, dtype=torch.long), persistent=False)

    def forward(self, k, v):
        new = torch.arange(int(self.length), int(self.length) + k.size(2))
        if new.numel() and new[-1] >= self.keys.size(2):
            raise ValueError("the cache is full")
        self.keys.index_copy_(2, new, k)
        self.values.index_copy_(2, new, v)
        self.length.add_(k.size(2))
        return self.keys.narrow(2, 0, int(self.length)), self.values.narrow(2, 0, int(self.length))


def window_band(T, window):
    if window <= 0:
        raise ValueError("window must be positive")
    return torch.ones(T, T, dtype=torch.bool).tril().triu(-(window - 1))


def window_difference(T, window):
    if window < 1:
        raise ValueError("window must be positive")
    distance = torch.arange(T).unsqueeze(1) - torch.arange(T).unsqueeze(0)  # i - j
    return (distance >= 0) & (distance < window)


@pytest.mark.parametrize(("check_id", "fn"), [
    ("hardware.tiled_attention", tiled_two_loops),
    ("hardware.tiled_attention", tiled_running_lse),
    ("hardware.tiled_attention", tiled_query_blocks),
    ("hardware.apply_rope", rope_complex),
    ("hardware.apply_rope", rope_matrix),
    ("hardware.grouped_query_attention", gqa_einsum),
    ("hardware.KVCache", CacheIndexCopy),
    ("hardware.sliding_window_mask", window_band),
    ("hardware.sliding_window_mask", window_difference),
], ids=lambda v: getattr(v, "__name__", v))
def test_correct_code_in_another_style_passes_every_rule(check_id, fn):
    for hidden in (False, True):
        assert run_check(get(check_id), fn, hidden=hidden).startswith("✓")
