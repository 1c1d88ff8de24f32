"""Reference implementation: Chapter 7 exercises: BERT and GPT

Generated from solutions/ch07_bert_gpt/bert_gpt.py by `python -m course.tools release`.
Do not edit: change the instructor notebook and regenerate.
"""


from collections.abc import Sequence

import torch
from torch import nn

from reference.attention import scaled_dot_product_attention
from reference.decoder import subsequent_mask
from reference.encoder import LayerNorm, PositionwiseFeedForward
from reference.multihead import MultiHeadAttention, merge_heads, split_heads


def bpe_vocabulary(merges: Sequence[tuple[int, int]]) -> dict[int, bytes]:
    """The bytes each id stands for: ids 0-255 are single bytes, id 256 + k the k-th merge's pair."""
    vocabulary = {i: bytes([i]) for i in range(256)}
    for k, (a, b) in enumerate(merges):
        vocabulary[256 + k] = vocabulary[a] + vocabulary[b]
    return vocabulary


def bpe_decode(ids: Sequence[int], merges: Sequence[tuple[int, int]]) -> str:
    """The text that a sequence of ids stands for (exactly, when the ids come from the same merges)."""
    vocabulary = bpe_vocabulary(merges)
    return b"".join(vocabulary[i] for i in ids).decode("utf-8", errors="replace")


def bpe_train(text: str, num_merges: int) -> list[tuple[int, int]]:
    """Up to num_merges byte-pair merges learnt from text, in order; merge k makes the id 256 + k."""
    if num_merges < 0:
        raise ValueError(f"num_merges must be at least 0, got {num_merges}")
    ids = list(text.encode("utf-8"))
    merges: list[tuple[int, int]] = []
    for k in range(num_merges):
        counts: dict[tuple[int, int], int] = {}
        for pair in zip(ids, ids[1:]):  # every neighbouring pair, overlapping ones included
            counts[pair] = counts.get(pair, 0) + 1
        if not counts:
            break
        best = max(counts, key=counts.get)  # ties: the pair seen first, since a dict keeps that order
        if counts[best] < 2:
            break
        new_id, merged, i = 256 + k, [], 0
        while i < len(ids):
            if i + 1 < len(ids) and (ids[i], ids[i + 1]) == best:
                merged.append(new_id)
                i += 2  # continue after the pair: occurrences never overlap
            else:
                merged.append(ids[i])
                i += 1
        ids = merged
        merges.append(best)
    return merges


def bpe_encode(text: str, merges: Sequence[tuple[int, int]]) -> list[int]:
    """The ids of text under the merges, applied in the order they were learnt."""
    ids = list(text.encode("utf-8"))
    for k, (a, b) in enumerate(merges):
        new_id, merged, i = 256 + k, [], 0
        while i < len(ids):
            if i + 1 < len(ids) and ids[i] == a and ids[i + 1] == b:
                merged.append(new_id)
                i += 2
            else:
                merged.append(ids[i])
                i += 1
        ids = merged
    return ids


def mask_tokens(
    ids: torch.Tensor,
    mask_id: int,
    vocab_size: int,
    special_ids: Sequence[int],
    generator: torch.Generator,
    rate: float = 0.15,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking of ids (B, T): (inputs, labels), labels -100 where no token was chosen."""
    if not 0 < rate <= 1:
        raise ValueError(f"rate must be in (0, 1], got {rate}")
    special = set(special_ids)
    ordinary = torch.tensor([i for i in range(vocab_size) if i not in special], dtype=ids.dtype)  # (K,)
    is_special = torch.isin(ids, torch.tensor(sorted(special), dtype=ids.dtype))  # (B, T)
    chosen = (torch.rand(ids.shape, generator=generator) < rate) & ~is_special  # (B, T)
    what = torch.rand(ids.shape, generator=generator)  # (B, T): below 0.8 mask, below 0.9 random, else keep
    random_ids = ordinary[torch.randint(len(ordinary), ids.shape, generator=generator)]  # (B, T)
    inputs = ids.clone()
    inputs[chosen & (what < 0.8)] = mask_id
    replace = chosen & (what >= 0.8) & (what < 0.9)
    inputs[replace] = random_ids[replace]
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))  # (B, T)
    return inputs, labels


def causal_lm_loss(logits: torch.Tensor, ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Mean next-token cross-entropy: logits[:, t] (B, T, V) predict ids[:, t + 1]; padding ignored."""
    predictions = logits[:, :-1]  # (B, T-1, V): the last position has no next token
    targets = ids[:, 1:]  # (B, T-1): the token each position must predict
    log_probs = torch.log_softmax(predictions, dim=-1)  # (B, T-1, V)
    nll = -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T-1)
    real = targets != pad_id  # (B, T-1)
    return nll[real].sum() / real.sum()


