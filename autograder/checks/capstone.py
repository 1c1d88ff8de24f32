"""Chapter 8 checks: edit distance, label-smoothed cross-entropy, the learning-rate schedule,
batching by length and beam search.

Oracles: the recursive definition of the edit distance, evaluated with memoisation;
``F.cross_entropy(label_smoothing=..., ignore_index=...)``; equation 3 of the paper in closed
form; properties every right batching has (each example once, no batch over budget, padding
against random batches, reproducible shuffling); greedy decoding and an exhaustive search over
every sequence of a small model, and a beam search run here on the grader's own copy of it.
Every case draws its inputs from its own ``torch.Generator``.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from .. import toys  # noqa: F401  (registers the "toy_translator" provider)
from ..framework import (
    Case,
    Check,
    CheckFailed,
    Hint,
    LossCheck,
    Provided,
    Stated,
    draw,
    expect_close,
    expect_tensor,
    expect_tuple,
    failure_on,
    materialize,
    named_failure,
    relabelling,
    rule,
    seeded,
)
from ..locate import Stage
from ..messages import N_, tr


def _as_int(value: Any) -> Any:
    """A 0-d integer tensor counts as an int; anything else is returned as it is."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point() and value.dtype != torch.bool:
        return int(value.item())
    return value


# ----------------------------------------------------------------------------------------
# edit_distance
# ----------------------------------------------------------------------------------------


def levenshtein(a: Sequence, b: Sequence) -> int:
    """The recursive definition, memoised: d(a, b) over the prefixes of both sequences."""

    @functools.cache
    def d(i: int, j: int) -> int:
        if i == 0 or j == 0:
            return i + j
        return min(d(i - 1, j) + 1, d(i, j - 1) + 1, d(i - 1, j - 1) + (a[i - 1] != b[j - 1]))

    return d(len(a), len(b))


