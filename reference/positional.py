"""Reference implementation: Chapter 6 exercises: positional encoding

Generated from solutions/ch06_positional/positional.py by `python -m course.tools release`.
Do not edit: change the instructor notebook and regenerate.
"""


import math

import torch
from torch import nn


def sinusoidal_encoding(max_len: int, d_model: int) -> torch.Tensor:
    """The sinusoidal positional encoding of the paper, shape (max_len, d_model), float32.

    Column 2i holds sin(pos / 10000^(2i/d_model)) and column 2i + 1 the cos of the same angle;
    for odd d_model the last column is a sin.
    """
    if max_len < 1 or d_model < 1:
        raise ValueError(f"need max_len >= 1 and d_model >= 1, got max_len={max_len}, d_model={d_model}")
    # float64 keeps the angle pos * frequency exact to ~1e-12 even for pos in the thousands.
    position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
    even_columns = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(d_model / 2),) the values 2i
    frequency = torch.pow(10000.0, -even_columns / d_model)  # 1 / 10000^(2i/d_model)
    angle = position * frequency  # (max_len, 1) * (ceil(d_model / 2),) -> (max_len, ceil(d_model / 2))
    table = torch.empty(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    # With odd d_model the last sine has no cosine partner: one frequency fewer for the cosines.
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return table.to(torch.float32)


class PositionalEmbedding(nn.Module):
    """Token embeddings scaled by sqrt(d_model), plus the sinusoidal encoding, then dropout."""

    def __init__(self, vocab_size: int, d_model: int, dropout: float = 0.1, max_len: int = 5000) -> None:
        super().__init__()
        self.d_model = d_model
        self.max_len = max_len
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.dropout = nn.Dropout(dropout)
        # Fixed, not learned; recomputed on construction, so it need not be saved either.
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, T) of ids -> (B, T, d_model)."""
        T = tokens.shape[1]
        if T > self.max_len:
            raise ValueError(f"a sequence of {T} tokens is longer than the table's max_len={self.max_len}")
        # The scale lifts the small embedding vectors to the size of the encoding (norm ~ sqrt(d_model)).
        scaled = self.embedding(tokens) * math.sqrt(self.d_model)  # (B, T, d_model)
        with_position = scaled + self.pe[:T]  # (B, T, d_model) + (T, d_model) -> (B, T, d_model)
        return self.dropout(with_position)
