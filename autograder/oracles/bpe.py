"""The rules of byte-pair encoding, written plainly (one scan per round that records each pair's
count and first position, then a sort), with the variants known mistakes follow.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _units(text: str, characters: bool = False) -> list[int]:
    return [ord(c) for c in text] if characters else list(text.encode("utf-8"))


def _pair_stats(seq: Sequence[int], overlapping: bool = True) -> dict[tuple[int, int], list[int]]:
    """pair -> [count, first position], in one scan; without ``overlapping`` a pair is counted as
    str.count counts (an occurrence that overlaps the previous one of the same pair is skipped)."""
    stats: dict[tuple[int, int], list[int]] = {}
    ends: dict[tuple[int, int], int] = {}
    for i in range(len(seq) - 1):
        pair = (seq[i], seq[i + 1])
        if not overlapping and i < ends.get(pair, 0):
            continue
        ends[pair] = i + 2
        if pair in stats:
            stats[pair][0] += 1
        else:
            stats[pair] = [1, i]
    return stats


def _ranked(stats: dict[tuple[int, int], list[int]], ties: str = "first") -> list[tuple[int, int]]:
    """The pairs from the best down: by count, then by the tie rule."""
    keys = {
        "first": lambda p: (-stats[p][0], stats[p][1]),  # the rule: first occurrence first
        "last": lambda p: (-stats[p][0], -stats[p][1]),
        "smallest": lambda p: (-stats[p][0], p),
        "largest": lambda p: (-stats[p][0], -p[0], -p[1]),
    }
    return sorted(stats, key=keys[ties])


def _replace(seq: Sequence[int], pair: tuple[int, int], new_id: int, right_to_left: bool = False,
             first_only: bool = False) -> list[int]:
    """``seq`` with the pair's occurrences replaced by new_id, scanning from one end, never overlapping."""
    work = list(reversed(seq)) if right_to_left else list(seq)
    target = (pair[1], pair[0]) if right_to_left else pair
    out: list[int] = []
    skip = False
    done = False
    for i, token in enumerate(work):
        if skip:
            skip = False
            continue
        if not done and i + 1 < len(work) and (token, work[i + 1]) == target:
            out.append(new_id)
            skip = True
            done = first_only
        else:
            out.append(token)
    return list(reversed(out)) if right_to_left else out


def bpe_rounds(text: str, num_merges: int, *, ties: str = "first", min_count: int = 2, overlapping: bool = True,
               right_to_left: bool = False, characters: bool = False, first_only: bool = False,
               ) -> list[tuple[tuple[int, int], dict[tuple[int, int], list[int]], list[int]]]:
    """Training round by round: (the merge, the pair statistics it was chosen from, the sequence after)."""
    seq = _units(text, characters)
    rounds = []
    for k in range(num_merges):
        stats = _pair_stats(seq, overlapping)
        if not stats:
            break
        best = _ranked(stats, ties)[0]
        if stats[best][0] < min_count:
            break
        seq = _replace(seq, best, 256 + k, right_to_left, first_only)
        rounds.append((best, stats, seq))
    return rounds


def bpe_merges(text: str, num_merges: int, **rules: Any) -> list[tuple[int, int]]:
    return [merge for merge, _, _ in bpe_rounds(text, num_merges, **rules)]


def counted_once(text: str, num_merges: int) -> list[tuple[int, int]]:
    """The most frequent byte pairs of the text as it starts, never recounted after a merge."""
    stats = _pair_stats(_units(text))
    return [p for p in _ranked(stats) if stats[p][0] >= 2][:num_merges]


def bpe_apply(text: str, merges: Sequence[tuple[int, int]], *, order: str = "learnt", right_to_left: bool = False,
              first_only: bool = False, characters: bool = False, first_id: int = 256) -> list[int]:
    """Encoding: every merge applied to the whole sequence, one after another."""
    seq = _units(text, characters)
    numbered = list(enumerate(merges))
    if order == "reversed":
        numbered.reverse()
    for k, pair in numbered:
        seq = _replace(seq, tuple(pair), first_id + k, right_to_left, first_only)
    return seq


def vocabulary(merges: Sequence[tuple[int, int]]) -> dict[int, bytes]:
    table = {i: bytes([i]) for i in range(256)}
    for k, (a, b) in enumerate(merges):
        table[256 + k] = table[a] + table[b]
    return table


def longest_match(text: str, merges: Sequence[tuple[int, int]]) -> list[int]:
    """Greedy longest match against the vocabulary, from the left (WordPiece's rule, not BPE's)."""
    ids_of: dict[bytes, int] = {}
    for i, piece in vocabulary(merges).items():
        ids_of.setdefault(piece, i)
    data, out, at = text.encode("utf-8"), [], 0
    longest = max(map(len, ids_of))
    while at < len(data):
        for size in range(min(longest, len(data) - at), 0, -1):
            if data[at : at + size] in ids_of:
                out.append(ids_of[data[at : at + size]])
                at += size
                break
    return out
