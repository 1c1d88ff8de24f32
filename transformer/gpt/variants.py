"""Chapter 9's GPT: chapter 7's, with the positions and the attention that long-context models use.

Everything but the attention and the positions is chapter 7's GPT: pre-norm blocks of chapter 4's
LayerNorm and feed-forward network, a final LayerNorm, the output layer tied to the embedding,
GPT-2's initialisation. What :class:`GPTConfig` may change:

* ``positions``: ``"sinusoidal"``, chapter 6's table added to the embeddings (scaled by
  sqrt(d_model), as the paper does), for any length; or ``"rope"``, chapter 9's ``apply_rope`` on every
  block's queries and keys, nothing added at the input. (``"learned"``, chapter 7's table, also works
  here, for a model with grouped heads.)
* ``kv_heads``: the heads of keys and values, each shared by h / kv_heads query heads (chapter 9's
  ``grouped_query_attention``).

Writing keeps a chapter 9 ``KVCache`` per block (:func:`generate_cached`). With ``--parts mine``
``apply_rope``, ``grouped_query_attention`` and ``KVCache`` are the learner's where written.

``position_scale`` divides every position before it is rotated: the position interpolation that
lets a RoPE model read a context longer than it was trained on (Chen et al., 2023).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from reference.encoder import LayerNorm, PositionwiseFeedForward
from reference.positional import sinusoidal_encoding

from ..parts import course_part
from .experts import MoEGPT
from .model import GPT, GPTConfig

#: the chapter 9 parts the model is made of, with --parts mine the learner's
PART_NAMES = ("apply_rope", "grouped_query_attention", "KVCache")


def course_parts() -> dict[str, Callable]:
    return {name: course_part(name) for name in PART_NAMES}


def build_gpt(config: GPTConfig, parts: dict | None = None) -> nn.Module:
    """Chapter 7's GPT, chapter 9's where the configuration asks for its positions or grouped heads, or chapter 10's
    where it has experts; ``parts`` (with --parts mine) holds the learner's ``GPTBlock`` and chapter 9 or 10 parts."""
    parts = parts or {}
    if config.n_experts:
        return MoEGPT(config, parts)
    if config.chapter_9:
        return VariantGPT(config, {**course_parts(), **{n: parts[n] for n in PART_NAMES if n in parts}})
    return GPT(config, parts.get("GPTBlock"))


class GroupedSelfAttention(nn.Module):
    """Causal self-attention of h query heads over kv_heads key/value heads, rotary positions optional.

    Parameters ``w_q`` (d_model -> d_model), ``w_k`` and ``w_v`` (d_model -> kv_heads * d_k), ``w_o``.
    """

    def __init__(self, d_model: int, h: int, kv_heads: int, rope: bool, parts: Mapping[str, Callable],
                 fused: bool = False) -> None:
        super().__init__()
        self.h, self.kv_heads, self.d_k = h, kv_heads, d_model // h
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, kv_heads * self.d_k)
        self.w_v = nn.Linear(d_model, kv_heads * self.d_k)
        self.w_o = nn.Linear(d_model, d_model)
        self.rope, self.fused, self.parts = rope, fused, parts
        self.position_scale = 1.0

    def forward(self, x: torch.Tensor, start: int = 0, cache: nn.Module | None = None) -> torch.Tensor:
        """x (B, T, d_model), the positions start .. start + T - 1 -> (B, T, d_model)."""
        B, T, d_model = x.shape
        q = self.w_q(x).view(B, T, self.h, self.d_k).transpose(1, 2)  # (B, h, T, d_k)
        k = self.w_k(x).view(B, T, self.kv_heads, self.d_k).transpose(1, 2)  # (B, h_kv, T, d_k)
        v = self.w_v(x).view(B, T, self.kv_heads, self.d_k).transpose(1, 2)  # (B, h_kv, T, d_k)
        if self.rope:
            positions = torch.arange(start, start + T, device=x.device)
            if self.position_scale != 1.0:
                positions = positions / self.position_scale
            q, k = self.parts["apply_rope"](q, positions), self.parts["apply_rope"](k, positions)
        if cache is not None:
            k, v = cache(k, v)  # (B, h_kv, start + T, d_k): every position so far
        if self.fused and cache is None and start == 0:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # (B, h, T, d_k)
        else:
            # query i sits at position start + i and may read the keys at positions up to it
            queries = torch.arange(start, start + T, device=x.device)[:, None]  # (T, 1) their positions
            allowed = torch.arange(k.shape[2], device=x.device)[None, :] <= queries  # (T, T_k)
            out, _ = self.parts["grouped_query_attention"](q, k, v, allowed)  # (B, h, T, d_k)
        return self.w_o(out.transpose(1, 2).reshape(B, T, d_model))


