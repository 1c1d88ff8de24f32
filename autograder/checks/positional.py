"""Chapter 6 checks: the sinusoidal positional encoding and the embedding layer that adds it.

Oracle: the closed form of the paper (section 3.5), evaluated in float64 here,

    PE(pos, 2i) = sin(pos / 10000^(2i / d_model)),   PE(pos, 2i + 1) = cos(pos / 10000^(2i / d_model)),

and its properties: values in [-1, 1], column 0 is sin(pos), column 1 is cos(pos), no two
positions share an encoding, and PE(pos + k) is a fixed rotation M_k of PE(pos).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ..framework import (
    Case,
    Check,
    CheckFailed,
    Hint,
    ModuleResult,
    Stage,
    Stated,
    draw,
    expect_finite,
    expect_shape,
    expect_tensor,
    module_output,
    named_failure,
    rule,
)
from ..messages import N_, tr
from . import state_mismatch

BASE = 10000.0

# A learner computes the table in float32. The error of an angle pos * omega then grows with
# pos (a few units in the last place of a number near pos), so the tolerance does too: about
# 2e-7 per position covers every float32 formulation we measured (exp/log, pow, a Python loop)
# with a margin, and is still thousands of times smaller than any real mistake.
ATOL = 1e-5
ATOL_PER_POSITION = 2e-7
RTOL = 1e-5
#: the visible case of the precision note, and how far from the closed form its table may be: a float64
#: table rounded to float32 is within 6e-8, one whose angles were float32 about 1e-4 at the last positions
PRECISE_MAX_LEN = 4096
PRECISE = 1e-6


# ----------------------------------------------------------------------------------------
# the closed form and the tables that known mistakes produce (all float64)
# ----------------------------------------------------------------------------------------


def _table(
    max_len: int,
    d_model: int,
    *,
    base: float = BASE,
    exponent: Callable[[torch.Tensor], torch.Tensor] | None = None,
    first_position: int = 0,
    swap: bool = False,
    multiply: bool = False,
    with_angle: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The sinusoidal table (max_len, d_model), interleaved; keywords reproduce mistakes.

    ``exponent(j)`` gives, for each column index j, the numerator n of the exponent n / d_model;
    the paper's is 2i = j - j % 2 for both columns of the pair (2i, 2i + 1).
    """
    pos = torch.arange(first_position, first_position + max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    j = torch.arange(d_model, dtype=torch.float64)  # (d_model,)
    numerator = (j - j % 2) if exponent is None else exponent(j)
    scale = base ** (numerator / d_model)  # (d_model,)
    angle = pos * scale if multiply else pos / scale  # (max_len, d_model)
    even = (torch.arange(d_model) % 2 == 0)[None, :]  # (1, d_model)
    if swap:
        even = ~even
    table = torch.where(even, torch.sin(angle), torch.cos(angle))
    return (table, angle) if with_angle else table


def closed_form(max_len: int, d_model: int) -> torch.Tensor:
    """PE of the paper, (max_len, d_model) float64; for odd d_model the last column is a sin."""
    return _table(max_len, d_model)


def _halves(max_len: int, d_model: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every sin first, then every cos (concatenated instead of interleaved), and the angles."""
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(d_model / 2),)
    angle = pos / BASE ** (two_i / d_model)  # (max_len, ceil(d_model / 2))
    angles = torch.cat([angle, angle[:, : d_model // 2]], dim=-1)  # (max_len, d_model)
    return torch.cat([torch.sin(angle), torch.cos(angle[:, : d_model // 2])], dim=-1), angles


def _rotation_error(pe: torch.Tensor, k: int) -> float:
    """How far PE(pos + k) is from M_k PE(pos), over every pos and every complete (sin, cos) pair.

    M_k is block diagonal: for the frequency omega_i of the pair (2i, 2i + 1) its block is
    [[cos k omega_i, sin k omega_i], [-sin k omega_i, cos k omega_i]], the same for every pos.
    """
    max_len, d_model = pe.shape
    pairs = d_model // 2
    omega = BASE ** (-torch.arange(0, 2 * pairs, 2, dtype=torch.float64) / d_model)  # (pairs,)
    c, s = torch.cos(k * omega), torch.sin(k * omega)  # (pairs,)
    x = pe[: max_len - k, 0 : 2 * pairs : 2]  # (max_len - k, pairs): the sin columns at pos
    y = pe[: max_len - k, 1 : 2 * pairs : 2]  # (max_len - k, pairs): the cos columns at pos
    shifted_x = c * x + s * y  # the first row of each block times (sin, cos)
    shifted_y = -s * x + c * y
    target = pe[k:, : 2 * pairs]  # (max_len - k, 2 * pairs)
    predicted = torch.stack([shifted_x, shifted_y], dim=-1).flatten(-2)  # (max_len - k, 2 * pairs)
    return (predicted - target).abs().max().item()


def _tolerance(expected: torch.Tensor, positions: torch.Tensor, factor: float = 1.0) -> torch.Tensor:
    """Elementwise tolerance for a float32 result that contains the encoding of ``positions``."""
    return factor * (ATOL + ATOL_PER_POSITION * positions) + RTOL * expected.abs()


def _close(actual: torch.Tensor, expected: torch.Tensor, tol: torch.Tensor) -> bool:
    if actual.shape != expected.shape:
        return False
    return bool(((actual.double() - expected).abs() <= tol).all())


def _worst(actual: torch.Tensor, expected: torch.Tensor) -> str:
    diff = (actual.double() - expected).abs()
    index = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
    return tr(
        "the largest difference is {diff} at index {index}: "
        "you returned {got} where {expected} was expected"
    ).format(diff=f"{diff.max().item():.3g}", index=index, got=f"{actual[index].item():.6g}",
             expected=f"{expected[index].item():.6g}")


# ----------------------------------------------------------------------------------------
# sinusoidal_encoding
# ----------------------------------------------------------------------------------------


ODD_HINT = N_(
    "For odd d_model there is one more sin column than cos columns: pe[:, 0::2] has (d_model + 1) // 2 "
    "columns but pe[:, 1::2] only d_model // 2, so give the cosines the first d_model // 2 frequencies "
    "(the last column is a sin without a cos partner)."
)


def _closed_form_of(case: Case) -> torch.Tensor:
    return closed_form(*case.args)


class SinusoidalEncodingCheck(Check):
    function = "sinusoidal_encoding"
    invalid_hint = N_(
        "a length or a width below 1 should raise ValueError with a message that says what is wrong: "
        "`raise ValueError(...)`, not an assert or another exception type."
    )
    invalid_returned = N_(
        "{name} returned {got} on the case {label}: a table needs at least one position and one feature, so raise "
        "ValueError instead (an empty table would only fail later, far from the cause)."
    )
    oracle = N_("the closed form sin/cos(pos / 10000^(2i/d_model)) in float64")
    hints = (Hint("RuntimeError", ODD_HINT, when=lambda case, result: case.args[1] % 2 == 1),)

    def cases(self, hidden: bool) -> list[Case]:
        def case(max_len: int, d_model: int, tag: str = "") -> Case:
            return Case(f"max_len={max_len}, d_model={d_model}", (max_len, d_model), {}, tag)

        out = [
            case(50, 16),
            case(12, 8),
            case(100, 32),
            case(9, 5),
            case(1, 4),
            case(20, 1),
            # long: the instructions' precision note. Angles near 4096 keep about 1e-4 in float32 and 1e-12 in
            # float64, so only this case tells a table computed in float64 and converted at the end from one
            # computed in float32 (every other case accepts both: ATOL_PER_POSITION)
            Case(tr("max_len={max_len}, d_model=8 (long: its later angles need float64)").format(
                max_len=PRECISE_MAX_LEN), (PRECISE_MAX_LEN, 8), {}, "precision"),
            case(0, 8, "invalid"),
            case(6, 0, "invalid"),
        ]
        if hidden:
            g = self.generator(hidden)
            out += [
                case(draw(g, 200, 400), 2 * draw(g, 8, 16)),  # long: the later positions' precision
                case(draw(g, 20, 50), 2 * draw(g, 2, 7) + 1),  # odd d_model: the last column is a sine
                case(draw(g, 2, 5), 2),
                case(draw(g, 40, 80), 2 * draw(g, 48, 80)),  # wide: the slowest frequencies
                case(1, 1),
                case(draw(g, 250, 300), 2 * draw(g, 2, 4) + 1),
                case(2, 2 * draw(g, 1, 3) + 1),
                case(-3, 4, "invalid"),
                case(4, -2, "invalid"),
            ]
        return out

    def stages(self, case: Case) -> list[Stage]:
        max_len, d_model = case.args
        position = torch.arange(max_len, dtype=torch.float64)
        two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # the values 2i
        exponent = two_i / d_model
        frequency = torch.pow(10000.0, -exponent)  # 1 / 10000^(2i/d_model)
        angle = position.unsqueeze(1) * frequency  # (max_len, ceil(d_model / 2))
        return [
            Stage(tr("the positions 0 .. max_len - 1"), (position, position.unsqueeze(1))),
            Stage(tr("the even column indices 2i"), (two_i,)),
            Stage(tr("the exponents 2i / d_model"), (exponent,)),
            Stage(tr("the powers 10000^(2i/d_model)"), (1 / frequency, (1 / frequency).unsqueeze(0))),
            Stage(tr("the frequencies 1 / 10000^(2i/d_model)"), (frequency, frequency.unsqueeze(0))),
            Stage(tr("the angles pos / 10000^(2i/d_model), (max_len, ceil(d_model / 2))"), (angle,)),
            Stage(tr("the sines of the angles (the even columns)"), (torch.sin(angle),)),
            Stage(tr("the cosines of the angles (the odd columns)"), (torch.cos(angle[:, : d_model // 2]),)),
            Stage(tr("the table, sines in the even columns and cosines in the odd ones"),
                  (closed_form(max_len, d_model),)),
        ]

    NAME = N_("`sinusoidal_encoding`'s table")

    @rule("shape (max_len, d_model)")
    def _shape(self, case: Case, result: Any) -> None:
        max_len, d_model = case.args
        name = tr(self.NAME)
        pe = expect_tensor(result, name, case)
        if tuple(pe.shape) == (d_model, max_len) and max_len != d_model:
            raise CheckFailed(tr(
                "{name} has shape {shape} on the case {case}: rows and columns are swapped. "
                "One row per position, one column per feature: (max_len, d_model)."
            ).format(name=name, shape=tuple(pe.shape), case=case.label))
        if tuple(pe.shape) == (1, max_len, d_model):
            raise CheckFailed(tr(
                "{name} has shape {shape} on the case {case}: return the 2-D table (max_len, d_model), "
                "without a batch axis; adding pe[:T] to a (B, T, d_model) batch broadcasts over the batch by itself."
            ).format(name=name, shape=tuple(pe.shape), case=case.label))
        expect_shape(pe, (max_len, d_model), name, case,
                     tr("One row per position, one column per feature: (max_len, d_model)."))

    @rule("float32")
    def _float32(self, case: Case, pe: torch.Tensor) -> None:
        name = tr(self.NAME)
        if pe.dtype != torch.float32:
            raise CheckFailed(tr(
                "{name} has dtype {dtype} on the case {case}; return float32, the "
                "dtype of the embeddings it is added to (compute in float64 if you like, then call .float())."
            ).format(name=name, dtype=str(pe.dtype).replace('torch.', ''), case=case.label))

    @rule("finite, within [-1, 1]")
    def _bounded(self, case: Case, pe: torch.Tensor) -> None:
        name = tr(self.NAME)
        expect_finite(pe, name, case, tr("sin and cos are finite: look for a division by zero in the exponent."))
        if pe.abs().max() > 1.0 + 1e-6:
            raise CheckFailed(tr(
                "{name} contains {value} on the case {case}, but sin and cos lie in [-1, 1]: "
                "return sin(angle) and cos(angle), not the angles pos / 10000^(2i/d_model) themselves."
            ).format(name=name, value=f"{pe.abs().max().item():.4g}", case=case.label))

    @rule("values")
    def _values(self, case: Case, pe: torch.Tensor) -> None:
        max_len, d_model = case.args
        name = tr(self.NAME)
        expected = self.worked_out(case, _closed_form_of)
        positions = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
        tol = _tolerance(expected, positions)
        agrees = _close(pe, expected, tol)
        explaining = []
        for mistaken, message in [] if agrees else self._diagnoses(max_len, d_model):
            candidate, angle = mistaken()
            # A float32 angle is only as exact as its size allows: large angles need a wider margin.
            candidate_tol = ATOL + 4 * ATOL_PER_POSITION * angle.abs() + RTOL * candidate.abs()
            if not _close(candidate, expected, tol) and _close(pe, candidate, candidate_tol):
                explaining.append(message)
        plain = self._broken_property(case, pe, expected, positions, tol) or (
            "" if agrees else tr("{name} is wrong on the case {case}: {worst}.").format(
                name=name, case=case.label, worst=_worst(pe, expected)))
        if explaining:
            raise named_failure(tr("{name} is wrong on the case {case}: ").format(name=name, case=case.label),
                                explaining, plain)
        if plain:
            raise CheckFailed(plain)

    def _broken_property(self, case: Case, pe: torch.Tensor, expected: torch.Tensor, positions: torch.Tensor,
                         tol: torch.Tensor) -> str:
        """The first property of the closed form that ``pe`` breaks, in words that say where to look; "" if none."""
        max_len, d_model = case.args
        name = tr(self.NAME)
        p = pe.double()
        pos = positions[:, 0]
        if not _close(p[:, 0], torch.sin(pos), tol[:, 0]):
            return tr(
                "{name}'s column 0 is not sin(pos) on the case {case}: for 2i = 0 the divisor "
                "10000^(2i/d_model) is 1, so column 0 must be sin(0), sin(1), sin(2), ... "
                "({worst})."
            ).format(name=name, case=case.label, worst=_worst(p[:, :1], torch.sin(pos)[:, None]))
        if d_model > 1 and not _close(p[:, 1], torch.cos(pos), tol[:, 1]):
            return tr(
                "{name}'s column 1 is not cos(pos) on the case {case}: columns 0 and 1 form the first pair "
                "(2i = 0), so column 1 must be cos(0), cos(1), cos(2), ... "
                "({worst})."
            ).format(name=name, case=case.label, worst=_worst(p[:, 1:2], torch.cos(pos)[:, None]))
        if max_len > 1:
            gaps = torch.cdist(p, p)  # (max_len, max_len)
            # Only pairs of rows that the paper's table keeps well apart (one column of sin(pos)
            # alone, d_model = 1, can bring two far positions close together).
            merged = (gaps < 1e-3) & (torch.cdist(expected, expected) > 1e-2)
            if merged.any():
                a, b = (int(i) for i in merged.nonzero()[0])
                return tr(
                    "{name} gives positions {first} and {second} the same encoding on the case {case}: "
                    "every position must get its own row, or the model cannot tell them apart."
                ).format(name=name, first=min(a, b), second=max(a, b), case=case.label)
        for k in (1, 3, 7):
            if d_model >= 2 and k < max_len and _rotation_error(p, k) > 1e-3 + ATOL_PER_POSITION * max_len:
                return tr(
                    "{name} on the case {case}: PE(pos + {k}) is not the rotation M_{k} PE(pos). Every pair of "
                    "columns (2i, 2i + 1) must hold (sin, cos) of the same angle pos / 10000^(2i/d_model); "
                    "{worst}."
                ).format(name=name, case=case.label, k=k, worst=_worst(p, expected))
        return ""

    @rule("angles computed in float64")
    def _precision(self, case: Case, pe: torch.Tensor) -> None:
        """A table that agrees with the closed form only as far as float32 angles allow (the values rule)
        but not as far as a float64 table rounded to float32 does: its angles were computed in float32."""
        if case.tag != "precision":
            return
        gap = (pe.double() - self.worked_out(case, _closed_form_of)).abs()
        if gap.max() <= PRECISE:
            return
        position, column = (int(i) for i in (gap == gap.max()).nonzero()[0])
        raise CheckFailed(tr(
            "`sinusoidal_encoding`'s table is right only to float32 precision on the case {case}: at "
            "position {position}, column {column} it is off by {gap}, where a table computed in "
            "float64 and converted at the end is off by less than {precise}. An angle near {position} keeps only "
            "about four decimals in float32: compute the positions, the frequencies and the angles in float64 "
            "(dtype=torch.float64), and call .float() on the finished table, as the instructions' precision note says."
        ).format(case=case.label, position=position, column=column, gap=f"{gap.max().item():.2g}",
                 precise=f"{PRECISE:g}"))

    rules = (_shape, _float32, _bounded, _values, _precision)

    @staticmethod
    def _diagnoses(max_len: int, d_model: int) -> list[tuple[Callable[[], tuple[torch.Tensor, torch.Tensor]], str]]:
        """(what a known mistake returns and its angles, what to tell the learner)."""
        return [
            (lambda: _table(max_len, d_model, with_angle=True, swap=True),
             tr("sin and cos are swapped: the even columns (0, 2, 4, ...) take sin and the odd columns take cos.")),
            (lambda: _table(max_len, d_model, with_angle=True, exponent=lambda j: j),
             tr("the odd columns used their own index in the exponent (j / d_model with j the column). Both columns "
                "of a pair share one frequency: column 2i + 1 uses the exponent 2i / d_model of its even partner, "
                "i.e. j - j % 2, or torch.arange(0, d_model, 2) used for the sin and the cos columns alike.")),
            (lambda: _table(max_len, d_model, with_angle=True, exponent=lambda j: (j - j % 2) / 2),
             tr("the exponent was i / d_model with i the pair index (column // 2). The paper's exponent is "
                "2i / d_model, the even column index over d_model: torch.arange(0, d_model, 2) / d_model.")),
            (lambda: _table(max_len, d_model, with_angle=True, exponent=lambda j: 2 * j),
             tr("the exponent used twice the column index, 2j / d_model. In the formula i counts pairs, so "
                "column j = 2i (or 2i + 1) has the exponent 2i / d_model = (j - j % 2) / d_model.")),
            (lambda: _table(max_len, d_model, with_angle=True, base=1000.0),
             tr("the base is 10000, not 1000: the divisor is 10000^(2i/d_model).")),
            (lambda: _table(max_len, d_model, with_angle=True, base=100000.0),
             tr("the base is 10000, not 100000: the divisor is 10000^(2i/d_model).")),
            (lambda: _table(max_len, d_model, with_angle=True, base=math.e),
             tr("the divisor is 10000^(2i/d_model), but you used e^(2i/d_model): with exp(), the exponent must be "
                "multiplied by log(10000).")),
            (lambda: _table(max_len, d_model, with_angle=True, first_position=1),
             tr("positions start at 1; they run from 0 to max_len - 1 (torch.arange(max_len)), so row 0 is "
                "sin(0) = 0, cos(0) = 1, ...")),
            (lambda: _halves(max_len, d_model),
             tr("all the sines fill the first half of the columns and all the cosines the second half; the paper "
                "interleaves them: column 2i is a sin and column 2i + 1 the cos of the same angle (pe[:, 0::2] and "
                "pe[:, 1::2]).")),
            (lambda: _table(max_len, d_model, with_angle=True, multiply=True),
             tr("pos was multiplied by 10000^(2i/d_model); divide by it (or multiply by 10000^(-2i/d_model): "
                "mind the minus sign in exp(-2i * log(10000) / d_model)).")),
        ]


# ----------------------------------------------------------------------------------------
# PositionalEmbedding
# ----------------------------------------------------------------------------------------


SHAPE_HINT = N_(
    "tokens has shape (B, T); the encoding to add is pe[:T], shape (T, d_model), which broadcasts over the "
    "batch: slice the table by the sequence length T = tokens.shape[1], not by the batch size tokens.shape[0]."
)


class PositionalEmbeddingCheck(Check):
    function = "PositionalEmbedding"
    result_dtype = None  # float32 like its embedding, whatever the table: judged with its own message
    trained_through = True  # a model learns through it: gradients must reach what it was made from
    oracle = N_("embedding weight[tokens] * sqrt(d_model) + the closed-form encoding, in float64")
    invalid_hint = N_(
        "its sequence is longer than max_len. Check the length yourself at the start of forward and raise ValueError "
        "with a clear message (say which T and which max_len), instead of letting a shape error happen later."
    )
    invalid_returned = N_(
        "{name} returned a result on the case {label}, but the sequence is longer than the table's max_len "
        "positions: raise ValueError (saying T and max_len) when T > max_len, rather than quietly using a shorter or "
        "made-up encoding."
    )
    hints = (
        Hint("AttributeError", lambda name, case, result: tr(
            "{name}'s `pe` is not a buffer ({case} raised AttributeError: {message}): a tensor stored as "
            "a plain attribute stays behind when the module moves, so model.to('cuda') or model.double() would leave "
            "the table on the CPU in float32. Register it: "
            "self.register_buffer('pe', sinusoidal_encoding(max_len, d_model), persistent=False).").format(
                name=name, case=case.label, message=result.message),
            containing="not a buffer", when=lambda case, result: case.tag == "buffer", whole=True),
        Hint("AttributeError", lambda name, case, result: tr(
            "{name} has no buffer named `pe` ({case} raised AttributeError: {message}): register the "
            "table in __init__ with self.register_buffer('pe', sinusoidal_encoding(max_len, d_model), "
            "persistent=False).").format(name=name, case=case.label, message=result.message),
            when=lambda case, result: case.tag == "buffer", whole=True),
        Hint("StateMismatch", lambda name, case, result: tr(
            "{name}'s parameters do not match the exercise on the case {case}: it has parameters the exercise "
            "does not ask for: pe. The table is fixed, not learned: register it with "
            "self.register_buffer('pe', ..., persistent=False), not as an nn.Parameter.").format(
                name=name, case=case.label),
            when=lambda case, result: "pe" in state_mismatch(result).unexpected, whole=True),
        Hint("RuntimeError", SHAPE_HINT, containing=("size of tensor", "must match")),
    )

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(vocab: int, d_model: int, B: int, T: int, max_len: int | None = 40, dropout: float = 0.1,
                 train: bool = False, tag: str = "") -> Case:
            init = {"vocab_size": vocab, "d_model": d_model, "dropout": dropout}
            if max_len is not None:
                init["max_len"] = max_len
            # A small initialisation, as when the embedding is shared with the output layer: the
            # sqrt(d_model) scale then matters, and a missing one is visible.
            weight = torch.randn(vocab, d_model, generator=g) / math.sqrt(d_model)
            tokens = torch.randint(0, vocab, (B, T), generator=g)
            mode = tr("train mode") if train else tr("eval mode")
            label = (f"vocab_size={vocab}, d_model={d_model}, dropout={dropout}, "
                     f"max_len={5000 if max_len is None else max_len}, tokens ({B}, {T}), {mode}")
            return Case(label, (tokens,), {}, tag, init=init, state={"embedding.weight": weight},
                        collect=("pe",), train=train)

        out = [
            case(11, 16, B=2, T=7),
            case(20, 8, B=1, T=9, max_len=12),
            case(7, 12, B=3, T=6, max_len=6, tag="full-length"),
            case(13, 32, B=4, T=24, max_len=50, dropout=0.5, train=True),
            case(9, 8, B=2, T=10, max_len=8, tag="invalid"),
        ]
        # How the table is kept: a buffer (it follows the module's .to()), left out of state_dict().
        built = {"vocab_size": 11, "d_model": 16, "dropout": 0.1, "max_len": 40}
        weight = {"embedding.weight": torch.randn(11, 16, generator=g) / 4.0}
        out += [
            Case("PositionalEmbedding(vocab_size=11, d_model=16, max_len=40).get_buffer('pe')", ("pe",), {}, "buffer",
                 init=built, state=weight, method="get_buffer"),
            Case(tr("state_dict() of PositionalEmbedding(vocab_size=11, d_model=16, max_len=40)"), (),
                 {"destination": {}}, "state-dict", init=built, state=weight, method="state_dict"),
        ]
        if hidden:
            out += [
                case(30, 9, B=5, T=17, max_len=100),
                case(5, 24, B=2, T=3, max_len=None),
                case(17, 16, B=6, T=30, max_len=64, dropout=0.2, train=True),
                case(6, 8, B=3, T=5, max_len=20, dropout=0.0, train=True),
                case(10, 20, B=1, T=33, max_len=33, tag="full-length"),
                case(4, 8, B=1, T=2, max_len=1, tag="invalid"),
            ]
        return out

    def stages(self, case: Case) -> list[Stage]:
        if case.train or case.tag in ("buffer", "state-dict", "invalid"):
            return []
        (tokens,) = case.args
        d_model, T = case.init["d_model"], tokens.shape[1]
        embedded = case.state["embedding.weight"].double()[tokens]  # (B, T, d_model)
        scaled = embedded * math.sqrt(d_model)
        pe = _table(case.init.get("max_len", 5000), d_model)[:T]  # (T, d_model)
        return [Stage.of(tr("the embeddings of the tokens, embedding(tokens)"), embedded),
                Stage.of(tr("the embeddings times sqrt(d_model)"), scaled),
                Stage.of(tr("the positional encodings of the first T positions, pe[:T]"), pe),
                Stage.of(tr("their sum, embedding(tokens) * sqrt(d_model) + pe[:T]"), scaled + pe)]

    NAME = N_("`PositionalEmbedding`'s output")
    STORAGE = ("buffer", "state-dict")  # the cases that read the stored table, not the output

    @rule("the table stored as a non-persistent buffer")
    def _storage(self, case: Case, result: Any) -> None:
        if case.tag in self.STORAGE:
            self._judge_storage(case, result, case.init.get("max_len", 5000), case.init["d_model"])

    @rule("shape (B, T, d_model)")
    def _shape(self, case: Case, result: Any) -> None:
        if case.tag in self.STORAGE:
            return
        (tokens,) = case.args
        B, T = tokens.shape
        d_model = case.init["d_model"]
        name = tr(self.NAME)
        y = module_output(result, self.function, case)
        if tuple(y.shape) == (B, T, 2 * d_model):
            raise CheckFailed(tr(
                "{name} has shape {shape} on the case {case}: the encoding was concatenated to the "
                "embeddings. The paper adds it, element by element, so the output keeps d_model features: "
                "embedding * sqrt(d_model) + pe[:T]."
            ).format(name=name, shape=tuple(y.shape), case=case.label))
        expect_shape(y, (B, T, d_model), name, case, tr("One vector of d_model features per token: (B, T, d_model)."))

    @rule("float32, finite")
    def _float32(self, case: Case, result: Any) -> None:
        if case.tag in self.STORAGE:
            return
        y, name = result.output, tr(self.NAME)
        if y.dtype != torch.float32:
            raise CheckFailed(tr(
                "{name} has dtype {dtype} on the case {case}; it should be float32 "
                "like the embeddings: the table pe must be float32 too (sinusoidal_encoding returns float32)."
            ).format(name=name, dtype=str(y.dtype).replace('torch.', ''), case=case.label))
        expect_finite(y, name, case, "")

    @rule("values")
    def _values(self, case: Case, result: Any) -> None:
        if case.tag in self.STORAGE:
            return
        (tokens,) = case.args
        T = tokens.shape[1]
        y, d_model = result.output, case.init["d_model"]
        W = case.state["embedding.weight"].double()
        pe = closed_form(T + 1, d_model)  # one extra row, for the off-by-one diagnosis
        emb = W[tokens]  # (B, T, d_model)
        scale = math.sqrt(d_model)
        expected = emb * scale + pe[:T]  # (B, T, d_model)
        positions = torch.arange(T, dtype=torch.float64)[None, :, None]  # (1, T, 1)
        if case.train:
            self._judge_dropout(case, y, expected, emb * scale, pe[:T], positions, case.init["dropout"])
            return
        tol = _tolerance(expected, positions)
        if not _close(y, expected, tol):
            self._explain_wrong_output(case, y, expected, emb, pe, positions, tol, result)

    @rule("self.pe is the table")
    def _table(self, case: Case, result: Any) -> None:
        if case.tag not in self.STORAGE:
            self._judge_table(case, result, case.init.get("max_len", 5000), case.init["d_model"])

    rules = (_storage, _shape, _float32, _values, _table)

    def _explain_wrong_output(self, case, y, expected, emb, pe, positions, tol, result) -> None:
        name = tr("`PositionalEmbedding`'s output")
        d_model = case.init["d_model"]
        B, T = case.args[0].shape
        scale = math.sqrt(d_model)
        diagnoses = [
            (emb + pe[:T], tr("the embeddings were not multiplied by sqrt(d_model) (section 3.4 of the paper): "
                              "embedding(tokens) * math.sqrt(d_model) + pe[:T].")),
            ((emb + pe[:T]) * scale, tr("you scaled the sum; multiply only the embeddings by sqrt(d_model), then add "
                                        "the encoding, whose values must stay in [-1, 1].")),
            (emb + pe[:T] * scale, tr("the encoding was multiplied by sqrt(d_model) instead of the embeddings: "
                                      "embedding(tokens) * math.sqrt(d_model) + pe[:T].")),
            (emb / scale + pe[:T], tr("the embeddings were divided by sqrt(d_model); multiply them.")),
            (emb * d_model + pe[:T], tr("the embeddings were multiplied by d_model; the factor is its square root, "
                                        "sqrt(d_model).")),
            (emb * scale, tr("the positional encoding was not added: embedding(tokens) * math.sqrt(d_model) + pe[:T].")),
            (emb * scale + pe[1 : T + 1], tr("the encoding is off by one position: token t gets pe[t], starting at "
                                             "pe[0].")),
        ]
        if B == 1:
            diagnoses.append((emb * scale + pe[:1], tr("every position got the encoding of position 0, pe[:B] with "
                                                       "B = 1. {hint}").format(hint=tr(SHAPE_HINT))))
        explaining = [message for candidate, message in diagnoses if _close(y, candidate, _tolerance(candidate, positions))]
        plain = self._unexplained_output(case, y, expected, pe, positions, tol, result)
        if explaining:
            raise named_failure(tr("{name} is wrong on the case {case}: ").format(name=name, case=case.label),
                                explaining, plain)
        raise CheckFailed(plain)

    @staticmethod
    def _unexplained_output(case, y, expected, pe, positions, tol, result) -> str:
        """What to say of a wrong output that no known mistake explains: what it shows, or where it differs."""
        name = tr("`PositionalEmbedding`'s output")
        d_model, p = case.init["d_model"], case.init["dropout"]
        T = case.args[0].shape[1]
        if p > 0:
            zeroed = (y.double().abs() <= tol) & (expected.abs() > 1e-3)
            kept = (y.double() - expected / (1 - p)).abs() <= tol / (1 - p)
            if zeroed.any() and bool((zeroed | kept | (expected.abs() <= 1e-3)).all()):
                return tr(
                    "{name} is wrong on the case {case}: dropout is active in eval mode (some entries are zero "
                    "and the rest divided by 1 - p). Use the submodule self.dropout (nn.Dropout), which turns itself "
                    "off after module.eval(), rather than F.dropout(..., training=True)."
                ).format(name=name, case=case.label)
        table = None if result is None else result.attributes.get("pe")
        if isinstance(table, torch.Tensor) and tuple(table.shape[-2:]) == (case.init.get("max_len", 5000), d_model):
            flat = table.reshape(-1, d_model)[:T].double()
            if not _close(flat, pe[:T], _tolerance(pe[:T], positions[0])):
                return tr(
                    "{name} is wrong on the case {case} because self.pe is not the sinusoidal table: build it "
                    "with your sinusoidal_encoding(max_len, d_model), and pass its checks first."
                ).format(name=name, case=case.label)
        return tr("{name} is wrong on the case {case}: {worst}. "
                  "Expected dropout(embedding(tokens) * sqrt(d_model) + pe[:T]).").format(
                      name=name, case=case.label, worst=_worst(y, expected))

    def _judge_dropout(self, case, y, expected, scaled_emb, pe, positions, p) -> None:
        """Training mode: each entry is either dropped (0) or the eval value divided by 1 - p."""
        name = tr("`PositionalEmbedding`'s output")
        yd = y.double()
        tol = _tolerance(expected, positions, 1.0 / (1 - p))
        clear = expected.abs() > 1e-3  # entries that cannot be mistaken for a dropped one
        if p == 0:
            if _close(y, expected, tol):
                return
            dropped = (yd.abs() <= tol) & clear
            if dropped.any():
                raise CheckFailed(tr(
                    "{name} on the case {case}: {fraction} of the entries "
                    "were dropped, but with dropout=0.0 none should be. Build the dropout layer from the "
                    "constructor's argument, nn.Dropout(dropout), rather than a fixed probability."
                ).format(name=name, case=case.label, fraction=f"{dropped.sum().item() / clear.sum().item():.1%}"))
            self._explain_wrong_output(case, y, expected, scaled_emb / math.sqrt(case.init["d_model"]),
                                       closed_form(positions.shape[1] + 1, case.init["d_model"]), positions, tol, None)
        if _close(y, expected, _tolerance(expected, positions)):
            raise CheckFailed(tr(
                "{name} on the case {case} is exactly the eval-mode output: "
                "no entry was dropped. Apply self.dropout to the sum, dropout(embedding * sqrt(d_model) + pe[:T]) "
                "(section 5.4 of the paper)."
            ).format(name=name, case=case.label))
        kept = (yd - expected / (1 - p)).abs() <= tol
        dropped = yd.abs() <= tol
        if not bool((kept | dropped).all()):
            # Kept entries scaled by one common factor other than 1 / (1 - p): another probability.
            survivors = ~dropped & clear
            if survivors.any():
                ratio = yd[survivors] / expected[survivors]
                factor = ratio.median().item()
                if factor > 1 and (ratio - factor).abs().max().item() < 1e-3 * factor:
                    raise CheckFailed(tr(
                        "{name} on the case {case}: the kept entries were divided by {divisor}, i.e. "
                        "dropout with p = {got}, but the constructor asked for dropout={p}. Build the "
                        "dropout layer from the constructor's argument, nn.Dropout(dropout), rather than a fixed "
                        "probability."
                    ).format(name=name, case=case.label, divisor=f"{1 / factor:.3g}", got=f"{1 - 1 / factor:.3g}",
                             p=p))
            # Dropout before the addition: a dropped entry still holds the encoding.
            early_dropped = (yd - pe).abs() <= tol
            early_kept = (yd - (scaled_emb / (1 - p) + pe)).abs() <= tol
            if bool((early_dropped | early_kept).all()):
                raise CheckFailed(tr(
                    "{name} is wrong on the case {case}: dropout was applied to the embeddings "
                    "before the encoding was added, so dropped entries still hold pe. The paper applies dropout to "
                    "the sum: self.dropout(embedding(tokens) * sqrt(d_model) + pe[:T])."
                ).format(name=name, case=case.label))
            raise CheckFailed(tr(
                "{name} is wrong on the case {case}: each entry should be either 0 "
                "(dropped) or the eval-mode value divided by 1 - p, as nn.Dropout does to "
                "embedding(tokens) * sqrt(d_model) + pe[:T]; "
                "{worst} (if kept)."
            ).format(name=name, case=case.label, worst=_worst(y, expected / (1 - p))))
        fraction = (dropped & clear).sum().item() / max(1, clear.sum().item())
        n = clear.sum().item()
        if abs(fraction - p) > 4 * math.sqrt(p * (1 - p) / n) + 0.01:
            raise CheckFailed(tr(
                "{name} on the case {case}: {fraction} of the entries were dropped, but with dropout={p} "
                "about {percent} should be. Build the dropout layer from the constructor's argument, "
                "nn.Dropout(dropout), rather than a fixed probability."
            ).format(name=name, case=case.label, fraction=f"{fraction:.1%}", p=p, percent=f"{p:.0%}"))

    def _judge_storage(self, case: Case, result: Any, max_len: int, d_model: int) -> None:
        """The table is a buffer, and a non-persistent one: the embedding's weight is all state_dict() holds."""
        output = result.output if isinstance(result, ModuleResult) else result
        if case.tag == "buffer":
            table = expect_tensor(output, tr("`PositionalEmbedding`'s buffer pe"), case)
            if tuple(table.shape) != (max_len, d_model):
                raise CheckFailed(tr(
                    "`PositionalEmbedding`'s buffer pe has shape {shape} on the case {case}; keep "
                    "the table as sinusoidal_encoding returns it, (max_len, d_model) = {expected}."
                ).format(shape=tuple(table.shape), case=case.label, expected=(max_len, d_model)))
            return
        if not isinstance(output, dict):
            raise CheckFailed(tr("`PositionalEmbedding`'s state_dict() returned {type} on the case "
                                 "{case}: do not override state_dict.").format(type=type(output).__name__,
                                                                               case=case.label))
        names = sorted(output)
        if "pe" in names:
            raise CheckFailed(tr(
                "`PositionalEmbedding`'s state_dict() holds `pe` on the case {case}: the table was registered "
                "as a persistent buffer, so every checkpoint would carry a table that can always be recomputed (and "
                "loading a checkpoint made with another max_len would fail). Register it with "
                "self.register_buffer('pe', ..., persistent=False)."
            ).format(case=case.label))
        if names != ["embedding.weight"]:
            raise CheckFailed(tr(
                "`PositionalEmbedding`'s state_dict() holds {names} on the case {case}; the embedding's "
                "weight, embedding.weight, is all it should hold."
            ).format(names=names, case=case.label))

    def _judge_table(self, case: Case, result: ModuleResult, max_len: int, d_model: int) -> None:
        table = result.attributes.get("pe")
        if table is None:
            raise CheckFailed(tr(
                "`PositionalEmbedding` has no attribute `pe` on the case {case}: register the table in __init__ with "
                "self.register_buffer('pe', sinusoidal_encoding(max_len, d_model), persistent=False)."
            ).format(case=case.label))
        if not isinstance(table, torch.Tensor):
            raise CheckFailed(tr("`PositionalEmbedding`'s `pe` is a {type} on the case {case}, "
                                 "not a tensor: register the table with self.register_buffer.").format(
                                     type=getattr(table, 'type', type(table).__name__), case=case.label))
        if tuple(table.shape) != (max_len, d_model):
            raise CheckFailed(tr(
                "`PositionalEmbedding`'s buffer pe has shape {shape} on the case {case}; keep the table as "
                "sinusoidal_encoding returns it, (max_len, d_model) = {expected}, and slice it with pe[:T]."
            ).format(shape=tuple(table.shape), case=case.label, expected=(max_len, d_model)))
        rows = min(max_len, 64)  # the start of the table is enough to recognise it
        expected = closed_form(rows, d_model)
        positions = torch.arange(rows, dtype=torch.float64)[:, None]
        if not _close(table[:rows], expected, _tolerance(expected, positions)):
            raise CheckFailed(tr(
                "`PositionalEmbedding`'s buffer pe is not the sinusoidal table on the case {case}: build it with your "
                "sinusoidal_encoding(max_len, d_model); {worst}."
            ).format(case=case.label, worst=_worst(table[:rows], expected)))


CHECKS = [SinusoidalEncodingCheck, PositionalEmbeddingCheck]


# What the instructions state, and the visible case that holds a learner to it. The rules every graded
# function keeps (its arguments left unchanged, no view of them returned, the device followed, gradients
# reaching the embedding) are the base class's (Check.judge_effects) and are not repeated here. The
# precision note (compute in float64, convert at the end) is held by one long case only: every other
# case's tolerance grows with the position (ATOL_PER_POSITION), so that its message is about the value.
STATED = {
    "sinusoidal_encoding": (
        Stated("the table is float32", "max_len=50", "return float32"),
        Stated("the angles are computed in float64", "precision", "right only to float32 precision"),
        Stated("sines and cosines are interleaved", "max_len=50", "interleaves them"),
        Stated("each pair is the sine and cosine of the same angle, with exponent 2i", "max_len=50",
               "odd columns used their own index"),
        Stated("an odd d_model ends with a sine column", "d_model=5", "one more sin column than cos columns"),
        Stated("positions run from 0", "max_len=50", "positions start at 1"),
        Stated("max_len < 1 or d_model < 1 raises ValueError", "invalid", "raise ValueError instead"),
    ),
    "PositionalEmbedding": (
        Stated("the table is a buffer named pe", "buffer", "`pe` is not a buffer"),
        Stated("pe keeps the shape sinusoidal_encoding gives it", "buffer",
               "keep the table as sinusoidal_encoding returns it"),
        Stated("pe is not persistent: state_dict() leaves it out", "state-dict",
               "registered as a persistent buffer"),
        Stated("the embedding's weight is the only parameter", "state-dict", "register it with self.register_buffer"),
        Stated("the embeddings are multiplied by sqrt(d_model)", "tokens (2, 7)", "not multiplied by sqrt(d_model)"),
        Stated("dropout acts on the sum", "train mode", "before the encoding was added"),
        Stated("the table is sliced by the sequence length", "tokens (2, 7)",
               "slice the table by the sequence length"),
        Stated("T > max_len raises ValueError", "invalid", "raise ValueError"),
        Stated("a sequence of exactly max_len tokens fits", "full-length", "This case is valid"),
    ),
}
