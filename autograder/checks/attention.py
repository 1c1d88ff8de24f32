"""Chapter 2 checks: softmax, scaled dot-product attention, additive attention, the variance experiment.

Oracles: ``torch.softmax``, ``torch.nn.functional.scaled_dot_product_attention`` and the
closed-form formulas of the paper, evaluated in float64.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ..framework import (
    Case,
    Check,
    CheckFailed,
    Hint,
    Stage,
    Stated,
    draw,
    expect_close,
    expect_finite,
    expect_shape,
    expect_tensor,
    expect_tuple,
    matches,
    named_failure,
    rule,
)
from ..messages import N_, tr

# ----------------------------------------------------------------------------------------
# softmax
# ----------------------------------------------------------------------------------------


SOFTMAX_BUILTINS = (
    "torch.softmax", "torch.Tensor.softmax", "torch.nn.functional.softmax", "torch.special.softmax", "torch.nn.Softmax",
    # exp(log_softmax(x)) and softmin(-x) are softmax too
    "torch.log_softmax", "torch.Tensor.log_softmax", "torch.nn.functional.log_softmax", "torch.special.log_softmax",
    "torch.nn.LogSoftmax", "torch.nn.functional.softmin", "torch.nn.Softmin", "torch.nn.functional.gumbel_softmax",
)
#: the attention built-ins return their softmax weights, so they compute softmax as well
SOFTMAX_OPS = ("softmax", "softmin", "scaled_dot_product", "multi_head_attention", "transformer_encoder_layer")
SDPA_BUILTINS = (
    "torch.nn.functional.scaled_dot_product_attention", "torch.nn.functional.multi_head_attention_forward",
    "torch.nn.MultiheadAttention", "torch.nn.attention.flex_attention.flex_attention",
)
#: the private kernels behind them: _scaled_dot_product_flash_attention_for_cpu, _native_multi_head_attention, ...
SDPA_OPS = ("scaled_dot_product", "scaled_dot_attention", "multi_head_attention", "transformer_encoder_layer")


class SoftmaxCheck(Check):
    function = "softmax"
    trained_through = True  # a model learns through it: gradients must reach what it was made from
    oracle = "torch.softmax"
    forbidden = SOFTMAX_BUILTINS
    forbidden_ops = SOFTMAX_OPS
    hints = (Hint("RuntimeError", N_("A sum or maximum along `dim` drops that dimension unless you pass keepdim=True; "
                                     "without it, it cannot broadcast against x."), containing="must match the size"),)

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(shape, dim=-1, dtype=torch.float32, scale=1.0, tag="", extra=""):
            x = (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)
            return x, Case(f"x {tuple(shape)} {str(dtype)[6:]}, dim={dim}" + (f" {extra}" if extra else ""), (x,),
                           {"dim": dim}, tag)

        out = [
            case((3, 5))[1],
            case((2, 3, 4), dtype=torch.float64)[1],
            case((4, 6), dim=0)[1],
            case((2, 7), scale=1000.0, tag="large", extra=tr("with entries near ±1000"))[1],
        ]
        x, _ = case((3, 6))
        x[0, 1] = x[1, 0] = x[1, 4] = float("-inf")  # masked entries, as attention produces them
        out.append(Case(tr("x (3, 6) float32 with some -inf entries, dim=-1"), (x,), {"dim": -1}, "neg-inf"))
        if hidden:
            out += [
                case((2, 3, 4, 5), dim=1)[1],
                case((5, 4), dim=-2, dtype=torch.float64)[1],
                case((9,), dim=0)[1],
                case((3, 8), dtype=torch.float16)[1],
                case((2, 4, 6), dtype=torch.float64, scale=1e4, tag="large", extra=tr("with entries near ±1e4"))[1],
            ]
            y = torch.randn(2, 6, generator=g)
            y[0] += 2000.0
            y[1] -= 2000.0  # a global maximum would make every exp of this row underflow
            out.append(Case(tr("x (2, 6) whose rows sit near +2000 and -2000, dim=-1"), (y,), {"dim": -1}, "scales"))
            out.append(Case(tr("x (3, 4) with every entry equal, dim=-1"), (torch.full((3, 4), float(draw(g, -50, 50))),),
                            {"dim": -1}))
        return out

    @rule("a tensor of x's shape")
    def _shape(self, case: Case, result: Any) -> None:
        what = tr("`{function}`'s result").format(function="softmax")
        y = expect_tensor(result, what, case)
        expect_shape(y, case.args[0].shape, what, case, tr("softmax keeps the shape of its input."))

    @rule("finite")
    def _finite(self, case: Case, y: torch.Tensor) -> None:
        (x,), dim = case.args, case.kwargs["dim"]
        if case.tag in ("large", "scales"):
            hint = tr(
                "exp overflowed or underflowed: subtract the maximum along `dim` "
                "(x.max(dim=dim, keepdim=True)) before exponentiating; it cancels in the ratio."
            )
            global_max = torch.exp(x - x.max())  # what one maximum for the whole tensor gives, in x's dtype
            global_max = global_max / global_max.sum(dim=dim, keepdim=True)
            if case.tag == "scales" or (
                not torch.isfinite(global_max).all() and torch.equal(torch.isnan(y), torch.isnan(global_max))
            ):
                hint = tr(
                    "some slice became 0/0: subtract the maximum of each slice along `dim` "
                    "(keepdim=True), not one maximum of the whole tensor."
                )
            expect_finite(y, tr("`{function}`'s result").format(function="softmax"), case, hint)
        else:
            expect_finite(
                y, tr("`{function}`'s result").format(function="softmax"), case,
                tr("exp of a large number overflows: subtract the maximum along `dim` first.")
            )

    @rule("values")
    def _values(self, case: Case, y: torch.Tensor) -> None:
        (x,), dim = case.args, case.kwargs["dim"]
        xd = x.double()
        expected = torch.softmax(xd, dim=dim)
        d = dim % x.dim()
        diagnoses = [
            (lambda o=o: torch.softmax(xd, dim=o),
             tr("you normalised along dim={other}, but the sum must run along dim={dim}: use the `dim` argument.")
             .format(other=o, dim=dim))
            for o in range(x.dim())
            if o != d
        ]
        diagnoses += [
            (lambda: torch.exp(xd) / torch.exp(xd).sum(),
             tr("you divided by the sum of the whole tensor; sum along `dim` only, with keepdim=True.")),
            (lambda: torch.exp(xd - xd.amax(dim=d, keepdim=True)) / torch.exp(xd - xd.amax(dim=d, keepdim=True)).sum(),
             tr("you divided by the sum of the whole tensor; sum along `dim` only, with keepdim=True.")),
            (lambda: torch.exp(xd), tr("you exponentiated but did not divide by the sum along `dim`.")),
            (lambda: torch.exp(xd - xd.amax(dim=d, keepdim=True)),
             tr("you subtracted the maximum but did not divide by the sum along `dim`.")),
            (lambda: torch.log_softmax(xd, dim=d),
             tr("this is log-softmax: softmax is exp(x) / sum(exp(x)), without the log.")),
            (lambda: xd / xd.sum(dim=d, keepdim=True),
             tr("you divided x by its sum without exponentiating first: softmax uses exp(x).")),
        ]
        expect_close(y, expected, tr("`{function}`'s result").format(function="softmax"), case, diagnoses)

    rules = (_shape, _finite, _values)

    def stages(self, case: Case) -> list[Stage]:
        (x,), dim = case.args, case.kwargs["dim"]
        xd = x.double()
        shifted = [xd - xd.amax(dim=dim, keepdim=True), xd - xd.max(), xd]  # any shift cancels in the ratio
        exps = [torch.exp(z) for z in shifted]
        return [
            Stage(tr("x shifted by its maximum"), tuple(shifted[:2])),
            Stage(tr("the exponentials"), tuple(exps)),
            Stage(tr("the sums of the exponentials along dim={dim} (keepdim=True)").format(dim=dim),
                  tuple(e.sum(dim=dim, keepdim=True) for e in exps)),
            Stage.of(tr("the softmax, the exponentials divided by their sums along dim={dim}").format(dim=dim),
                     torch.softmax(xd, dim=dim)),
        ]



# ----------------------------------------------------------------------------------------
# attention (scaled dot-product and additive share the masking and the weight properties)
# ----------------------------------------------------------------------------------------

MASK_HINT = N_("set the scores of masked keys to -inf before the softmax: scores.masked_fill(~mask, float('-inf')).")
FULLY_MASKED_HINT = N_(
    "a query whose keys are all masked must get all-zero weights and a zero output (the course's "
    "convention, and PyTorch's): replace the NaN rows after the softmax, e.g. with torch.nan_to_num or torch.where."
)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """softmax over keys with masked keys at exactly zero and fully masked rows all zero."""
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1).nan_to_num(nan=0.0)


RENORMALISED = N_(
    "the mask was applied after the softmax and the rows divided by their new sums. In exact arithmetic that gives "
    "the same weights, but not in floating point: here a masked key scores far above the allowed ones, so after "
    "the softmax every allowed weight has underflowed to 0 and the division is 0/0. Mask the scores before the "
    "softmax: scores.masked_fill(~mask, float('-inf')), then softmax."
)


def _renormalised_late(weights: torch.Tensor, scores: torch.Tensor, mask: torch.Tensor) -> bool:
    """Whether ``weights`` are softmax, then mask, then renormalise, worked out in their own dtype.

    That repair loses the allowed weights when a masked key dominates: they underflow, the division
    gives 0/0 (NaN, or zero once NaN is replaced) or a few surviving digits. Only a case where this
    differs from the right answer can tell the two apart.
    """
    late = torch.softmax(scores.to(weights.dtype), dim=-1) * mask  # (..., T_q, T_k)
    renormalised = (late / late.sum(-1, keepdim=True)).double()
    candidate = renormalised.nan_to_num(0.0)
    if matches(candidate, masked_softmax(scores, mask), weights.dtype):
        return False  # the same answer here: nothing to tell apart
    lost = torch.isnan(renormalised).any(-1) & mask.any(-1)  # rows that see a key, all of whose weight underflowed
    w = weights.double()
    lost_rows_empty = bool(((torch.isnan(w) | (w == 0)).all(-1) | ~lost).all())
    return lost_rows_empty and matches(w.nan_to_num(0.0), candidate, weights.dtype)


class _AttentionCheck(Check):
    """Shared judging of (output, weights) for attention functions."""

    hints = (Hint("RuntimeError", N_("Mind the shapes: q is (..., T_q, d_k) and k is (..., T_k, d_k), so the scores "
                                     "are q @ k.transpose(-2, -1), (..., T_q, T_k): swap the last two axes only (k.T "
                                     "reverses every axis of a batched tensor). A mask must broadcast to (..., T_q, T_k).")),)

    def scores(self, case: Case) -> torch.Tensor:
        """The oracle's unmasked scores, float64, shape (..., T_q, T_k)."""
        raise NotImplementedError

    def mistaken_scores(self, case: Case) -> list[tuple[torch.Tensor, str]]:
        """Scores a known mistake would produce, with the message that names it."""
        return []

    def score_stages(self, case: Case) -> list[Stage]:
        """The steps that lead to the scores, before them."""
        return []

    def keys_values(self, case: Case) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values each query reads, lined up with the scores' axes: the case's own here."""
        return case.args[1], case.args[2]

    def mistaken_outputs(self, case: Case, weights: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
        """Outputs a known mistake would produce from the right ``weights``, with the message that names it."""
        return []

    def stages(self, case: Case) -> list[Stage]:
        _, v = self.keys_values(case)
        mask = case.kwargs.get("mask")
        scores = self.scores(case)
        out = [*self.score_stages(case), Stage.of(tr("the scores"), scores)]
        weights = masked_softmax(scores, None if mask is None else mask.expand(scores.shape))
        if mask is None:
            out.append(Stage.of(tr("the weights, softmax of the scores over the keys"), weights))
        else:
            full = mask.expand(scores.shape)
            masked = scores.masked_fill(~full, float("-inf"))
            # A query that sees no key may have its row filled with finite scores (0) on the way, so that the
            # softmax gives no NaN (uniform weights, zeroed afterwards): a right step, which must not be blamed.
            blind = ~full.any(dim=-1, keepdim=True)  # (..., T_q, 1)
            safe = masked.masked_fill(blind, 0.0)
            # -inf, or a large negative number: both are right wherever a query sees some key
            out.append(Stage.of(tr("the masked scores, -inf where the mask is False"), masked,
                                scores.masked_fill(~full, -1e9), safe))
            if bool(blind.any()):
                out.append(Stage.of(tr("the softmax of the masked scores, uniform for a query that sees no key (until "
                                       "its row is zeroed)"), torch.softmax(safe, dim=-1)))
            out.append(Stage.of(tr("the weights, softmax of the scores over the keys"), weights))
        out.append(Stage.of(tr("the output, weights @ v"), weights @ v.double()))
        return out

    def rounding_scale(self, case: Case) -> float:
        """Scores in the hundreds (the large and dominant cases) carry float32 rounding of 1e-5 into the
        weights and the output: the tolerance grows with them."""
        scores = self.worked_out(case, self.scores)
        return float(scores.abs().nan_to_num(0.0, 0.0, 0.0).max()) / 30 if scores.numel() else 1.0

    def _returned(self, case: Case, result: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """(output, weights), each a tensor."""
        name = f"`{self.function}`"
        output, weights = expect_tuple(result, 2, name, case, "output, weights")
        return (expect_tensor(output, tr("`{function}`'s output").format(function=self.function), case),
                expect_tensor(weights, tr("`{function}`'s weights").format(function=self.function), case))

    def _full_mask(self, case: Case, scores: torch.Tensor) -> torch.Tensor | None:
        mask = case.kwargs.get("mask")
        return None if mask is None else mask.expand(scores.shape)

    @rule("output and weights")
    def _two_tensors(self, case: Case, result: Any) -> None:
        self._returned(case, result)

    @rule("weights are (..., T_q, T_k)", returns=(1, "the weights"))
    def _weights_shape(self, case: Case, result: Any) -> None:
        q, k = case.args[:2]
        _, weights = self._returned(case, result)
        batch = self.worked_out(case, self.scores).shape[:-2]
        expect_shape(
            weights, (*batch, q.shape[-2], k.shape[-2]), tr("`{function}`'s weights").format(function=self.function),
            case, tr("The weights have one row per query and one column per key: (..., T_q, T_k)."),
        )

    @rule("output is (..., T_q, d_v)", returns=(0, "the output"))
    def _output_shape(self, case: Case, result: Any) -> None:
        q, k, v = case.args[:3]
        output, _ = self._returned(case, result)
        batch, t_q = self.worked_out(case, self.scores).shape[:-2], q.shape[-2]
        if v.shape[-1] != k.shape[-1] and tuple(output.shape) == (*batch, t_q, k.shape[-1]):
            raise CheckFailed(tr(
                "`{function}`'s output has shape {shape}, the size of k's features, on the case {case}: "
                "the weights multiplied k instead of v. The output is weights @ v: (..., T_q, d_v)."
            ).format(function=self.function, shape=tuple(output.shape), case=case.label))
        expect_shape(output, (*batch, t_q, v.shape[-1]), tr("`{function}`'s output").format(function=self.function), case,
                     tr("The output is weights @ v: (..., T_q, d_v)."))

    @rule("mask before the softmax")
    def _masked_before_softmax(self, case: Case, result: Any) -> None:
        _, weights = self._returned(case, result)
        scores = self.worked_out(case, self.scores)
        full_mask = self._full_mask(case, scores)
        if full_mask is not None and _renormalised_late(weights, scores, full_mask):
            raise CheckFailed(tr("`{function}`'s weights are wrong on the case {case}: {reason}").format(
                function=self.function, case=case.label, reason=tr(RENORMALISED)))

    @rule("finite")
    def _finite(self, case: Case, result: Any) -> None:
        output, weights = self._returned(case, result)
        expect_finite(weights, tr("`{function}`'s weights").format(function=self.function), case,
                      tr(FULLY_MASKED_HINT) if case.tag == "fully-masked" else
                      tr("subtract the row maximum before exp (or use a stable softmax)."))
        expect_finite(output, tr("`{function}`'s output").format(function=self.function), case,
                      tr(FULLY_MASKED_HINT) if case.tag == "fully-masked" else "")

    # Properties first: they explain a wrong answer better than a difference does.
    @rule("masked keys get zero weight")
    def _masked_keys(self, case: Case, result: Any) -> None:
        _, weights = self._returned(case, result)
        scores = self.worked_out(case, self.scores)
        full_mask = self._full_mask(case, scores)
        if full_mask is None:
            return
        alive = full_mask.any(-1)
        leaked = weights.double().masked_select(~full_mask & alive.unsqueeze(-1)).abs()  # rows with no key: below
        if leaked.numel() and leaked.max() > 0:
            if matches(weights, masked_softmax(scores, ~full_mask)):
                raise CheckFailed(tr(
                    "`{function}`'s mask is inverted on the case {case}: True means 'may attend', "
                    "so the keys where mask is False are the ones to hide (masked_fill(~mask, -inf))."
                ).format(function=self.function, case=case.label))
            raise CheckFailed(tr(
                "`{function}` gave a masked key the weight {weight} on the case {case}: "
                "masked keys must get exactly zero weight; {hint}"
            ).format(function=self.function, weight=f"{leaked.max().item():.3g}", case=case.label, hint=tr(MASK_HINT)))

    @rule("a fully masked query gets zero weights")
    def _fully_masked(self, case: Case, result: Any) -> None:
        q, k = case.args[:2]
        _, weights = self._returned(case, result)
        full_mask = self._full_mask(case, self.worked_out(case, self.scores))
        if full_mask is None:
            return
        w, dead = weights.double(), ~full_mask.any(-1)
        if dead.any() and (w[dead].abs().max() > 0):
            row = w[dead][0]
            atol = 1e-2 if q.dtype in (torch.float16, torch.bfloat16) else 1e-4
            if torch.allclose(row, torch.full_like(row, 1.0 / k.shape[-2]), atol=atol):
                raise CheckFailed(tr(
                    "`{function}` gave a fully masked query uniform weights on the case {case}: filling with a "
                    "large negative number such as -1e9 instead of -inf has this effect, because every key then "
                    "ties. A query whose keys are all masked must get all-zero weights and a zero output (the "
                    "course's convention, and PyTorch's): fill with -inf and zero such rows, e.g. with torch.where."
                ).format(function=self.function, case=case.label))
            raise CheckFailed(tr("`{function}` gave a fully masked query non-zero weights on the case {case}: {hint}")
                              .format(function=self.function, case=case.label, hint=tr(FULLY_MASKED_HINT)))

    @rule("rows sum to one")
    def _rows_sum_to_one(self, case: Case, result: Any) -> None:
        q = case.args[0]
        _, weights = self._returned(case, result)
        scores = self.worked_out(case, self.scores)
        full_mask = self._full_mask(case, scores)
        alive = torch.ones(scores.shape[:-1], dtype=torch.bool) if full_mask is None else full_mask.any(-1)
        atol = 1e-2 if q.dtype in (torch.float16, torch.bfloat16) else 1e-4
        sums = weights.double().sum(-1)
        if not torch.allclose(sums[alive], torch.ones_like(sums[alive]), atol=atol):
            bad = (sums - 1).abs().masked_fill(~alive, 0).argmax()
            message = tr(
                "`{function}`'s weights do not sum to 1 over the last axis (one row sums to "
                "{total}) on the case {case}: {reason}"
            ).format
            total = f"{sums.flatten()[bad].item():.4g}"
            if full_mask is not None and matches(weights, torch.softmax(scores, -1) * full_mask):
                raise CheckFailed(message(function=self.function, total=total, case=case.label, reason=tr(
                    "the mask was applied after the softmax. {hint}").format(hint=tr(MASK_HINT))))
            if matches(
                weights,
                torch.softmax(
                    scores.masked_fill(~full_mask, float("-inf")) if full_mask is not None else scores, dim=-2
                ).nan_to_num(nan=0.0),
            ):
                raise CheckFailed(message(function=self.function, total=total, case=case.label, reason=tr(
                    "the softmax ran over the queries (dim=-2); it must run over the keys, dim=-1.")))
            raise CheckFailed(message(function=self.function, total=total, case=case.label,
                                      reason=tr("the softmax must run over the keys, dim=-1.")))

    @rule("weights")
    def _weights(self, case: Case, result: Any) -> None:
        _, weights = self._returned(case, result)
        scores = self.worked_out(case, self.scores)
        full_mask = self._full_mask(case, scores)
        expected, scale = masked_softmax(scores, full_mask), self.rounding_scale(case)
        if not matches(weights, expected, scale=scale):  # only then is it worth working out which mistake it was
            diagnoses = [(lambda s=s: masked_softmax(s, full_mask), msg) for s, msg in self.mistaken_scores(case)]
            expect_close(weights, expected, tr("`{function}`'s weights").format(function=self.function), case,
                         diagnoses, scale=scale)

    @rule("output")
    def _output(self, case: Case, result: Any) -> None:
        k, v = self.keys_values(case)
        output, _ = self._returned(case, result)
        scores = self.worked_out(case, self.scores)
        expected = masked_softmax(scores, self._full_mask(case, scores))
        mistaken = [(lambda o=o: o, message) for o, message in self.mistaken_outputs(case, expected)]
        expect_close(
            output, expected @ v.double(), tr("`{function}`'s output").format(function=self.function), case,
            [(lambda: expected @ k.double(), tr("the weights are right but multiplied k instead of v.")), *mistaken],
            hint=tr("The weights are right, so look at the last step: output = weights @ v."),
            scale=self.rounding_scale(case),
        )

    rules = (_two_tensors, _weights_shape, _output_shape, _masked_before_softmax, _finite, _masked_keys, _fully_masked,
             _rows_sum_to_one, _weights, _output)

    @rule("masked keys change nothing")
    def _masked_change_nothing(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        pairs = {c.tag: (c, r) for c, r in zip(cases, results) if c.tag.startswith("pair-")}
        if {"pair-a", "pair-b"} <= pairs.keys():
            (case_a, (out_a, _)), (_, (out_b, _)) = pairs["pair-a"], pairs["pair-b"]
            if not matches(out_a, out_b):
                raise CheckFailed(tr(
                    "`{function}`'s output changed when only masked keys and values changed "
                    "({case}): masked positions must have no influence at all. {hint}"
                ).format(function=self.function, case=case_a.label, hint=tr(MASK_HINT)))

    rules_across = (_masked_change_nothing,)


def _attention_cases(g: torch.Generator, hidden: bool, extra_args) -> list[Case]:
    """Shared shapes for both attention functions; ``extra_args(d_q, d_k)`` adds parameters."""

    def rand(*shape, dtype=torch.float32, scale=1.0):
        return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)

    def case(label, q, k, v, mask=None, tag=""):
        kwargs = {} if mask is None else {"mask": mask}
        return Case(label, (q, k, v, *extra_args(q.shape[-1], k.shape[-1], q.dtype)), kwargs, tag)

    causal = torch.tril(torch.ones(4, 4, dtype=torch.bool))
    padding = torch.tensor([[True] * 6, [True] * 4 + [False] * 2]).view(2, 1, 6)  # (B, 1, T_k)
    fully = torch.tensor([[True, False, True, True, False], [False] * 5, [True] * 5])  # row 1 sees nothing
    out = [
        case(tr("q (2, 4, 8), k (2, 6, 8), v (2, 6, 5), no mask"), rand(2, 4, 8), rand(2, 6, 8), rand(2, 6, 5)),
        case(tr("q (3, 8), k (5, 8), v (5, 4) with no batch dimension"), rand(3, 8), rand(5, 8), rand(5, 4)),
        case(tr("q, k, v (2, 3, 4, 16) with a causal mask (4, 4)"), rand(2, 3, 4, 16), rand(2, 3, 4, 16), rand(2, 3, 4, 16),
             causal),
        case(tr("q (2, 5, 8), k and v (2, 6, 8), padding mask (2, 1, 6)"), rand(2, 5, 8), rand(2, 6, 8), rand(2, 6, 8), padding),
        case(tr("q (2, 3, 64), k (2, 7, 64), v (2, 7, 3) float64"), rand(2, 3, 64, dtype=torch.float64),
             rand(2, 7, 64, dtype=torch.float64), rand(2, 7, 3, dtype=torch.float64)),
        case(tr("q (3, 6), k and v (5, 6), mask (3, 5) whose second row is all False"),
             rand(3, 6), rand(5, 6), rand(5, 6), fully, "fully-masked"),
    ]
    pair_a = case(tr("q (2, 5, 8), k and v (2, 6, 8), padding mask (2, 1, 6)"),
                  rand(2, 5, 8), rand(2, 6, 8), rand(2, 6, 8), padding, "pair-a")
    q, k, v, *params = pair_a.args
    k2, v2 = k.clone(), v.clone()
    k2[1, 4:], v2[1, 4:] = 50.0, -1e3  # only masked positions change
    pair_b = Case(tr("the same inputs with different keys and values where the mask is False"),
                  (q, k2, v2, *params), pair_a.kwargs, "pair-b")
    out += [pair_a, pair_b]
    if hidden:
        causal7 = torch.tril(torch.ones(7, 7, dtype=torch.bool))
        out += [
            case(tr("q, k, v (2, 2, 3, 7, 32) float64 with a causal mask (7, 7)"), rand(2, 2, 3, 7, 32, dtype=torch.float64),
                 rand(2, 2, 3, 7, 32, dtype=torch.float64), rand(2, 2, 3, 7, 32, dtype=torch.float64), causal7),
            case(tr("q (4, 9, 16), k (4, 3, 16), v (4, 3, 2)"), rand(4, 9, 16), rand(4, 3, 16), rand(4, 3, 2)),
            case(tr("q (2, 4, 8), k and v (2, 5, 8) float16"), rand(2, 4, 8, dtype=torch.float16),
                 rand(2, 5, 8, dtype=torch.float16), rand(2, 5, 8, dtype=torch.float16)),
            case(tr("q (2, 6, 32) with large entries (dot products up to a few hundred), k and v (2, 6, 32)"),
                 rand(2, 6, 32, scale=10.0), rand(2, 6, 32, scale=10.0), rand(2, 6, 32)),
            case(tr("q (3, 4, 8), k and v (3, 6, 8), mask (3, 4, 6) at random"), rand(3, 4, 8), rand(3, 6, 8), rand(3, 6, 8),
                 torch.rand(3, 4, 6, generator=g) > 0.4, "fully-masked"),
        ]
    return out


DOMINANT = N_("q (2, 4, 8), k and v (2, 6, 8), padding mask (2, 1, 6); in sequence 2 the padded keys score far above "
              "the real ones")
DOMINANT_PADDING = torch.tensor([[True] * 4 + [False] * 2] * 2).view(2, 1, 6)  # (B, 1, T_k)


def _dominant_gap(scores: torch.Tensor) -> float:
    """How far sequence 2's padded keys score above its real ones, at the least, over its queries."""
    real, padded = scores[1, :, :4], scores[1, :, 4:]  # (T_q, 4), (T_q, 2)
    return (padded.min(-1).values - real.max(-1).values).min().item()


