"""Chapter 7's byte-pair encoding: ``bpe_train`` and ``bpe_encode``.

Oracle: a plain implementation of the BPE rules (:mod:`autograder.oracles.bpe`), with variants that
follow the rules known mistakes follow; a mistake is named only when it explains every result.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ...framework import (
    Case,
    Check,
    CheckFailed,
    Opaque,
    Stated,
    failure_on,
    named_failure,
    opaque_kind,
    relabelling,
    rule,
)
from ...locate import Stage
from ...messages import N_, tr
from ...oracles.bpe import bpe_apply, bpe_merges, bpe_rounds, counted_once, longest_match, vocabulary
from .draws import RETURNED


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
'''  # english: a text to tokenise, not a message

ACCENTED = "déjà vu: a naïve café owner served crème brûlée; the café's crème was naïve too"  # english: a text to tokenise
TIES = "ab cd ab cd ef"  # english: input text; four pairs occur twice; "ab" comes first, " c" is the smallest
RUNS = "aaaaaa xyxyxyxy aaaaaa"  # english: input text; after (a, a), counting with or without overlaps picks another pair
ODD_RUNS = "aaaaa xyxyxy aaaaa"  # english: input text; runs of odd length: replacing from the left or from the right differs


# ----------------------------------------------------------------------------------------
# bpe_train
# ----------------------------------------------------------------------------------------


def _as_pairs(result: Any, function: str, case: Case) -> list[tuple[int, int]]:
    if isinstance(result, Opaque) or not isinstance(result, (list, tuple)):
        kind = opaque_kind(result) if isinstance(result, Opaque) else type(result).__name__
        raise CheckFailed(tr(
            "`{function}` returned a {kind} on the case {case}; return a list of merges, each a pair of ids "
            "(a, b) of ints, in the order they were learnt."
        ).format(function=function, kind=kind, case=case.label))
    pairs = []
    for item in result:
        if isinstance(item, (tuple, list)) and len(item) == 2 and all(isinstance(i, str) for i in item):
            raise CheckFailed(tr(
                "`{function}` returned the merge {merge} on the case {case}: merges are pairs of ids "
                "(ints), not of text. The first tokens are the bytes of the text, list(text.encode('utf-8')), ids "
                "0-255, and the k-th merge makes the id 256 + k."
            ).format(function=function, merge=repr(tuple(item)), case=case.label))
        if isinstance(item, Opaque) or (isinstance(item, (tuple, list)) and any(isinstance(i, Opaque) for i in item)):
            raise CheckFailed(tr(
                "`{function}` returned merges that are not pairs of ints on the case {case} (bytes objects, "
                "perhaps): give each merge as the pair of the two ids it joins, (a, b); merge k makes the id 256 + k."
            ).format(function=function, case=case.label))
        if not (isinstance(item, (tuple, list)) and len(item) == 2
                and all(isinstance(i, int) and not isinstance(i, bool) for i in item)):
            raise CheckFailed(tr(
                "`{function}` returned {item} as a merge on the case {case}; a merge is a pair of ids, "
                "(a, b), two ints."
            ).format(function=function, item=f"{item!r:.60}", case=case.label))
        pairs.append((int(item[0]), int(item[1])))
    return pairs


def _letter_renaming(check: Check) -> Callable[[str], str]:
    """The hidden cases' texts with their lowercase ASCII letters renamed by the course secret: the
    crafted texts keep their ties and runs, and no learner knows what they read."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    table = str.maketrans(relabelling(check.generator(True, "letters"), letters))
    return lambda text: text.translate(table)