def _damerau(a: Sequence, b: Sequence) -> int:
    """Edit distance in which swapping two neighbours costs 1 (optimal string alignment)."""
    D = [[i + j if i == 0 or j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            D[i][j] = min(D[i - 1][j] + 1, D[i][j - 1] + 1, D[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                D[i][j] = min(D[i][j], D[i - 2][j - 2] + 1)
    return D[-1][-1]


def _lcs(a: Sequence, b: Sequence) -> int:
    L = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            L[i][j] = L[i - 1][j - 1] + 1 if a[i - 1] == b[j - 1] else max(L[i - 1][j], L[i][j - 1])
    return L[-1][-1]


def _zero_borders(a: Sequence, b: Sequence) -> int:
    """The recurrence with D[i, 0] = D[0, j] = 0."""
    D = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            D[i][j] = min(D[i - 1][j] + 1, D[i][j - 1] + 1, D[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
    return D[-1][-1]


PHONEMES = ("AA", "AE", "AH", "AO", "B", "CH", "D", "EH", "ER", "IY", "K", "L", "N", "R", "S", "T", "TH", "Z")


class EditDistanceCheck(Check):
    function = "edit_distance"
    #: installed libraries that compute it (RapidFuzz comes with the course's requirements)
    forbidden = ("rapidfuzz", "Levenshtein", "editdistance", "nltk.edit_distance", "nltk.metrics.distance",
                 "torchaudio.functional.edit_distance")
    oracle = N_("the recursive definition of the Levenshtein distance")

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def phonemes(n: int, alphabet: int = len(PHONEMES)) -> list[str]:
            return [PHONEMES[i] for i in torch.randint(alphabet, (n,), generator=g).tolist()]

        def ids(n: int, alphabet: int) -> list[int]:
            return torch.randint(alphabet, (n,), generator=g).tolist()

        def case(a, b, tag=""):
            return Case(f"a={a!r}, b={b!r}", (a, b), {}, tag)

        out = [
            case(["TH", "AO", "T"], ["T", "AO", "T"]),
            case(["K", "AE", "T"], ["K", "AE", "T", "S"]),
            case([], ["K", "AE", "T"], "empty"),
            case(["D", "AO", "G", "Z"], [], "empty"),
            case(["ER"], ["EH", "R"], "symbols"),
            case(["K", "S", "AE"], ["S", "K", "AE"], "swap"),
            case(phonemes(7, 5), phonemes(9, 5)),
            case(ids(8, 3), ids(6, 3)),
            case(("AH", "B", "AW", "T"), ("AH", "B", "AW", "T")),
        ]
        if hidden:
            # The crafted pairs keep their shape (a prefix, a swap, a two-letter symbol beside its letters)
            # with the phonemes renamed by the course secret.
            rename = relabelling(self.generator(True, "phonemes"), list(PHONEMES) + ["SH", "AW", "OW", "UW"])

            def renamed(a, b, tag=""):
                return case([rename[p] for p in a], [rename[p] for p in b], tag)

            out += [
                case([], []),
                renamed(["AA", "R", "T"], ["AA", "R", "T", "AH", "S", "T"]),
                case(phonemes(14, 4), phonemes(11, 4)),
                case(phonemes(20), phonemes(18)),
                case(ids(12, 2), ids(15, 2)),
                renamed(["CH", "ER", "CH"], ["SH", "ER", "CH"], "symbols"),
                renamed(["EH", "R", "IY"], ["ER", "IY"], "symbols"),
                renamed(["T", "S", "K", "S"], ["S", "T", "S", "K"], "swap"),
                case(ids(1, 3), ids(9, 3)),
            ]
        return out

    def stages(self, case: Case) -> list[Stage]:
        """The table D[i][j] (the distance between the first i symbols of a and the first j of b), a row at a
        time; a learner whose loops run over b first fills its columns, so column i stands beside row i."""
        a, b = case.args
        n, m = len(a), len(b)
        D = torch.tensor([[levenshtein(a[:i], b[:j]) for j in range(m + 1)] for i in range(n + 1)], dtype=torch.float64)
        rows = [Stage((tr("row {i} of the table D[i][j] (or column {i}, when your loops run over b first)") if i <= m
                       else tr("row {i} of the table D[i][j]")).format(i=i),
                      tuple(v for v in (D[i] if i <= n else None, D[:, i] if i <= m else None) if v is not None))
                for i in range(max(n, m))]
        return [*rows, Stage.of(tr("the last row of the table (or its last column), whose last entry is the distance"),
                                D[n], D[:, m])]

    @rule("an int")
    def _an_int(self, case: Case, result: Any) -> None:
        result = _as_int(result)
        if isinstance(result, float) and result.is_integer():
            raise CheckFailed(
                tr("`edit_distance` returned the float {result} on the case {case}; return an int: "
                   "a number of edits.").format(result=repr(result), case=case.label)
            )
        if isinstance(result, bool) or not isinstance(result, int):
            raise CheckFailed(
                tr("`edit_distance` returned {result} ({kind}) on the case {case}; return an int.").format(
                    result=repr(result), kind=type(result).__name__, case=case.label)
            )

    rules = (_an_int,)

    @rule("the Levenshtein distance")
    def _distance(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        results = [_as_int(r) for r in results]
        wrong = [(c, r) for c, r in zip(cases, results) if r != levenshtein(*c.args)]
        if not wrong:
            return
        diagnoses: list[tuple[Callable[[Sequence, Sequence], int], str]] = [
            (_zero_borders,
             tr("the first row and column of the table must be D[i, 0] = i and D[0, j] = j (the cost of deleting or "
                "inserting a whole prefix), not 0.")),
            (lambda a, b: sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b)),
             tr("you compared the sequences position by position; an insertion or a deletion shifts everything after "
                "it, so use the recurrence D[i, j] = min(D[i-1, j] + 1, D[i, j-1] + 1, D[i-1, j-1] + [a_i != b_j]).")),
            (lambda a, b: len(a) + len(b) - 2 * _lcs(a, b),
             tr("a substitution costs 1, not 2 (a deletion plus an insertion): D[i-1, j-1] + 1 when a_i != b_j.")),
            (_lcs, tr("this is the length of the longest common subsequence, not the edit distance.")),
            (lambda a, b: levenshtein("".join(map(str, a)), "".join(map(str, b))),
             tr("you compared letters, not phonemes: a symbol is a whole element of the sequence (\"TH\" is one "
                "phoneme), so do not join or split the sequences into characters.")),
            (_damerau,
             tr("swapping two neighbours is two edits here (Levenshtein distance), not one (that is Damerau's "
                "variant).")),
        ]
        case, result = wrong[0]
        expected = levenshtein(*case.args)
        message = self.explaining_mistake(cases, results, diagnoses)
        if message:  # it explains every case, so the verdict need not verify it again
            raise named_failure(tr("`edit_distance` returned {result} on the case {case}: ").format(
                result=result, case=case.label), [message], None)
        if case.tag == "empty" and result == _zero_borders(*case.args):  # what borders of 0 give, and nothing else
            raise CheckFailed(
                tr("`edit_distance` returned {result} on the case {case} where {expected} was expected: turning a "
                   "sequence into an empty one (or the other way round) takes one deletion (insertion) per symbol, so "
                   "start from D[i, 0] = i and D[0, j] = j.").format(result=result, case=case.label, expected=expected)
            )
        raise failure_on(
            case,
            tr("`edit_distance` returned {result} on the case {case} where {expected} was expected: fill the table "
               "D[i, j] = min(D[i-1, j] + 1, D[i, j-1] + 1, D[i-1, j-1] + [a_i != b_j]) for every prefix and return "
               "D[len(a), len(b)].").format(result=result, case=case.label, expected=expected),
        )

    rules_across = (_distance,)


# ----------------------------------------------------------------------------------------
# label_smoothed_cross_entropy
# ----------------------------------------------------------------------------------------


def _smoothed(logits: torch.Tensor, target: torch.Tensor, eps: float, pad_id: int, *, others_only: bool = False,
              one_minus: bool = True, uniform_sum: bool = False, log_probs: torch.Tensor | None = None) -> torch.Tensor:
    """Per-position losses (...,) of a smoothed target, with the variants known mistakes use."""
    lp = torch.log_softmax(logits, dim=-1) if log_probs is None else log_probs  # (..., V)
    V = lp.shape[-1]
    nll = -lp.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (...,)
    if others_only:  # eps spread over the V - 1 wrong tokens only
        rest = (-lp.sum(-1) - nll) / (V - 1)
        return (1 - eps) * nll + eps * rest
    uniform = -lp.sum(-1) if uniform_sum else -lp.mean(-1)  # (...,)
    return ((1 - eps) if one_minus else 1.0) * nll + eps * uniform


class LabelSmoothedCrossEntropyCheck(LossCheck):
    function = "label_smoothed_cross_entropy"
    # a mistake that crashes on the batch with nothing to average is named by its value on the others
    values_first = True
    trained_through = True  # a model learns through it: gradients must reach what it was made from
    oracle = "F.cross_entropy(label_smoothing=..., ignore_index=pad_id)"
    #: torch._C._nn.cross_entropy_loss is where both lead, with label_smoothing or without
    forbidden = ("torch.nn.functional.cross_entropy", "torch.nn.CrossEntropyLoss")
    forbidden_ops = ("cross_entropy",)

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(shape, eps, pad_id=0, dtype=torch.float32, scale=2.0, pad_share=0.3, tag=""):
            V = shape[-1]
            logits = (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)
            target = torch.randint(V, shape[:-1], generator=g)
            target[target == pad_id] = (pad_id + 1) % V  # padding only where it is put below
            if pad_share and len(shape) == 3:
                B, T = shape[:2]
                keep = torch.randint(max(1, int(T * (1 - pad_share))), T + 1, (B,), generator=g)  # (B,) real lengths
                keep[0] = T  # one full row
                target[torch.arange(T).unsqueeze(0) >= keep.unsqueeze(1)] = pad_id  # (B, T) padded at the end
            elif pad_share >= 1:
                target[...] = pad_id  # nothing to average
            elif pad_share:
                target[torch.rand(shape[:-1], generator=g) < pad_share] = pad_id
                target.view(-1)[0] = (pad_id + 1) % V  # at least one real position
            extra = tr(" with entries near ±1000") if tag == "large" else ""
            empty = tr(" (every target is padding)") if bool((target == pad_id).all()) else ""
            label = tr("logits {shape} {dtype}{extra}, target {target_shape} with {padding} padding positions, "
                       "smoothing={eps}, pad_id={pad_id}{empty}").format(
                shape=tuple(shape), dtype=str(dtype)[6:], extra=extra, target_shape=tuple(shape[:-1]),
                padding=int((target == pad_id).sum()), eps=eps, pad_id=pad_id, empty=empty)
            return Case(label, (logits, target), {"smoothing": eps, "pad_id": pad_id}, tag)

        out = [
            case((3, 5, 7), 0.1),
            case((6, 11), 0.1, pad_share=0.0),
            case((2, 6, 9), 0.2, pad_id=3, dtype=torch.float64),
            case((4, 4, 5), 0.0),
            case((2, 3, 6), 0.1, scale=500.0, tag="large"),
            case((2, 3), 0.1, pad_share=1.0),
        ]
        if hidden:
            out += [
                case((5, 9, 42), 0.1, dtype=torch.float64),
                case((3, 8, 13), 0.5, pad_id=12, pad_share=0.6),
                case((7, 4), 0.3, pad_id=1, dtype=torch.float64),
                case((2, 2, 3, 8), 0.1),
                case((4, 6, 20), 0.1, scale=2000.0, dtype=torch.float64, tag="large"),
            ]
        return out

    def stages(self, case: Case) -> list[Stage]:
        logits, target = case.args
        eps, pad_id = case.kwargs["smoothing"], case.kwargs["pad_id"]
        log_probs = torch.log_softmax(logits.double(), dim=-1)  # (..., V)
        nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (...,)
        uniform = -log_probs.mean(-1)  # (...,)
        loss = (1 - eps) * nll + eps * uniform  # (...,)
        real = target != pad_id
        # Which positions are real depends on the target alone: a learner may find them at any point.
        return [
            Stage(tr("the positions that are not padding"), (real,)),
            Stage(tr("the log-probabilities log_softmax(logits, dim=-1)"), (log_probs,)),
            Stage(tr("each position's log-probability of its target, log p_y (or its negative)"), (nll, -nll)),
            Stage(tr("each position's mean over the vocabulary of log p_v (or its negative)"), (uniform, -uniform)),
            Stage(tr("each position's loss, (1 - eps) * (-log p_y) + eps * mean_v(-log p_v)"), (loss,)),
            Stage(tr("the loss, the mean of the positions' losses over those"), (loss[real].sum() / real.sum(),)),
        ]

    what = N_("`label_smoothed_cross_entropy`'s result")
    mean_of = N_("the mean over the positions that are not padding")
    stable_hint = N_("use torch.log_softmax, which computes it stably.")

    def real_targets(self, case: Case) -> torch.Tensor:
        return case.args[1] != case.kwargs["pad_id"]

    @rule("values")
    def _values(self, case: Case, loss: Any) -> None:
        if self.nothing_to_average(case):
            return
        logits, target = case.args
        eps, pad_id = case.kwargs["smoothing"], case.kwargs["pad_id"]
        name = tr(self.what)
        V = logits.shape[-1]
        x = logits.double()
        expected = F.cross_entropy(x.reshape(-1, V), target.reshape(-1), label_smoothing=eps, ignore_index=pad_id)
        real = target != pad_id
        n_real, n_all = int(real.sum()), target.numel()

        def mean_real(per_position: torch.Tensor) -> torch.Tensor:
            return per_position[real].sum() / n_real

        diagnoses: list[tuple[Callable[[], torch.Tensor], str]] = []
        if n_real < n_all:
            diagnoses += [
                (lambda: F.cross_entropy(x.reshape(-1, V), target.reshape(-1), label_smoothing=eps),
                 tr("padding positions were counted: leave out every position where target == pad_id, from the sum "
                    "and from the count.")),
                (lambda: _smoothed(x, target, eps, pad_id)[real].sum() / n_all,
                 tr("the padding was left out of the sum but not out of the count: divide by the number of "
                    "non-padding positions, (target != pad_id).sum().")),
            ]
            if target.dim() >= 2:
                diagnoses.append((
                    lambda: torch.stack([
                        _smoothed(x[b], target[b], eps, pad_id)[real[b]].mean()
                        for b in range(target.shape[0]) if real[b].any()
                    ]).mean(),
                    tr("this is the mean of per-sentence means; the loss is the mean over all non-padding positions "
                       "together, so that every token weighs the same."),
                ))
        diagnoses += [
            (lambda: _smoothed(x, target, eps, pad_id)[real].sum(),
             tr("this is the sum over positions; return the mean over the non-padding positions.")),
            (lambda: mean_real(_smoothed(x, target, eps, pad_id, others_only=True)),
             tr("the smoothing mass was spread over the V - 1 wrong tokens only; spread epsilon evenly over all V "
                "tokens, the right one included: q = (1 - eps) one_hot + eps / V.")),
            (lambda: mean_real(_smoothed(x, target, 0.0, pad_id)),
             tr("the smoothing was ignored: this is the plain cross-entropy; mix in eps times the cross-entropy "
                "against the uniform distribution.")),
            (lambda: mean_real(_smoothed(x, target, eps, pad_id, one_minus=False)),
             tr("the right token's term must be weighted by (1 - smoothing): q puts 1 - eps on it, plus its share "
                "eps / V.")),
            (lambda: mean_real(_smoothed(x, target, eps, pad_id, uniform_sum=True)),
             tr("the smoothing term summed -log p over the vocabulary; the uniform target gives each token eps / V, "
                "so average it over the V tokens (mean, not sum).")),
            (lambda: mean_real(_smoothed(x, target, eps, pad_id, log_probs=x)),
             tr("the logits were used as log-probabilities: take torch.log_softmax(logits, dim=-1) first.")),
            (lambda: mean_real(_smoothed(x, target, eps, pad_id, log_probs=torch.softmax(x, -1))),
             tr("the softmax probabilities were used where log-probabilities belong: use torch.log_softmax.")),
        ]
        expect_close(loss, expected, name, case, diagnoses, dtype=logits.dtype,
                     hint=tr("The loss is (1 - eps) * (-log p_y) + eps * mean_v(-log p_v), averaged over non-padding "
                             "positions."))

    rules = (LossCheck._loss, _values)


# ----------------------------------------------------------------------------------------
# noam_rate
# ----------------------------------------------------------------------------------------


def _rate(step: float, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """Equation 3 of the paper, times factor."""
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


class NoamRateCheck(Check):
    function = "noam_rate"
    invalid_hint = N_(
        "raise ValueError with a message that says what is wrong (steps are counted from 1, warmup is at least 1)."
    )
    invalid_returned = N_(
        "{name} returned {got} on the case {label}: raise ValueError instead. Steps are counted from 1 (the first "
        "update), where the formula is defined; warmup must be at least 1."
    )
    oracle = N_("equation 3 of the paper in closed form")

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(step, d_model, warmup, factor=None, tag=""):
            kwargs = {} if factor is None else {"factor": factor}
            label = f"step={step}, d_model={d_model}, warmup={warmup}" + ("" if factor is None else f", factor={factor}")
            return Case(label, (step, d_model, warmup), kwargs, tag)

        out = [
            case(1, 512, 4000),
            case(1000, 512, 4000),
            case(4000, 512, 4000),
            case(4001, 512, 4000),
            case(100_000, 512, 4000),
            case(250, 128, 500, factor=2.0),
            case(int(torch.randint(501, 5000, (1,), generator=g)), 128, 500, factor=2.0),
            case(0, 512, 4000, tag="invalid"),
            case(10, 512, 0, tag="invalid"),  # the text refuses a warm-up below one step
        ]
        if hidden:
            warmup, d_model = draw(g, 8, 40), 2 ** draw(g, 5, 8)
            factor = draw(g, 1, 9) / 4
            out += [
                case(draw(g, 2, 5), d_model, warmup),
                case(warmup, d_model, warmup, factor=factor),  # the peak
                case(warmup + 1, d_model, warmup, factor=factor),  # the first step of the decay
                case(draw(g, 1, 300), 256, 300),
                case(draw(g, 500_000, 2_000_000), 1024, 8000, factor=3.0),
                case(-5, 512, 4000, tag="invalid"),
                case(draw(g, 2, 50), 512, -draw(g, 1, 100), tag="invalid"),
            ]
        return out

    def stages(self, case: Case) -> list[Stage]:
        step, d_model, warmup = case.args
        factor = case.kwargs.get("factor", 1.0)

        def number(x: float) -> torch.Tensor:
            return torch.tensor(x, dtype=torch.float64)

        decay, warm = step ** -0.5, step * warmup ** -1.5
        return [Stage.of(tr("the scale d_model ** -0.5"), number(d_model ** -0.5), number(factor * d_model ** -0.5)),
                Stage.of(tr("the two terms, step ** -0.5 (the decay) and step * warmup ** -1.5 (the warm-up)"),
                         number(decay), number(warm)),
                Stage.of(tr("the smaller of the two terms, min(step ** -0.5, step * warmup ** -1.5)"),
                         number(min(decay, warm))),
                Stage.of(tr("the rate, factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)"),
                         number(_rate(step, d_model, warmup, factor)))]

    @rule("a Python float")
    def _a_float(self, case: Case, result: Any) -> None:
        if isinstance(result, torch.Tensor):
            raise CheckFailed(
                tr("`noam_rate` returned a tensor on the case {case}; return the rate as a Python float, as the "
                   "instructions say (float(...) or .item()): a learning rate is one number for the optimiser, not a "
                   "value in a graph.").format(case=case.label)
            )
        if isinstance(result, bool) or not isinstance(result, (int, float)):
            raise CheckFailed(tr("`noam_rate` returned {result} on the case {case}; return the rate as a float.").format(
                result=repr(result), case=case.label))

    @rule("equation 3")
    def _values(self, case: Case, result: float) -> None:
        step, d_model, warmup = case.args
        factor = case.kwargs.get("factor", 1.0)
        expected = _rate(step, d_model, warmup, factor)

        def close(x: float) -> bool:
            return math.isclose(result, x, rel_tol=1e-9, abs_tol=1e-15)

        if close(expected):
            return
        diagnoses = [
            (lambda: factor * d_model ** -0.5 * max(step ** -0.5, step * warmup ** -1.5),
             tr("the schedule takes the smaller of the two terms: min(step ** -0.5, step * warmup ** -1.5), not max.")),
            (lambda: factor * min(step ** -0.5, step * warmup ** -1.5), tr("the factor d_model ** -0.5 is missing.")),
            (lambda: factor * d_model ** 0.5 * min(step ** -0.5, step * warmup ** -1.5),
             tr("multiply by d_model ** -0.5 (one over its square root), not by its square root.")),
            (lambda: _rate(step - 1, d_model, warmup, factor) if step > 1 else math.nan,
             tr("steps are counted from 1: the first update uses step=1, so do not subtract 1.")),
            (lambda: _rate(step + 1, d_model, warmup, factor),
             tr("steps are counted from 1 already: use step itself, not step + 1.")),
            (lambda: factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -0.5),
             tr("the warm-up term is step * warmup ** -1.5 (it meets step ** -0.5 at step = warmup), not "
                "warmup ** -0.5.")),
            (lambda: factor * d_model ** -0.5 * min(step ** 0.5, step * warmup ** -1.5),
             tr("after the warm-up the rate decays as step ** -0.5; step ** 0.5 would grow.")),
            (lambda: _rate(step, d_model, warmup), tr("the factor argument was ignored: multiply the whole rate by it.")),
        ]
        explaining = []
        for value, message in diagnoses:
            candidate = value()
            if not math.isnan(candidate) and close(candidate) and not math.isclose(candidate, expected, rel_tol=1e-9):
                explaining.append(message)
        raise named_failure(
            tr("`noam_rate` returned {result} on the case {case}: ").format(result=f"{result:.6g}", case=case.label),
            explaining,
            tr("`noam_rate` returned {result} on the case {case} where {expected} was expected: "
               "factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5).").format(
                result=f"{result:.6g}", case=case.label, expected=f"{expected:.6g}"),
        )

    rules = (_a_float, _values)


# ----------------------------------------------------------------------------------------
# length_batches
# ----------------------------------------------------------------------------------------


def _greedy_packing(lengths: Sequence[int], order: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Cut ``order`` into consecutive batches whose padded size stays within max_tokens."""
    batches, batch, longest = [], [], 0
    for i in order:
        if batch and (len(batch) + 1) * max(longest, lengths[i]) > max_tokens:
            batches.append(batch)
            batch, longest = [], 0
        batch.append(i)
        longest = max(longest, lengths[i])
    if batch:
        batches.append(batch)
    return batches


def _padding(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> int:
    return sum(len(b) * max(lengths[i] for i in b) - sum(lengths[i] for i in b) for b in batches)


def _word_like_lengths(g: torch.Generator, n: int, low: int, high: int) -> list[int]:
    """Lengths bunched in the middle with long tails, as word lengths are."""
    middle, spread = (low + high) / 2, (high - low) / 5
    raw = torch.randn(n, generator=g, dtype=torch.float64) * spread + middle
    return raw.round().clamp(low, high).long().tolist()


class LengthBatchesCheck(Check):
    function = "length_batches"
    invalid_hint = N_(
        "an example longer than max_tokens fits in no batch: raise ValueError with a message that says which one."
    )
    invalid_returned = N_(
        "{name} returned a result on the case {label}, although one example is longer than max_tokens and fits in no "
        "batch: raise ValueError instead."
    )
    oracle = N_("the properties of batching by length (each example once, budget, padding, reproducible shuffling)")
    hints = (Hint("ValueError", N_("An example exactly as long as max_tokens fits: it costs max_tokens, the budget, "
                                   "and makes a batch of its own. Refuse only an example longer than max_tokens "
                                   "(n > max_tokens)."),
                  when=lambda case, result: max(case.args[0], default=0) == case.args[1]),)

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(lengths, max_tokens, seed=0, epoch=0, tag="", what=""):
            what = what or tr("{count} lengths from {low} to {high}").format(
                count=len(lengths), low=min(lengths, default=0), high=max(lengths, default=0))
            return Case(f"{what}, max_tokens={max_tokens}, seed={seed}, epoch={epoch}",
                        (list(lengths), max_tokens), {"seed": seed, "epoch": epoch}, tag)

        main = _word_like_lengths(g, 600, 2, 24)
        out = [
            case(main, 256, tag="main"),
            case(main, 256, tag="again"),
            case(main, 256, epoch=1, tag="next-epoch"),
            case(main, 256, seed=1, tag="other-seed"),
            case([3, 5, 2, 7, 4], 8, what=tr("lengths {lengths}").format(lengths="[3, 5, 2, 7, 4]")),
            case([5] * 100, 50, what=tr("100 lengths all equal to 5")),
            # The text refuses only an example longer than the budget: one exactly as long makes a batch alone.
            case([6, 2, 6, 4], 6, tag="fits exactly", what=tr("lengths {lengths}").format(lengths="[6, 2, 6, 4]")),
            case([], 64, what=tr("no lengths")),
            case([4, 9, 30, 2], 16, tag="invalid", what=tr("lengths {lengths}").format(lengths="[4, 9, 30, 2]")),
        ]
        if hidden:
            def fitting(budget: int, short: int) -> Case:
                """Examples that each fill the budget exactly, and a short one among them."""
                lengths = [budget, budget, short, budget]
                return case(lengths, budget, what=tr("lengths {lengths}").format(lengths=lengths))

            big = _word_like_lengths(g, 3000, 3, 40)
            out += [
                case(big, 1024, seed=7, epoch=2, tag="main"),
                case(big, 1024, seed=7, epoch=2, tag="again"),
                case(big, 1024, seed=7, epoch=3, tag="next-epoch"),
                case(big, 1024, seed=8, epoch=2, tag="other-seed"),
                case(_word_like_lengths(g, 400, 1, 12), 12, seed=3),
                fitting(draw(g, 5, 12), draw(g, 1, 4)),
                case([single := draw(g, 1, 9)], single, what=tr("lengths {lengths}").format(lengths=f"[{single}]")),
                case([3, 3, 41], 40, tag="invalid", what=tr("lengths {lengths}").format(lengths="[3, 3, 41]")),
            ]
        return out

    def _batches(self, case: Case, result: Any) -> list[list[int]]:
        if not isinstance(result, (list, tuple)):
            raise CheckFailed(
                tr("`length_batches` returned a {kind} on the case {case}; return a list of "
                   "batches, each a list of example indices.").format(kind=type(result).__name__, case=case.label)
            )
        batches = []
        for b in result:
            if isinstance(b, torch.Tensor) and b.dim() == 1 and not b.is_floating_point():
                b = b.tolist()
            if not isinstance(b, (list, tuple)) or not all(isinstance(_as_int(i), int) and not isinstance(i, bool) for i in b):
                raise CheckFailed(
                    tr("`length_batches` returned a batch that is not a list of ints ({batch}) on the case {case}.")
                    .format(batch=f"{b!r:.80}", case=case.label)
                )
            batches.append([_as_int(i) for i in b])
        return batches

    @rule("every example in exactly one batch")
    def _partition(self, case: Case, result: Any) -> None:
        lengths, _ = case.args
        batches = self._batches(case, result)
        n = len(lengths)
        if any(len(b) == 0 for b in batches):
            raise CheckFailed(tr("`length_batches` returned an empty batch on the case {case}: drop empty batches.")
                              .format(case=case.label))
        seen = [i for b in batches for i in b]
        if sorted(seen) != list(range(n)):
            counts: dict[int, int] = {}
            for i in seen:
                counts[i] = counts.get(i, 0) + 1
            missing = [i for i in range(n) if i not in counts]
            twice = [i for i, c in counts.items() if c > 1]
            strange = [i for i in counts if not 0 <= i < n]
            detail = []
            if missing:
                detail.append(tr("{count} indices are missing (for example {indices}); did you forget to "
                                 "keep the last, partly filled batch?").format(count=len(missing), indices=missing[:5]))
            if twice:
                detail.append(tr("{count} indices appear more than once (for example {indices})").format(
                    count=len(twice), indices=twice[:5]))
            if strange:
                detail.append(tr("indices outside 0..{last}: {indices}").format(last=n - 1, indices=strange[:5]))
            raise CheckFailed(
                tr("`length_batches` must put every example in exactly one batch, on the case {case}: {details}.")
                .format(case=case.label, details=tr("; ").join(detail))
            )

    @rule("each batch within the budget, padded", about=("max_tokens",))
    def _budget(self, case: Case, result: Any) -> None:
        lengths, max_tokens = case.args
        batches = self._batches(case, result)
        over = [b for b in batches if len(b) * max(lengths[i] for i in b) > max_tokens]
        if over:
            # Counting real tokens instead of padded ones keeps every batch's sum of lengths within the budget;
            # a batch over the budget by that count too rules that mistake out.
            beyond = [b for b in over if sum(lengths[i] for i in b) > max_tokens]
            b = (beyond or over)[0]
            longest = max(lengths[i] for i in b)
            cost = len(b) * longest
            if not beyond:
                raise CheckFailed(
                    tr("`length_batches` made a batch of {count} examples up to length {longest} on the case "
                       "{case}: padded, it holds {cost} tokens, over the budget. A batch's cost is its padded "
                       "size, len(batch) * (its longest length), not the sum of its lengths.").format(
                        count=len(b), longest=longest, case=case.label, cost=cost)
                )
            raise CheckFailed(
                tr("`length_batches` made a batch of {count} examples up to length {longest} on the case "
                   "{case}: padded, it holds {cost} tokens, more than max_tokens={max_tokens}. Check the "
                   "budget before adding an example, with the longest length the batch would then have.").format(
                    count=len(b), longest=longest, case=case.label, cost=cost, max_tokens=max_tokens)
            )

    @rule("examples of similar length together, batches full", about=("max_tokens",))
    def _packing(self, case: Case, result: Any) -> None:
        lengths, max_tokens = case.args
        batches = self._batches(case, result)
        n = len(lengths)
        if n < 50:
            return
        rng = seeded(self.seed("random batches", n))  # the grader's own random batches, for comparison
        random_batches = _greedy_packing(lengths, torch.randperm(n, generator=rng).tolist(), max_tokens)
        sorted_batches = _greedy_packing(lengths, sorted(range(n), key=lambda i: lengths[i]), max_tokens)
        mine, random_padding = _padding(lengths, batches), _padding(lengths, random_batches)
        if mine > 0.25 * random_padding:
            raise CheckFailed(
                tr("`length_batches`'s batches hold {mine} padding tokens on the case {case}, against "
                   "{random} for random batches under the same budget: put examples of similar length together "
                   "(sort the examples by length, then cut the sorted list into batches).").format(
                    mine=mine, case=case.label, random=random_padding)
            )
        if len(batches) > 1.15 * len(sorted_batches) + 1:
            raise CheckFailed(
                tr("`length_batches` made {count} batches on the case {case}, where {enough} "
                   "are enough: fill each batch up to the budget before starting the next one.").format(
                    count=len(batches), case=case.label, enough=len(sorted_batches))
            )

    rules = (_partition, _budget, _packing)

    def _epochs(self, cases: Sequence[Case], results: Sequence[Any]):
        """The calls that differ in their seed or epoch only, by tag ("main", "again", "next-epoch", "other-seed"),
        and the main call's batches; None without the main call."""
        by_tag = {c.tag: (c, r) for c, r in zip(cases, results) if c.tag in ("main", "again", "next-epoch", "other-seed")}
        if "main" not in by_tag:
            return None
        main_case, main = by_tag["main"]
        return by_tag, main_case, self._batches(main_case, main)

    @rule("shuffled by its own generator, from seed and epoch", about=("seed", "epoch"))
    def _seeded(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        epochs = self._epochs(cases, results)
        if epochs is None:
            return
        by_tag, main_case, main = epochs
        if "again" in by_tag and self._batches(*by_tag["again"]) != main:
            raise CheckFailed(
                tr("`length_batches` gave different batches for the same arguments ({case}) when called twice: "
                   "the shuffling must come from your own torch.Generator seeded from seed and epoch "
                   "(torch.randperm(n, generator=g)), never from the global random generator.").format(
                    case=main_case.label)
            )
        if "next-epoch" in by_tag and self._batches(*by_tag["next-epoch"]) == main:
            raise CheckFailed(
                tr("`length_batches` gave the same batches in the same order for another epoch ({case}): "
                   "each epoch must be shuffled differently; seed your generator from both seed and epoch.").format(
                    case=by_tag['next-epoch'][0].label)
            )
        if "other-seed" in by_tag and self._batches(*by_tag["other-seed"]) == main:
            raise CheckFailed(
                tr("`length_batches` gave the same batches for another seed ({case}): seed your "
                   "generator from the seed argument.").format(case=by_tag['other-seed'][0].label)
            )

    @rule("equal lengths meet new neighbours each epoch")
    def _neighbours(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        epochs = self._epochs(cases, results)
        if epochs is None:
            return
        by_tag, main_case, main = epochs
        if "next-epoch" in by_tag:
            def contents(batches: list[list[int]]) -> list[list[int]]:
                return sorted(sorted(b) for b in batches)

            if contents(self._batches(*by_tag["next-epoch"])) == contents(main):
                raise CheckFailed(
                    tr("`length_batches` put the same examples together in every epoch ({case}), only the "
                       "order of the batches changed: the examples of equal length were not shuffled, so each word "
                       "always meets the same neighbours. Shuffle the indices first (torch.randperm with your "
                       "generator), then sort them by length with a stable sort (list.sort, sorted), which keeps the "
                       "shuffled order among equal lengths.").format(case=main_case.label)
                )

    @rule("batches in shuffled order")
    def _order(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        epochs = self._epochs(cases, results)
        if epochs is None:
            return
        _, main_case, main = epochs
        lengths = main_case.args[0]
        longest = [max(lengths[i] for i in b) for b in main]
        if len(set(longest)) > 3 and (longest == sorted(longest) or longest == sorted(longest, reverse=True)):
            raise CheckFailed(
                tr("`length_batches`'s batches come in order of length on the case {case}: shuffle the order "
                   "of the batches (with the same generator), so that training does not see all short words first.")
                .format(case=main_case.label)
            )

    rules_across = (_seeded, _neighbours, _order)


# ----------------------------------------------------------------------------------------
# beam_search
# ----------------------------------------------------------------------------------------


def _next_log_probs(model, memory: torch.Tensor, prefixes: list[list[int]], kind: str = "log_softmax") -> torch.Tensor:
    """(k, V) scores of the next token after each prefix (all of one length), as a mistake may compute them."""
    ys = torch.tensor(prefixes, dtype=torch.long)  # (k, t)
    logits = model.decode(memory.expand(len(prefixes), -1, -1), ys)[:, -1].double()  # (k, V)
    if kind == "logits":
        return logits
    if kind == "probs":
        return torch.softmax(logits, dim=-1)
    return torch.log_softmax(logits, dim=-1)


def _lp(n_generated: int, alpha: float, form: str = "gnmt") -> float:
    if form == "power":
        return n_generated ** alpha
    return ((5 + n_generated) / 6) ** alpha


def _beam(model, src, beam_size, max_len, bos_id, eos_id, alpha, *, kind="log_softmax", eos_finishes=True,
          finished_take_slots=True, per_hypothesis=False, form="gnmt", normalise=True, count_bos=False,
          finished_first=True, shrink_for_good=False, finished_stay=False) -> tuple[list[int], float]:
    """Beam search as the exercise defines it; the keyword arguments switch on known mistakes.

    ``shrink_for_good``: each finished hypothesis takes a place of the beam for the rest of the search;
    ``finished_stay``: a hypothesis ending in <eos> stays in the beam as it is, competing by its raw score
    with the extensions of the others.
    """
    memory = model.encode(src)  # (1, S, d)

    def norm(tokens: list[int], score: float) -> float:
        n = len(tokens) - (0 if count_bos else 1)
        return score / _lp(n, alpha, form) if normalise else score

    live, finished = [([bos_id], 0.0)], []
    for _ in range(max_len):
        width = beam_size - len(finished) if shrink_for_good else beam_size
        if not live or width <= 0:
            break
        by_length: dict[int, list[int]] = {}
        for index, (tokens, _) in enumerate(live):
            by_length.setdefault(len(tokens), []).append(index)
        step = torch.empty(len(live), model.vocab_size, dtype=torch.float64)
        for group in by_length.values():
            step[group] = _next_log_probs(model, memory, [live[i][0] for i in group], kind)
        scores = torch.tensor([s for _, s in live], dtype=torch.float64).unsqueeze(1) + step  # (k, V)
        V = scores.shape[1]
        if per_hypothesis and len(live) > 1:
            chosen = [(i * V + int(scores[i].argmax()), float(scores[i].max())) for i in range(len(live))]
        else:
            top = scores.flatten().topk(min(width, scores.numel()))
            chosen = list(zip(top.indices.tolist(), top.values.tolist()))
            if finished_stay:
                # The finished ones take part as they are (index -1 - j for finished[j]).
                pool = chosen + [(-1 - j, score) for j, (_, score) in enumerate(finished)]
                chosen = sorted(pool, key=lambda pair: -pair[1])[:beam_size]
                finished = [finished[-1 - index] for index, _ in chosen if index < 0]
                chosen = [pair for pair in chosen if pair[0] >= 0]
            if not finished_take_slots:
                # Finished hypotheses do not count: take extensions until beam_size of them stay live.
                order = scores.flatten().argsort(descending=True).tolist()
                chosen, kept = [], 0
                for index in order:
                    chosen.append((index, float(scores.flatten()[index])))
                    kept += index % V != eos_id
                    if kept == beam_size:
                        break
        survivors = []
        for index, score in chosen:
            tokens = live[index // V][0] + [index % V]
            if eos_finishes and index % V == eos_id:
                finished.append((tokens, score))
            else:
                survivors.append((tokens, score))
        live = survivors
    pool = (finished or live) if finished_first else finished + live
    tokens, score = max(pool, key=lambda hyp: norm(*hyp))
    return tokens, norm(tokens, score)


def _exhaustive(model, src, max_len, bos_id, eos_id, alpha) -> tuple[list[int], float]:
    """The best normalised score over every sequence that ends in <eos> within max_len tokens."""
    memory = model.encode(src)
    V = model.vocab_size
    ordinary = [v for v in range(V) if v != eos_id]
    best: tuple[list[int], float] | None = None
    for n in range(1, max_len + 1):
        prefixes = [[bos_id, *body, eos_id] for body in itertools.product(ordinary, repeat=n - 1)]
        ys = torch.tensor(prefixes, dtype=torch.long)  # (N, n + 1)
        log_probs = torch.log_softmax(model.decode(memory.expand(len(prefixes), -1, -1), ys[:, :-1]).double(), -1)
        scores = log_probs.gather(-1, ys[:, 1:].unsqueeze(-1)).squeeze(-1).sum(-1) / _lp(n, alpha)  # (N,)
        top = int(scores.argmax())
        if best is None or float(scores[top]) > best[1]:
            best = (prefixes[top], float(scores[top]))
    assert best is not None
    return best


def _sequence_score(model, src, tokens: list[int], kind: str) -> float:
    """The sum over a sequence's tokens of what a (possibly mistaken) scoring adds up."""
    memory = model.encode(src)
    ys = torch.tensor([tokens], dtype=torch.long)  # (1, L)
    logits = model.decode(memory, ys[:, :-1])[0].double()  # (L - 1, V)
    table = {"logits": logits, "probs": torch.softmax(logits, -1), "log_softmax": torch.log_softmax(logits, -1)}[kind]
    return float(table.gather(-1, ys[0, 1:].unsqueeze(-1)).sum())


def _greedy(model, src, max_len, bos_id, eos_id) -> list[int]:
    memory = model.encode(src)
    ys = [bos_id]
    for _ in range(max_len):
        token = int(model.decode(memory, torch.tensor([ys]))[0, -1].argmax())
        ys.append(token)
        if token == eos_id:
            break
    return ys


def _first_step(case: Case) -> dict[str, torch.Tensor]:
    """The first step of the grader's beam search on a case, from the exercise's own start, [bos_id] with score 0:
    the memory, the prefix decoded, the next token's logits (V,), their log-probabilities (the extensions'
    scores, the start scoring 0), the beam_size best of those with their indices, and all of them sorted."""
    model_spec, src = case.args
    k, bos_id = case.kwargs["beam_size"], case.kwargs["bos_id"]
    model = materialize(model_spec)
    memory = model.encode(src.clone())
    prefix = torch.tensor([[bos_id]])  # (1, 1)
    logits = model.decode(memory, prefix)[0, -1].double()  # (V,)
    log_probs = torch.log_softmax(logits, dim=-1)
    best = log_probs.topk(min(k, log_probs.numel()))
    return {"memory": memory, "prefix": prefix, "logits": logits, "log_probs": log_probs, "values": best.values,
            "indices": best.indices, "sorted": log_probs.sort(descending=True).values,
            "order": log_probs.argsort(descending=True)}


class BeamSearchCheck(Check):
    function = "beam_search"
    oracle = N_(
        "greedy decoding (beam 1), an exhaustive search over every sequence (the widest beam) "
        "and a beam search run by the grader"
    )
    hints = (
        Hint("ValueError", N_("no hypothesis finished within max_len steps here, so the list of finished ones is "
                              "empty: then return the live hypothesis with the best normalised score instead "
                              "(max(finished or live, ...))."),
             containing="empty"),
        Hint(("RuntimeError", "IndexError"),
             N_("Mind the shapes: model.decode(memory, ys) takes ys of shape (k, t) and returns logits (k, t, V); the "
                "next token's log-probabilities are torch.log_softmax(logits[:, -1], dim=-1), shape (k, V). To decode "
                "k hypotheses at once, the memory must have k rows too (encode src.expand(k, -1)), or decode them one "
                "at a time.")),
    )

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(src_len, beam_size, max_len, seed, alpha=0.0, vocab_size=10, d=16, ids=(1, 2, 0), tag="", note="",
                 src=None, eos_slope=8.0):
            bos_id, eos_id, pad_id = ids
            ordinary = torch.tensor([i for i in range(vocab_size) if i not in ids])
            if src is None:
                src = ordinary[torch.randint(len(ordinary), (1, src_len), generator=g)]  # (1, S)
            model = Provided("toy_translator", {"vocab_size": vocab_size, "d": d, "seed": seed, "bos_id": bos_id,
                                                "eos_id": eos_id, "pad_id": pad_id, "eos_slope": eos_slope})
            label = tr("a source of length {src_len}, beam_size={beam_size}, max_len={max_len}, alpha={alpha}, "
                       "vocabulary of {vocab_size}, bos_id={bos_id}, eos_id={eos_id}{note}").format(
                src_len=src_len, beam_size=beam_size, max_len=max_len, alpha=alpha, vocab_size=vocab_size,
                bos_id=bos_id, eos_id=eos_id, note=note)
            kwargs = {"beam_size": beam_size, "max_len": max_len, "bos_id": bos_id, "eos_id": eos_id, "alpha": alpha}
            return Case(label, (model, src), kwargs, tag)

        out = [
            case(4, 1, 10, seed=0, tag="greedy", note=tr(" (beam 1 is greedy decoding)")),
            case(4, 3, 10, seed=0),
            case(4, 4, 10, seed=0, vocab_size=8, alpha=0.6),
            case(2, 6 ** 4, 4, seed=1, vocab_size=6, tag="exhaustive", note=tr(" (a beam as wide as every sequence)")),
            case(3, 5 ** 4, 4, seed=4, vocab_size=5, alpha=1.0, tag="exhaustive",
                 note=tr(" (a beam as wide as every sequence)")),
            case(9, 3, 3, seed=2, note=tr(" (no hypothesis can end in time)")),
            # A model unsure of when to stop: finished hypotheses of several lengths compete.
            case(2, 3, 10, seed=0, vocab_size=8, alpha=2.0, src=torch.tensor([[6, 5]]), eos_slope=0.5),
            # Here a beam that stays smaller, finished hypotheses kept in the beam and a final choice by raw scores
            # each end somewhere else.
            case(3, 3, 10, seed=8, vocab_size=8, alpha=1.0, src=torch.tensor([[7, 3, 4]]), eos_slope=0.5),
        ]
        if hidden:
            def toy() -> int:
                return draw(g, 0, 2 ** 31)  # the toy translator's weights, unknowable too

            out += [
                case(6, 1, 12, seed=toy(), vocab_size=14, tag="greedy", note=tr(" (beam 1 is greedy decoding)")),
                case(5, 2, 12, seed=toy(), vocab_size=12, alpha=0.6, ids=(4, 0, 7)),
                case(4, 5, 10, seed=toy(), vocab_size=16, alpha=0.6),
                case(3, 7 ** 3, 3, seed=toy(), vocab_size=7, alpha=0.6, tag="exhaustive",
                     note=tr(" (a beam as wide as every sequence)")),
                case(1, 4, 6, seed=toy(), vocab_size=9, alpha=2.0),
                case(7, 8, 12, seed=toy(), vocab_size=11, alpha=0.6),
                case(3, 3, 10, seed=1, vocab_size=8, alpha=2.0, src=torch.tensor([[5, 3, 5]]), eos_slope=0.5),
                case(5, 3, 10, seed=2, vocab_size=8, alpha=0.6, eos_slope=1.0),
            ]
        return out

    def stages(self, case: Case) -> list[Stage]:
        """The first step of the greedy case (the other cases: none).

        Only the first step's inputs are the exercise's own, [bos_id] with score 0: every later step decodes the
        hypotheses the learner kept, and a wrong choice among them (a token, a parent, an <eos> set aside wrongly)
        is made in Python, where the trace sees no value; its first trace is a right computation on a wrong
        hypothesis, a step later, which would be blamed on the line that decodes it. So a wrong result is located
        only where its first token is already wrong (:meth:`_judge_values`), within the first step
        (:meth:`where_values_part`).

        Before the chain, the values that are right whatever the learner's first step does, so that they never
        stand for the furthest stage once a value of the chain agrees: the start's score 0 (a scores tensor made
        of it alone, or an index 0, is no sign that the step is right), the prefix [[bos_id]] and the memory.
        The chain: the logits of the token after <bos>, their log-probabilities (the extensions' scores, the start
        scoring 0; each one alone too, as a learner who lists the extensions reads them one at a time), the
        beam_size best of them (topk, or a sort), and then the result, which a wrong first token never reaches."""
        if case.tag != "greedy":
            return []
        first = _first_step(case)
        memory, prefix, logits, log_probs = first["memory"], first["prefix"], first["logits"], first["log_probs"]
        values, indices, zero = first["values"], first["indices"].double(), torch.zeros(1, dtype=torch.float64)
        tokens, _ = _run(case)
        return [
            Stage.of(tr("the score of the hypothesis [bos_id] the search starts from, 0"), zero, zero[0], zero[None]),
            Stage.of(tr("the prefix [[bos_id]] decoded first"), prefix, prefix[0]),
            Stage.of(tr("the memory, model.encode(src)"), memory),
            Stage.of(tr("the logits of the first token, model.decode(memory, ys)[:, -1]"), logits, logits[None]),
            Stage(tr("the log-probabilities of the first token, torch.log_softmax of the logits (the scores of the "
                     "first step's extensions, as [bos_id] scores 0)"), (log_probs, log_probs[None], *log_probs)),
            Stage(tr("the beam_size best extensions of the first step, their scores and indices (topk over all of "
                     "them)"),
                  (values, *values, indices, *indices, first["sorted"], first["order"].double())),
            Stage.of(tr("the best hypothesis, the tokens your function returns"), torch.tensor(tokens)),
        ]

    def where_values_part(self, case: Case, seen: Any) -> str:
        """Where the values part within the first step (see :meth:`stages`): the trace is read up to the second
        step's hypotheses, [bos_id, token] (the first of the learner's int tensors of two columns that starts with
        bos_id: what the second step decodes, or a result of one step), when it has them. Past them the model's
        own operations on a wrong token would be taken for the learner's lines; a first step whose values all agree
        is said nothing about."""
        if seen is None or not seen.steps:
            return ""
        bos_id = case.kwargs["bos_id"]

        def second(step: Any) -> bool:
            value = step.value
            return (value is not None and not value.is_floating_point() and value.dim() in (1, 2)
                    and value.shape[-1] == 2 and bool((value.reshape(-1, 2)[:, 0] == bos_id).all()))

        end = next((i for i, step in enumerate(seen.steps) if second(step)), len(seen.steps))
        return super().where_values_part(case, dataclasses.replace(seen, steps=seen.steps[:end]))

    #: a crash is not followed back: the course's model is recorded as if its operations were made on the line that
    #: calls it, and a later step's values are none of the first step's, so the line blamed would be the model's
    crash_followed_back = False

    def _result(self, case: Case, result: Any) -> tuple[list[int], float]:
        """The learner's (tokens, score) as plain values, or a message about their form."""
        tokens, score = expect_tuple(result, 2, "`beam_search`", case, "tokens, score")
        tokens = expect_tensor(tokens, tr("`beam_search`'s tokens"), case)
        if tokens.is_floating_point() or tokens.dtype == torch.bool or tokens.dim() != 1:
            raise CheckFailed(
                tr("`beam_search`'s tokens have dtype {dtype} and shape {shape} on the case "
                   "{case}: return a LongTensor of shape (L,), the best hypothesis from bos_id on.").format(
                    dtype=tokens.dtype, shape=tuple(tokens.shape), case=case.label)
            )
        if isinstance(score, torch.Tensor) and score.numel() == 1:
            score = score.item()
        if isinstance(score, bool) or not isinstance(score, (int, float)):
            raise CheckFailed(tr("`beam_search`'s score is {score} on the case {case}: return it as a float.").format(
                score=repr(score), case=case.label))
        return tokens.tolist(), float(score)

    @rule("tokens a LongTensor (L,), the score a float")
    def _form(self, case: Case, result: Any) -> None:
        self._result(case, result)  # the form of every result first; the values across the cases

    rules = (_form,)

    @rule("the best hypothesis and its normalised score")
    def _best(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        """Judged across the cases, so that a catalogued mistake is named only where it explains every case."""
        answers = [(case, self._result(case, result)) for case, result in zip(cases, results)]

        def explains(mistake: dict[str, Any]) -> bool:
            """Whether a mistake gives the learner's tokens on every case."""
            for case, (mine, _) in answers:
                try:
                    if _run(case, **mistake)[0] != mine:
                        return False
                except Exception:  # a mistake that cannot run on this case explains nothing there
                    return False
            return True

        for case, (mine, score) in answers:
            self._judge_values(case, mine, score, explains)

    def _judge_values(self, case: Case, mine: list[int], score: float,
                      explains: Callable[[dict[str, Any]], bool]) -> None:
        model_spec, src = case.args
        k, max_len, bos_id, eos_id, alpha = (case.kwargs[x] for x in ("beam_size", "max_len", "bos_id", "eos_id", "alpha"))
        expected_tokens, expected_score = _run(case)
        # The independent oracles first: they must agree with the grader's beam, or the grader is wrong.
        if case.tag == "greedy":
            greedy = _greedy(materialize(model_spec), src.clone(), max_len, bos_id, eos_id)
            if greedy != expected_tokens:
                raise RuntimeError(  # a fault of the grader's own, not feedback
                    f"grader error on {case.label}: greedy {greedy}, beam {expected_tokens}")  # english: grader fault
        if case.tag == "exhaustive":
            best_tokens, best_score = _exhaustive(materialize(model_spec), src.clone(), max_len, bos_id, eos_id, alpha)
            if best_tokens != expected_tokens or not math.isclose(best_score, expected_score, rel_tol=1e-9):
                raise RuntimeError(  # a fault of the grader's own, not feedback
                    f"grader error on {case.label}: exhaustive {best_tokens}, beam {expected_tokens}")  # english: grader fault

        def close(a: float, b: float) -> bool:
            return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-8)

        if mine == expected_tokens and close(score, expected_score):
            return
        n = len(expected_tokens) - 1
        raw = expected_score * _lp(n, alpha)
        if mine == expected_tokens:
            wrong_sums = [
                (_sequence_score(materialize(model_spec), src.clone(), mine, kind), message)
                for kind, message in (
                    ("logits", tr("the raw logits were added up; a hypothesis' score is the sum of log-probabilities, "
                                  "torch.log_softmax(logits[:, -1], dim=-1).")),
                    ("probs", tr("probabilities were added up; add log-probabilities (the log of a product of "
                                 "probabilities).")),
                )
            ]
            for value, message in [
                *[(v / _lp(n, alpha), m) for v, m in wrong_sums],
                *wrong_sums,
                (raw, tr("the score is the raw sum of log-probabilities; return the normalised score, divided by "
                         "lp(Y) = ((5 + |Y|) / 6) ** alpha.")),
                (raw / _lp(n + 1, alpha), tr("|Y| counts the tokens after <bos> (its <eos> included), not <bos> itself.")),
                (raw / _lp(n, alpha, "power"),
                 tr("the length penalty is lp(Y) = ((5 + |Y|) / 6) ** alpha, not |Y| ** alpha.")),
            ]:
                if close(score, value) and not close(value, expected_score):
                    raise failure_on(case, tr("`beam_search`'s score is wrong on the case {case}: {message}").format(
                        case=case.label, message=message), returns=(1, tr("the score")))
            raise failure_on(
                case,
                tr("`beam_search` found the right hypothesis on the case {case} but returned the score {score} "
                   "where {expected} was expected: the sum of its tokens' log-probabilities, {raw}, divided "
                   "by lp(Y) = ((5 + |Y|) / 6) ** alpha = {penalty} (|Y| = {n}, alpha = {alpha}).").format(
                    case=case.label, score=f"{score:.6g}", expected=f"{expected_score:.6g}", raw=f"{raw:.6g}",
                    penalty=f"{_lp(n, alpha):.6g}", n=n, alpha=alpha),
                returns=(1, tr("the score")))
        matching = []
        for mistake, message in BEAM_MISTAKES:
            try:
                candidate, _ = _run(case, **mistake)
            except Exception:  # a mistake that cannot run on this case
                continue
            if candidate == mine and candidate != expected_tokens:
                matching.append((mistake, tr(message)))
        # Several mistakes can give the same tokens on one case: name one only where it explains every case.
        verified = [message for mistake, message in matching if explains(mistake)]
        if verified:
            raise named_failure(tr("`beam_search`'s result is wrong on the case {case}: ").format(case=case.label),
                                verified[:1], None)
        if case.tag == "greedy":
            message = tr(
                "`beam_search` returned {mine} on the case {case}, where greedy decoding gives {expected}: "
                "with beam_size=1 beam search keeps one hypothesis, the best extension at every step, exactly as greedy "
                "decoding does."
            ).format(mine=mine, case=case.label, expected=expected_tokens)
            if len(mine) > 1 and len(expected_tokens) > 1 and mine[1] != expected_tokens[1]:
                # The first token is chosen from the exercise's own start, [bos_id] with score 0: the values part from
                # the grader's within the first step, and the verdict locates where (see :meth:`stages`).
                raise failure_on(case, message)
            raise CheckFailed(message)
        if case.tag == "exhaustive":
            raise CheckFailed(
                tr("`beam_search` returned {mine} on the case {case}; the beam is wide enough to hold every sequence, "
                   "so it must find the best of them all, {expected} (normalised score {score}).").format(
                    mine=mine, case=case.label, expected=expected_tokens, score=f"{expected_score:.6g}")
            )
        raise CheckFailed(
            tr("`beam_search` returned {mine} on the case {case} where {expected} was expected "
               "(normalised score {score}). At every step keep the beam_size best extensions of all live "
               "hypotheses together (beam_size of them at every step, however many have finished before); those ending "
               "in eos_id finish and leave; return the finished one with the best normalised score.").format(
                mine=mine, case=case.label, expected=expected_tokens, score=f"{expected_score:.6g}")
        )

    rules_across = (_best,)


def _run(case: Case, **mistake: Any) -> tuple[list[int], float]:
    """The grader's beam search on a case, with a mistake switched on if asked."""
    model_spec, src = case.args
    k, max_len, bos_id, eos_id, alpha = (case.kwargs[x] for x in ("beam_size", "max_len", "bos_id", "eos_id", "alpha"))
    return _beam(materialize(model_spec), src.clone(), k, max_len, bos_id, eos_id, alpha, **mistake)


BEAM_MISTAKES: list[tuple[dict[str, Any], str]] = [
    (dict(kind="logits"),
     N_("the raw logits were added up; a hypothesis' score is the sum of log-probabilities, "
        "torch.log_softmax(logits[:, -1], dim=-1).")),
    (dict(kind="probs"),
     N_("probabilities were added up; add log-probabilities (the log of a product of probabilities).")),
    (dict(per_hypothesis=True),
     N_("each hypothesis was extended by its own best token only; compare all extensions of all live "
        "hypotheses together and keep the beam_size best (topk over the flattened (k, V) scores).")),
    (dict(eos_finishes=False),
     N_("hypotheses went on after <eos>: an extension that ends in eos_id is finished, leaves the beam and is "
        "never extended again.")),
    (dict(finished_take_slots=False),
     N_("the beam kept beam_size live hypotheses although some had finished: a finished hypothesis takes its "
        "place among the beam_size kept at the step it finishes, so the beam shrinks for that step (this is what "
        "makes beam size 1 greedy).")),
    (dict(shrink_for_good=True),
     N_("the beam stayed smaller after a hypothesis finished: a finished hypothesis takes one of the beam_size "
        "places only at the step it finishes. At every step take the beam_size best extensions of the hypotheses "
        "still live, however many finished before.")),
    (dict(normalise=False),
     N_("the final choice ignored the length penalty: rank finished hypotheses by score / ((5 + |Y|) / 6) ** alpha.")),
    (dict(finished_stay=True),
     N_("your search did not finish at <eos>: a hypothesis ending in eos_id stayed in the beam and kept competing "
        "for its place with the extensions of the others. Set it aside among the finished ones (it leaves the beam), "
        "and choose among the finished ones by their normalised scores at the end.")),
    (dict(form="power"), N_("the length penalty is lp(Y) = ((5 + |Y|) / 6) ** alpha, not |Y| ** alpha.")),
    (dict(count_bos=True), N_("|Y| counts the tokens after <bos> (its <eos> included), not <bos> itself.")),
    (dict(finished_first=False),
     N_("an unfinished hypothesis was returned although one had finished: return the best finished hypothesis, "
        "and a live one only when none finished within max_len steps.")),
]


CHECKS = [EditDistanceCheck, LabelSmoothedCrossEntropyCheck, NoamRateCheck, LengthBatchesCheck, BeamSearchCheck]


# What the instructions state, and the visible case that holds a learner to it. The rules every graded
# function keeps (its arguments left unchanged, no view of them returned, the arguments' dtype and
# device followed, gradients reaching them) are the base class's (Check.judge_effects, judge_dtype)
# and are not repeated here. Two pieces of advice are not held: noam_rate accepts a 0-dimensional
# tensor as well as a float, and beam_search's scores in float64 make no difference on models this small.
STATED = {
    "edit_distance": (
        Stated("the distance is an int", "a=['TH', 'AO', 'T']", "return an int"),
        Stated("a symbol is a whole element of the sequence", "a=['AO', 'B'", "you compared letters, not phonemes"),
        Stated("either sequence may be empty", "empty", "D[i, 0] = i and D[0, j] = j"),
        Stated("swapping two neighbours is two edits", "swap", "swapping two neighbours is two edits"),
        Stated("a substitution costs 1", "a=['TH', 'AO', 'T']", "a substitution costs 1"),
        Stated("the sequences may be tuples", "a=('AH'", "raised TypeError"),
        Stated("the symbols may be integer ids", "a=[2, 1, 1", "raised TypeError"),
    ),
    "label_smoothed_cross_entropy": (
        Stated("epsilon is spread over all V tokens, the right one included", "smoothing=0.1, pad_id=0",
               "over all V tokens"),
        Stated("the right token's term is weighted by 1 - epsilon", "smoothing=0.1, pad_id=0",
               "must be weighted by (1 - smoothing)"),
        Stated("padding is left out of the sum", "1 padding positions", "padding positions were counted"),
        Stated("padding is left out of the count", "1 padding positions", "not out of the count"),
        Stated("when every target is padding the result is NaN", "every target is padding", "nothing to average"),
        Stated("pad_id is the argument, not 0", "pad_id=3", "averaged over non-padding positions"),
        Stated("log p comes from torch.log_softmax", "large", "torch.log_softmax"),
        Stated("logits may have any number of leading axes", "target (6,)", "not enough values to unpack"),
        Stated("the loss is a 0-dimensional tensor, not a Python number", "target (6,)", "no .item()"),
        Stated("F.cross_entropy is not used", "target (6,)", "asks you to build yourself"),
    ),
    "noam_rate": (
        Stated("the rate takes the smaller of the two terms", "step=100000", "not max"),
        Stated("the rate is a Python float", "step=100000", "as a Python float"),
        Stated("factor scales the whole curve", "factor=2.0", "factor argument was ignored"),
        Stated("steps are counted from 1", "step=1,", "not step + 1"),
        Stated("a step below 1 raises ValueError", "step=0", "raise ValueError"),
        Stated("a warmup below 1 raises ValueError", "warmup=0", "warmup=0; raise ValueError"),
    ),
    "length_batches": (
        Stated("every index appears in exactly one batch", "lengths [3, 5, 2, 7, 4]", "exactly one batch"),
        Stated("a batch costs its size times its longest length", "fits exactly",
               "not the sum of its lengths"),
        Stated("no batch costs more than max_tokens", "lengths [3, 5, 2, 7, 4]", "more than max_tokens"),
        Stated("an example exactly as long as max_tokens fits", "fits exactly", "exactly as long as max_tokens fits"),
        Stated("an example longer than max_tokens raises ValueError", "invalid", "raise ValueError"),
        Stated("batches hold examples of similar lengths", "main", "sort the examples by length"),
        Stated("batches are filled up to the budget", "main", "fill each batch up to the budget"),
        Stated("the order of the batches is shuffled", "main", "shuffle the order of the batches"),
        Stated("examples of equal length are shuffled", "600 lengths", "examples of equal length were not shuffled"),
        Stated("the shuffling comes from a generator seeded from seed and epoch", "seed=0, epoch=0",
               "never from the global random generator"),
        Stated("another epoch gives another order", "600 lengths", "for another epoch"),
        Stated("no lengths give no batches", "no lengths", "max() arg is an empty sequence"),
    ),
    "beam_search": (
        Stated("a score sums log-probabilities", "beam_size=3, max_len=10, alpha=0.0", "the raw logits were added up"),
        Stated("the beam_size best of all extensions together are kept", "alpha=2.0", "compare all extensions"),
        Stated("a finished hypothesis leaves the beam", "alpha=1.0",
               "did not finish at <eos>"),
        Stated("a finished hypothesis is never extended", "beam_size=3, max_len=10, alpha=0.0",
               "went on after <eos>"),
        Stated("a finished hypothesis takes a place only at the step it finishes", "alpha=2.0",
               "the beam stayed smaller after a hypothesis finished"),
        Stated("with nothing finished, the best live hypothesis is returned", "no hypothesis can end in time",
               "no hypothesis finished within max_len"),
        Stated("hypotheses are ranked by score / lp(Y)", "alpha=2.0", "ignored the length penalty"),
        Stated("lp(Y) = ((5 + |Y|) / 6) ** alpha", "alpha=2.0", "not |Y| ** alpha"),
        Stated("the normalised score is returned", "alpha=2.0", "return the normalised score"),
        Stated("tokens is a LongTensor of shape (L,)", "greedy", "return a LongTensor of shape (L,)"),
    ),
}