class ScaledDotProductAttentionCheck(_AttentionCheck):
    function = "scaled_dot_product_attention"
    trained_through = True  # a model learns through it: gradients must reach what it was made from
    oracle = "torch.nn.functional.scaled_dot_product_attention"
    forbidden = SOFTMAX_BUILTINS + SDPA_BUILTINS
    forbidden_ops = SOFTMAX_OPS + SDPA_OPS

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)
        return _attention_cases(g, hidden, lambda d_q, d_k, dtype: ()) + [self._dominant_case(g)]

    @staticmethod
    def _dominant_case(g: torch.Generator) -> Case:
        """Float32 underflows below exp(-104): the padded keys of sequence 2 outscore its real ones by more."""
        q = torch.randn(2, 4, 8, generator=g).abs() + 1.0  # positive features: q . k grows with k
        k, v = torch.randn(2, 6, 8, generator=g), torch.randn(2, 6, 8, generator=g)
        k[1, 4:] = 60.0
        scores = q.double() @ k.double().transpose(-2, -1) / 8 ** 0.5  # (B, T_q, T_k)
        assert _dominant_gap(scores) > 120, "the case no longer makes a softmax underflow"  # english: the grader's own check
        return Case(tr(DOMINANT), (q, k, v), {"mask": DOMINANT_PADDING}, "dominant")

    def scores(self, case: Case) -> torch.Tensor:
        q, k, _ = (t.double() for t in case.args)
        return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., T_q, T_k)

    def score_stages(self, case: Case) -> list[Stage]:
        q, k, _ = (t.double() for t in case.args)
        return [Stage.of(tr("the dot products q @ k.transpose(-2, -1), before the scale"), q @ k.transpose(-2, -1))]

    def mistaken_scores(self, case: Case):
        q, k, v = (t.double() for t in case.args)
        raw = q @ k.transpose(-2, -1)  # (..., T_q, T_k)
        d_k, d_v = q.shape[-1], v.shape[-1]
        out = [
            (raw, tr("the scores were not divided by sqrt(d_k): use (q @ k.transpose(-2, -1)) / math.sqrt(d_k).")),
            (raw / d_k, tr("the scores were divided by d_k; the paper divides by its square root, sqrt(d_k).")),
            (raw * math.sqrt(d_k), tr("the scores were multiplied by sqrt(d_k); divide by it instead.")),
        ]
        if d_v != d_k:
            out.append((raw / math.sqrt(d_v),
                        tr("the scores were divided by sqrt(d_v); the scale uses the key size, d_k = q.shape[-1].")))
        if q.shape[-2] == k.shape[-2]:
            out.append((raw.transpose(-2, -1) / math.sqrt(d_k),
                        tr("the weights are transposed: scores are q @ k^T, with queries as rows.")))
        return out

    @rule("output agrees with PyTorch's kernel")
    def _kernel(self, case: Case, result: Any) -> None:
        """The independent oracle: PyTorch's own kernel agrees with the formula the other rules use."""
        q, k, v = (t.double() for t in case.args)
        mask = case.kwargs.get("mask")
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        expect_close(result[0], expected, tr("`{function}`'s output").format(function="scaled_dot_product_attention"),
                     case, dtype=case.args[0].dtype,
                     scale=self.rounding_scale(case))

    rules = (*_AttentionCheck.rules, _kernel)


