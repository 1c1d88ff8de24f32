"""Reference implementation: Chapter 9 exercises: attention against the hardware

Generated from solutions/ch09_hardware/hardware.py by `python -m course.tools release`.
Do not edit: change the instructor notebook and regenerate.
"""


import math

import torch
from torch import nn

from reference.attention import scaled_dot_product_attention


def tiled_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int, causal: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T / sqrt(d_k)) v, one block of keys at a time, with the log-sum-exp of each row."""
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    T_q, T_k = q.shape[-2], k.shape[-2]
    if causal and T_q != T_k:
        raise ValueError(f"causal attention needs as many queries as keys, got {T_q} and {T_k}")
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = q.new_full((*q.shape[:-1], 1), float("-inf"))  # (..., T_q, 1) the largest score so far
    total = q.new_zeros((*q.shape[:-1], 1))  # (..., T_q, 1) sum of exp(s - m)
    acc = q.new_zeros((*q.shape[:-1], v.shape[-1]))  # (..., T_q, d_v) sum of exp(s - m) v
    rows = torch.arange(T_q, device=q.device)[:, None]  # (T_q, 1) each query's position
    for start in range(0, T_k, block_size):
        k_block = k[..., start:start + block_size, :]  # (..., b, d_k)
        v_block = v[..., start:start + block_size, :]  # (..., b, d_v)
        s = q @ k_block.transpose(-2, -1) * scale  # (..., T_q, b)
        if causal:
            cols = torch.arange(start, start + k_block.shape[-2], device=q.device)  # (b,) the keys' positions
            s = s.masked_fill(cols > rows, float("-inf"))
        # Every row meets key 0 in the first block, so m is finite from then on and exp(m - m_new) is defined.
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., T_q, 1)
        p = torch.exp(s - m_new)  # (..., T_q, b)
        rescale = torch.exp(m - m_new)  # (..., T_q, 1): 0 at the first block, where m is -inf
        total = total * rescale + p.sum(dim=-1, keepdim=True)
        acc = acc * rescale + p @ v_block  # (..., T_q, d_v)
        m = m_new
    return acc / total, (m + torch.log(total)).squeeze(-1)  # (..., T_q, d_v), (..., T_q)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotate each neighbouring pair of features of x (..., T, d) by position * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2:
        raise ValueError(f"rotary embedding pairs the features, so d must be even, got {d}")
    # The angles in float64: position x frequency loses digits in float32 at long positions.
    i = torch.arange(d // 2, dtype=torch.float64, device=x.device)  # (d/2,)
    theta = base ** (-2 * i / d)  # (d/2,)
    angles = positions.to(torch.float64)[:, None] * theta  # (T, d/2)
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)  # (T, d/2)
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, d/2) each
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)  # (..., T, d/2, 2)
    return rotated.flatten(-2)  # (..., T, d): pairs back in their places


def grouped_query_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of h query heads over h_kv shared key/value heads, consecutive query heads sharing one."""
    B, h, T_q, d_k = q.shape
    h_kv, T_k = k.shape[1], k.shape[2]
    if h % h_kv:
        raise ValueError(f"{h} query heads cannot share {h_kv} key/value heads evenly")
    g = h // h_kv
    grouped = q.view(B, h_kv, g, T_q, d_k)  # (B, h_kv, g, T_q, d_k): query head j is in group j // g
    if mask is not None:
        mask = torch.broadcast_to(mask, (B, h, T_q, T_k)).reshape(B, h_kv, g, T_q, T_k)
    # k and v gain a group axis of size 1, which broadcasting shares across the group without a copy
    out, weights = scaled_dot_product_attention(grouped, k.unsqueeze(2), v.unsqueeze(2), mask)
    return out.flatten(1, 2), weights.flatten(1, 2)  # (B, h, T_q, d_v), (B, h, T_q, T_k)


class KVCache(nn.Module):
    """Keys and values of the positions written so far, in buffers allocated once for max_len positions."""

    def __init__(self, batch: int, n_kv_heads: int, max_len: int, d_head: int):
        super().__init__()
        shape = (batch, n_kv_heads, max_len, d_head)
        self.register_buffer("keys", torch.zeros(shape))
        self.register_buffer("values", torch.zeros(shape))
        self.register_buffer("length", torch.zeros((), dtype=torch.long))

    def forward(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        start = int(self.length)
        end = start + k.shape[2]
        if end > self.keys.shape[2]:
            raise ValueError(f"the cache holds {self.keys.shape[2]} positions; {start} are filled, {k.shape[2]} more do not fit")
        self.keys[:, :, start:end] = k  # written in place: nothing already cached is copied
        self.values[:, :, start:end] = v
        self.length.fill_(end)
        return self.keys[:, :, :end], self.values[:, :, :end]  # (B, h_kv, length, d_head) each


def sliding_window_mask(T: int, window: int) -> torch.Tensor:
    """(T, T) bool: query i may read key j when i - window < j <= i."""
    if window < 1:
        raise ValueError(f"a window holds at least one key, got {window}")
    i = torch.arange(T)[:, None]  # (T, 1) queries
    j = torch.arange(T)[None, :]  # (1, T) keys
    return (j <= i) & (j > i - window)  # (T, T)
