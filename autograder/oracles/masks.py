"""The course's masks and how attention combines them.

One rule throughout the course: an attention mask is True where a query *may* attend; a key-padding
mask is True where a key *is padding*. PyTorch's nn layers want the opposite for boolean attention
masks, which :func:`torch_attn_mask` translates.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch


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
