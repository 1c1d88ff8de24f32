"""PyTorch's own ``nn.Transformer`` behind the course model's interface, for comparisons.

Same embeddings (scaled, plus the sinusoidal encoding), same tied output projection, same
``encode``/``decode`` methods, so the training loop, greedy decoding and beam search drive it
unchanged. Inside, ``nn.Transformer``'s encoder and decoder replace the course's stacks
(post-norm as in the paper; PyTorch adds one more LayerNorm after each stack).
"""
from __future__ import annotations

import torch
from torch import nn

from reference.positional import PositionalEmbedding

from ..model import Memory, TransformerConfig


class TorchTransformer(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        c = self.config = config
        self.src_embed = PositionalEmbedding(c.src_vocab_size, c.d_model, c.dropout, c.max_len)
        self.tgt_embed = PositionalEmbedding(c.tgt_vocab_size, c.d_model, c.dropout, c.max_len)
        self.transformer = nn.Transformer(c.d_model, c.h, c.N, c.N, c.d_ff, c.dropout, batch_first=True)
        # Its evaluation fast path packs padded batches into (prototype) nested tensors: keep one path.
        self.transformer.encoder.use_nested_tensor = False
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size)
        if c.share_embeddings:
            self.tgt_embed.embedding.weight = self.src_embed.embedding.weight
            self.generator.weight = self.src_embed.embedding.weight
        for p in self.transformer.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        nn.init.normal_(self.src_embed.embedding.weight, mean=0.0, std=c.d_model ** -0.5)
        if not c.share_embeddings:
            nn.init.normal_(self.tgt_embed.embedding.weight, mean=0.0, std=c.d_model ** -0.5)
            nn.init.xavier_uniform_(self.generator.weight)
        nn.init.zeros_(self.generator.bias)

    def encode(self, src: torch.Tensor) -> Memory:
        padding = src == self.config.pad_id  # (B, S)
        return Memory(self.transformer.encoder(self.src_embed(src), src_key_padding_mask=padding), padding)

    def decode(self, memory: Memory, ys: torch.Tensor) -> torch.Tensor:
        T = ys.size(1)
        # nn layers mark the positions that may NOT be attended.
        future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=ys.device), diagonal=1)  # (T, T)
        hidden = self.transformer.decoder(
            self.tgt_embed(ys), memory.states, tgt_mask=future, tgt_key_padding_mask=ys == self.config.pad_id,
            memory_key_padding_mask=memory.key_padding_mask,
        )  # (B, T, d_model)
        return self.generator(hidden)  # (B, T, V)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(src), tgt)