def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One token per row of logits (B, V), shape (B,): temperature, then top-k, then top-p, then a draw."""
    if temperature < 0:
        raise ValueError(f"temperature must be at least 0 (0 is greedy), got {temperature}")
    if top_k < 0:
        raise ValueError(f"top_k must be at least 0 (0 keeps every token), got {top_k}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if temperature == 0 or top_k == 1:
        return logits.argmax(dim=-1)  # (B,)
    scores = logits.double() / temperature  # (B, V)
    if 0 < top_k < scores.shape[-1]:
        kth = scores.topk(top_k, dim=-1).values[:, -1:]  # (B, 1): the k-th largest score of each row
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1:
        probs, order = torch.softmax(scores, dim=-1).sort(dim=-1, descending=True)  # (B, V) each
        ahead = probs.cumsum(dim=-1) - probs  # (B, V): the mass of the tokens more likely than each
        drop_sorted = ahead >= top_p  # the most likely token has 0 ahead of it: always kept
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)  # (B, V), vocabulary order
        scores = scores.masked_fill(drop, float("-inf"))
    probs = torch.softmax(scores, dim=-1)  # (B, V), zero where a token was removed
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)


class GPTBlock(nn.Module):
    """One GPT block (pre-norm): x + Dropout(Attention(LayerNorm(x))) under a causal mask, then x + Dropout(FFN(LayerNorm(x))).

    Submodules: ``norm1``, ``self_attn``, ``dropout1``, ``norm2``, ``feed_forward``, ``dropout2``.
    """

    def __init__(self, d_model: int, h: int, d_ff: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.norm1 = LayerNorm(d_model)
        self.self_attn = MultiHeadAttention(d_model, h, dropout)
        self.dropout1 = nn.Dropout(dropout)
        # Its own gamma and beta: the feed-forward network's input is not the attention's.
        self.norm2 = LayerNorm(d_model)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, d_model) -> (B, T, d_model); position t sees positions 0..t only."""
        mask = subsequent_mask(x.shape[1]).to(x.device)  # (T, T), True where a query may attend
        normed = self.norm1(x)  # (B, T, d_model)
        # Pre-norm: the sub-layer reads a normalised copy; the residual path carries x itself.
        x = x + self.dropout1(self.self_attn(normed, normed, normed, attn_mask=mask))  # (B, T, d_model)
        return x + self.dropout2(self.feed_forward(self.norm2(x)))  # (B, T, d_model)


class GPT(nn.Module):
    """A decoder-only language model: embeddings, N GPTBlocks, a final LayerNorm and a tied output layer.

    Submodules: ``embed`` (vocab_size x d_model), ``pos_embed`` (max_len x d_model), ``dropout``,
    ``blocks`` (N ``GPTBlock``), ``norm`` and ``head`` (d_model -> vocab_size, no bias, its weight
    that of ``embed``).
    """

    def __init__(self, vocab_size: int, d_model: int = 64, h: int = 4, d_ff: int = 256, N: int = 2,
                 max_len: int = 256, dropout: float = 0.1) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos_embed = nn.Embedding(max_len, d_model)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(GPTBlock(d_model, h, d_ff, dropout) for _ in range(N))
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.embed.weight  # weight tying: one (vocab_size, d_model) matrix
        self.max_len = max_len

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, T) -> next-token logits (B, T, vocab_size), reading the whole sequence at once."""
        T = ids.shape[1]
        if T > self.max_len:
            raise ValueError(f"a sequence of {T} tokens is longer than max_len={self.max_len}")
        x = self.dropout(self.embed(ids) + self.pos_embed(torch.arange(T, device=ids.device)))  # (B, T, d_model)
        for block in self.blocks:
            x = block(x)  # (B, T, d_model)
        return self.head(self.norm(x))  # (B, T, vocab_size)


def generate_with_cache(
    model: nn.Module, prompt: torch.Tensor, steps: int
) -> tuple[torch.Tensor, torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """Greedy decoding of steps tokens after prompt (B, T0), each position read once: (tokens, logits, cache)."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    cache: list[tuple[torch.Tensor, torch.Tensor]] = []
    new = prompt  # (B, T_new): the positions not read yet, the whole prompt at first
    start = 0  # the position of new[:, 0] in the sequence
    tokens, logits = [], []
    with torch.no_grad():
        for _ in range(steps):
            T_new = new.shape[1]
            x = model.embed(new) + model.pos_embed(torch.arange(start, start + T_new, device=new.device))  # (B, T_new, d_model)
            # New query t sits at position start + t and may see the keys 0 .. start + t.
            mask = subsequent_mask(start + T_new)[start:].to(new.device)  # (T_new, start + T_new)
            for i, block in enumerate(model.blocks):
                attn = block.self_attn
                normed = block.norm1(x)  # (B, T_new, d_model)
                q = split_heads(attn.w_q(normed), attn.h)  # (B, h, T_new, d_k)
                k = split_heads(attn.w_k(normed), attn.h)  # (B, h, T_new, d_k)
                v = split_heads(attn.w_v(normed), attn.h)  # (B, h, T_new, d_k)
                if i < len(cache):
                    k = torch.cat([cache[i][0], k], dim=2)  # (B, h, start + T_new, d_k)
                    v = torch.cat([cache[i][1], v], dim=2)  # (B, h, start + T_new, d_k)
                    cache[i] = (k, v)
                else:
                    cache.append((k, v))
                context, _ = scaled_dot_product_attention(q, k, v, mask)  # (B, h, T_new, d_k)
                x = x + attn.w_o(merge_heads(context))  # (B, T_new, d_model)
                x = x + block.feed_forward(block.norm2(x))  # (B, T_new, d_model)
            step_logits = model.head(model.norm(x[:, -1]))  # (B, V): only the newest position predicts
            next_token = step_logits.argmax(dim=-1)  # (B,)
            tokens.append(next_token)
            logits.append(step_logits)
            start += T_new
            new = next_token.unsqueeze(1)  # (B, 1)
    return torch.stack(tokens, dim=1), torch.stack(logits, dim=1), cache
