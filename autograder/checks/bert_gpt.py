"""Chapter 7 checks: byte-pair encoding, BERT's masking, GPT's next-token loss, sampling, block and KV cache.

Oracles: a plain implementation of the BPE rules written here (one scan per round that records
each pair's count and first position, then a sort), with variants that follow the rules known
mistakes follow; ``F.cross_entropy(ignore_index=pad_id)`` on tensors shifted here; and, for the
functions that draw at random, the probabilities the rules give, computed token by token in
float64, against which the learner's draws over many seeded rows must stay within a 5-sigma
binomial bound (``SIGMAS``; plus ``SLACK`` draws for tokens whose expected count is tiny). With
these bounds a right implementation fails a case with a probability below one in a million; the
mistakes the messages name are off by tens of sigmas.

``GPTBlock`` is compared, in float64, with ``nn.TransformerEncoderLayer(norm_first=True)`` holding
the case's weights under a causal mask; chapter 4's LayerNorm and ``nn.LayerNorm`` compute the same
function (biased variance, eps inside the square root), so no extra tolerance is needed. A
functional twin (:func:`gpt_block`), held to PyTorch on every eval case, names the mistakes and
replays the learner's dropout masks in training mode. ``generate_with_cache`` drives
:class:`autograder.toys.ToyGPT` (``Provided("toy_gpt", ...)``), whose forward uses PyTorch's own
causal attention; the oracle is that model read without a cache, step by step. The learner's copy
has a budget of positions per linear weight (prompt length + steps, per row), counted at ATen's
matrix products by :class:`harness.toys.Reads` from before the call, so that setting the model's
``budget`` or calling ``F.linear`` on its weights changes nothing; a read past it comes back as
``Recomputed``, which is how a decoder that reads the whole sequence again is caught. The count
runs in the learner's process and is advisory: a decoder that copies the weights first is not
seen, and nothing outside the process can tell a cache from reading everything again.

The cases hand the learner's function a ``torch.Generator`` as ``Provided("generator", {"seed": s})``:
each side builds its own from the seed. The judges draw nothing: torch's global generator is
never touched here.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from .. import oracles, toys
from ..framework import (
    Case,
    Check,
    CheckFailed,
    Hint,
    ModuleResult,
    Opaque,
    Provided,
    expect_close,
    expect_dtype,
    expect_finite,
    expect_loss,
    expect_shape,
    expect_tensor,
    expect_tuple,
    matches,
    where_it_differs,
)
from . import Mismatch, state_mismatch

#: half-width of an acceptance interval, in standard deviations of the binomial count
SIGMAS = 5.0
#: draws added to every interval, for counts whose expectation is a handful or less
SLACK = 3.0


def _bound(n: int, p: float) -> float:
    """How far a Binomial(n, p) count may stray from n * p before a check calls it wrong."""
    return SIGMAS * math.sqrt(max(n * p * (1.0 - p), 0.0)) + SLACK


def _generator(seed: int) -> Provided:
    return Provided("generator", {"seed": seed})


#: what the checks of chapter 7 tell a learner whose function returned on arguments it must refuse
RETURNED = ("{name} returned a result on the case {label}: raise ValueError instead, with a message that says what is "
            "wrong with `{argument}`.")


def _seed_groups(cases: Sequence[Case], results: Sequence[Any]) -> list[dict[str, tuple[Case, Any]]]:
    """The cases tagged "main", each with the "again" and "other-seed" cases that follow it."""
    groups: list[dict[str, tuple[Case, Any]]] = []
    for c, r in zip(cases, results):
        if c.tag == "main":
            groups.append({"main": (c, r)})
        elif c.tag in ("again", "other-seed") and groups:
            groups[-1][c.tag] = (c, r)
    return groups


# ----------------------------------------------------------------------------------------
# byte-pair encoding: the rules, and the rules known mistakes follow
# ----------------------------------------------------------------------------------------


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


def _counted_once(text: str, num_merges: int) -> list[tuple[int, int]]:
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


def _longest_match(text: str, merges: Sequence[tuple[int, int]]) -> list[int]:
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


def _shown(merges: Sequence[tuple[int, int]], pair: Sequence[int]) -> str:
    """A pair of ids with the text they stand for: (101, 32) 'e' + ' '."""
    table = vocabulary([tuple(m) for m in merges if len(m) == 2 and all(isinstance(i, int) for i in m)])

    def text(i: int) -> str:
        return repr(table[i].decode("utf-8", errors="replace")) if i in table else "?"

    return f"({pair[0]}, {pair[1]}) {text(pair[0])} + {text(pair[1])}"


def _snippet(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")


#: a small piece of Python, with the repetitions (indentation, names, keywords) real code has
CODE = '''def count_words(lines, ignore_case=True):
    """Count how often each word occurs in the lines."""
    counts = {}
    for line in lines:
        for word in line.split():
            if ignore_case:
                word = word.lower()
            counts[word] = counts.get(word, 0) + 1
    return counts


def most_common(counts, n=10):
    """The n most common words, the most common first."""
    ordered = sorted(counts.items(), key=lambda item: item[1], reverse=True)
    return ordered[:n]


class WordCounter:
    def __init__(self, ignore_case=True):
        self.ignore_case = ignore_case
        self.counts = {}

    def update(self, lines):
        for word, count in count_words(lines, self.ignore_case).items():
            self.counts[word] = self.counts.get(word, 0) + count
'''

ACCENTED = "déjà vu: a naïve café owner served crème brûlée; the café's crème was naïve too"
TIES = "ab cd ab cd ef"  # four pairs occur twice; "ab" comes first, " c" is the smallest
RUNS = "aaaaaa xyxyxyxy aaaaaa"  # after (a, a), counting with or without overlaps picks another pair
ODD_RUNS = "aaaaa xyxyxy aaaaa"  # runs of odd length: replacing from the left or from the right differs


# ----------------------------------------------------------------------------------------
# bpe_train
# ----------------------------------------------------------------------------------------


def _as_pairs(result: Any, function: str, case: Case) -> list[tuple[int, int]]:
    if isinstance(result, Opaque) or not isinstance(result, (list, tuple)):
        kind = result.type if isinstance(result, Opaque) else type(result).__name__
        raise CheckFailed(
            f"`{function}` returned a {kind} on the case {case.label}; return a list of merges, each a pair of ids "
            "(a, b) of ints, in the order they were learnt."
        )
    pairs = []
    for item in result:
        if isinstance(item, (tuple, list)) and len(item) == 2 and all(isinstance(i, str) for i in item):
            raise CheckFailed(
                f"`{function}` returned the merge {tuple(item)!r} on the case {case.label}: merges are pairs of ids "
                "(ints), not of text. The first tokens are the bytes of the text, list(text.encode('utf-8')), ids "
                "0-255, and the k-th merge makes the id 256 + k."
            )
        if isinstance(item, Opaque) or (isinstance(item, (tuple, list)) and any(isinstance(i, Opaque) for i in item)):
            raise CheckFailed(
                f"`{function}` returned merges that are not pairs of ints on the case {case.label} (bytes objects, "
                "perhaps): give each merge as the pair of the two ids it joins, (a, b); merge k makes the id 256 + k."
            )
        if not (isinstance(item, (tuple, list)) and len(item) == 2
                and all(isinstance(i, int) and not isinstance(i, bool) for i in item)):
            raise CheckFailed(
                f"`{function}` returned {item!r:.60} as a merge on the case {case.label}; a merge is a pair of ids, "
                "(a, b), two ints."
            )
        pairs.append((int(item[0]), int(item[1])))
    return pairs


class BpeTrainCheck(Check):
    function = "bpe_train"
    oracle = "the BPE rules, applied round by round by a plain implementation"
    invalid_hint = "a negative num_merges means nothing: raise ValueError with a message that names num_merges."
    invalid_returned = RETURNED
    invalid_argument = "num_merges"

    def cases(self, hidden: bool) -> list[Case]:
        def case(text: str, num_merges: int, what: str = "", tag: str = "") -> Case:
            return Case(f"text={what or _snippet(text)}, num_merges={num_merges}", (text, num_merges), {}, tag)

        out = [
            case("the cat sat on the mat with the hat", 6),
            case(TIES, 3, tag="ties"),
            case(RUNS, 4, tag="runs"),
            case(ODD_RUNS, 4, tag="runs"),
            case(ACCENTED, 12, tag="accented"),
            case("abcabd", 5, tag="stop"),
            case(CODE, 40, what="a piece of Python code (1,000 characters)"),
            case("", 3),
            case("le pot", -1, tag="invalid"),
        ]
        if hidden:
            out += [
                case(CODE[400:], 60, what="another piece of Python code"),
                case("abab", 10, tag="stop"),
                case("x", 2),
                case("mississippi missus miss", 8),
                case("zz yy zz yy xx", 3, tag="ties"),
                case("ooooo ppp ooooo ppp", 6, tag="runs"),
                case("日本語の文章、日本語の単語", 10, tag="accented"),
                case(ACCENTED + " " + TIES, 0),
            ]
        return out

    def judge(self, case: Case, result: Any) -> None:
        _as_pairs(result, "bpe_train", case)

    def judge_all(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        # Judged together: on one short text several mistakes give the same merges, but a mistake is
        # named only when it explains every result.
        judged = [(c, _as_pairs(r, "bpe_train", c)) for c, r in zip(cases, results)]
        wrong = [(c, mine) for c, mine in judged if mine != bpe_merges(*c.args)]
        if not wrong:
            return
        diagnoses: list[tuple[Callable[[str, int], list[tuple[int, int]]], str]] = [
            (lambda t, n: bpe_merges(t, n, characters=True),
             "you started from the characters of the text (ord(c)); start from its UTF-8 bytes, "
             "list(text.encode('utf-8')), so that ids 0-255 cover any text and every token is a sequence of bytes."),
            (lambda t, n: bpe_merges(t, n, ties="smallest"),
             "when pairs are equally frequent you took the smallest pair; take the one whose first occurrence comes "
             "first in the sequence (a dict filled from left to right, then max(counts, key=counts.get))."),
            (lambda t, n: bpe_merges(t, n, ties="largest"),
             "when pairs are equally frequent you took the largest pair; take the one whose first occurrence comes "
             "first in the sequence."),
            (lambda t, n: bpe_merges(t, n, ties="last"),
             "when pairs are equally frequent you took the one seen last; take the one whose first occurrence comes "
             "first (max keeps the first of equal maxima; the last element of an ascending sort does not)."),
            (lambda t, n: bpe_merges(t, n, min_count=1),
             "you went on merging pairs that occur only once; stop as soon as the most frequent pair occurs fewer "
             "than 2 times."),
            (lambda t, n: bpe_merges(t, n, min_count=3),
             "you stopped at a pair that occurs twice; stop only when the most frequent pair occurs once."),
            (_counted_once,
             "you counted the pairs once, on the bytes, and took the most frequent ones; count again after every "
             "merge, on the sequence as it is then, since merged tokens form new pairs."),
            (lambda t, n: bpe_merges(t, n, overlapping=False),
             "you counted the pair occurrences without overlaps (as str.count does); count every position i, the "
             "pairs (ids[i], ids[i + 1]): in a a a the pair (a, a) occurs twice."),
            (lambda t, n: bpe_merges(t, n, right_to_left=True),
             "you replaced the pair's occurrences from the right; replace them from the left: in a a a the merge of "
             "(a, a) gives aa a."),
            (lambda t, n: bpe_merges(t, n, first_only=True),
             "you replaced only the first occurrence of the pair; replace every occurrence, left to right."),
            (lambda t, n: bpe_merges(t, max(n - 1, 0)),
             "you made one merge too few: make up to num_merges merges (range(num_merges))."),
            (lambda t, n: bpe_merges(t, n + 1),
             "you made one merge too many: make at most num_merges merges."),
        ]
        case, mine = wrong[0]
        for mistaken, message in diagnoses:
            if all(mistaken(*c.args) == m for c, m in judged):
                raise CheckFailed(f"`bpe_train`'s merges are wrong on the case {case.label}: {message}")
        text, num_merges = case.args
        rounds = bpe_rounds(text, num_merges)
        expected = [m for m, _, _ in rounds]
        if len(mine) < len(expected) and mine == expected[: len(mine)]:
            best, stats, _ = rounds[len(mine)]
            raise CheckFailed(
                f"`bpe_train` stopped after {len(mine)} merges on the case {case.label}, where "
                f"{len(expected)} are made: after them the pair {_shown(expected, best)} still occurs "
                f"{stats[best][0]} times. Stop only when no pair occurs twice, or after num_merges merges."
            )
        if len(mine) > len(expected) and mine[: len(expected)] == expected:
            why = (f"no pair occurs twice any more after merge {len(expected) - 1}" if len(expected) < num_merges
                   else f"num_merges={num_merges}")
            raise CheckFailed(
                f"`bpe_train` returned {len(mine)} merges on the case {case.label}, where only {len(expected)} are "
                f"made: {why}, so stop there."
            )
        k = next(i for i, (a, b) in enumerate(zip(mine, expected)) if a != b)
        want, stats, _ = rounds[k]
        got = mine[k]
        count = stats.get(got, [0])[0]
        raise CheckFailed(
            f"`bpe_train`'s merge {k} is wrong on the case {case.label} (the {k} before it are right): you merged "
            f"{_shown(expected, got)}, which occurs {count} times at that point, where {_shown(expected, want)} "
            f"occurs {stats[want][0]} times and comes first among the most frequent. Count every neighbouring pair "
            "of the sequence as it is after the earlier merges, take the most frequent (ties: the first to occur), "
            f"and give it the id 256 + {k} = {256 + k}."
        )


# ----------------------------------------------------------------------------------------
# bpe_encode
# ----------------------------------------------------------------------------------------


def _as_ids(result: Any, function: str, case: Case) -> list[int]:
    if isinstance(result, torch.Tensor) and result.dim() == 1 and not result.is_floating_point() \
            and result.dtype != torch.bool:
        return [int(i) for i in result.tolist()]
    if isinstance(result, (list, tuple)):
        if all(isinstance(i, int) and not isinstance(i, bool) for i in result):
            return list(result)
        if any(isinstance(i, str) for i in result):
            raise CheckFailed(
                f"`{function}` returned text pieces on the case {case.label}; return the ids, a list of ints (use "
                "bpe_decode or bpe_vocabulary to look at the pieces)."
            )
    kind = result.type if isinstance(result, Opaque) else type(result).__name__
    raise CheckFailed(f"`{function}` returned a {kind} on the case {case.label}; return the ids as a list of ints.")


class BpeEncodeCheck(Check):
    function = "bpe_encode"
    oracle = "the merges applied one after another in the order they were learnt, by a plain implementation"

    def cases(self, hidden: bool) -> list[Case]:
        code_merges = bpe_merges(CODE, 40)
        accented_merges = bpe_merges(ACCENTED, 12)

        def case(text: str, merges: list[tuple[int, int]], what: str, tag: str = "") -> Case:
            return Case(f"text={_snippet(text)}, merges {what}", (text, merges), {}, tag)

        out = [
            case("abc", [(98, 99), (97, 98)], "[(98, 99), (97, 98)]: 'b' + 'c', then 'a' + 'b'"),
            case("aaaaa", [(97, 97)], "[(97, 97)]: 'a' + 'a'"),
            case("abcd abcd abd", [(97, 98), (256, 99), (257, 100)], "[(97, 98), (256, 99), (257, 100)]: 'ab', 'abc', 'abcd'"),
            case(CODE, code_merges, "learnt from this very text (40)", tag="training"),
            case("    def count_lines(self, lines):\n        return len(lines)\n", code_merges,
                 "learnt from a piece of Python code (40)"),
            case("a naïve déjà vu — 🙂", accented_merges, "learnt from an accented sentence (12)"),
            case("", code_merges, "learnt from a piece of Python code (40)"),
        ]
        if hidden:
            runs_merges = bpe_merges(RUNS, 4)
            out += [
                case(ACCENTED, accented_merges, "learnt from this very text (12)", tag="training"),
                case(CODE[500:], bpe_merges(CODE[500:], 70), "learnt from this very text (70)", tag="training"),
                case("xyzxyz", [(121, 122), (120, 121), (256, 120)], "[(121, 122), (120, 121), (256, 120)]"),
                case("aaaaaaa", [(97, 97), (256, 256)], "[(97, 97), (256, 256)]: 'aa', then 'aaaa'"),
                case("xyxyx aaa aaaa", runs_merges, "learnt from another text (4)"),
                case("    for word in counts:\n        print(word, counts[word])\n", code_merges,
                     "learnt from a piece of Python code (40)"),
                case("crème brûlée", [], "[] (no merges)"),
            ]
        return out

    def judge(self, case: Case, result: Any) -> None:
        _as_ids(result, "bpe_encode", case)

    def judge_all(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        # As for training: a mistake is named only when it explains every result.
        judged = [(c, _as_ids(r, "bpe_encode", c)) for c, r in zip(cases, results)]
        wrong = [(c, mine) for c, mine in judged if mine != bpe_apply(*c.args)]
        if not wrong:
            return
        diagnoses: list[tuple[Callable[[str, list[tuple[int, int]]], list[int]], str]] = [
            (lambda t, m: bpe_apply(t, m, order="reversed"),
             "you applied the merges from the last to the first; apply them in the order they were learnt, merge 0 "
             "first, since a later merge joins tokens that earlier ones made."),
            (_longest_match,
             "you took the longest known piece from the left at each step (WordPiece's rule); BPE applies the merges "
             "one after another, in the order they were learnt, each to the whole sequence."),
            (lambda t, m: bpe_apply(t, m, first_only=True),
             "each merge replaced only the first occurrence of its pair; replace every occurrence, left to right."),
            (lambda t, m: bpe_apply(t, m, right_to_left=True),
             "you replaced the pairs from the right; replace them from the left, as training did: with the merge "
             "(a, a), a a a gives aa a."),
            (lambda t, m: bpe_apply(t, m, characters=True),
             "you started from the characters of the text (ord(c)); start from its UTF-8 bytes, "
             "list(text.encode('utf-8'))."),
            (lambda t, m: bpe_apply(t, m, first_id=257),
             "your new ids start at 257; the k-th merge makes the id 256 + k (ids 0-255 are the bytes, so merge 0 "
             "makes 256), which is how the merges name the tokens they join: (256, 99) joins merge 0's token and 'c'."),
        ]
        case, mine = wrong[0]
        for mistaken, message in diagnoses:
            if all(mistaken(*c.args) == m for c, m in judged):
                raise CheckFailed(f"`bpe_encode`'s ids are wrong on the case {case.label}: {message}")
        text, merges = case.args
        table = vocabulary(merges)
        strange = [i for i in mine if i not in table]
        if strange:
            raise CheckFailed(
                f"`bpe_encode` returned the id {strange[0]} on the case {case.label}, which no token has: ids 0-255 are "
                f"the bytes of the text and 256 + k the k-th merge, so with {len(merges)} merges every id is below "
                f"{256 + len(merges)}."
            )
        decoded = b"".join(table[i] for i in mine)
        if decoded != text.encode("utf-8"):
            lost = "drops part of the text" if len(decoded) < len(text.encode("utf-8")) else "does not give the text back"
            raise CheckFailed(
                f"`bpe_encode`'s ids on the case {case.label}: decoding them {lost} "
                f"({_snippet(decoded.decode('utf-8', errors='replace'))} instead of {_snippet(text)}). Every byte of "
                "the text must end up in exactly one token: when a merge joins the pair at i and i + 1, continue at "
                "i + 2, and keep every token no merge joins."
            )
        expected = bpe_apply(text, merges)
        at = next((i for i, (a, b) in enumerate(zip(mine, expected)) if a != b), min(len(mine), len(expected)))

        def pieces(ids: list[int]) -> list[str]:
            return [table[i].decode("utf-8", errors="replace") for i in ids[at : at + 4]]

        extra = (" Encoding the training text must retrace training: the same merges, in the same order, at the same "
                 "places." if case.tag == "training" else "")
        raise CheckFailed(
            f"`bpe_encode` gave {len(mine)} tokens on the case {case.label} where {len(expected)} were expected; the "
            f"first difference is at token {at}: you have {pieces(mine)} where {pieces(expected)} was expected. Start "
            "from the bytes and apply each merge k, in order, to the whole sequence, replacing its pair from the left "
            f"by 256 + k.{extra}"
        )


# ----------------------------------------------------------------------------------------
# mask_tokens
# ----------------------------------------------------------------------------------------


def _bert_batch(g: torch.Generator, B: int, T: int, ordinary: list[int], pad: int, cls: int, sep: int) -> torch.Tensor:
    """(B, T) sentence pairs as BERT reads them: [CLS] a [SEP] b [SEP], then padding."""
    pool = torch.tensor(ordinary)
    ids = pool[torch.randint(len(pool), (B, T), generator=g)]  # (B, T)
    lengths = torch.randint(max(5, T // 2), T + 1, (B,), generator=g).tolist()
    lengths[0] = T  # one full row
    for b, n in enumerate(lengths):
        middle = int(torch.randint(2, n - 2, (1,), generator=g))
        ids[b, 0], ids[b, middle], ids[b, n - 1] = cls, sep, sep
        ids[b, n:] = pad
    return ids


class MaskTokensCheck(Check):
    function = "mask_tokens"
    oracle = "BERT's rule: the exact properties, and its rates within a 5-sigma binomial bound"
    invalid_hint = "a rate outside (0, 1] means nothing: raise ValueError with a message that names rate."
    invalid_returned = RETURNED
    invalid_argument = "rate"

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(B, T, vocab_size, specials=(0, 1, 2, 3), seed=0, rate=None, tag="", ids=None):
            pad, cls, sep, mask = specials[:4]
            ordinary = [i for i in range(vocab_size) if i not in specials]
            if ids is None:
                ids = _bert_batch(g, B, T, ordinary, pad, cls, sep)
            kwargs = {"mask_id": mask, "vocab_size": vocab_size, "special_ids": list(specials),
                      "generator": _generator(seed)}
            if rate is not None:
                kwargs["rate"] = rate
            label = (f"ids {tuple(ids.shape)} (sentence pairs with [CLS], [SEP] and padding), vocab_size={vocab_size}, "
                     f"special_ids={list(specials)}, mask_id={mask}, generator seeded with {seed}"
                     + ("" if rate is None else f", rate={rate}"))
            return Case(label, (ids,), kwargs, tag), ids

        main, _ = case(96, 64, 40, seed=1, tag="main")
        out = [
            main,
            Case(main.label, main.args, dict(main.kwargs), "again"),
            Case(main.label.replace("seeded with 1", "seeded with 2"), main.args,
                 dict(main.kwargs) | {"generator": _generator(2)}, "other-seed"),
            case(160, 100, 12, seed=3, rate=1.0, tag="all")[0],
            case(48, 40, 30, specials=(0, 1, 2, 3, 4), seed=4, rate=0.4)[0],
            case(4, 12, 20, seed=5, rate=0.0, tag="invalid")[0],
            case(4, 12, 20, seed=5, rate=1.5, tag="invalid")[0],
        ]
        if hidden:
            bert_like = (0, 101, 102, 103, 100)  # [PAD], [CLS], [SEP], [MASK], [UNK], as in BERT's vocabulary
            hidden_main, _ = case(128, 80, 120, specials=bert_like, seed=11, tag="main")
            out += [
                hidden_main,
                Case(hidden_main.label, hidden_main.args, dict(hidden_main.kwargs), "again"),
                Case(hidden_main.label.replace("seeded with 11", "seeded with 12"), hidden_main.args,
                     dict(hidden_main.kwargs) | {"generator": _generator(12)}, "other-seed"),
                case(200, 100, 10, specials=(7, 0, 9, 3), seed=13, rate=1.0, tag="all")[0],
                case(64, 50, 60, seed=14, rate=0.05)[0],
                case(3, 8, 20, seed=15, rate=-0.1, tag="invalid")[0],
            ]
        return out

    def judge(self, case: Case, result: Any) -> None:
        (ids,) = case.args
        kw = case.kwargs
        mask_id, vocab_size, rate = kw["mask_id"], kw["vocab_size"], kw.get("rate", 0.15)
        specials = set(kw["special_ids"])
        ordinary = [i for i in range(vocab_size) if i not in specials]
        K = len(ordinary)
        inputs, labels = expect_tuple(result, 2, "`mask_tokens`", case, "inputs, labels")
        for name, t in (("inputs", inputs), ("labels", labels)):
            t = expect_tensor(t, f"`mask_tokens`'s {name}", case)
            if tuple(t.shape) != tuple(ids.shape):
                raise CheckFailed(
                    f"`mask_tokens`'s {name} have shape {tuple(t.shape)} on the case {case.label}; they must have the "
                    f"shape of ids, {tuple(ids.shape)}: one entry per position."
                )
            if t.dtype != torch.long:
                raise CheckFailed(
                    f"`mask_tokens`'s {name} have dtype {t.dtype} on the case {case.label}; token ids and labels are "
                    "torch.long, the dtype of ids (embeddings and F.cross_entropy need it)."
                )
        is_special = torch.isin(ids, torch.tensor(sorted(specials)))  # (B, T)
        chosen = labels != -100  # (B, T)

        def first(where: torch.Tensor) -> tuple[int, int]:
            b, t = where.nonzero()[0].tolist()
            return b, t

        wrong_label = chosen & (labels != ids)
        if wrong_label.any():
            b, t = first(wrong_label)
            values = labels[wrong_label].unique().tolist()
            if len(values) == 1 and (labels == values[0]).sum() > 0.5 * labels.numel():
                raise CheckFailed(
                    f"`mask_tokens`'s labels are {values[0]} at most positions on the case {case.label}: a position "
                    "that was not chosen must have the label -100, the value F.cross_entropy ignores, and a chosen "
                    "one its original id."
                )
            if labels[b, t] == mask_id or (labels[wrong_label] == inputs[wrong_label]).all():
                raise CheckFailed(
                    f"`mask_tokens`'s label at {(b, t)} is {int(labels[b, t])} on the case {case.label}, where the "
                    f"original token was {int(ids[b, t])}: the labels were taken after the replacements were written. "
                    "Did you write into ids itself (inputs = ids, then inputs[...] = mask_id)? Clone ids first, and "
                    "take the labels from the original ids."
                )
            raise CheckFailed(
                f"`mask_tokens`'s label at {(b, t)} is {int(labels[b, t])} on the case {case.label}, where the original "
                f"token was {int(ids[b, t])}: a chosen position's label is its original id, every other one is -100."
            )
        if (chosen & is_special).any():
            b, t = first(chosen & is_special)
            raise CheckFailed(
                f"`mask_tokens` chose the special token {int(ids[b, t])} at {(b, t)} on the case {case.label}: special "
                "tokens (those in special_ids: padding, [CLS], [SEP], ...) are never chosen. Choose only among the "
                "positions whose id is not in special_ids (torch.isin helps)."
            )
        changed = ~chosen & (inputs != ids)
        if changed.any():
            b, t = first(changed)
            hint = ""
            if (inputs[changed] != mask_id).all() and chosen.any() and (inputs[chosen] == mask_id).all():
                hint = (" It looks as if only the [MASK] positions got a label: every chosen position gets its label, "
                        "whether it became [MASK], a random token or stayed as it was.")
            raise CheckFailed(
                f"`mask_tokens` changed the input at {(b, t)} from {int(ids[b, t])} to {int(inputs[b, t])} on the case "
                f"{case.label}, where the label is -100 (not chosen). Only chosen positions may change; draw the chosen "
                f"positions once and use that one mask for the inputs and the labels.{hint}"
            )
        bad_draw = chosen & (inputs != mask_id) & torch.isin(inputs, torch.tensor(sorted(specials)))
        if bad_draw.any():
            b, t = first(bad_draw)
            raise CheckFailed(
                f"`mask_tokens` put the special token {int(inputs[b, t])} at {(b, t)} on the case {case.label}: a "
                "random replacement is drawn from the ordinary ids only, never a special one. Draw an index into the "
                "list of ordinary ids (torch.randint(len(ordinary), ..., generator=generator))."
            )
        # The rates. Counts of independent draws: binomial, judged with a 5-sigma bound.
        n_candidates, n_chosen = int((~is_special).sum()), int(chosen.sum())
        where = f"on the case {case.label}"
        if rate == 1.0:
            if n_chosen != n_candidates:
                raise CheckFailed(
                    f"`mask_tokens` chose {n_chosen} of the {n_candidates} ordinary tokens {where}: with rate=1.0 every "
                    "ordinary token is chosen. Choose each with probability rate, e.g. torch.rand(...) < rate."
                )
        else:
            low, high = n_candidates * rate - _bound(n_candidates, rate), n_candidates * rate + _bound(n_candidates, rate)
            if not low <= n_chosen <= high:
                share = n_chosen / max(1, ids.numel())
                hint = (" That is about rate times all positions: count only the ordinary tokens (specials and padding "
                        "are never candidates), and choose each of them with probability rate."
                        if abs(share - rate) < abs(n_chosen / max(1, n_candidates) - rate) else
                        " Choose each ordinary token independently with probability rate: torch.rand(ids.shape, "
                        "generator=generator) < rate, restricted to the ordinary positions.")
                raise CheckFailed(
                    f"`mask_tokens` chose {n_chosen} of the {n_candidates} ordinary tokens ({n_chosen / n_candidates:.1%}) "
                    f"{where}, where rate={rate} expects between {max(low, 0):.0f} and {high:.0f} (a 5-sigma bound).{hint}"
                )
        if n_chosen < 200:
            return
        masked = int((chosen & (inputs == mask_id)).sum())
        same = int((chosen & (inputs == ids)).sum())
        other = n_chosen - masked - same
        p_same = 0.1 + 0.1 / K  # left alone, or replaced by itself
        p_other = 0.1 * (K - 1) / K
        shares = f"{masked} became [MASK], {other} another token, {same} stayed as they were"
        one_draw = (" Draw one number u per chosen position: u < 0.8 gives [MASK], 0.8 <= u < 0.9 a random ordinary "
                    "token, the rest stay as they are (a second draw that overwrites some [MASK]s changes the shares).")

        def outside(count: int, p: float) -> bool:
            return abs(count - n_chosen * p) > _bound(n_chosen, p)

        if outside(masked, 0.8):
            hint = ("every chosen token became [MASK]; only 80% do: 10% get a random ordinary token and 10% keep their own."
                    if masked == n_chosen else
                    "80% of the chosen tokens become [MASK]." + one_draw)
            raise CheckFailed(
                f"`mask_tokens`: of the {n_chosen} chosen tokens {where}, {shares}; about {0.8 * n_chosen:.0f} "
                f"(80%, within {_bound(n_chosen, 0.8):.0f}) should have become [MASK]: {hint}"
            )
        if outside(other, p_other):
            raise CheckFailed(
                f"`mask_tokens`: of the {n_chosen} chosen tokens {where}, {shares}; about {p_other * n_chosen:.0f} "
                f"(within {_bound(n_chosen, p_other):.0f}) should have been replaced by a random ordinary token, 10% of "
                "the chosen ones (a random draw that happens to give the original token leaves it as it was)."
                + one_draw
            )
        if outside(same, p_same):
            raise CheckFailed(
                f"`mask_tokens`: of the {n_chosen} chosen tokens {where}, {shares}; about {p_same * n_chosen:.0f} "
                f"(within {_bound(n_chosen, p_same):.0f}) should have kept their own id: 10%, plus the random draws "
                "that happen to give the original token." + one_draw
            )
        # Each ordinary id is an equally likely replacement.
        for v in ordinary:
            could = int((chosen & (ids != v)).sum())
            drawn = int((chosen & (ids != v) & (inputs == v)).sum())
            p = 0.1 / K
            if abs(drawn - could * p) > _bound(could, p) and could * p > 20:
                hint = (" It is the largest ordinary id: the upper end of torch.randint(low, high) is excluded."
                        if v == max(ordinary) and drawn == 0 else "")
                raise CheckFailed(
                    f"`mask_tokens`'s random replacements are not spread evenly over the ordinary ids {where}: the id "
                    f"{v} replaced a chosen token {drawn} times, where about {could * p:.0f} (within "
                    f"{_bound(could, p):.0f}) were expected. Draw uniformly from all the ids of range(vocab_size) "
                    f"that are not in special_ids.{hint}"
                )

    def judge_all(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        for group in _seed_groups(cases, results):
            main_case, (inputs, labels) = group["main"]
            if "again" in group:
                again_inputs, again_labels = group["again"][1]
                if not (torch.equal(inputs, again_inputs) and torch.equal(labels, again_labels)):
                    raise CheckFailed(
                        f"`mask_tokens` gave different results for the same arguments and a generator with the same seed "
                        f"({main_case.label}): draw every random number from the generator passed in "
                        "(torch.rand(shape, generator=generator), torch.randint(n, shape, generator=generator)), "
                        "never from torch's global generator."
                    )
            if "other-seed" in group:
                other_inputs, other_labels = group["other-seed"][1]
                if torch.equal(inputs, other_inputs) and torch.equal(labels, other_labels):
                    raise CheckFailed(
                        f"`mask_tokens` gave the same result with generators of different seeds (the case "
                        f"{main_case.label}, and the same with another seed): the random choices must come from the "
                        "generator passed in, not from torch's global generator or a generator of your own."
                    )


# ----------------------------------------------------------------------------------------
# causal_lm_loss
# ----------------------------------------------------------------------------------------


def _ce(logits: torch.Tensor, targets: torch.Tensor, pad_id: int | None, reduction: str = "mean") -> torch.Tensor:
    V = logits.shape[-1]
    kwargs = {} if pad_id is None else {"ignore_index": pad_id}
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), reduction=reduction, **kwargs)


class CausalLmLossCheck(Check):
    function = "causal_lm_loss"
    oracle = "F.cross_entropy(ignore_index=pad_id) on logits[:, :-1] against ids[:, 1:]"

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(B, T, V, lengths=None, pad_id=0, dtype=torch.float32, scale=2.0, tag=""):
            logits = (torch.randn(B, T, V, generator=g, dtype=torch.float64) * scale).to(dtype)
            ordinary = torch.tensor([i for i in range(V) if i != pad_id])
            ids = ordinary[torch.randint(len(ordinary), (B, T), generator=g)]  # (B, T)
            if lengths is not None:
                ids[torch.arange(T).unsqueeze(0) >= torch.tensor(lengths).unsqueeze(1)] = pad_id  # padded at the end
            extra = " with entries near ±1000" if tag == "large" else ""
            label = (f"logits {(B, T, V)} {str(dtype)[6:]}{extra}, ids {(B, T)} with "
                     + (f"real lengths {lengths}" if lengths is not None else "no padding") + f", pad_id={pad_id}")
            return Case(label, (logits, ids), {"pad_id": pad_id}, tag)

        out = [
            case(3, 7, 11, lengths=[7, 4, 5]),
            case(2, 5, 6, dtype=torch.float64),
            case(4, 9, 13, lengths=[9, 2, 6, 3], pad_id=5, dtype=torch.float64),
            case(2, 6, 9, lengths=[6, 3], scale=500.0, tag="large"),
        ]
        if hidden:
            out += [
                case(5, 12, 30, lengths=[12, 1, 7, 10, 4], dtype=torch.float64),
                case(1, 2, 5),
                case(3, 8, 17, lengths=[8, 8, 2], pad_id=16),
                case(6, 10, 7, lengths=[10, 9, 3, 5, 2, 8], dtype=torch.float64, scale=4.0),
                case(2, 5, 20, lengths=[5, 4], scale=2000.0, dtype=torch.float64, tag="large"),
            ]
        return out

    def judge(self, case: Case, result: Any) -> None:
        logits, ids = case.args
        pad_id = case.kwargs["pad_id"]
        name = "`causal_lm_loss`'s result"
        loss = expect_loss(result, name, case, logits.dtype, "the mean over every real target of the batch",
                           "use torch.log_softmax or F.cross_entropy, which compute it stably.")
        x = logits.double()
        B, T, V = x.shape
        shifted, targets = x[:, :-1], ids[:, 1:]  # position t predicts the token at t + 1
        expected = _ce(shifted, targets, pad_id)
        real = targets != pad_id  # (B, T-1)
        per_token = _ce(shifted, targets, None, reduction="none").view(B, T - 1)  # (B, T-1)
        padded = bool((ids == pad_id).any())

        diagnoses: list[tuple[Callable[[], torch.Tensor], str]] = [
            (lambda: _ce(x, ids, pad_id),
             "there is no shift: position t was scored against ids[:, t], the token it already sees. Position t "
             "predicts the next token: compare logits[:, :-1] with ids[:, 1:]."),
            (lambda: _ce(x[:, 1:], ids[:, :-1], pad_id),
             "the shift goes the wrong way: logits[:, 1:] were scored against ids[:, :-1], so every position "
             "predicts the token before it. Use logits[:, :-1] against ids[:, 1:]."),
            (lambda: _ce(x[:, :-1], ids[:, :-1], pad_id),
             "the last position was dropped but nothing was shifted: logits[:, :-1] must meet ids[:, 1:], the "
             "tokens one step ahead."),
            (lambda: _ce(x[:, 1:], ids[:, 1:], pad_id),
             "logits[:, 1:] were scored against ids[:, 1:]: those are the same positions, with no shift. Position t "
             "predicts ids[:, t + 1]: use logits[:, :-1] against ids[:, 1:]."),
        ]
        if padded:
            by_input = ids[:, :-1] != pad_id  # (B, T-1)
            diagnoses += [
                (lambda: _ce(shifted, targets, None),
                 "padding was counted: leave out every target equal to pad_id, from the sum and from the count "
                 "(F.cross_entropy(..., ignore_index=pad_id))."),
                (lambda: per_token[real].sum() / real.numel(),
                 "padding was left out of the sum but not out of the count: divide by the number of real targets, "
                 "(ids[:, 1:] != pad_id).sum(), not by B * (T - 1)."),
                (lambda: per_token[by_input].sum() / by_input.sum(),
                 "the positions were kept by their input token instead of their target: the last real token of a row "
                 "predicts padding and must be left out, so mask with ids[:, 1:] != pad_id."),
            ]
            if B > 1:
                diagnoses.append((
                    lambda: torch.stack([per_token[b][real[b]].mean() for b in range(B) if real[b].any()]).mean(),
                    "this is the mean of per-sequence means; the loss is the mean over all real targets of the batch "
                    "together, so that every token weighs the same and a short sequence weighs less.",
                ))
        diagnoses += [
            (lambda: per_token[real].sum(),
             "this is the sum over the targets; return the mean over the real targets."),
            (lambda: -(x[:, :-1].gather(-1, targets.unsqueeze(-1)).squeeze(-1)[real]).mean(),
             "the logits were used as log-probabilities: take torch.log_softmax(logits, dim=-1) first (or use "
             "F.cross_entropy, which does)."),
        ]
        expect_close(loss, expected, name, case, diagnoses, dtype=logits.dtype,
                     hint="The loss is the mean of -log softmax(logits[:, t])[ids[:, t + 1]] over the positions whose "
                          "target ids[:, t + 1] is not pad_id.")


# ----------------------------------------------------------------------------------------
# sample_next
# ----------------------------------------------------------------------------------------


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


def _sorted_positions(row: Sequence[float], temperature: float, top_k: int, top_p: float) -> list[float]:
    """The draws of a sampler that returns positions in the sorted order instead of token ids."""
    p = sampling_distribution(row, temperature, top_k, top_p)
    return sorted(p, reverse=True)


def _nucleus_margin(row: Sequence[float], temperature: float, top_k: int, top_p: float) -> float:
    """How far top_p is from the nearest cumulative probability: a case must not sit on a boundary."""
    if top_p >= 1:
        return 1.0
    scores = {v: float(z) / temperature for v, z in enumerate(row)}
    if 0 < top_k < len(row):
        scores = {v: scores[v] for v in sorted(scores, key=lambda v: (-scores[v], v))[:top_k]}
    probs = sorted(_softmax(scores).values(), reverse=True)
    sums = [sum(probs[: i + 1]) for i in range(len(probs))]
    return min(abs(s - top_p) for s in sums)


class SampleNextCheck(Check):
    function = "sample_next"
    oracle = ("the renormalised top-k / top-p distribution, over thousands of seeded draws per row "
              "(a 5-sigma binomial bound per token), and argmax where the choice is greedy")
    invalid_hint = "raise ValueError with a message that names the argument that is wrong."
    invalid_returned = RETURNED
    hints = (
        Hint((), "A temperature of 0, or top_k=1, is greedy decoding: return logits.argmax(dim=-1) without dividing by "
             "the temperature or drawing.", when=lambda case, result: case.tag == "greedy"),
        Hint("RuntimeError", lambda name, case, result: (
            ("some row kept no token at all: the most likely token is always kept, even when its probability alone "
             "passes top_p (keep a token when the tokens more likely than it hold less than top_p together: "
             "cumsum - probs < top_p, not cumsum <= top_p). " if case.kwargs.get("top_p", 1.0) < 1 else "")
            + "torch.multinomial needs, in every row, non-negative probabilities with a positive sum: keep at least the "
            "most likely token, and give removed tokens probability 0 (logit -inf before the softmax), not NaN."),
            containing=("multinomial", "probability tensor")),
    )

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(n_rows, V, n, seed, temperature=None, top_k=None, top_p=None, tag="", scale=1.5, rows_from=None):
            rows = torch.randn(n_rows, V, generator=rows_from or g, dtype=torch.float64) * scale  # (n_rows, V)
            logits = rows.repeat_interleave(n, dim=0).float()  # (R * n, V): each row drawn n times
            kwargs: dict[str, Any] = {"generator": _generator(seed)}
            shown = []
            for key, value in (("temperature", temperature), ("top_k", top_k), ("top_p", top_p)):
                if value is not None:
                    kwargs[key] = value
                    shown.append(f"{key}={value}")
            label = (f"logits ({n_rows * n}, {V}): {n_rows} random rows, each repeated {n} times"
                     + (", " + ", ".join(shown) if shown else "") + f", generator seeded with {seed}")
            c = Case(label, (logits,), kwargs, tag)
            if tag != "invalid":
                t, k, p = self._settings(c)
                for r in logits[::n].double().tolist():
                    if t > 0 and _nucleus_margin(r, t, k, p) < 1e-4:
                        raise RuntimeError(f"grader error: top_p sits on a boundary in {label}")
            return c

        main = case(4, 12, 5000, seed=1, tag="main")
        out = [
            main,
            Case(main.label, main.args, dict(main.kwargs), "again"),
            Case(main.label.replace("seeded with 1", "seeded with 2"), main.args,
                 dict(main.kwargs) | {"generator": _generator(2)}, "other-seed"),
            case(3, 10, 5000, seed=3, temperature=0.5),
            case(3, 10, 5000, seed=4, temperature=2.0),
            case(3, 16, 5000, seed=5, top_k=4),
            case(3, 16, 5000, seed=6, top_p=0.7),
            case(3, 16, 5000, seed=7, temperature=0.8, top_k=6, top_p=0.6),
            case(5, 9, 1, seed=8, temperature=0, top_k=3, tag="greedy"),
            case(5, 9, 1, seed=9, temperature=1.5, top_k=1, tag="greedy"),
            case(2, 6, 1, seed=10, temperature=-1.0, tag="invalid"),
            case(2, 6, 1, seed=10, top_k=-2, tag="invalid"),
            case(2, 6, 1, seed=10, top_p=0.0, tag="invalid"),
            case(2, 6, 1, seed=10, top_p=1.5, tag="invalid"),
        ]
        # A high temperature with both filters, where the order of the three steps shows: drawn from a generator of
        # its own, so that the other cases keep their rows.
        out.insert(7, case(3, 16, 5000, seed=21, temperature=2.5, top_k=8, top_p=0.5,
                           rows_from=self.generator(hidden, "high temperature")))
        if hidden:
            hidden_main = case(3, 20, 5000, seed=11, temperature=1.2, tag="main")
            out += [
                hidden_main,
                Case(hidden_main.label, hidden_main.args, dict(hidden_main.kwargs), "again"),
                Case(hidden_main.label.replace("seeded with 11", "seeded with 12"), hidden_main.args,
                     dict(hidden_main.kwargs) | {"generator": _generator(12)}, "other-seed"),
                case(3, 30, 5000, seed=13, top_k=30),
                case(4, 25, 4000, seed=14, temperature=0.7, top_k=10),
                case(3, 25, 5000, seed=15, temperature=1.5, top_p=0.9),
                case(3, 12, 5000, seed=16, top_p=0.3, scale=2.5),
                case(3, 40, 5000, seed=17, temperature=0.6, top_k=12, top_p=0.75),
                case(3, 14, 5000, seed=18, top_k=5, top_p=0.95),
                case(7, 50, 1, seed=19, temperature=0.0, tag="greedy"),
                case(2, 8, 1, seed=20, temperature=-0.5, top_k=2, tag="invalid"),
                case(2, 8, 1, seed=20, top_p=-0.2, tag="invalid"),
            ]
        return out

    def wrong_argument(self, case: Case) -> str:
        temperature, top_k, _ = self._settings(case)
        return "temperature" if temperature < 0 else "top_k" if top_k < 0 else "top_p"

    @staticmethod
    def _settings(case: Case) -> tuple[float, int, float]:
        return (case.kwargs.get("temperature", 1.0), case.kwargs.get("top_k", 0), case.kwargs.get("top_p", 1.0))

    def judge(self, case: Case, result: Any) -> None:
        (logits,) = case.args
        temperature, top_k, top_p = self._settings(case)
        drawn = expect_tensor(result, "`sample_next`'s result", case)
        B, V = logits.shape
        if tuple(drawn.shape) == (B, 1):
            raise CheckFailed(
                f"`sample_next`'s result has shape {(B, 1)} on the case {case.label}: return one id per row, shape "
                f"({B},); torch.multinomial(probs, 1) gives (B, 1), so .squeeze(-1) it."
            )
        if tuple(drawn.shape) != (B,):
            raise CheckFailed(
                f"`sample_next`'s result has shape {tuple(drawn.shape)} on the case {case.label}; it must have shape "
                f"({B},): one token id per row of logits."
            )
        if drawn.dtype != torch.long:
            raise CheckFailed(
                f"`sample_next`'s result has dtype {drawn.dtype} on the case {case.label}; token ids are torch.long "
                "(what argmax and torch.multinomial return)."
            )
        if ((drawn < 0) | (drawn >= V)).any():
            bad = int(drawn[(drawn < 0) | (drawn >= V)][0])
            raise CheckFailed(
                f"`sample_next` returned the id {bad} on the case {case.label}, outside the vocabulary 0..{V - 1}."
            )
        if case.tag == "greedy":
            expected = logits.argmax(dim=-1)
            if not torch.equal(drawn, expected):
                row = int((drawn != expected).nonzero()[0])
                raise CheckFailed(
                    f"`sample_next` returned {int(drawn[row])} for row {row} on the case {case.label}, where the largest "
                    f"logit is that of token {int(expected[row])}: a temperature of 0, or top_k=1, is greedy "
                    "decoding, logits.argmax(dim=-1), and draws nothing."
                )
            return
        # Rows come in blocks of n identical ones: each block is n draws from one distribution.
        starts = [0] + [i + 1 for i in (logits[1:] != logits[:-1]).any(dim=-1).nonzero().flatten().tolist()]
        blocks = [(s, e) for s, e in zip(starts, starts[1:] + [B])]
        observed = []
        for s, e in blocks:
            observed.append((logits[s].double().tolist(), torch.bincount(drawn[s:e], minlength=V).tolist(), e - s))

        def consistent(rule: Callable[[list[float]], list[float]]) -> bool:
            for row, counts, n in observed:
                p = rule(row)
                for v in range(V):
                    if p[v] == 0.0:
                        if counts[v] > 0:
                            return False
                    elif abs(counts[v] - n * p[v]) > _bound(n, p[v]):
                        return False
            return True

        def likelihood(rule: Callable[[list[float]], list[float]]) -> float:
            """The log-probability of the observed counts under a rule (consistent ones only: no zero hit)."""
            total = 0.0
            for row, counts, _ in observed:
                p = rule(row)
                total += sum(c * math.log(p[v]) for v, c in enumerate(counts) if c)
            return total

        def rules(**mistake: Any) -> Callable[[list[float]], list[float]]:
            return lambda row: sampling_distribution(row, temperature, top_k, top_p, **mistake)

        if consistent(rules()):
            return
        diagnoses: list[tuple[Callable[[list[float]], list[float]], str]] = []
        if temperature != 1:
            diagnoses += [
                (rules(temperature_rule="multiply"),
                 "the logits were multiplied by the temperature; divide them by it: softmax(logits / temperature), "
                 "so that a temperature below 1 sharpens the distribution."),
                (rules(temperature_rule="ignore"),
                 "the temperature was ignored: divide the logits by it before the softmax."),
            ]
        if top_k > 0 and top_p < 1:
            # Before "top_k was ignored": where the nucleus of the whole vocabulary fits inside the top-k, the two agree.
            diagnoses.append((
                rules(order="p-then-k"),
                "the nucleus was taken from the whole vocabulary; take it from the tokens top-k kept, with their "
                "probabilities renormalised (temperature, then top-k, then top-p).",
            ))
        if top_k > 0:
            diagnoses += [
                (rules(k_shift=-1),
                 f"only {top_k - 1} tokens were kept; top_k={top_k} keeps the {top_k} largest logits, the k-th "
                 "included (remove the logits strictly below the k-th largest, < not <=)."),
                (rules(k_shift=1),
                 f"{top_k + 1} tokens were kept; top_k={top_k} keeps exactly the {top_k} largest logits."),
                (lambda row: sampling_distribution(row, temperature, 0, top_p),
                 f"top_k={top_k} was ignored: keep only the {top_k} tokens with the largest logits."),
            ]
        if top_p < 1:
            diagnoses += [
                (rules(nucleus_extra=1),
                 "the nucleus kept one token more than it should: the token after the one whose probability takes the "
                 "total past top_p was kept too. Keep a token when the tokens more likely than it hold less than top_p "
                 "together (cumsum - probs < top_p): the crossing token is the last one kept."),
                (rules(crossing=False),
                 "the nucleus left out the token that takes the total past top_p; keep the smallest set whose "
                 "probabilities reach top_p, that token included: a token is kept when the tokens more likely than "
                 "it hold less than top_p together (cumsum - probs < top_p)."),
                (rules(sorted_nucleus=False),
                 "the nucleus was cut in vocabulary order; sort the probabilities from the most likely down first, "
                 "then add them up."),
                (lambda row: sampling_distribution(row, temperature, top_k, 1.0),
                 f"top_p={top_p} was ignored: keep only the nucleus, the smallest set of most likely tokens whose "
                 "probabilities reach top_p."),
            ]
            if temperature != 1:
                diagnoses.append((
                    rules(p_before_temperature=True),
                    "the temperature was applied after top-k and top-p (the nucleus was chosen from the probabilities "
                    "without it); apply the temperature first, then top-k, then top-p on what is left.",
                ))
        if top_k > 0 or top_p < 1:
            diagnoses.append((
                lambda row: _sorted_positions(row, temperature, top_k, top_p),
                "the ids returned are positions in the sorted order, not token ids: after sorting, map a drawn "
                "position back to its token with the indices the sort returned (or scatter the filter back to "
                "vocabulary order before drawing).",
            ))
        fitting = [(rule, message) for rule, message in diagnoses if consistent(rule)]
        if fitting:
            # Two mistakes can both pass the 5-sigma bounds; the draws are far likelier under the one made.
            _, message = max(fitting, key=lambda pair: likelihood(pair[0]))
            raise CheckFailed(f"`sample_next`'s draws are wrong on the case {case.label}: {message}")
        expected_rule = rules()
        for block, (row, counts, n) in enumerate(observed):
            p = expected_rule(row)
            for v in range(V):
                if p[v] == 0.0 and counts[v] > 0:
                    raise CheckFailed(
                        f"`sample_next` drew token {v} {counts[v]} times out of {n} from row {blocks[block][0]} on the "
                        f"case {case.label}, although it is outside "
                        + ("the top-k" if top_k > 0 and v not in _top(row, top_k) else "the nucleus")
                        + ": a removed token must get probability exactly 0 (logit -inf before the softmax)."
                    )
            for v in range(V):
                if abs(counts[v] - n * p[v]) > _bound(n, p[v]):
                    raise CheckFailed(
                        f"`sample_next` drew token {v} {counts[v]} times out of {n} from row {blocks[block][0]} on the "
                        f"case {case.label}, where its probability {p[v]:.4f} gives {n * p[v]:.0f} ± "
                        f"{_bound(n, p[v]):.0f} (a 5-sigma bound): divide the logits by the temperature, keep the "
                        "top-k, then the nucleus, renormalise, and draw once per row with torch.multinomial."
                    )

    def judge_all(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        for group in _seed_groups(cases, results):
            main_case, main = group["main"]
            if "again" in group and not torch.equal(main, group["again"][1]):
                raise CheckFailed(
                    f"`sample_next` gave different tokens for the same logits and a generator with the same seed "
                    f"({main_case.label}): draw with torch.multinomial(probs, 1, generator=generator), never from "
                    "torch's global generator."
                )
            if "other-seed" in group and torch.equal(main, group["other-seed"][1]):
                raise CheckFailed(
                    f"`sample_next` gave the same tokens with generators of different seeds ({main_case.label}): the "
                    "draw must come from the generator passed in (torch.multinomial(probs, 1, generator=generator))."
                )


def _top(row: Sequence[float], k: int) -> set[int]:
    return set(sorted(range(len(row)), key=lambda v: (-row[v], v))[:k])





# ----------------------------------------------------------------------------------------
# GPTBlock
# ----------------------------------------------------------------------------------------


def gpt_block(
    state: oracles.State,
    x: torch.Tensor,
    *,
    h: int,
    dropout: oracles.Dropout | None = None,
    inner_dropout: oracles.Dropout | None | str = "same",
    mask: str = "causal",  # "causal" | "none" | "inverted"
    wiring: tuple[str, str] = ("pre", "pre"),
    norms: tuple[str, str] = ("norm1", "norm2"),
    order: tuple[str, str] = ("attn", "ffn"),
) -> torch.Tensor:
    """A pre-norm GPT block as a function, in the dtype of x; the keywords reproduce learners' mistakes.

    ``wiring`` per sub-layer: "pre" x + f(LN(x)) (right); "post" LN(x + f(x)), the paper's;
    "no-residual" f(LN(x)); "normed-residual" LN(x) + f(LN(x)), the residual taken after the norm;
    "inner" x + LN(f(x)); "dropped-sum" dropout(x + f(LN(x))). ``dropout`` draws the residual dropout's masks and,
    unless told otherwise,
    those of the attention weights and the FFN's hidden layer, in the order the course's modules
    draw them.
    """
    inner = dropout if inner_dropout == "same" else inner_dropout
    T = x.shape[1]
    allow = {"causal": oracles.causal_mask(T), "none": None, "inverted": ~oracles.causal_mask(T)}[mask]

    def attn(z: torch.Tensor) -> torch.Tensor:
        return oracles.multi_head_attention(state, z, z, z, h=h, prefix="self_attn.", attn_mask=allow, dropout=inner)[0]

    def ffn(z: torch.Tensor) -> torch.Tensor:
        return oracles.feed_forward(state, z, prefix="feed_forward.", dropout=inner)

    def drop(z: torch.Tensor) -> torch.Tensor:
        return z if dropout is None else dropout(z)

    blocks = {"attn": attn, "ffn": ffn}
    for block, norm, wire in zip(order, norms, wiring):
        f = blocks[block]

        def n(z: torch.Tensor, norm: str = norm) -> torch.Tensor:
            return oracles.layer_norm(state, z, prefix=f"{norm}.")

        if wire == "pre":
            x = x + drop(f(n(x)))
        elif wire == "post":
            x = n(x + drop(f(x)))
        elif wire == "no-residual":
            x = drop(f(n(x)))
        elif wire == "normed-residual":
            x = n(x)
            x = x + drop(f(x))
        elif wire == "inner":
            x = x + n(drop(f(x)))
        elif wire == "dropped-sum":
            x = drop(x + f(n(x)))
    return x


GPT_BLOCK_RULE = (
    "A GPT block is pre-norm: x = x + dropout1(self_attn(a, a, a, attn_mask=subsequent_mask(T))) with a = norm1(x), "
    "then x = x + dropout2(feed_forward(norm2(x)))."
)

GPT_BLOCK_MISTAKES: list[tuple[dict, str]] = [
    (dict(wiring=("post", "post")),
     "this is the paper's post-norm wiring, LayerNorm(x + Sublayer(x)), as in chapter 4's EncoderLayer. GPT-2 moved "
     "the LayerNorm in front of each sub-layer and leaves the residual path alone: x = x + Sublayer(LayerNorm(x))."),
    (dict(mask="none"),
     "there is no causal mask, so every position saw the positions after it. The block makes its own mask: "
     "self_attn(a, a, a, attn_mask=subsequent_mask(T)) with T = x.shape[1]."),
    (dict(mask="inverted"),
     "the causal mask is flipped: each position saw only the positions after it. subsequent_mask(T) is already True "
     "where a query may attend, which is what MultiHeadAttention's attn_mask expects: pass it without ~."),
    (dict(wiring=("no-residual", "no-residual")),
     "the residual connections are missing: add each sub-layer's output to its input, x = x + Sublayer(LayerNorm(x))."),
    (dict(wiring=("pre", "no-residual")),
     "the feed-forward network's residual connection is missing: x = x + dropout2(feed_forward(norm2(x)))."),
    (dict(wiring=("no-residual", "pre")),
     "the attention's residual connection is missing: x = x + dropout1(self_attn(a, a, a, attn_mask=...)), "
     "a = norm1(x)."),
    (dict(wiring=("normed-residual", "normed-residual")),
     "the residual was taken after the LayerNorm (x = norm(x); x = x + Sublayer(x)), so the residual path is "
     "normalised at every block. Keep x itself on the residual path: x = x + Sublayer(norm(x))."),
    (dict(wiring=("normed-residual", "pre")),
     "the attention's residual was taken after norm1 (x = norm1(x); x = x + self_attn(x, ...)), so the input itself "
     "never reaches the output. Keep x on the residual path: a = norm1(x); x = x + dropout1(self_attn(a, a, a, ...))."),
    (dict(wiring=("pre", "normed-residual")),
     "the feed-forward network's residual was taken after norm2 (x = norm2(x); x = x + feed_forward(x)). Keep x on "
     "the residual path: x = x + dropout2(feed_forward(norm2(x)))."),
    (dict(wiring=("inner", "inner")),
     "the LayerNorm was applied to the sub-layer's output, x + LayerNorm(Sublayer(x)); pre-norm normalises the "
     "sub-layer's input: x + Sublayer(LayerNorm(x))."),
    (dict(norms=("norm1", "norm1")),
     "norm1 served both sub-layers, and norm2 was never used: each sub-layer has its own LayerNorm, norm1 before the "
     "attention and norm2 before the feed-forward network."),
    (dict(norms=("norm2", "norm2")),
     "norm2 served both sub-layers, and norm1 was never used: norm1 goes before the attention and norm2 before the "
     "feed-forward network."),
    (dict(norms=("norm2", "norm1")),
     "norm1 and norm2 are swapped: norm1 goes before the attention and norm2 before the feed-forward network."),
    (dict(order=("ffn", "attn"), norms=("norm2", "norm1")),
     "the feed-forward network came before the attention: attention first, then the feed-forward network."),
]

GPT_BLOCK_TRAINING_MISTAKES: list[tuple[Callable[[oracles.Dropout], dict], str]] = [
    (lambda d: dict(dropout=d, wiring=("dropped-sum", "dropped-sum")),
     "in training mode dropout was applied to the residual sum, dropout1(x + self_attn(...)), so it also drops parts "
     "of x itself; drop only the sub-layer's output before it is added: x = x + dropout1(self_attn(a, a, a, ...))."),
    (lambda d: dict(dropout=None, inner_dropout=d),
     "in training mode dropout1 and dropout2 are never used: apply them to each sub-layer's output before it is added "
     "to x."),
]


def _extra_norms(name: str, case: Case, mismatch: Mismatch) -> str:
    extra = [n for n in mismatch.unexpected if "norm" in n.split(".")[0]]
    if not extra:
        return ""
    return (f"{name} has parameters the exercise does not ask for ({', '.join(extra)}) on the case {case.label}: a "
            "pre-norm block has two LayerNorms, norm1 and norm2. The LayerNorm after the last block belongs to the "
            "model (GPT's `norm`), not to every block.")


class GPTBlockCheck(Check):
    function = "GPTBlock"
    oracle = "nn.TransformerEncoderLayer(norm_first=True, ReLU) under a causal mask, with the same weights"
    forbidden = ("torch.nn.TransformerEncoderLayer", "torch.nn.TransformerDecoderLayer", "torch.nn.MultiheadAttention",
                 "torch.nn.Transformer", "torch.nn.functional.multi_head_attention_forward")
    forbidden_ops = ("multi_head_attention", "transformer_encoder_layer")  # the fused kernels behind them
    hints = (
        Hint("StateMismatch", lambda name, case, result: (
            f"{name}'s norm1 and norm2 are one and the same LayerNorm object on the case {case.label}, so the two "
            "sub-layers share one gamma and one beta. Each sub-layer has its own: self.norm1 = LayerNorm(d_model) and "
            "self.norm2 = LayerNorm(d_model), two objects."),
            when=lambda case, result: any({a, o} == {"norm1", "norm2"} for a, o in state_mismatch(result).shared),
            whole=True),
        Hint("StateMismatch", lambda name, case, result: _extra_norms(name, case, state_mismatch(result)), whole=True),
    )

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)
        out: list[Case] = []

        def case(B, T, d_model, h, d_ff, tag="", dropout=0.1, train=False, x=None, state=None, label=""):
            init = {"d_model": d_model, "h": h, "d_ff": d_ff, "dropout": dropout}
            x = torch.randn(B, T, d_model, generator=g) if x is None else x
            state = oracles.encoder_layer_state(g, d_model, d_ff) if state is None else state
            label = label or (f"x ({B}, {T}, {d_model}), h={h}, d_ff={d_ff}, dropout={dropout}, "
                              + ("training mode" if train else "eval mode"))
            c = Case(label, (x,), {}, tag, init=init, state=state, collect=("dropout1", "dropout2"), train=train)
            out.append(c)
            return c

        def future_pair(B, T, d_model, h, d_ff, first_changed):
            a = case(B, T, d_model, h, d_ff, "future-a")
            x_b = a.args[0].clone()
            x_b[:, first_changed:] = torch.randn(B, T - first_changed, d_model, generator=g) * 3
            case(B, T, d_model, h, d_ff, "future-b", x=x_b, state=a.state,
                 label=f"the same block and inputs with other tokens from position {first_changed} on")

        case(2, 5, 16, 4, 32)
        case(1, 1, 16, 4, 32)
        case(3, 7, 8, 2, 16)
        future_pair(2, 6, 16, 4, 32, 3)
        case(2, 5, 16, 4, 32, "train", dropout=0.3, train=True)
        if hidden:
            case(4, 3, 32, 8, 24)
            case(1, 9, 12, 3, 20, dropout=0.5)
            future_pair(3, 8, 16, 2, 32, 5)
            case(3, 6, 24, 3, 48, "train", dropout=0.5, train=True)
        return out

    def judge(self, case: Case, result: Any) -> None:
        name = "`GPTBlock`'s output"
        if not isinstance(result, ModuleResult):  # pragma: no cover - a module case always gives one
            raise CheckFailed(f"`GPTBlock` did not run as a module on the case {case.label}.")
        (x,) = case.args
        y = expect_tensor(result.output, name, case)
        expect_shape(y, x.shape, name, case, "A block keeps the shape (B, T, d_model) of its input.")
        expect_dtype(y, x.dtype, name, case)
        expect_finite(y, name, case, "No position is fully masked here: every position may attend to itself.")
        for attr in ("dropout1", "dropout2"):
            got = result.attributes.get(attr)
            if not (isinstance(got, Opaque) and got.type == "Dropout"):
                raise CheckFailed(
                    f"`GPTBlock` has no submodule {attr} of type nn.Dropout on the case {case.label}: build "
                    f"self.{attr} = nn.Dropout(dropout), for the sub-layer's output before the residual sum."
                )
        d_model, h, d_ff, p = (case.init[k] for k in ("d_model", "h", "d_ff", "dropout"))
        xd = x.double()

        def block(stream: oracles.Dropout | None = None, **mistake) -> torch.Tensor:
            with torch.no_grad():
                return gpt_block(case.state, xd, h=h, **({"dropout": stream} | mistake))

        def drops() -> oracles.Dropout:
            return oracles.Dropout(p, x.dtype)

        hint = GPT_BLOCK_RULE
        if case.train:
            # PyTorch's layer cannot be given the learner's dropout masks; the functional block, held to
            # nn.TransformerEncoderLayer on every eval case, replays them.
            diagnoses = [(lambda f=f: (lambda d: block(**f(d)))(drops()), message)
                         for f, message in GPT_BLOCK_TRAINING_MISTAKES]
            diagnoses.append((lambda: block(None), "no dropout was applied at all in training mode. " + hint))
            diagnoses += [(lambda kw=kw: block(drops(), **kw), message) for kw, message in GPT_BLOCK_MISTAKES]
            expect_close(y, block(drops()), name, case, diagnoses, hint=hint, dtype=x.dtype)
            return
        layer = oracles.torch_encoder_layer(oracles.double_state(case.state), d_model, h, d_ff, norm_first=True)
        with torch.no_grad():
            expected = layer(xd, src_mask=oracles.torch_attn_mask(oracles.causal_mask(x.shape[1]), h))
        if not matches(y, expected, x.dtype):
            # The functional twin that names the mistakes must agree with PyTorch, or its names mean nothing.
            assert matches(block(), expected, torch.float64), "grader error: the functional GPT block disagrees"
        diagnoses = [(lambda kw=kw: block(**kw), message) for kw, message in GPT_BLOCK_MISTAKES]
        if p > 0:
            diagnoses.append((lambda: block(drops(), inner_dropout=None),
                              "dropout is active in eval mode: use the submodules dropout1 and dropout2 (nn.Dropout, "
                              "which follows module.eval()) rather than torch.nn.functional.dropout."))
        expect_close(y, expected, name, case, diagnoses, hint=hint, dtype=x.dtype)

    def judge_all(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        pairs = [(c, r) for c, r in zip(cases, results) if c.tag in ("future-a", "future-b")]
        for (case, a), (other, b) in zip(pairs[::2], pairs[1::2]):
            first = int((case.args[0] != other.args[0]).any(dim=(0, 2)).nonzero()[0])
            early_a, early_b = a.output[:, :first], b.output[:, :first]
            if not matches(early_a, early_b):
                raise CheckFailed(
                    f"`GPTBlock`: changing the tokens from position {first} on changed the output at an earlier "
                    f"position ({case.label}); {where_it_differs(early_b, early_a)}. Position t may see positions "
                    "0..t only: give the attention the causal mask subsequent_mask(T)."
                )


# ----------------------------------------------------------------------------------------
# generate_with_cache
# ----------------------------------------------------------------------------------------


def _toy(case: Case) -> toys.ToyGPT:
    """The grader's own copy of the case's model, without a budget: the oracle may read as it likes."""
    model = case.args[0]
    return toys.ToyGPT(**{k: v for k, v in model.kwargs.items() if k != "budget"})


def generate_plain(model: toys.ToyGPT, prompt: torch.Tensor, steps: int):
    """Greedy decoding without a cache: the whole sequence read again at every step (the oracle).

    Returns (tokens (B, steps), logits (B, steps, V), the keys and values of every block for the
    T0 + steps - 1 positions read)."""
    ids, logits = prompt, []
    with torch.no_grad():
        for _ in range(steps):
            step = model(ids)[:, -1]  # (B, V)
            logits.append(step)
            ids = torch.cat([ids, step.argmax(dim=-1, keepdim=True)], dim=1)
    return ids[:, prompt.shape[1]:], torch.stack(logits, dim=1), list(model.kv)


def generate_cached(model: toys.ToyGPT, prompt: torch.Tensor, steps: int, *, prompt_mask: bool = True,
                    positions: str = "right", extend: bool = True, final_norm: bool = True, feed_last: bool = False):
    """A cached greedy decoder written here, in float64; the keywords reproduce learners' mistakes.

    ``positions`` "restart": every step's positions count from 0, so a new token sits at position 0;
    ``extend`` False: the new position attends to its own key and value only, the cache never grows;
    ``prompt_mask`` False: the prompt is read without a causal mask; ``final_norm`` False: the final
    LayerNorm is skipped; ``feed_last``: the last token is read too, one step for nothing.
    """
    cache: list[tuple[torch.Tensor, torch.Tensor]] = []
    new, start, tokens, logits = prompt, 0, [], []
    B = prompt.shape[0]
    with torch.no_grad():
        for step in range(steps + int(feed_last)):
            T_new = new.shape[1]
            first = 0 if positions == "restart" else start
            x = model.embed(new) + model.pos_embed(torch.arange(first, first + T_new))  # (B, T_new, d_model)
            for i, block in enumerate(model.blocks):
                attn = block.self_attn
                a = block.norm1(x)
                q, k, v = (y.reshape(B, T_new, attn.h, attn.d_k).transpose(1, 2)  # (B, h, T_new, d_k)
                           for y in (attn.w_q(a), attn.w_k(a), attn.w_v(a)))
                if i < len(cache):
                    if extend:
                        k, v = torch.cat([cache[i][0], k], dim=2), torch.cat([cache[i][1], v], dim=2)
                    cache[i] = (k, v)
                else:
                    cache.append((k, v))
                T_k = k.shape[2]
                allow = torch.arange(T_k)[None, :] <= torch.arange(T_k - T_new, T_k)[:, None]  # (T_new, T_k)
                if not prompt_mask:
                    allow = torch.ones_like(allow)
                scores = (q @ k.transpose(-2, -1) / math.sqrt(attn.d_k)).masked_fill(~allow, float("-inf"))
                context = torch.softmax(scores, dim=-1) @ v  # (B, h, T_new, d_k)
                x = x + attn.w_o(context.transpose(1, 2).reshape(B, T_new, -1))
                x = x + block.feed_forward(block.norm2(x))
            last = x[:, -1]  # (B, d_model)
            step_logits = model.head(model.norm(last) if final_norm else last)  # (B, V)
            if step < steps:
                tokens.append(step_logits.argmax(dim=-1))
                logits.append(step_logits)
            start += T_new
            new = tokens[-1].unsqueeze(1)
    return torch.stack(tokens, dim=1), torch.stack(logits, dim=1), cache


GENERATE_MISTAKES: list[tuple[dict, str]] = [
    (dict(prompt_mask=False),
     "the prompt was read without a causal mask, so its positions saw each other's future and their keys and values "
     "are wrong from the second block on. When several positions are read at once, query t (at position start + t) "
     "may see the keys 0 .. start + t: subsequent_mask(start + T_new)[start:]."),
    (dict(positions="restart"),
     "each new token got position 0 (or positions counted from 0 at every step): a token's position is its place in "
     "the whole sequence, so the first generated token sits at position T0, the next at T0 + 1, and so on: "
     "model.pos_embed(torch.arange(start, start + T_new))."),
    (dict(extend=False),
     "each new position attended to its own key and value only: the cache never grew. Concatenate the new keys and "
     "values to the cached ones along the positions, torch.cat([k_cached, k_new], dim=2), and attend over all of them."),
    (dict(final_norm=False),
     "the final LayerNorm was skipped: the logits are model.head(model.norm(x)) at the newest position."),
]


class GenerateWithCacheCheck(Check):
    function = "generate_with_cache"
    oracle = "the same model read without a cache, step by step (logits, tokens and keys and values)"
    invalid_hint = "fewer than 1 step means nothing to generate: raise ValueError with a message that names steps."
    invalid_returned = RETURNED
    invalid_argument = "steps"
    hints = (
        Hint("Recomputed", lambda name, case, result: (
            f"{name} read positions again on the case {case.label}: {result.message}. Each step after the first reads "
            "only the newest token, shape (B, 1), through the blocks; the keys and values of the earlier positions "
            "come from the cache. Do not call model(...) or a block's forward, which read the whole sequence."),
            whole=True),
        Hint(("RuntimeError", "ValueError", "IndexError"),
             "Mind the shapes: the first step reads the prompt (B, T0), each later one the new tokens (B, 1); the cache "
             "of a block holds k and v of shape (B, h, positions so far, d_k), and the new ones join along dim=2. Keep "
             "every row of the batch: next_token = logits.argmax(dim=-1) has shape (B,), no .item()."),
    )

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(B, T_0, steps, seed, tag="", **shape):
            spec = {"vocab_size": 11, "d_model": 16, "h": 4, "d_ff": 32, "N": 2} | shape
            model = Provided("toy_gpt", spec | {"seed": seed, "budget": B * (T_0 + max(steps, 1))})
            prompt = torch.randint(spec["vocab_size"], (B, T_0), generator=g)
            label = (f"a prompt ({B}, {T_0}), steps={steps}, a model of {spec['N']} blocks, d_model={spec['d_model']}, "
                     f"h={spec['h']}, vocabulary {spec['vocab_size']}")
            return Case(label, (model, prompt), {"steps": steps}, tag)

        out = [
            case(1, 4, 6, seed=1),
            case(3, 5, 5, seed=2),
            case(2, 1, 4, seed=3, N=3, d_model=24, h=3),
            case(2, 3, 1, seed=4),
            case(2, 3, 0, seed=5, tag="invalid"),
        ]
        if hidden:
            out += [
                case(4, 6, 8, seed=6, vocab_size=17),
                case(1, 2, 10, seed=7, N=1),
                case(5, 3, 3, seed=8, N=4, h=2),
                case(1, 3, -2, seed=9, tag="invalid"),
            ]
        return out

    def judge(self, case: Case, result: Any) -> None:
        fn = "`generate_with_cache`"
        tokens, logits, cache = expect_tuple(result, 3, fn, case, "tokens, logits, cache")
        _, prompt = case.args
        steps = case.kwargs["steps"]
        model = _toy(case)
        B, T_0 = prompt.shape
        V, N, h, d_k = model.vocab_size, model.N, model.h, model.d_model // model.h
        tokens = expect_tensor(tokens, f"{fn}'s tokens", case)
        logits = expect_tensor(logits, f"{fn}'s logits", case)
        if tuple(tokens.shape) == (B, T_0 + steps) and torch.equal(tokens[:, :T_0], prompt):
            raise CheckFailed(
                f"{fn}'s tokens have shape {tuple(tokens.shape)} on the case {case.label}: they begin with the prompt. "
                f"Return the generated tokens only, shape (B, steps) = ({B}, {steps})."
            )
        expect_shape(tokens, (B, steps), f"{fn}'s tokens", case, "One row per prompt, one column per generated token.")
        expect_shape(logits, (B, steps, V), f"{fn}'s logits", case,
                     "Step s's logits over the vocabulary, one row per prompt: stack the (B, V) logits along dim=1.")
        expect_dtype(logits, torch.float64, f"{fn}'s logits", case)
        expected_tokens, expected_logits, expected_kv = generate_plain(model, prompt, steps)
        if not matches(logits, expected_logits):
            assert matches(generate_cached(model, prompt, steps)[1], expected_logits), (
                "grader error: the cached decoder disagrees with the plain one")
            bad_step = int((~torch.isclose(logits, expected_logits, atol=1e-9, rtol=1e-7)).any(dim=-1).any(dim=0)
                           .nonzero()[0])
            hint = ("The first step's logits (the prompt, read at once) are wrong: check the causal mask over the "
                    "prompt, the positions 0 .. T0 - 1, the pre-norm wiring of each block and the final LayerNorm."
                    if bad_step == 0 else
                    f"The first {bad_step} step(s) agree, so the prompt is read right; look at what a later step "
                    "reads: the new token at its own position (start), its query against every cached key plus its own, "
                    "and the cache of each block extended by the new keys and values.")
            diagnoses = [(lambda kw=kw: generate_cached(model, prompt, steps, **kw)[1], message)
                         for kw, message in GENERATE_MISTAKES]
            expect_close(logits, expected_logits, f"{fn}'s logits tensor", case, diagnoses, hint=hint,
                         dtype=torch.float64)
        if not torch.equal(tokens, expected_tokens):
            b, s = (int(i) for i in (tokens != expected_tokens).nonzero()[0])
            raise CheckFailed(
                f"{fn}'s tokens are wrong on the case {case.label}, though the logits are right: row {b}, step {s} "
                f"holds {int(tokens[b, s])} where the largest logit is that of token {int(expected_tokens[b, s])}. "
                "Each step's token is logits.argmax(dim=-1) over the vocabulary, and it is the token read next."
            )
        self._judge_cache(case, cache, expected_kv, B, T_0, steps, N, h, d_k)

    def _judge_cache(self, case: Case, cache: Any, expected_kv, B, T_0, steps, N, h, d_k) -> None:
        fn = "`generate_with_cache`'s cache"
        if isinstance(cache, Opaque) or not isinstance(cache, (list, tuple)) or len(cache) != N:
            got = cache.type if isinstance(cache, Opaque) else (
                f"{len(cache)} entries" if isinstance(cache, (list, tuple)) else type(cache).__name__)
            raise CheckFailed(
                f"{fn} is {got} on the case {case.label}; return a list with one (k, v) pair per block, {N} here."
            )
        length = T_0 + steps - 1
        for i, (pair, (k_expected, v_expected)) in enumerate(zip(cache, expected_kv)):
            k, v = expect_tuple(pair, 2, f"{fn}[{i}]", case, "k, v")
            k = expect_tensor(k, f"{fn}[{i}][0] (k)", case)
            v = expect_tensor(v, f"{fn}[{i}][1] (v)", case)
            for what, t in (("k", k), ("v", v)):
                if tuple(t.shape) == (B, h, length + 1, d_k):
                    raise CheckFailed(
                        f"{fn}[{i}] holds {length + 1} positions on the case {case.label}, one more than were needed: "
                        f"the last generated token was read too. After {steps} step(s) the model has read the prompt "
                        f"and the first {steps - 1} generated token(s), T0 + steps - 1 = {length} positions; the last "
                        "token is returned, not read."
                    )
                if tuple(t.shape) == (B, length, h * d_k):
                    raise CheckFailed(
                        f"{fn}[{i}]'s {what} has shape {tuple(t.shape)} on the case {case.label}: keep the heads apart, "
                        f"(B, h, positions, d_k) = {(B, h, length, d_k)}, as split_heads gives them."
                    )
                expect_shape(t, (B, h, length, d_k), f"{fn}[{i}]'s {what}", case,
                             "The cache of a block holds the keys (and the values) of every position read so far, "
                             "T0 + steps - 1 of them, one new position per step after the prompt.")
            if matches(k, v_expected) and matches(v, k_expected):
                raise CheckFailed(f"{fn}[{i}] holds (v, k) on the case {case.label}: store each pair as (k, v).")
            for what, got, expected in (("keys", k, k_expected), ("values", v, v_expected)):
                if not matches(got, expected):
                    raise CheckFailed(
                        f"{fn}[{i}]'s {what} are wrong on the case {case.label}, though the logits are right: "
                        f"{where_it_differs(got, expected)}. Store, for block {i}, the {what} of every position read: "
                        "w_k (or w_v) of norm1(x), split into heads, the cached ones first."
                    )


CHECKS = [BpeTrainCheck, BpeEncodeCheck, MaskTokensCheck, CausalLmLossCheck, SampleNextCheck, GPTBlockCheck,
          GenerateWithCacheCheck]
