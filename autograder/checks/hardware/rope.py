"""The check of ``apply_rope``: rotary position embedding on neighbouring pairs of features.

Oracle: the rotation written with complex numbers, in float64 (pair (x_2i, x_2i+1) is the number
x_2i + i x_2i+1, multiplied by exp(i m theta_i)), and the property that defines it: on a case that
places one query and one key at every position, the score of the query at m with the key at n
depends on m - n only.
"""
from __future__ import annotations

from typing import Any

import torch

from ...framework import (
    INVALID,
    Case,
    Check,
    CheckFailed,
    Hint,
    Stage,
    Stated,
    draw,
    expect_close,
    expect_shape,
    expect_tensor,
    matches,
    named_failure,
    rule,
)
from ...messages import N_, tr


def frequencies(d: int, base: float, exponent: float = 2.0) -> torch.Tensor:
    """(d/2,) float64: theta_i = base^(-exponent * i / d); the formula's exponent is 2."""
    return base ** (-exponent * torch.arange(d // 2, dtype=torch.float64) / d)


def rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0, *, pairs: str = "neighbours",
         exponent: float = 2.0, sign: float = 1.0, shift: int = 0, angles_in: torch.dtype = torch.float64) -> torch.Tensor:
    """The rotation in float64 with complex numbers; the keywords replay known mistakes: ``pairs="halves"``
    pairs feature i with i + d/2, ``exponent`` changes the frequencies, ``sign=-1`` turns the other way,
    ``shift`` moves every position, ``angles_in=torch.float32`` rounds the angles and their cosines there."""
    xd = x.double()
    d = x.shape[-1]
    if angles_in != torch.float64:  # as a learner computes them there: the powers too
        theta = base ** (-exponent * torch.arange(d // 2, dtype=angles_in) / d)
        angles = (positions.to(angles_in) + shift)[:, None] * theta
        return _rotated(xd, torch.cos(angles).double(), torch.sin(angles).double(), pairs)
    angles = (positions.double() + shift)[:, None] * frequencies(d, base, exponent)  # (T, d/2)
    turn = torch.polar(torch.ones_like(angles), sign * angles)  # (T, d/2) exp(i m theta)
    if pairs != "halves":
        z = torch.view_as_complex(xd.reshape(*x.shape[:-1], d // 2, 2).contiguous()) * turn  # (..., T, d/2)
        return torch.view_as_real(z).flatten(-2)  # (..., T, d)
    return _rotated(xd, turn.real, turn.imag, pairs)


def _rotated(xd: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pairs: str) -> torch.Tensor:
    """x's pairs turned by the angles whose cosines and sines are given, (T, d/2) each."""
    d = xd.shape[-1]
    if pairs == "halves":
        first, second = xd[..., : d // 2], xd[..., d // 2:]
        return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)
    even, odd = xd[..., 0::2], xd[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


RELATIVE = "relative"
FLOAT32_ANGLES = N_("the angles were computed in float32: a position in the hundreds times a frequency keeps only a few "
                    "digits there. Compute positions * theta_i in float64, then give the cosines and sines x's dtype.")


def _relative_case(g: torch.Generator, T: int, d: int) -> Case:
    """Row 0 holds one query at every position, row 1 one key: their rotated scores must depend on m - n only."""
    query, key = torch.randn(d, generator=g), torch.randn(d, generator=g)
    x = torch.stack([query.expand(T, d), key.expand(T, d)]).clone()  # (2, T, d)
    positions = torch.arange(T) * 3 + 2  # evenly spaced positions, not starting at 0
    return Case(tr("x (2, {T}, {d}): row 0 one query, row 1 one key, each repeated at positions 2, 5, 8, ...").format(
        T=T, d=d), (x, positions), {}, RELATIVE)


class ApplyRopeCheck(Check):
    function = "apply_rope"
    oracle = N_("the rotation written with complex numbers, in float64, and the scores' dependence on m - n")
    trained_through = True  # queries and keys are learned through it
    follows_device = True
    hints = (Hint("RuntimeError", N_("Mind the shapes: the angles are (T, d/2), one per position and pair, and the "
                                     "pairs of x are x[..., 0::2] and x[..., 1::2], (..., T, d/2) each; they broadcast "
                                     "against each other."),
                  containing=("must match the size", "shape")),)

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(shape, positions, base=None, dtype=torch.float32, tag=""):
            x = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
            kind = str(dtype).replace("torch.", "")
            shown = positions.tolist()
            where = (tr("positions {first}..{last}").format(first=shown[0], last=shown[-1]) if len(shown) > 2
                     else tr("positions {positions}").format(positions=shown))
            label = f"x {tuple(shape)} {kind}, {where}" + ("" if base is None else f", base={base:g}")
            return Case(label, (x, positions), {} if base is None else {"base": base}, tag)

        out = [
            case((6, 8), torch.arange(6)),
            case((2, 3, 5, 16), torch.arange(7, 12)),  # a cache's later positions
            case((4, 32), torch.arange(100, 104), base=500.0),
            case((2, 9, 64), torch.arange(0, 900, 100), dtype=torch.float64),
            _relative_case(g, 12, 16),
            case((3, 7), torch.arange(3), tag=INVALID),
        ]
        if hidden:
            T, d = draw(g, 3, 12), 2 * draw(g, 2, 12)
            start = draw(g, 0, 50)
            out += [
                case((draw(g, 1, 3), T, d), torch.arange(start, start + T)),
                case((2, 2, T, d), torch.arange(T) * draw(g, 2, 5), base=float(draw(g, 50, 5000)), dtype=torch.float64),
                _relative_case(g, draw(g, 6, 14), 2 * draw(g, 3, 10)),
                case((T, 2), torch.arange(T)),
                case((T, 2 * draw(g, 2, 5) + 1), torch.arange(T), tag=INVALID),
            ]
        return out

    def _expected(self, case: Case) -> torch.Tensor:
        x, positions = case.args
        return rope(x, positions, case.kwargs.get("base", 10000.0))

    @rule("a tensor of x's shape")
    def _shape(self, case: Case, result: Any) -> None:
        what = tr("`{function}`'s result").format(function="apply_rope")
        y = expect_tensor(result, what, case)
        x = case.args[0]
        if tuple(y.shape) == (*x.shape[:-1], x.shape[-1] // 2, 2):
            raise CheckFailed(tr("`apply_rope`'s result has shape {shape} on the case {case}: the pairs "
                                 "were stacked on a new last axis and left there. Put them back in their places: "
                                 ".flatten(-2) gives (..., T, d).").format(shape=tuple(y.shape), case=case.label))
        expect_shape(y, x.shape, what, case, tr("A rotation keeps the shape of x: (..., T, d)."))

    @rule("the score depends on m - n only")
    def _relative(self, case: Case, y: torch.Tensor) -> None:
        if case.tag != RELATIVE:
            return
        scores = y[0].double() @ y[1].double().T  # (T, T): the query at position m against the key at n
        T = scores.shape[0]
        for offset in range(-(T - 1), T):
            along = torch.diagonal(scores, offset=offset)
            if not matches(along, along[:1].expand_as(along), y.dtype, scale=float(scores.abs().max()) / 10):
                broken = tr(
                    "`apply_rope`'s result breaks the property that defines rotary embedding on the case {case}: "
                    "the score of the query at one position with the key {offset} positions before it changes with "
                    "where the pair sits ({low} to {high}). Rotate each pair by an angle proportional to its position, "
                    "m * theta_i; then only the difference of two angles reaches the score."
                ) if offset <= 0 else tr(
                    "`apply_rope`'s result breaks the property that defines rotary embedding on the case {case}: "
                    "the score of the query at one position with the key {offset} positions after it changes with "
                    "where the pair sits ({low} to {high}). Rotate each pair by an angle proportional to its position, "
                    "m * theta_i; then only the difference of two angles reaches the score."
                )
                raise CheckFailed(broken.format(case=case.label, offset=abs(offset), low=f"{along.min().item():.4g}",
                                                high=f"{along.max().item():.4g}"))

    @rule("the rotation of each pair")
    def _values(self, case: Case, y: torch.Tensor) -> None:
        x, positions = case.args
        base = case.kwargs.get("base", 10000.0)
        angles = positions.double()[:, None] * frequencies(x.shape[-1], base)  # (T, d/2)
        if x.dtype == torch.float64 and not matches(y, self._expected(case)) and matches(
                y, rope(x, positions, base, angles_in=torch.float32), torch.float32):
            # the float32 angles are rounded as the learner rounds them only to float32's tolerance
            raise named_failure(tr("`{function}`'s result is wrong on the case {case}: ").format(
                function="apply_rope", case=case.label), [tr(FLOAT32_ANGLES)], None)
        diagnoses = [
            (lambda: rope(x, positions, base, pairs="halves"),
             tr("the features were paired as (i, i + d/2), the rotate-half convention of some libraries; this "
                "exercise pairs neighbours, (0, 1), (2, 3), ...: x[..., 0::2] with x[..., 1::2].")),
            (lambda: rope(x, positions, base, exponent=1.0),
             tr("the frequencies are base ** (-i / d); the formula's are base ** (-2i / d), i = 0 .. d/2 - 1.")),
            (lambda: rope(x, positions, base, sign=-1.0),
             tr("each pair was turned the other way: x'_2i = x_2i cos - x_2i+1 sin, x'_2i+1 = x_2i sin + x_2i+1 cos.")),
            (lambda: rope(x, torch.arange(len(positions)), base),
             tr("the rows were rotated by their index 0 .. T-1, not by `positions`: a cache adds tokens at later "
                "positions, which the argument gives.")),
            (lambda: rope(x, positions, 10000.0),
             tr("the base was 10000, not the `base` argument ({base}).").format(base=f"{base:g}")),
            (lambda: rope(x, positions, base, shift=1),
             tr("every position was moved by one: the token at position m turns by m * theta_i.")),
            (lambda: x.double() + torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1).flatten(-2),
             tr("a sinusoid was added to x, as chapter 6 adds its encoding; rotary embedding multiplies each pair by "
                "a rotation matrix.")),
        ]
        expect_close(y, self._expected(case), tr("`{function}`'s result").format(function="apply_rope"), case, diagnoses,
                     scale=float(case.args[0].abs().max()))

    rules = (_shape, _relative, _values)

    def stages(self, case: Case) -> list[Stage]:
        if case.tag == INVALID:
            return []
        x, positions = case.args
        d = x.shape[-1]
        theta = frequencies(d, case.kwargs.get("base", 10000.0))
        angles = positions.double()[:, None] * theta  # (T, d/2)
        xd = x.double()
        even, odd = xd[..., 0::2], xd[..., 1::2]
        cos, sin = torch.cos(angles), torch.sin(angles)
        return [Stage.of(tr("the frequencies theta_i = base ** (-2i / d), (d/2,)"), theta),
                Stage.of(tr("the angles positions * theta_i, (T, d/2)"), angles),
                Stage.of(tr("the cosines of the angles"), cos), Stage.of(tr("the sines of the angles"), sin),
                Stage.of(tr("the even features x[..., 0::2]"), even), Stage.of(tr("the odd features x[..., 1::2]"), odd),
                Stage.of(tr("the rotated even features, x_2i cos - x_2i+1 sin"), even * cos - odd * sin),
                Stage.of(tr("the rotated odd features, x_2i sin + x_2i+1 cos"), even * sin + odd * cos),
                # the solution's way back: each pair stacked on a new last axis, which a flatten then removes
                Stage.of(tr("the rotated pairs, (..., T, d/2, 2)"),
                         torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)),
                Stage.of(tr("the rotated x, (..., T, d)"), self._expected(case))]


STATED = {
    "apply_rope": (
        Stated("neighbouring features are paired", "positions 0..5", "paired as (i, i + d/2)"),
        Stated("theta_i = base ** (-2i / d)", "positions 0..5", "base ** (-i / d)"),
        Stated("rows are rotated by `positions`", "positions 7..11", "not by `positions`"),
        Stated("the base is the argument", "base=500", "not the `base` argument"),
        Stated("the angles are computed in float64", "float64, positions 0..800", "computed in float32"),
        Stated("the score depends on m - n only", RELATIVE, "m * theta_i"),
        Stated("an odd d raises ValueError", INVALID, "raise ValueError"),
    ),
}
