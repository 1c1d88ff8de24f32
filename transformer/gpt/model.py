"""A small GPT: the decoder alone, reading left to right, built from the course's reference parts.

The blocks are chapter 7's ``GPTBlock``: chapter 3's :class:`MultiHeadAttention` with chapter 5's causal mask, the
feed-forward network and the layer normalisation are chapter 4's. What differs from the paper's
decoder is GPT-2's arrangement: no cross-attention (there is no encoder), *pre-norm* blocks
(each sub-layer reads a normalised copy of the residual stream and adds its output back, with
one more LayerNorm after the last block), learned position embeddings instead of sinusoids, and
the output projection tied to the token embedding.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from torch import nn

from reference import bert_gpt

from ..fused import PATHS, use_attention
from ..model import ModelShape, positive_integers

POSITIONS = ("learned", "sinusoidal", "rope")


@dataclass(frozen=True)
class GPTConfig(ModelShape):
    vocab_size: int = 256  # bytes
    block_size: int = 128  # the longest context, in tokens
    d_model: int = 128
    h: int = 4
    N: int = 4  # blocks
    d_ff: int = 512
    dropout: float = 0.0
    attention: str = "course"  # course, or fused (F.scaled_dot_product_attention)
    positions: str = "learned"  # learned (chapter 7), sinusoidal (chapter 6) or rope (chapter 9)
    kv_heads: int = 0  # heads of keys and values, each shared by h / kv_heads query heads (0: h, chapter 3's)
    position_scale: float = 1.0  # rotary positions divided by it: position interpolation (rope only)
    n_experts: int = 0  # feed-forward experts per block, d_ff wide each (chapter 10); 0: one dense network
    top_k: int = 2  # experts each token is sent to (with n_experts)
    capacity_factor: float = 0.0  # tokens an expert takes per call, times N k / E (0: no limit, none dropped)

    def __post_init__(self) -> None:
        super().__post_init__()
        positive_integers(self, ("vocab_size", "block_size"))
        if self.attention not in PATHS:
            raise ValueError(f"attention must be one of {', '.join(PATHS)}, got {self.attention!r}")
        if self.positions not in POSITIONS:
            raise ValueError(f"positions must be one of {', '.join(POSITIONS)}, got {self.positions!r}")
        if self.kv_heads < 0 or (self.kv_heads and self.h % self.kv_heads):
            raise ValueError(f"kv_heads must divide h={self.h} (or be 0, for h), got {self.kv_heads}")
        if self.position_scale <= 0 or (self.position_scale != 1.0 and self.positions != "rope"):
            raise ValueError(f"position_scale divides rotary positions: it must be positive, and 1 unless positions "
                             f"is rope (got {self.position_scale} with positions={self.positions})")
        if self.n_experts < 0 or self.capacity_factor < 0:
            raise ValueError(f"n_experts and capacity_factor must be 0 or more, got {self.n_experts} and "
                             f"{self.capacity_factor}")
        if self.n_experts and not 1 <= self.top_k <= self.n_experts:
            raise ValueError(f"top_k must be between 1 and n_experts={self.n_experts}, got {self.top_k}")
        if self.n_experts and self.chapter_9:
            raise ValueError("the experts replace the feed-forward layers of chapter 7's GPT: with n_experts, keep "
                             "positions=learned and kv_heads 0")

    @property
    def chapter_9(self) -> bool:
        """Whether the model needs chapter 9's attention or positions (:mod:`transformer.gpt.variants`)."""
        return self.positions != "learned" or self.kv_heads not in (0, self.h)


class GPT(bert_gpt.GPT):
    """Token ids (B, T) -> next-token logits (B, T, vocab_size), T at most block_size.

    Chapter 7's own ``GPT`` (``reference.bert_gpt``: embeddings, ``GPTBlock`` s, a final LayerNorm,
    the tied output layer), configured by a :class:`GPTConfig`, initialised as GPT-2 is, and able to
    switch its attention to the fused kernel. Its parameter names are the exercise's, so the
    exercise's ``generate_with_cache`` runs on a trained model as it is.
    """

    def __init__(self, config: GPTConfig, block: type[nn.Module] | None = None) -> None:
        super().__init__(config.vocab_size, config.d_model, config.h, config.d_ff, config.N, max_len=config.block_size,
                         dropout=config.dropout)
        if block is not None:  # another GPTBlock (the learner's, with --parts mine)
            self.blocks = nn.ModuleList(block(config.d_model, config.h, config.d_ff, config.dropout) for _ in range(config.N))
        self.config = config
        self._init_weights()
        use_attention(self, config.attention)

    def _init_weights(self) -> None:
        # GPT-2's: small normal weights, zero biases; the projections that write into the residual
        # stream are scaled down by sqrt(2N) so that the stream's variance does not grow with depth.
        for name, p in self.named_parameters():
            if name.endswith("bias") or name.endswith("beta"):
                nn.init.zeros_(p)
            elif name.endswith("gamma"):
                nn.init.ones_(p)
            else:
                std = 0.02 / math.sqrt(2 * self.config.N) if name.endswith(("w_o.weight", "w_2.weight")) else 0.02
                nn.init.normal_(p, mean=0.0, std=std)


def forward_flops(config: GPTConfig, batch: int, length: int) -> int:
    """Matrix-product FLOPs of one forward pass over (batch, length) tokens, counted as on the
    full-Transformer page: two per multiply-add, weights and attention, element-wise work left out."""
    d, N = config.d_model, config.N
    # a token passes through top_k experts of d_ff each, and the router's d x n_experts map, where there are experts
    feed_forward = 2 * d * config.d_ff * (config.top_k if config.n_experts else 1) + d * config.n_experts
    per_token = N * (4 * d * d + feed_forward) + config.vocab_size * d
    attention = 2 * d * N * length * length  # scores and weighted sum, the masked half included
    return 2 * batch * (length * per_token + attention)
