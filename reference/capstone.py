"""Reference implementation: Chapter 8 exercises: training, decoding and evaluating the Transformer

Generated from solutions/ch08_capstone/capstone.py by `python -m course.tools release`.
Do not edit: change the instructor notebook and regenerate.
"""


from collections.abc import Hashable, Sequence
from typing import Any

import torch


def edit_distance(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    """Levenshtein distance: the fewest insertions, deletions and substitutions turning a into b."""
    previous = list(range(len(b) + 1))  # D[0, j] = j: build b[:j] from nothing
    for i, x in enumerate(a, start=1):
        current = [i]  # D[i, 0] = i: delete all of a[:i]
        for j, y in enumerate(b, start=1):
            current.append(min(
                previous[j] + 1,  # delete x
                current[j - 1] + 1,  # insert y
                previous[j - 1] + (x != y),  # keep x, or replace it by y
            ))
        previous = current
    return previous[-1]


def label_smoothed_cross_entropy(
    logits: torch.Tensor, target: torch.Tensor, smoothing: float = 0.1, pad_id: int = 0
) -> torch.Tensor:
    """Mean over non-padding positions of -sum_v q_v log p_v, q = (1 - eps) one-hot + eps / V."""
    log_probs = torch.log_softmax(logits, dim=-1)  # (..., V)
    nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (...,): -log p_y
    uniform = -log_probs.mean(dim=-1)  # (...,): cross-entropy against the uniform distribution
    loss = (1.0 - smoothing) * nll + smoothing * uniform  # (...,)
    real = target != pad_id  # (...,)
    return loss[real].sum() / real.sum()


def noam_rate(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), for step = 1, 2, ..."""
    if step < 1:
        raise ValueError(f"steps are counted from 1, got step={step}")
    if warmup < 1:
        raise ValueError(f"warmup must be at least 1 step, got {warmup}")
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def length_batches(lengths: Sequence[int], max_tokens: int, seed: int = 0, epoch: int = 0) -> list[list[int]]:
    """Batches of example indices of similar length, each at most max_tokens when padded; shuffled."""
    too_long = [i for i, n in enumerate(lengths) if n > max_tokens]
    if too_long:
        raise ValueError(
            f"example {too_long[0]} has length {lengths[too_long[0]]}, more than max_tokens={max_tokens}: it fits in no batch"
        )
    g = torch.Generator().manual_seed(1_000_003 * seed + epoch)
    order = torch.randperm(len(lengths), generator=g).tolist()
    order.sort(key=lambda i: lengths[i])  # stable: examples of equal length stay shuffled
    batches: list[list[int]] = []
    batch: list[int] = []
    longest = 0
    for i in order:
        # Sorted ascending, so example i is the longest of the batch it joins.
        if batch and (len(batch) + 1) * max(longest, lengths[i]) > max_tokens:
            batches.append(batch)
            batch, longest = [], 0
        batch.append(i)
        longest = max(longest, lengths[i])
    if batch:
        batches.append(batch)
    shuffled = torch.randperm(len(batches), generator=g).tolist()
    return [batches[k] for k in shuffled]


def beam_search(
    model: Any, src: torch.Tensor, beam_size: int, max_len: int, bos_id: int, eos_id: int, alpha: float = 0.0
) -> tuple[torch.Tensor, float]:
    """The best hypothesis of a beam search over one source (1, S): (tokens (L,), normalised score)."""
    def normalised(tokens: list[int], score: float) -> float:
        return score / ((5 + len(tokens) - 1) / 6) ** alpha  # len - 1: <bos> is not generated

    memory = model.encode(src)
    live: list[tuple[list[int], float]] = [([bos_id], 0.0)]
    finished: list[tuple[list[int], float]] = []
    for _ in range(max_len):
        if not live:
            break
        log_probs = torch.stack([
            torch.log_softmax(model.decode(memory, torch.tensor([tokens], device=src.device))[0, -1].double(), dim=-1)
            for tokens, _ in live
        ])  # (k, V)
        scores = torch.tensor([s for _, s in live], dtype=torch.float64).unsqueeze(1) + log_probs.cpu()  # (k, V)
        V = scores.shape[1]
        best = scores.flatten().topk(min(beam_size, scores.numel()))  # over all extensions together
        survivors = []
        for score, index in zip(best.values.tolist(), best.indices.tolist()):
            tokens = live[index // V][0] + [index % V]
            (finished if index % V == eos_id else survivors).append((tokens, score))
        live = survivors
    pool = finished or live
    tokens, score = max(pool, key=lambda hyp: normalised(*hyp))
    return torch.tensor(tokens, dtype=torch.long), normalised(tokens, score)
