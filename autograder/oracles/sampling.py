"""The distribution of one sampled token under temperature, top-k and top-p, token by token in
float64, with the variants known mistakes follow.
"""
from __future__ import annotations

import math
from collections.abc import Sequence


def _softmax(values: dict[int, float]) -> dict[int, float]:
    top = max(values.values())
    weights = {v: math.exp(z - top) for v, z in values.items()}
    total = sum(weights.values())
    return {v: w / total for v, w in weights.items()}


def sampling_distribution(row: Sequence[float], temperature: float, top_k: int, top_p: float, *,
                          temperature_rule: str = "divide", k_shift: int = 0, crossing: bool = True,
                          sorted_nucleus: bool = True, order: str = "k-then-p", p_before_temperature: bool = False,
                          nucleus_extra: int = 0) -> list[float]:
    """The probability of each token of one row of logits under the rules, token by token in float64.

    The keyword arguments switch on the rules known mistakes follow.
    """
    V = len(row)
    if temperature_rule == "multiply":
        scores = {v: float(row[v]) * temperature for v in range(V)}
    elif temperature_rule == "ignore":
        scores = {v: float(row[v]) for v in range(V)}
    else:
        scores = {v: float(row[v]) / temperature for v in range(V)}

    def top_k_of(kept: dict[int, float]) -> dict[int, float]:
        if top_k == 0:
            return kept
        k = top_k + k_shift
        if k >= len(kept):
            return kept
        if k <= 0:
            return {}
        best = sorted(kept, key=lambda v: (-kept[v], v))[:k]
        return {v: kept[v] for v in best}

    def nucleus_of(kept: dict[int, float], logits_for_p: dict[int, float]) -> dict[int, float]:
        if top_p >= 1:
            return kept
        probs = _softmax({v: logits_for_p[v] for v in kept})
        ranked = sorted(probs, key=lambda v: (-probs[v], v)) if sorted_nucleus else sorted(probs)
        chosen, mass, extra = [], 0.0, nucleus_extra
        for v in ranked:
            if crossing:
                if mass >= top_p:
                    if extra <= 0:
                        break
                    extra -= 1
                chosen.append(v)
                mass += probs[v]
            else:
                mass += probs[v]
                if mass > top_p and chosen:
                    break
                chosen.append(v)
        return {v: kept[v] for v in chosen}

    unscaled = {v: float(row[v]) for v in range(V)}
    if order == "p-then-k":
        kept = top_k_of(nucleus_of(scores, unscaled if p_before_temperature else scores))
    else:
        kept = nucleus_of(top_k_of(scores), unscaled if p_before_temperature else scores)
    probs = _softmax(kept) if kept else {}
    return [probs.get(v, 0.0) for v in range(V)]


def sorted_positions(row: Sequence[float], temperature: float, top_k: int, top_p: float) -> list[float]:
    """The draws of a sampler that returns positions in the sorted order instead of token ids."""
    p = sampling_distribution(row, temperature, top_k, top_p)
    return sorted(p, reverse=True)


def nucleus_margin(row: Sequence[float], temperature: float, top_k: int, top_p: float) -> float:
    """How far top_p is from the nearest cumulative probability: a case must not sit on a boundary."""
    if top_p >= 1:
        return 1.0
    scores = {v: float(z) / temperature for v, z in enumerate(row)}
    if 0 < top_k < len(row):
        scores = {v: scores[v] for v in sorted(scores, key=lambda v: (-scores[v], v))[:top_k]}
    probs = sorted(_softmax(scores).values(), reverse=True)
    sums = [sum(probs[: i + 1]) for i in range(len(probs))]
    return min(abs(s - top_p) for s in sums)


def top_ids(row: Sequence[float], k: int) -> set[int]:
    return set(sorted(range(len(row)), key=lambda v: (-row[v], v))[:k])