def _renamed_merges(rename: Callable[[str], str], merges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merges given as byte ids, with the letters among them renamed as the text's are."""
    def byte(i: int) -> int:
        return ord(rename(chr(i))) if i < 128 else i
    return [(byte(a), byte(b)) for a, b in merges]


class BpeTrainCheck(Check):
    function = "bpe_train"
    oracle = N_("the BPE rules, applied round by round by a plain implementation")
    invalid_hint = N_("a negative num_merges means nothing: raise ValueError with a message that names num_merges.")
    invalid_returned = RETURNED
    invalid_argument = "num_merges"

    def cases(self, hidden: bool) -> list[Case]:
        def case(text: str, num_merges: int, what: str = "", tag: str = "") -> Case:
            return Case(f"text={what or _snippet(text)}, num_merges={num_merges}", (text, num_merges), {}, tag)

        out = [
            case("the cat sat on the mat with the hat", 6),  # english: a text to tokenise
            case(TIES, 3, tag="ties"),
            case(RUNS, 4, tag="runs"),
            case(ODD_RUNS, 4, tag="runs"),
            case(ACCENTED, 12, tag="accented"),
            case("abcabd", 5, tag="stop"),
            case(CODE, 40, what=tr("a piece of Python code (1,000 characters)")),
            case("", 3),
            case("le pot", -1, tag="invalid"),
        ]
        if hidden:
            r = _letter_renaming(self)
            out += [
                case(r(CODE[400:]), 60, what=tr("another piece of Python code")),
                case(r("abab"), 10, tag="stop"),
                case(r("x"), 2),
                case(r("mississippi missus miss"), 8),  # english: a text to tokenise
                case(r("zz yy zz yy xx"), 3, tag="ties"),  # english: a text to tokenise
                case(r("ooooo ppp ooooo ppp"), 6, tag="runs"),  # english: a text to tokenise
                case("日本語の文章、日本語の単語" + r("ab"), 10, tag="accented"),
                case(r(ACCENTED + " " + TIES), 0),
            ]
        return out

    def stages(self, case: Case) -> list[Stage]:
        """The bytes, then merge by merge the pair chosen and the sequence after it (the counts, a dict, are not
        compared); the last, the merges themselves, is never a value a line holds as a flat list."""
        text, num_merges = case.args
        out = [Stage.of(tr("the text's UTF-8 bytes, list(text.encode('utf-8'))"), _floats(list(text.encode("utf-8"))))]
        for k, (best, _, after) in enumerate(bpe_rounds(text, num_merges)):
            out += [Stage.of(tr("the pair merge {k} joins, the most frequent then (ties: the first seen)").format(k=k),
                             _floats(best)),
                    Stage.of(tr("the sequence after merge {k}, every occurrence of that pair replaced by {id}").format(
                        k=k, id=256 + k), _floats(after))]
        return [*out, Stage.of(tr("the merges, in order"),
                               torch.tensor(bpe_merges(text, num_merges), dtype=torch.float64))]

    @rule("a list of (int, int) pairs")
    def _form(self, case: Case, result: Any) -> None:
        _as_pairs(result, "bpe_train", case)

    rules = (_form,)

    @rule("the merges of byte-level BPE")
    def _values(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        """Judged across the cases, so that a catalogued mistake is named only where it explains every case."""
        judged = [(c, _as_pairs(r, "bpe_train", c)) for c, r in zip(cases, results)]
        wrong = [(c, mine) for c, mine in judged if mine != bpe_merges(*c.args)]
        if not wrong:
            return
        diagnoses: list[tuple[Callable[[str, int], list[tuple[int, int]]], str]] = [
            (lambda t, n: bpe_merges(t, n, characters=True),
             tr("you started from the characters of the text (ord(c)); start from its UTF-8 bytes, "
                "list(text.encode('utf-8')), so that ids 0-255 cover any text and every token is a sequence of bytes.")),
            (lambda t, n: bpe_merges(t, n, ties="smallest"),
             tr("when pairs are equally frequent you took the smallest pair; take the one whose first occurrence comes "
                "first in the sequence (a dict filled from left to right, then max(counts, key=counts.get)).")),
            (lambda t, n: bpe_merges(t, n, ties="largest"),
             tr("when pairs are equally frequent you took the largest pair; take the one whose first occurrence comes "
                "first in the sequence.")),
            (lambda t, n: bpe_merges(t, n, ties="last"),
             tr("when pairs are equally frequent you took the one seen last; take the one whose first occurrence comes "
                "first (max keeps the first of equal maxima; the last element of an ascending sort does not).")),
            (lambda t, n: bpe_merges(t, n, min_count=1),
             tr("you went on merging pairs that occur only once; stop as soon as the most frequent pair occurs fewer "
                "than 2 times.")),
            (lambda t, n: bpe_merges(t, n, min_count=3),
             tr("you stopped at a pair that occurs twice; stop only when the most frequent pair occurs once.")),
            (counted_once,
             tr("you counted the pairs once, on the bytes, and took the most frequent ones; count again after every "
                "merge, on the sequence as it is then, since merged tokens form new pairs.")),
            (lambda t, n: bpe_merges(t, n, overlapping=False),
             tr("you counted the pair occurrences without overlaps (as str.count does); count every position i, the "
                "pairs (ids[i], ids[i + 1]): in a a a the pair (a, a) occurs twice.")),
            (lambda t, n: bpe_merges(t, n, right_to_left=True),
             tr("you replaced the pair's occurrences from the right; replace them from the left: in a a a the merge of "
                "(a, a) gives aa a.")),
            (lambda t, n: bpe_merges(t, n, first_only=True),
             tr("you replaced only the first occurrence of the pair; replace every occurrence, left to right.")),
            (lambda t, n: bpe_merges(t, max(n - 1, 0)),
             tr("you made one merge too few: make up to num_merges merges (range(num_merges)).")),
            (lambda t, n: bpe_merges(t, n + 1),
             tr("you made one merge too many: make at most num_merges merges.")),
        ]
        case, mine = wrong[0]
        message = self.explaining_mistake(cases, [m for _, m in judged], diagnoses)
        if message:  # it explains every case
            raise named_failure(tr("`bpe_train`'s merges are wrong on the case {case}: ").format(case=case.label),
                                [message], None)
        text, num_merges = case.args
        rounds = bpe_rounds(text, num_merges)
        expected = [m for m, _, _ in rounds]
        if len(mine) < len(expected) and mine == expected[: len(mine)]:
            best, stats, _ = rounds[len(mine)]
            raise failure_on(case, tr(
                "`bpe_train` stopped after {count} merges on the case {case}, where "
                "{expected} are made: after them the pair {pair} still occurs "
                "{times} times. Stop only when no pair occurs twice, or after num_merges merges."
            ).format(count=len(mine), case=case.label, expected=len(expected), pair=_shown(expected, best),
                     times=stats[best][0]))
        if len(mine) > len(expected) and mine[: len(expected)] == expected:
            why = (tr("no pair occurs twice any more after merge {k}").format(k=len(expected) - 1)
                   if len(expected) < num_merges else f"num_merges={num_merges}")
            raise failure_on(case, tr(
                "`bpe_train` returned {count} merges on the case {case}, where only {expected} are "
                "made: {why}, so stop there."
            ).format(count=len(mine), case=case.label, expected=len(expected), why=why))
        k = next(i for i, (a, b) in enumerate(zip(mine, expected)) if a != b)
        want, stats, _ = rounds[k]
        got = mine[k]
        count = stats.get(got, [0])[0]
        raise failure_on(case, tr(
            "`bpe_train`'s merge {k} is wrong on the case {case} (the {k} before it are right): you merged "
            "{got}, which occurs {count} times at that point, where {want} "
            "occurs {want_count} times and comes first among the most frequent. Count every neighbouring pair "
            "of the sequence as it is after the earlier merges, take the most frequent (ties: the first to occur), "
            "and give it the id 256 + {k} = {id}."
        ).format(k=k, case=case.label, got=_shown(expected, got), count=count, want=_shown(expected, want),
                 want_count=stats[want][0], id=256 + k))

    rules_across = (_values,)


# ----------------------------------------------------------------------------------------
# bpe_encode
# ----------------------------------------------------------------------------------------


def _floats(values: Sequence[int]) -> torch.Tensor:
    """A list of ids as a record of the learner's values holds it."""
    return torch.tensor([float(v) for v in values], dtype=torch.float64)


def _as_ids(result: Any, function: str, case: Case) -> list[int]:
    if isinstance(result, torch.Tensor) and result.dim() == 1 and not result.is_floating_point() \
            and result.dtype != torch.bool:
        return [int(i) for i in result.tolist()]
    if isinstance(result, (list, tuple)):
        if all(isinstance(i, int) and not isinstance(i, bool) for i in result):
            return list(result)
        if any(isinstance(i, str) for i in result):
            raise CheckFailed(tr(
                "`{function}` returned text pieces on the case {case}; return the ids, a list of ints (use "
                "bpe_decode or bpe_vocabulary to look at the pieces)."
            ).format(function=function, case=case.label))
    kind = opaque_kind(result) if isinstance(result, Opaque) else type(result).__name__
    raise CheckFailed(tr("`{function}` returned a {kind} on the case {case}; return the ids as a list of ints.").format(
        function=function, kind=kind, case=case.label))


class BpeEncodeCheck(Check):
    function = "bpe_encode"
    oracle = N_("the merges applied one after another in the order they were learnt, by a plain implementation")

    def cases(self, hidden: bool) -> list[Case]:
        code_merges = bpe_merges(CODE, 40)
        accented_merges = bpe_merges(ACCENTED, 12)

        def case(text: str, merges: list[tuple[int, int]], what: str, tag: str = "") -> Case:
            return Case(tr("text={text}, merges {merges}").format(text=_snippet(text), merges=what), (text, merges), {},
                        tag)

        out = [
            case("abc", [(98, 99), (97, 98)], tr("[(98, 99), (97, 98)]: 'b' + 'c', then 'a' + 'b'")),
            case("aaaaa", [(97, 97)], tr("[(97, 97)]: 'a' + 'a'")),
            case("abcd abcd abd", [(97, 98), (256, 99), (257, 100)],  # english: a text to tokenise
                 tr("[(97, 98), (256, 99), (257, 100)]: 'ab', 'abc', 'abcd'")),
            case(CODE, code_merges, tr("learnt from this very text ({count})").format(count=40), tag="training"),
            case("    def count_lines(self, lines):\n        return len(lines)\n", code_merges,
                 tr("learnt from a piece of Python code ({count})").format(count=40)),
            case("a naïve déjà vu — 🙂", accented_merges, tr("learnt from an accented sentence ({count})").format(count=12)),
            case("", code_merges, tr("learnt from a piece of Python code ({count})").format(count=40)),
        ]
        if hidden:
            r = _letter_renaming(self)
            accented, code = r(ACCENTED), r(CODE)
            accented_merges, code_merges = bpe_merges(accented, 12), bpe_merges(code, 40)

            def given(text: str, merges: list[tuple[int, int]], note: str = "") -> Case:
                merges = _renamed_merges(r, merges)
                return case(r(text), merges, f"{merges}{note}")

            out += [
                case(accented, accented_merges, tr("learnt from this very text ({count})").format(count=12), tag="training"),
                case(code[500:], bpe_merges(code[500:], 70), tr("learnt from this very text ({count})").format(count=70),
                     tag="training"),
                given("xyzxyz", [(121, 122), (120, 121), (256, 120)]),
                given("aaaaaaa", [(97, 97), (256, 256)], tr(": a pair, then a pair of pairs")),
                case(r("xyxyx aaa aaaa"), bpe_merges(r(RUNS), 4),  # english: a text to tokenise
                     tr("learnt from another text ({count})").format(count=4)),
                case(r("    for word in counts:\n        print(word, counts[word])\n"), code_merges,  # english: code to tokenise
                     tr("learnt from a piece of Python code ({count})").format(count=40)),
                case(r("crème brûlée"), [], tr("[] (no merges)")),
            ]
        return out

    def stages(self, case: Case) -> list[Stage]:
        """The bytes, then the sequence after each merge that changes it (one that finds no pair changes
        nothing, and a value a line does not change is not recorded again)."""
        text, merges = case.args
        sequence = list(text.encode("utf-8"))
        out = [Stage.of(tr("the text's UTF-8 bytes, list(text.encode('utf-8'))"), _floats(sequence))]
        for k, pair in enumerate(merges):
            after = bpe_apply(text, merges[: k + 1])
            if after != sequence:
                out.append(Stage.of(tr("the sequence after merge {k}, every occurrence of {pair} replaced by "
                                       "{id} from the left").format(k=k, pair=tuple(pair), id=256 + k), _floats(after)))
                sequence = after
        return [*out, Stage.of(tr("the ids after the last merge"), _floats(sequence))]

    @rule("a list of ints")
    def _form(self, case: Case, result: Any) -> None:
        _as_ids(result, "bpe_encode", case)

    rules = (_form,)

    @rule("the ids the merges give")
    def _values(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        """Judged across the cases, so that a catalogued mistake is named only where it explains every case."""
        judged = [(c, _as_ids(r, "bpe_encode", c)) for c, r in zip(cases, results)]
        wrong = [(c, mine) for c, mine in judged if mine != bpe_apply(*c.args)]
        if not wrong:
            return
        diagnoses: list[tuple[Callable[[str, list[tuple[int, int]]], list[int]], str]] = [
            (lambda t, m: bpe_apply(t, m, order="reversed"),
             tr("you applied the merges from the last to the first; apply them in the order they were learnt, merge 0 "
                "first, since a later merge joins tokens that earlier ones made.")),
            (longest_match,
             tr("you took the longest known piece from the left at each step (WordPiece's rule); BPE applies the merges "
                "one after another, in the order they were learnt, each to the whole sequence.")),
            (lambda t, m: bpe_apply(t, m, first_only=True),
             tr("each merge replaced only the first occurrence of its pair; replace every occurrence, left to right.")),
            (lambda t, m: bpe_apply(t, m, right_to_left=True),
             tr("you replaced the pairs from the right; replace them from the left, as training did: with the merge "
                "(a, a), a a a gives aa a.")),
            (lambda t, m: bpe_apply(t, m, characters=True),
             tr("you started from the characters of the text (ord(c)); start from its UTF-8 bytes, "
                "list(text.encode('utf-8')).")),
            (lambda t, m: bpe_apply(t, m, first_id=257),
             tr("your new ids start at 257; the k-th merge makes the id 256 + k (ids 0-255 are the bytes, so merge 0 "
                "makes 256), which is how the merges name the tokens they join: (256, 99) joins merge 0's token and 'c'.")),
        ]
        case, mine = wrong[0]
        message = self.explaining_mistake(cases, [m for _, m in judged], diagnoses)
        if message:  # it explains every case
            raise named_failure(tr("`bpe_encode`'s ids are wrong on the case {case}: ").format(case=case.label),
                                [message], None)
        text, merges = case.args
        table = vocabulary(merges)
        strange = [i for i in mine if i not in table]
        if strange:
            raise failure_on(case, tr(
                "`bpe_encode` returned the id {id} on the case {case}, which no token has: ids 0-255 are "
                "the bytes of the text and 256 + k the k-th merge, so with {count} merges every id is below "
                "{limit}."
            ).format(id=strange[0], case=case.label, count=len(merges), limit=256 + len(merges)))
        decoded = b"".join(table[i] for i in mine)
        if decoded != text.encode("utf-8"):
            lost = (tr("drops part of the text") if len(decoded) < len(text.encode("utf-8"))
                    else tr("does not give the text back"))
            raise failure_on(case, tr(
                "`bpe_encode`'s ids on the case {case}: decoding them {lost} "
                "({got} instead of {want}). Every byte of "
                "the text must end up in exactly one token: when a merge joins the pair at i and i + 1, continue at "
                "i + 2, and keep every token no merge joins."
            ).format(case=case.label, lost=lost, got=_snippet(decoded.decode('utf-8', errors='replace')),
                     want=_snippet(text)))
        expected = bpe_apply(text, merges)
        at = next((i for i, (a, b) in enumerate(zip(mine, expected)) if a != b), min(len(mine), len(expected)))

        def pieces(ids: list[int]) -> list[str]:
            return [table[i].decode("utf-8", errors="replace") for i in ids[at : at + 4]]

        extra = (tr(" Encoding the training text must retrace training: the same merges, in the same order, at the "
                    "same places.") if case.tag == "training" else "")
        raise failure_on(case, tr(
            "`bpe_encode` gave {count} tokens on the case {case} where {expected} were expected; the "
            "first difference is at token {at}: you have {mine} where {theirs} was expected. Start "
            "from the bytes and apply each merge k, in order, to the whole sequence, replacing its pair from the left "
            "by 256 + k.{extra}"
        ).format(count=len(mine), case=case.label, expected=len(expected), at=at, mine=pieces(mine),
                 theirs=pieces(expected), extra=extra))

    rules_across = (_values,)


# What the instructions state, and the visible case that holds a learner to it. The rules every graded
# function keeps (its arguments left unchanged) are the base class's (Check.judge_effects) and are not
# repeated here.
STATED = {
    "bpe_train": (
        Stated("pairs are counted with overlaps: a a a holds (a, a) twice", "runs", "without overlaps"),
        Stated("a tie goes to the pair whose first occurrence comes first", "ties", "you took the smallest pair"),
        Stated("training stops when the best pair occurs only once", "stop", "occur only once"),
        Stated("training stops when fewer than two tokens are left", "text=''", "max() arg is an empty sequence"),
        Stated("a merge replaces occurrences from left to right", "runs",
               "replaced the pair's occurrences from the right"),
        Stated("the first tokens are the text's UTF-8 bytes", "accented", "started from the characters"),
        Stated("the pairs are counted again after every merge", "the cat sat", "count again after every merge"),
        Stated("a negative num_merges raises ValueError", "invalid", "raise ValueError"),
    ),
    "bpe_encode": (
        Stated("the merges are applied in the order they were learnt", "'b' + 'c'",
               "from the last to the first"),
        Stated("encoding is not the longest known piece from the left", "'b' + 'c'", "WordPiece"),
        Stated("pairs are replaced from left to right, never overlapping", "'aaaaa'",
               "replaced the pairs from the right"),
        Stated("a merge applies everywhere in the sequence", "'abcd abcd abd'", "only the first occurrence"),
        Stated("a text starts as its UTF-8 bytes; a byte no merge covers stays a token", "naïve",
               "started from the characters"),
        Stated("merge k makes the id 256 + k", "'abc'", "the k-th merge makes the id 256 + k"),
    ),
}