ADDITIVE_SHAPES = N_(
    "Mind the shapes: q @ W_q is (..., T_q, d_a) and k @ W_k is (..., T_k, d_a). To pair every query with every key, "
    "give the queries an axis for the keys and the keys an axis for the queries: (q @ W_q).unsqueeze(-2) is "
    "(..., T_q, 1, d_a), (k @ W_k).unsqueeze(-3) is (..., 1, T_k, d_a), and their sum broadcasts to "
    "(..., T_q, T_k, d_a); tanh, then @ w_v, gives the scores (..., T_q, T_k). A mask must broadcast to (..., T_q, T_k)."
)


class AdditiveAttentionCheck(_AttentionCheck):
    function = "additive_attention"
    trained_through = True  # a model learns through it: gradients must reach what it was made from
    oracle = N_("the additive score w_v · tanh(q W_q + k W_k)")
    hints = (Hint("RuntimeError", ADDITIVE_SHAPES),)
    forbidden = SOFTMAX_BUILTINS + SDPA_BUILTINS
    forbidden_ops = SOFTMAX_OPS + SDPA_OPS

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def params(d_q, d_k, dtype, d_a=6):
            return (
                (torch.randn(d_q, d_a, generator=g, dtype=torch.float64) / math.sqrt(d_q)).to(dtype),
                (torch.randn(d_k, d_a, generator=g, dtype=torch.float64) / math.sqrt(d_k)).to(dtype),
                torch.randn(d_a, generator=g, dtype=torch.float64).to(dtype),
            )

        return _attention_cases(g, hidden, params) + [self._dominant_case(g)]

    @staticmethod
    def _dominant_case(g: torch.Generator) -> Case:
        """A large positive w_v; the padded keys of sequence 2 push every tanh to +1, its real keys towards -1."""
        d, d_a = 8, 8
        q, v = torch.randn(2, 4, d, generator=g), torch.randn(2, 6, d, generator=g)
        W_q = torch.randn(d, d_a, generator=g) / d ** 0.5
        # Orthogonal: keys solved for through an ill-conditioned W_k would be huge, and float32 would lose
        # k @ W_k to cancellation (on some draws the course's own answer was 1e-3 off).
        W_k = torch.linalg.qr(torch.randn(d, d_a, generator=g))[0]
        w_v = 30.0 + 10.0 * torch.rand(d_a, generator=g)  # (d_a,), every entry positive
        k = 0.3 * torch.randn(2, 6, d, generator=g) + torch.full((d_a,), -2.0) @ W_k.T
        k[1, 4:] = torch.full((d_a,), 30.0) @ W_k.T  # k @ W_k = 30 in every feature
        scores = torch.tanh((q @ W_q).unsqueeze(-2) + (k @ W_k).unsqueeze(-3)).double() @ w_v.double()  # (B, T_q, T_k)
        assert _dominant_gap(scores) > 120, "the case no longer makes a softmax underflow"  # english: the grader's own check
        return Case(tr(DOMINANT), (q, k, v, W_q, W_k, w_v), {"mask": DOMINANT_PADDING}, "dominant")

    def scores(self, case: Case) -> torch.Tensor:
        q, k, _, W_q, W_k, w_v = (t.double() for t in case.args)
        hidden = torch.tanh((q @ W_q).unsqueeze(-2) + (k @ W_k).unsqueeze(-3))  # (..., T_q, T_k, d_a)
        return hidden @ w_v  # (..., T_q, T_k)

    def score_stages(self, case: Case) -> list[Stage]:
        q, k, _, W_q, W_k, w_v = (t.double() for t in case.args)
        pre = (q @ W_q).unsqueeze(-2) + (k @ W_k).unsqueeze(-3)  # (..., T_q, T_k, d_a)
        return [Stage.of(tr("the projected queries q @ W_q"), q @ W_q), Stage.of(tr("the projected keys k @ W_k"), k @ W_k),
                Stage.of(tr("the sums q W_q + k W_k for every query and key, (..., T_q, T_k, d_a)"), pre),
                Stage.of(tr("their tanh"), torch.tanh(pre))]

    def mistaken_scores(self, case: Case):
        q, k, _, W_q, W_k, w_v = (t.double() for t in case.args)
        pre = (q @ W_q).unsqueeze(-2) + (k @ W_k).unsqueeze(-3)  # (..., T_q, T_k, d_a)
        out = [
            (pre @ w_v, tr("the tanh is missing: score = w_v · tanh(q W_q + k W_k); without it the score is linear.")),
            ((torch.tanh(pre) @ w_v) / math.sqrt(q.shape[-1]),
             tr("additive attention has no 1/sqrt(d_k) scale; that belongs to dot-product attention.")),
            (torch.tanh(pre @ w_v),
             tr("the tanh was applied after projecting with w_v; apply it to q W_q + k W_k, then project.")),
            (torch.tanh(pre).sum(-1), tr("the scores summed the hidden features; project them with w_v instead.")),
            (torch.relu(pre) @ w_v, tr("the nonlinearity is tanh, not ReLU.")),
        ]
        if q.shape[-2] == k.shape[-2]:
            out.append((torch.tanh(pre).transpose(-3, -2) @ w_v,
                        tr("the weights are transposed: the queries were unsqueezed at -3 and the keys at -2. {shapes}")
                        .format(shapes=tr(ADDITIVE_SHAPES))))
        if W_q.shape == W_k.shape:
            swapped = (q @ W_k).unsqueeze(-2) + (k @ W_q).unsqueeze(-3)  # (..., T_q, T_k, d_a)
            out += [
                (torch.tanh((q @ W_q).unsqueeze(-2) + (k @ W_q).unsqueeze(-3)) @ w_v,
                 tr("the keys were projected with W_q; project them with W_k.")),
                (torch.tanh((q @ W_k).unsqueeze(-2) + (k @ W_k).unsqueeze(-3)) @ w_v,
                 tr("the queries were projected with W_k; project them with W_q.")),
                (torch.tanh(swapped) @ w_v,
                 tr("W_q and W_k are swapped: the queries go through W_q, the keys through W_k.")),
            ]
        return out


