"""Reference implementation: Exercises: BERT and GPT

Generated from solutions/ch07_bert_gpt/bert_gpt.py by `python -m coursetools release`.
Do not edit: change the instructor notebook and regenerate.
"""


from collections.abc import Sequence

import torch


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
