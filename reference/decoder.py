"""Reference implementation: Chapter 5 exercises: the decoder

Generated from solutions/ch05_decoder/decoder.py by `python -m course.tools release`.
Do not edit: change the instructor notebook and regenerate.
"""


import torch
from torch import nn

from reference.encoder import LayerNorm, PositionwiseFeedForward
from reference.multihead import MultiHeadAttention


def subsequent_mask(size: int) -> torch.Tensor:
    """(size, size) bool mask, True where query i may attend to key j, i.e. j <= i."""
    if size < 0:
        raise ValueError(f"size must be at least 0, got {size}")
    query_pos = torch.arange(size).unsqueeze(1)  # (size, 1)
    key_pos = torch.arange(size).unsqueeze(0)  # (1, size)
    # Broadcasting the two position vectors compares every query with every key.
    return key_pos <= query_pos  # (size, size)


class DecoderLayer(nn.Module):
    """One decoder layer of the paper (post-norm): masked self-attention, cross-attention over memory, then the FFN.

    Submodules: ``self_attn``, ``cross_attn``, ``feed_forward``, ``norm1``, ``norm2``, ``norm3``,
    ``dropout1``, ``dropout2``, ``dropout3``.
    """

    def __init__(self, d_model: int, h: int, d_ff: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, h, dropout)
        # Its own weights: what a position asks of the source is not what it asks of the target.
        self.cross_attn = MultiHeadAttention(d_model, h, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = LayerNorm(d_model), LayerNorm(d_model), LayerNorm(d_model)
        self.dropout1, self.dropout2, self.dropout3 = nn.Dropout(dropout), nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        tgt_mask: torch.Tensor | None = None,
        tgt_key_padding_mask: torch.Tensor | None = None,
        memory_key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x (B, T_tgt, d_model), memory (B, T_src, d_model) -> (B, T_tgt, d_model)."""
        # The target attends to itself, each position only to itself and what came before.
        attended = self.self_attn(x, x, x, attn_mask=tgt_mask, key_padding_mask=tgt_key_padding_mask)  # (B, T_tgt, d_model)
        x = self.norm1(x + self.dropout1(attended))  # (B, T_tgt, d_model)
        # The target asks (queries from x); the source answers (keys and values from memory).
        looked_up = self.cross_attn(x, memory, memory, key_padding_mask=memory_key_padding_mask)  # (B, T_tgt, d_model)
        x = self.norm2(x + self.dropout2(looked_up))  # (B, T_tgt, d_model)
        return self.norm3(x + self.dropout3(self.feed_forward(x)))  # (B, T_tgt, d_model)


class Decoder(nn.Module):
    """A stack of N decoder layers, each with its own weights; its output is the last layer's.

    Submodule: ``layers``, an ``nn.ModuleList`` of N ``DecoderLayer``.
    """

    def __init__(self, d_model: int, h: int, d_ff: int, N: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(d_model, h, d_ff, dropout) for _ in range(N))

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        tgt_mask: torch.Tensor | None = None,
        tgt_key_padding_mask: torch.Tensor | None = None,
        memory_key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x (B, T_tgt, d_model), memory (B, T_src, d_model) -> (B, T_tgt, d_model)."""
        for decoder_layer in self.layers:
            # memory stays the encoder's output; only the target representation is refined.
            x = decoder_layer(x, memory, tgt_mask, tgt_key_padding_mask, memory_key_padding_mask)  # (B, T_tgt, d_model)
        return x