class VariantBlock(nn.Module):
    """Chapter 7's pre-norm block with :class:`GroupedSelfAttention`."""

    def __init__(self, d_model: int, h: int, kv_heads: int, d_ff: int, dropout: float, rope: bool,
                 parts: Mapping[str, Callable], fused: bool) -> None:
        super().__init__()
        self.norm1 = LayerNorm(d_model)
        self.self_attn = GroupedSelfAttention(d_model, h, kv_heads, rope, parts, fused)
        self.dropout1 = nn.Dropout(dropout)
        self.norm2 = LayerNorm(d_model)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, start: int = 0, cache: nn.Module | None = None) -> torch.Tensor:
        x = x + self.dropout1(self.self_attn(self.norm1(x), start, cache))  # (B, T, d_model)
        return x + self.dropout2(self.feed_forward(self.norm2(x)))


class VariantGPT(nn.Module):
    """Token ids (B, T) -> next-token logits (B, T, vocab_size), for any T with sinusoidal or rotary positions."""

    def __init__(self, config: GPTConfig, parts: Mapping[str, Callable] | None = None) -> None:
        super().__init__()
        self.config = config
        self.parts = dict(parts or course_parts())
        d, kv_heads = config.d_model, config.kv_heads or config.h
        self.embed = nn.Embedding(config.vocab_size, d)
        if config.positions == "learned":
            self.pos_embed = nn.Embedding(config.block_size, d)
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(
            VariantBlock(d, config.h, kv_heads, config.d_ff, config.dropout, config.positions == "rope", self.parts,
                         config.attention == "fused") for _ in range(config.N))
        self.norm = LayerNorm(d)
        self.head = nn.Linear(d, config.vocab_size, bias=False)
        self.head.weight = self.embed.weight
        self._table = torch.zeros(0, d)
        GPT._init_weights(self)  # chapter 7's initialisation, GPT-2's
        self.set_position_scale(config.position_scale)

    def set_position_scale(self, scale: float) -> None:
        """Divide every rotary position by ``scale`` (position interpolation); 1 undoes it."""
        for block in self.blocks:
            block.self_attn.position_scale = float(scale)

    def _positions(self, start: int, T: int, device: torch.device) -> torch.Tensor | float:
        if self.config.positions == "learned":
            if start + T > self.config.block_size:
                raise ValueError(f"learned positions stop at block_size={self.config.block_size}")
            return self.pos_embed(torch.arange(start, start + T, device=device))
        if self.config.positions == "sinusoidal":
            if len(self._table) < start + T:  # the table for any length, computed once per length reached
                self._table = sinusoidal_encoding(max(start + T, 2 * len(self._table)), self.config.d_model)
            return self._table[start:start + T].to(device)
        return 0.0  # rotary positions act inside the attention

    def forward(self, ids: torch.Tensor, start: int = 0, caches: list[nn.Module] | None = None) -> torch.Tensor:
        """ids (B, T) at positions start .. start + T - 1 -> logits (B, T, vocab_size); with ``caches`` (one
        KVCache per block) the keys and values of earlier positions are read from them."""
        T = ids.shape[1]
        x = self.embed(ids)  # (B, T, d_model)
        if self.config.positions == "sinusoidal":
            x = x * math.sqrt(self.config.d_model)
        x = self.dropout(x + self._positions(start, T, ids.device))
        for i, block in enumerate(self.blocks):
            x = block(x, start, None if caches is None else caches[i])  # (B, T, d_model)
        return self.head(self.norm(x))  # (B, T, vocab_size)

    def new_caches(self, batch: int, max_len: int) -> list[nn.Module]:
        """One empty KVCache per block, for ``max_len`` positions, on the model's device and in its dtype."""
        weight = self.embed.weight
        make = self.parts["KVCache"]
        kv_heads = self.config.kv_heads or self.config.h
        return [make(batch, kv_heads, max_len, self.config.d_model // self.config.h).to(weight.device, weight.dtype)
                for _ in self.blocks]


@torch.no_grad()
def generate_cached(model: VariantGPT, prompt: torch.Tensor, steps: int) -> torch.Tensor:
    """Greedy decoding of ``steps`` tokens after ``prompt`` (B, T0), each position read once through the
    blocks' caches: the new tokens (B, steps)."""
    caches = model.new_caches(prompt.shape[0], prompt.shape[1] + steps)
    logits = model(prompt, 0, caches)[:, -1]  # (B, vocab)
    out = []
    for step in range(steps):
        token = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
        out.append(token)
        if step + 1 < steps:
            logits = model(token, prompt.shape[1] + step, caches)[:, -1]
    return torch.cat(out, dim=1) if out else prompt.new_zeros(prompt.shape[0], 0)