# ----------------------------------------------------------------------------------------
# the variance experiment
# ----------------------------------------------------------------------------------------


class ScoreVarianceCheck(Check):
    function = "score_variance"
    oracle = N_("torch.var of the row-wise scores q_i · k_i")

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)
        out = []
        for n, d_k, scaled, dist in [(2000, 4, False, "normal"), (2000, 64, False, "normal"), (2000, 64, True, "normal"),
                                     (50, 16, False, "uniform"), (50, 16, True, "uniform")] + (
            [(3000, 256, False, "normal"), (3000, 256, True, "normal"), (20, 3, True, "uniform"), (500, 1, False, "normal")]
            if hidden else []
        ):
            if dist == "normal":
                q, k = torch.randn(n, d_k, generator=g), torch.randn(n, d_k, generator=g)
            else:
                q, k = torch.rand(n, d_k, generator=g) * 4 - 1, torch.rand(n, d_k, generator=g) * 2
            label = (tr("q and k ({n}, {d_k}) normal, scaled={scaled}") if dist == "normal"
                     else tr("q and k ({n}, {d_k}) uniform, scaled={scaled}"))
            out.append(Case(label.format(n=n, d_k=d_k, scaled=scaled), (q, k), {"scaled": scaled}, dist))
        return out

    def stages(self, case: Case) -> list[Stage]:
        q, k = (t.double() for t in case.args)
        products = q * k  # (n, d_k)
        scores = products.sum(-1)  # (n,)
        stages = [Stage.of(tr("the products q_i * k_i, feature by feature"), products),
                  Stage.of(tr("the scores q_i · k_i, summed over the features (dim=-1)"), scores)]
        if case.kwargs["scaled"]:
            scores = scores / math.sqrt(q.shape[-1])
            stages.append(Stage.of(tr("the scores divided by sqrt(d_k)"), scores))
        return [*stages, Stage.of(tr("the sample variance of the scores"), scores.var())]

    @rule("a Python float")
    def _a_float(self, case: Case, result: Any) -> None:
        if isinstance(result, torch.Tensor):
            if result.numel() != 1:
                raise CheckFailed(tr(
                    "`score_variance` returned a tensor of shape {shape} on the case {case}; "
                    "return one number: the variance of the n scores."
                ).format(shape=tuple(result.shape), case=case.label))
            raise CheckFailed(tr(
                "`score_variance` returned a tensor ({value}) on the case {case}; the exercise asks "
                "for a Python float: end with .item(), as in scores.var().item()."
            ).format(value=f"{result.item():.6g}", case=case.label))
        if isinstance(result, bool) or not isinstance(result, (int, float)):
            raise CheckFailed(tr("`score_variance` returned {kind} on the case {case}; return a number.").format(
                kind=type(result).__name__, case=case.label))

    @rule("value")
    def _value(self, case: Case, result: float) -> None:
        q, k = (t.double() for t in case.args)
        scaled = case.kwargs["scaled"]
        d_k = q.shape[-1]
        scores = (q * k).sum(-1)  # (n,) one score per row pair
        scale = math.sqrt(d_k) if scaled else 1.0
        expected = (scores / scale).var().item()

        def close(x):
            return math.isclose(result, x, rel_tol=2e-4, abs_tol=1e-9)

        if close(expected):
            return
        diagnoses = [
            ((scores / scale).var(unbiased=False).item(),
             tr("this is the biased variance (dividing by n); use torch.var's default, which divides by n - 1.")),
            ((scores / scale).std().item(), tr("this is the standard deviation; the variance is its square.")),
            ((scores / scale).mean().item(), tr("this is the mean of the scores, not their variance.")),
            (scores.var().item(), tr("the scores were not divided by sqrt(d_k) although scaled=True.") if scaled else ""),
            ((scores / math.sqrt(d_k)).var().item(), tr("the scores were divided by sqrt(d_k) although scaled=False.")),
            ((scores / d_k).var().item(), tr("the scores were divided by d_k; the scale is sqrt(d_k).")),
            ((q @ k.T / scale).var().item(), tr("this is the variance of every q_i · k_j (the whole matrix q @ k.T); "
                                                "use the n row-wise scores q_i · k_i = (q * k).sum(-1).")),
            ((q * k / scale).var().item(),
             tr("this is the variance of the element-wise products; sum over the d_k features first.")),
        ]
        # Every mistake that gives this value, the nearest first: on a sample two of them can land within the
        # tolerance by chance, and another case then tells which one was made.
        explaining = [message for value, message in sorted(diagnoses, key=lambda d: abs(d[0] - result))
                      if message and close(value)]
        raise named_failure(
            tr("`score_variance` is wrong on the case {case}: ").format(case=case.label), explaining,
            tr("`score_variance` returned {value} on the case {case} where {expected} was expected: "
               "compute the scores (q * k).sum(-1), divide them by sqrt(d_k) when scaled, and return their variance.")
            .format(value=f"{result:.6g}", case=case.label, expected=f"{expected:.6g}"))

    rules = (_a_float, _value)


