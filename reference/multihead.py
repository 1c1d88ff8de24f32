"""Reference implementation: Chapter 3 exercises: multi-head attention

Generated from solutions/ch03_multihead/multihead.py by `python -m course.tools release`.
Do not edit: change the instructor notebook and regenerate.
"""


import torch
from torch import nn

from reference.attention import scaled_dot_product_attention


def split_heads(x: torch.Tensor, h: int) -> torch.Tensor:
    """(B, T, d_model) -> (B, h, T, d_k), head i taking features i*d_k .. (i+1)*d_k - 1."""
    B, T, d_model = x.shape
    if d_model % h != 0:
        raise ValueError(f"d_model={d_model} is not divisible by h={h}")
    # The reshape alone would already have the right shape, but it would mix positions into heads:
    # the head axis must be cut out of the features, then moved in front of the positions.
    return x.reshape(B, T, h, d_model // h).transpose(1, 2)  # (B, h, T, d_k)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, h, T, d_k) -> (B, T, h * d_k): the heads' features side by side, head 0 first."""
    B, h, T, d_k = x.shape
    return x.transpose(1, 2).reshape(B, T, h * d_k)  # (B, T, h, d_k) -> (B, T, d_model)


class MultiHeadAttention(nn.Module):
    """Multi-head attention: h scaled dot-product attentions over learned projections, then W^O.

    Parameters: w_q, w_k, w_v, w_o (each nn.Linear(d_model, d_model)); attributes h, d_k,
    dropout (on the attention weights) and, after each forward, attn_weights (B, h, T_q, T_k),
    detached and taken before dropout.
    """

    def __init__(self, d_model: int, h: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        if d_model % h != 0:
            raise ValueError(f"d_model={d_model} must be divisible by the number of heads h={h}")
        self.h = h
        self.d_k = d_model // h
        # One d_model x d_model matrix holds the h per-head projections W_i side by side.
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.attn_weights: torch.Tensor | None = None

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """query (B, T_q, d_model), key and value (B, T_k, d_model) -> (B, T_q, d_model).

        attn_mask: bool (T_q, T_k) or (B, T_q, T_k), True where a query may attend.
        key_padding_mask: bool (B, T_k), True where a key is padding.
        """
        q = split_heads(self.w_q(query), self.h)  # (B, h, T_q, d_k)
        k = split_heads(self.w_k(key), self.h)  # (B, h, T_k, d_k)
        v = split_heads(self.w_v(value), self.h)  # (B, h, T_k, d_k)

        mask = None
        if attn_mask is not None:
            # A per-sequence mask needs a head axis; a (T_q, T_k) mask broadcasts as it is.
            mask = attn_mask.unsqueeze(1) if attn_mask.dim() == 3 else attn_mask  # (B, 1, T_q, T_k) or (T_q, T_k)
        if key_padding_mask is not None:
            real_key = ~key_padding_mask[:, None, None, :]  # (B, 1, 1, T_k)
            mask = real_key if mask is None else mask & real_key  # (B, 1, T_q, T_k)

        context, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, h, T_q, d_k), (B, h, T_q, T_k)
        self.attn_weights = weights.detach()
        if self.training and self.dropout.p > 0:
            # Dropout acts on the weights, so the weighted sum is taken again with the dropped weights.
            context = self.dropout(weights) @ v  # (B, h, T_q, d_k)
        return self.w_o(merge_heads(context))  # (B, T_q, d_model)
