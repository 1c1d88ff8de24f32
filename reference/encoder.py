"""Reference implementation: Chapter 4 exercises: the encoder

Generated from solutions/ch04_encoder/encoder.py by `python -m course.tools release`.
Do not edit: change the instructor notebook and regenerate.
"""


import torch
from torch import nn

from reference.multihead import MultiHeadAttention


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, the same network for every position.

    Submodules: ``w_1`` (d_model -> d_ff), ``w_2`` (d_ff -> d_model), ``dropout`` (after the ReLU).
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_model) -> (..., d_model)."""
        hidden = torch.relu(self.w_1(x))  # (..., d_ff)
        # Dropout on the wide hidden layer, where PyTorch's encoder layer puts it too.
        return self.w_2(self.dropout(hidden))  # (..., d_model)


class LayerNorm(nn.Module):
    """Layer normalisation of each position's d_model features, with a learnable scale and shift.

    Parameters ``gamma`` (ones) and ``beta`` (zeros), both of shape (d_model,); attribute ``eps``.
    """

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_model) -> (..., d_model)."""
        mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
        centred = x - mean  # (..., d_model)
        # Two passes (centre, then square): E[x^2] - E[x]^2 cancels catastrophically far from 0.
        variance = (centred * centred).mean(dim=-1, keepdim=True)  # (..., 1), divides by d_model
        return self.gamma * centred / torch.sqrt(variance + self.eps) + self.beta  # (..., d_model)


class EncoderLayer(nn.Module):
    """One encoder layer of the paper (post-norm): multi-head self-attention, then the feed-forward network.

    Submodules: ``self_attn``, ``feed_forward``, ``norm1``, ``norm2``, ``dropout1``, ``dropout2``.
    """

    def __init__(self, d_model: int, h: int, d_ff: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, h, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, d_model) -> (B, T, d_model); key_padding_mask (B, T) is True at padding."""
        attended = self.self_attn(x, x, x, key_padding_mask=key_padding_mask)  # (B, T, d_model)
        # Post-norm: the residual sum is normalised, as in the paper.
        x = self.norm1(x + self.dropout1(attended))  # (B, T, d_model)
        return self.norm2(x + self.dropout2(self.feed_forward(x)))  # (B, T, d_model)


class Encoder(nn.Module):
    """A stack of N encoder layers, each with its own weights; its output is the last layer's.

    Submodule: ``layers``, an ``nn.ModuleList`` of N ``EncoderLayer``.
    """

    def __init__(self, d_model: int, h: int, d_ff: int, N: int, dropout: float = 0.1) -> None:
        super().__init__()
        # A new layer per iteration: N independent sets of weights.
        self.layers = nn.ModuleList(EncoderLayer(d_model, h, d_ff, dropout) for _ in range(N))

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, d_model) -> (B, T, d_model); key_padding_mask (B, T) is True at padding."""
        for layer in self.layers:
            x = layer(x, key_padding_mask)  # (B, T, d_model)
        return x