CHECKS = [SoftmaxCheck, ScaledDotProductAttentionCheck, AdditiveAttentionCheck, ScoreVarianceCheck]


# What the instructions state, and the visible case that holds a learner to it. The rules every graded
# function keeps (its arguments left unchanged, no view of them returned, the arguments' dtype and
# device followed, gradients reaching them) are the base class's (Check.judge_effects, judge_dtype)
# and are not repeated here.
STATED = {
    "softmax": (
        Stated("entries near 1000 do not overflow: subtract the maximum", "large",
               "subtract the maximum along `dim`"),
        Stated("the maximum is taken per slice", "large", "not one maximum of the whole tensor"),
        Stated("the softmax runs along `dim`", "dim=0", "use the `dim` argument"),
        Stated("entries equal to -inf get zero probability", "neg-inf", "is wrong on the case"),
        Stated("torch.softmax is not used", "x (3, 5)", "asks you to build yourself"),
    ),
    "scaled_dot_product_attention": (
        Stated("the scores are divided by sqrt(d_k)", "float64", "not divided by sqrt(d_k)"),
        Stated("the softmax runs over the keys", "no mask", "over the queries (dim=-2)"),
        Stated("a mask is True where a query may attend", "causal mask", "mask is inverted"),
        Stated("masked scores become -inf before the softmax", "pair-", "before the softmax"),
        Stated("masked scores become -inf, not a large negative number", "fully-masked", "-1e9 instead of -inf"),
        Stated("a query whose keys are all masked gets zero weights and a zero output", "fully-masked",
               "replace the NaN rows"),
        Stated("q may have no batch dimension", "no batch dimension", "raised IndexError"),
        Stated("any number of batch dimensions: transpose the last two axes only", "(2, 3, 4, 16)",
               "k.T reverses every axis"),
        Stated("F.scaled_dot_product_attention is not used", "no mask", "asks you to build yourself"),
    ),
    "additive_attention": (
        Stated("there is no 1/sqrt(d_k) scale", "no mask", "no 1/sqrt(d_k) scale"),
        Stated("the score is w_v . tanh(q W_q + k W_k)", "no mask", "after projecting with w_v"),
        Stated("every (query, key) pair is scored: (..., T_q, 1, d_a) against (..., 1, T_k, d_a)", "no mask",
               "(q @ W_q).unsqueeze(-2) is"),
        Stated("q may have no batch dimension", "no batch dimension", "Mind the shapes"),
        Stated("a mask is True where a query may attend", "causal mask", "mask is inverted"),
        Stated("masked scores become -inf before the softmax", "pair-", "before the softmax"),
        Stated("a query whose keys are all masked gets zero weights and a zero output", "fully-masked",
               "replace the NaN rows"),
    ),
    "score_variance": (
        Stated("the sample variance divides by n - 1", "uniform", "biased variance"),
        Stated("scaled=True divides the scores by sqrt(d_k)", "scaled=True", "although scaled=True"),
        Stated("the scores are the n row-wise products q_i . k_i", "normal", "whole matrix"),
        Stated("the result is a Python float", "normal", "for a Python float"),
    ),
}
