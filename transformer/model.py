"""The model of "Attention Is All You Need", assembled from the parts built in chapters 2 to 6.

Nothing here re-implements a part: attention, the encoder and decoder stacks and the
positional embedding are imported from the reference modules that the chapters' notebooks
generate. This file only wires them together, as Figure 1 of the paper draws them.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import NamedTuple

import torch
from torch import nn

from reference.decoder import Decoder, subsequent_mask
from reference.encoder import Encoder
from reference.positional import PositionalEmbedding


def positive_integers(config: object, names: tuple[str, ...]) -> None:
    """Refuse a setting of ``config`` among ``names`` that is not a positive integer."""
    for name in names:
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """The shape every model of the course shares, and its rules: the encoder-decoder, GPT and BERT
    configurations and their training configurations are all shapes. The defaults are the paper's
    base model (Table 3); a model or a task gives its own by declaring a field again."""

    d_model: int = 512  # the model's width: the size of every token's vector (the paper's d_model)
    h: int = 8  # attention heads
    N: int = 6  # layers (of the encoder, and again of the decoder)
    d_ff: int = 2048  # width of the feed-forward network's hidden layer
    dropout: float = 0.1  # dropout rate (the paper's P_drop)

    def __post_init__(self) -> None:
        positive_integers(self, ("d_model", "h", "N", "d_ff"))
        if self.d_model % self.h:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by h={self.h}: each head gets d_model / h features"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    def shape(self) -> dict[str, int | float]:
        """The shape's settings alone, to build a model's configuration from a training one."""
        return {f.name: getattr(self, f.name) for f in fields(ModelShape)}


@dataclass(frozen=True)
class TransformerConfig(ModelShape):
    """Every setting of the model. The defaults are the paper's base model (Table 3)."""

    src_vocab_size: int = 37000  # the paper's shared English-German byte-pair vocabulary
    tgt_vocab_size: int = 37000
    max_len: int = 5000
    # Section 3.4: one matrix for both embeddings and the pre-softmax projection.
    share_embeddings: bool = True
    pad_id: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        positive_integers(self, ("src_vocab_size", "tgt_vocab_size", "max_len"))
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                "share_embeddings needs one vocabulary for both languages, but "
                f"src_vocab_size={self.src_vocab_size} and tgt_vocab_size={self.tgt_vocab_size}"
            )
        if not 0 <= self.pad_id < min(self.src_vocab_size, self.tgt_vocab_size):
            raise ValueError(f"pad_id={self.pad_id} is not a token of the vocabulary")

    @property
    def d_k(self) -> int:
        return self.d_model // self.h


class Memory(NamedTuple):
    """What the encoder hands the decoder: its output and which source positions are padding."""

    states: torch.Tensor  # (B, T_src, d_model)
    key_padding_mask: torch.Tensor  # (B, T_src), True at padding


class Transformer(nn.Module):
    """Encoder-decoder Transformer: tokens in, next-token logits out.

    ``encode(src)`` and ``decode(memory, ys)`` are the interface a decoding loop drives (the
    greedy decoder of chapter 1 works with it unchanged); ``forward(src, tgt)`` does both at once
    for training with teacher forcing.
    """

    def __init__(
        self,
        config: TransformerConfig = TransformerConfig(),
        *,
        embedding: Callable[..., nn.Module] = PositionalEmbedding,
        encoder: Callable[..., nn.Module] = Encoder,
        decoder: Callable[..., nn.Module] = Decoder,
        subsequent_mask: Callable[[int], torch.Tensor] = subsequent_mask,
    ) -> None:
        """The parts default to the course's; ``--parts mine`` passes the learner's, with the same signatures."""
        super().__init__()
        c = self.config = config
        self.src_embed = embedding(c.src_vocab_size, c.d_model, c.dropout, c.max_len)
        self.tgt_embed = embedding(c.tgt_vocab_size, c.d_model, c.dropout, c.max_len)
        self.encoder = encoder(c.d_model, c.h, c.d_ff, c.N, c.dropout)
        self.decoder = decoder(c.d_model, c.h, c.d_ff, c.N, c.dropout)
        self._subsequent_mask = subsequent_mask
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size)
        if c.share_embeddings:
            self.tgt_embed.embedding.weight = self.src_embed.embedding.weight
            self.generator.weight = self.src_embed.embedding.weight
        self._init_weights()

    def _init_weights(self) -> None:
        # Xavier for every matrix, as the paper's reference code does; one embedding scale for all.
        for name, p in self.named_parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        # With shared weights the table is also the output projection: keep its entries small
        # (the embedding is multiplied by sqrt(d_model) on the way in).
        nn.init.normal_(self.src_embed.embedding.weight, mean=0.0, std=self.config.d_model ** -0.5)
        if not self.config.share_embeddings:
            nn.init.normal_(self.tgt_embed.embedding.weight, mean=0.0, std=self.config.d_model ** -0.5)

    def encode(self, src: torch.Tensor) -> Memory:
        """src (B, T_src) token ids -> the encoder's output and the source padding mask."""
        padding = src == self.config.pad_id  # (B, T_src)
        states = self.encoder(self.src_embed(src), key_padding_mask=padding)  # (B, T_src, d_model)
        return Memory(states, padding)

    def decode(self, memory: Memory, ys: torch.Tensor) -> torch.Tensor:
        """ys (B, T) target prefix -> logits (B, T, tgt_vocab_size) for the token after each position."""
        causal = self._subsequent_mask(ys.size(1)).to(ys.device)  # (T, T), True where attending is allowed
        hidden = self.decoder(
            self.tgt_embed(ys), memory.states, tgt_mask=causal,
            tgt_key_padding_mask=ys == self.config.pad_id, memory_key_padding_mask=memory.key_padding_mask,
        )  # (B, T, d_model)
        return self.generator(hidden)  # (B, T, V)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: src (B, T_src), tgt (B, T_tgt) -> logits (B, T_tgt, V)."""
        return self.decode(self.encode(src), tgt)


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters, each shared tensor counted once."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters() if p.requires_grad}.values())
