"""Chapter 5 checks: subsequent_mask, DecoderLayer, Decoder.

Oracles: the closed form j <= i, ``torch.tril`` and ``nn.Transformer.generate_square_subsequent_mask``
for the mask; ``nn.TransformerDecoderLayer`` and ``nn.TransformerDecoder`` (post-norm, ReLU,
dropout off) loaded with each case's weights, in float64, for the layers. To *name* a wrong
answer, the functional decoder layer built from :mod:`autograder.oracles` recomputes what each
known mistake would have returned; its correct configuration is itself checked against
PyTorch's layers on every case. In training mode it is fed the very dropout masks the
learner's modules draw (:class:`autograder.oracles.Dropout`).

Properties, judged across pairs of cases: changing future target tokens never changes an
earlier position's output, and padded target or memory positions never leak into real outputs.
"""
from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from .. import oracles
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
    matches,
    module_output,
    named_failure,
    raised_text,
    rule,
    tagged_pair,
    where_it_differs,
)
from ..messages import N_, tr
from . import Mismatch, state_mismatch
from .encoder import fits_as_attn_mask, positional_padding_hint

FORBIDDEN_LAYERS = (
    "torch.nn.TransformerDecoderLayer",
    "torch.nn.TransformerDecoder",
    "torch.nn.MultiheadAttention",
    "torch.nn.Transformer",
    "torch.nn.functional.multi_head_attention_forward",
)

# ----------------------------------------------------------------------------------------
# subsequent_mask
# ----------------------------------------------------------------------------------------


class SubsequentMaskCheck(Check):
    function = "subsequent_mask"
    forbidden = ("torch.nn.Transformer.generate_square_subsequent_mask",
                 "torch.nn.modules.transformer._generate_square_subsequent_mask")
    invalid_hint = N_(
        "a negative size makes no sense, so raise ValueError with a message that says so: `raise ValueError(...)`."
    )
    invalid_returned = N_(
        "{name} returned a value on the case {label}; a negative size is a mistake by the caller: raise ValueError, "
        "so that it is caught rather than silently turned into a mask."
    )
    oracle = N_("the closed form j <= i, torch.tril and nn.Transformer.generate_square_subsequent_mask")
    hints = (Hint((), lambda name, case, result: tr(
        "{name} raised {error} ({message}) on the case {case}; an empty sequence is valid and has "
        "an empty mask: return a (0, 0) boolean tensor (torch.tril of a (0, 0) tensor gives exactly that). Only a "
        "negative size is an error.").format(name=name, error=result.type, message=raised_text(result), case=case.label),
        when=lambda case, result: case.tag == "empty", whole=True),)

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)
        # small sizes last: their mistakes look alike
        sizes = [4, 7, 1] if not hidden else [draw(g, 5, 12), draw(g, 13, 24), draw(g, 25, 40), 2, 3]
        out = [Case(f"size={n}", (n,)) for n in sizes]
        out.append(Case(tr("size=0 (an empty sequence)"), (0,), tag="empty"))
        out.append(Case("size=-3", (-3,), tag="invalid") if not hidden else Case("size=-1", (-1,), tag="invalid"))
        return out

    @rule("a (size, size) tensor")
    def _shape(self, case: Case, result: Any) -> None:
        (size,) = case.args
        m = expect_tensor(result, tr("`{function}`'s result").format(function=self.function), case)
        if m.dim() == 3 and tuple(m.shape) == (1, size, size):
            raise CheckFailed(tr(
                "`{function}` returned shape {shape} on the case {case}: it has an extra batch axis in "
                "front. Return (size, size); a (T_q, T_k) mask broadcasts against the (B, h, T_q, T_k) scores by itself."
            ).format(function=self.function, shape=tuple(m.shape), case=case.label))
        expect_shape(m, (size, size), tr("`{function}`'s result").format(function=self.function), case,
                     tr("The mask has one row per query and one column per key."))

    @rule("boolean")
    def _boolean(self, case: Case, m: torch.Tensor) -> None:
        if m.dtype == torch.bool:
            return
        if m.is_floating_point() and case.args[0] > 1 and bool((m == float("-inf")).any()):
            raise CheckFailed(tr(
                "`{function}` returned a float tensor of 0 and -inf on the case {case}: this is PyTorch's "
                "additive mask (what nn.Transformer.generate_square_subsequent_mask returns), added to the "
                "scores. The course's masks are boolean, True where a query may attend: return dtype torch.bool."
            ).format(function=self.function, case=case.label))
        kind = tr("a float tensor") if m.is_floating_point() else tr("an integer tensor")
        raise CheckFailed(tr(
            "`{function}` returned {kind} ({dtype}) on the case {case}: the course's masks are boolean "
            "(dtype torch.bool), True where a query may attend. Create it with dtype=torch.bool, or build it from "
            "a comparison such as j <= i, which is boolean already."
        ).format(function=self.function, kind=kind, dtype=m.dtype, case=case.label))

    @rule("True where j <= i")
    def _values(self, case: Case, m: torch.Tensor) -> None:
        (size,) = case.args
        expected = oracles.causal_mask(size)
        # The closed form agrees with PyTorch's own ways of building the same mask.
        assert torch.equal(expected, torch.tril(torch.ones(size, size, dtype=torch.bool)))
        assert torch.equal(expected, nn.Transformer.generate_square_subsequent_mask(size) == 0)
        if torch.equal(m, expected):
            return
        diagnoses = [
            (expected.T, tr("this is the upper triangle (j >= i): row i is the query, and it may attend to the keys "
                            "j <= i, so the True entries lie on and below the diagonal (torch.tril, not torch.triu).")),
            (oracles.causal_mask(size) & ~torch.eye(size, dtype=torch.bool),
             tr("the diagonal is False, so a position cannot attend to itself. Position i may attend to every j <= i, "
                "itself included: keep the diagonal (torch.tril's default diagonal=0, or j <= i rather than j < i).")),
            (~expected, tr("the mask is inverted: True must mark the keys a query MAY attend to (the course's "
                           "convention), not the blocked ones as nn.MultiheadAttention's boolean masks do.")),
            (torch.ones(size, size, dtype=torch.bool),
             tr("every entry is True, so nothing is hidden: the future positions (j > i) must be False.")),
            (torch.zeros(size, size, dtype=torch.bool),
             tr("every entry is False, so no position may attend to anything: True goes where j <= i.")),
        ]
        bad = (m != expected).nonzero()[0].tolist()
        plain = (tr("`{function}` is wrong on the case {case}: entry {entry} is {value} but query {query} may attend to "
                    "key {key}. The mask is True exactly where j <= i.") if expected[tuple(bad)] else
                 tr("`{function}` is wrong on the case {case}: entry {entry} is {value} but query {query} may not "
                    "attend to key {key}. The mask is True exactly where j <= i."))
        raise named_failure(
            tr("`{function}` is wrong on the case {case}: ").format(function=self.function, case=case.label),
            [message for wrong, message in diagnoses if torch.equal(m, wrong)],
            plain.format(function=self.function, case=case.label, entry=tuple(bad), value=bool(m[tuple(bad)]),
                         query=bad[0], key=bad[1]),
        )

    rules = (_shape, _boolean, _values)


# ----------------------------------------------------------------------------------------
# A functional decoder layer, able to make each known mistake on purpose
# ----------------------------------------------------------------------------------------


def layer_forward(
    state,
    x: torch.Tensor,
    memory: torch.Tensor,
    *,
    h: int,
    prefix: str = "",
    tgt_mask: torch.Tensor | None = None,
    tgt_key_padding_mask: torch.Tensor | None = None,
    memory_key_padding_mask: torch.Tensor | None = None,
    dropout: oracles.Dropout | None = None,
    self_mask: str = "given",  # "given" | "none" | "inverted"
    self_padding: str = "given",  # "given" | "none" | "inverted" | "as-attn-mask"
    cross_q: str = "x",  # where the cross-attention's queries come from: "x" | "memory"
    cross_kv: str = "memory",  # where its keys and values come from: "memory" | "x"
    cross_padding: str = "given",  # "given" | "none" | "inverted" | "as-attn-mask"
    cross_causal: bool = False,  # the mistake of giving tgt_mask to the cross-attention too
    cross_module: str = "cross_attn",
    order: tuple[str, ...] = ("self", "cross", "ffn"),
    norms: tuple[str, ...] = ("norm1", "norm2", "norm3"),
    wiring: str = "post",  # "post": norm(x + f(x)); "pre": x + f(norm(x)); "inner": x + norm(f(x)); "none": norm(f(x))
    dropout_at: str = "sublayer",  # where the residual dropout goes: "sublayer" | "sum" | "norm" | "none"
) -> torch.Tensor:
    """One decoder layer, computed in float64; the keyword arguments reproduce the mistakes learners make.

    ``dropout`` (training mode) draws the masks of every nn.Dropout the layer reaches, in the order
    the course's modules reach them: each attention's weights, then its residual dropout, and so on.
    A padding mask "as-attn-mask" was handed to the attention's attn_mask, as passing it as the fourth
    positional argument does: self_attn(x, x, x, tgt_key_padding_mask) loses tgt_mask on the way.
    """
    p = prefix
    x, memory = x.double(), memory.double()
    own_mask = {"given": tgt_mask, "none": None, "inverted": None if tgt_mask is None else ~tgt_mask}[self_mask]

    def masks(attn_mask, padding, rule):
        """The attention's keyword masks once ``rule`` has acted on the padding mask."""
        if rule == "as-attn-mask":
            return {"attn_mask": padding}
        kept = {"given": padding, "none": None, "inverted": None if padding is None else ~padding}[rule]
        return {"attn_mask": attn_mask, "key_padding_mask": kept}

    def self_attention(y):
        return oracles.multi_head_attention(
            state, y, y, y, h=h, prefix=f"{p}self_attn.", dropout=dropout,
            **masks(own_mask, tgt_key_padding_mask, self_padding))[0]

    def cross_attention(y):
        q = y if cross_q == "x" else memory
        kv = memory if cross_kv == "memory" else y
        padding = memory_key_padding_mask if cross_kv == "memory" else None
        return oracles.multi_head_attention(
            state, q, kv, kv, h=h, prefix=f"{p}{cross_module}.", dropout=dropout,
            **masks(tgt_mask if cross_causal else None, padding, cross_padding))[0]

    def feed_forward(y):
        return oracles.feed_forward(state, y, prefix=f"{p}feed_forward.", dropout=dropout)

    blocks = {"self": self_attention, "cross": cross_attention, "ffn": feed_forward}
    for block, norm in zip(order, norms):
        x = oracles.sublayer(state, x, blocks[block], norm=f"{p}{norm}", wiring=wiring, dropout=dropout,
                             dropout_at=dropout_at)
    return x


def decoder_layer_stages(case: Case, x: torch.Tensor, memory: torch.Tensor, prefix: str = "") -> list[Stage]:
    """The stages of one decoder layer in eval mode: each sub-layer's output, residual sum and norm."""
    m, h = _masks(case), case.init["h"]

    def self_attn(y):
        return oracles.multi_head_attention(case.state, y, y, y, h=h, prefix=f"{prefix}self_attn.",
                                            attn_mask=m["tgt_mask"], key_padding_mask=m["tgt_key_padding_mask"])[0]

    def cross_attn(y):
        return oracles.multi_head_attention(case.state, y, memory, memory, h=h, prefix=f"{prefix}cross_attn.",
                                            key_padding_mask=m["memory_key_padding_mask"])[0]

    def feed_forward(y):
        return oracles.feed_forward(case.state, y, prefix=f"{prefix}feed_forward.")

    return oracles.post_norm_stages(case.state, x, [
        ("self_attn", self_attn, f"{prefix}norm1"), ("cross_attn", cross_attn, f"{prefix}norm2"),
        ("feed_forward", feed_forward, f"{prefix}norm3")])


# What each known mistake of a decoder layer changes, and the words that name it.
LAYER_MISTAKES: list[tuple[dict, str]] = [
    (dict(self_mask="none"),
     N_("the self-attention ignored tgt_mask, so every target position saw the future ones. Pass it on: "
        "self_attn(x, x, x, attn_mask=tgt_mask, key_padding_mask=tgt_key_padding_mask).")),
    (dict(self_mask="inverted"),
     N_("tgt_mask was inverted before it reached the self-attention. The course's masks are already True where a "
        "query may attend, which is what MultiHeadAttention expects: pass tgt_mask as it is, without ~.")),
    (dict(self_padding="none"),
     N_("the self-attention ignored tgt_key_padding_mask, so padded target positions were attended to: pass "
        "key_padding_mask=tgt_key_padding_mask to self_attn.")),
    (dict(cross_padding="none"),
     N_("the cross-attention ignored memory_key_padding_mask, so padded source positions were attended to: pass "
        "key_padding_mask=memory_key_padding_mask to cross_attn.")),
    (dict(self_padding="inverted"),
     N_("tgt_key_padding_mask is inverted before it reaches the self-attention: it is True where a key IS padding, "
        "which is what MultiHeadAttention's key_padding_mask expects, so pass it on as it is, without ~.")),
    (dict(cross_padding="inverted"),
     N_("memory_key_padding_mask is inverted before it reaches the cross-attention: it is True where a key IS "
        "padding, which is what MultiHeadAttention's key_padding_mask expects, so pass it on as it is, without ~.")),
    (dict(cross_kv="x"),
     N_("the keys and values of the cross-attention came from the decoder (x) instead of the encoder's output: "
        "cross_attn(x, memory, memory, ...) takes its queries from x and its keys and values from memory.")),
    (dict(cross_kv="x", cross_padding="none"),
     N_("the keys and values of the cross-attention came from the decoder (x) instead of the encoder's output: "
        "cross_attn(x, memory, memory, ...) takes its queries from x and its keys and values from memory.")),
    (dict(cross_q="memory", cross_kv="x", cross_padding="none"),
     N_("the queries of the cross-attention came from memory and its keys and values from x: it is the other way "
        "round. The decoder asks (queries from x) and the encoder's output answers: cross_attn(x, memory, memory, ...).")),
    (dict(cross_causal=True),
     N_("the cross-attention was given tgt_mask too. The causal mask hides future *target* positions in the "
        "self-attention only; every target position may see the whole source, so cross_attn gets only "
        "key_padding_mask=memory_key_padding_mask.")),
    (dict(cross_module="self_attn"),
     N_("the cross-attention used self_attn's weights: it has its own projections, so call self.cross_attn.")),
    (dict(order=("self", "ffn", "cross")),
     N_("the sub-layers are in the wrong order: the feed-forward network came before the cross-attention. The order is "
        "masked self-attention, then cross-attention, then the feed-forward network.")),
    (dict(order=("cross", "self", "ffn")),
     N_("the sub-layers are in the wrong order: the cross-attention came before the masked self-attention. The order is "
        "masked self-attention, then cross-attention, then the feed-forward network.")),
    (dict(wiring="pre"),
     N_("this is the pre-norm arrangement, x + Sublayer(LayerNorm(x)). The paper (and this exercise) normalises after "
        "the residual addition, post-norm: x = LayerNorm(x + Sublayer(x)).")),
    (dict(wiring="inner"),
     N_("the LayerNorm was applied to the sub-layer's output before adding the residual, x + LayerNorm(Sublayer(x)); "
        "the paper normalises the sum: x = LayerNorm(x + Sublayer(x)).")),
    (dict(wiring="none"),
     N_("the residual connections are missing: each sub-layer's output is added to its input before the LayerNorm, "
        "x = LayerNorm(x + Sublayer(x)).")),
] + [
    (dict(norms=perm),
     N_("the LayerNorms are used in the wrong places (yours: {yours}): norm1 follows the self-attention, "
        "norm2 the cross-attention and norm3 the feed-forward network."))
    for perm in itertools.permutations(("norm1", "norm2", "norm3"))
    if perm != ("norm1", "norm2", "norm3")
]


# attn_mask is True where a query may attend; key_padding_mask is True at padding: the two are not interchangeable.
CROSS_PADDING_AS_ATTN_MASK = N_(
    "the padding mask reached `attn_mask` of the cross-attention (MultiHeadAttention's fourth positional argument "
    "is attn_mask): pass it by name, cross_attn(x, memory, memory, key_padding_mask=memory_key_padding_mask). "
    "attn_mask is True where a query may attend; key_padding_mask is True at padding."
)


SELF_PADDING_AS_ATTN_MASK = N_(
    "the self-attention ignored tgt_mask: MultiHeadAttention's fourth positional argument is attn_mask, so "
    "self_attn(x, x, x, tgt_key_padding_mask) hands the padding mask to attn_mask and tgt_mask is lost. Pass both "
    "by name: self_attn(x, x, x, attn_mask=tgt_mask, key_padding_mask=tgt_key_padding_mask)."
)


def _padding_mistakes(case: Case) -> list[tuple[dict, str]]:
    """A padding mask handed to an attention's attn_mask, where the case's shapes let that run (B equal to
    T_tgt, or no padding at all). In the self-attention, self_attn(x, x, x, tgt_key_padding_mask), the slip
    pushes tgt_mask out: on a case without target padding it gives what an ignored tgt_mask gives.
    """
    T = case.args[0].shape[1]
    found = []
    padding = case.kwargs.get("tgt_key_padding_mask")
    if padding is None or fits_as_attn_mask(padding, T):
        found.append((dict(self_padding="as-attn-mask"), SELF_PADDING_AS_ATTN_MASK))  # english: a name of the code
    if fits_as_attn_mask(case.kwargs.get("memory_key_padding_mask"), T):
        found.append((dict(cross_padding="as-attn-mask"), CROSS_PADDING_AS_ATTN_MASK))  # english: a name of the code
    return found


def _masks(case: Case) -> dict:
    return {k: case.kwargs.get(k) for k in ("tgt_mask", "tgt_key_padding_mask", "memory_key_padding_mask")}


def _advice(mistake: dict, message: str) -> str:
    """A mistake's words in the learner's language, with the order of the LayerNorms filled in where it names one."""
    return tr(message).format(yours=", ".join(mistake["norms"])) if "norms" in mistake else tr(message)


def _torch_masks(case: Case, h: int) -> dict:
    m = _masks(case)
    return dict(
        tgt_mask=oracles.torch_attn_mask(m["tgt_mask"], h),
        tgt_key_padding_mask=m["tgt_key_padding_mask"],
        memory_key_padding_mask=m["memory_key_padding_mask"],
    )


# ----------------------------------------------------------------------------------------
# Cases shared by DecoderLayer and Decoder
# ----------------------------------------------------------------------------------------


_causal = oracles.causal_mask
_padding = oracles.padding_mask


def _module_cases(g: torch.Generator, hidden: bool, init: dict, make_state) -> list[Case]:
    """Inputs, masks and property pairs; ``make_state(g, init)`` draws the weights of one module."""

    def rand(*shape):
        return torch.randn(shape, generator=g)

    def case(label, b, t_tgt, t_src, tag="", x=None, memory=None, state=None, **masks):
        x = rand(b, t_tgt, init["d_model"]) if x is None else x
        memory = rand(b, t_src, init["d_model"]) if memory is None else memory
        kwargs = {k: v for k, v in masks.items() if v is not None}
        label = label.replace("d_model", str(init["d_model"]))
        return Case(label, (x, memory), kwargs, tag, init=dict(init), state=state or make_state(g, init))

    out = [
        case(tr("x (2, 5, d_model), memory (2, 7, d_model), causal tgt_mask (5, 5)"), 2, 5, 7, tgt_mask=_causal(5)),
        case(tr("x (1, 4, d_model), memory (1, 4, d_model), no masks at all"), 1, 4, 4),
        case(tr("x (3, 6, d_model), memory (3, 5, d_model), causal tgt_mask, target lengths [6, 4, 2], "
                "source lengths [5, 3, 4]"), 3, 6, 5, tgt_mask=_causal(6),
             tgt_key_padding_mask=_padding([6, 4, 2], 6), memory_key_padding_mask=_padding([5, 3, 4], 5)),
        case(tr("x (2, 6, d_model), memory (2, 6, d_model), causal tgt_mask (6, 6)"), 2, 6, 6, tgt_mask=_causal(6)),
    ]

    # Property 1: changing future target tokens leaves earlier positions alone (causal mask on).
    a = case(tr("x (2, 6, d_model), memory (2, 4, d_model), causal tgt_mask"), 2, 6, 4, "future-a",
             tgt_mask=_causal(6))
    x_b = a.args[0].clone()
    x_b[:, 3:] = rand(2, 3, init["d_model"]) * 3  # new tokens at positions 3, 4, 5
    b = Case(tr("the same inputs with different target tokens at positions 3, 4 and 5"), (x_b, a.args[1]), a.kwargs,
             "future-b", init=a.init, state=a.state)
    out += [a, b]

    # Property 2: padded target keys never leak (no causal mask, so padding alone must hide them).
    lengths = [5, 3]
    a = case(tr("x (2, 5, d_model), memory (2, 4, d_model), no tgt_mask, target lengths [5, 3]"), 2, 5, 4, "tgtpad-a",
             tgt_key_padding_mask=_padding(lengths, 5))
    x_b = a.args[0].clone()
    x_b[1, 3:] = 20.0  # far from the real values, yet not so far that float32 loses the padded rows themselves
    b = Case(tr("the same inputs with different values at the padded target positions"), (x_b, a.args[1]), a.kwargs,
             "tgtpad-b", init=a.init, state=a.state)
    out += [a, b]

    # Property 3: padded memory positions never leak.
    a = case(tr("x (2, 4, d_model), memory (2, 6, d_model), causal tgt_mask, source lengths [4, 6]"), 2, 4, 6,
             "mempad-a", tgt_mask=_causal(4), memory_key_padding_mask=_padding([4, 6], 6))
    m_b = a.args[1].clone()
    m_b[0, 4:] = -50.0
    b = Case(tr("the same inputs with different values at the padded memory positions"), (a.args[0], m_b), a.kwargs,
             "mempad-b", init=a.init, state=a.state)
    out += [a, b]

    # As many examples as target positions: a (B, T) padding mask taken for a (T_q, T_k) attention mask
    # then runs instead of raising, and the values it gives can be named.
    out.append(case(tr("x (3, 3, d_model), memory (3, 5, d_model), causal tgt_mask, target lengths [3, 2, 3], "
                       "source lengths [5, 2, 4]"), 3, 3, 5, tgt_mask=_causal(3),
                    tgt_key_padding_mask=_padding([3, 2, 3], 3), memory_key_padding_mask=_padding([5, 2, 4], 5)))

    if hidden:
        per_example = _causal(5).repeat(3, 1, 1)  # (B, T, T): causal, and example 1 also hides key 0 from queries 2..
        per_example[1, 2:, 0] = False
        out += [
            case(tr("x (1, 1, d_model), memory (1, 3, d_model): the first decoding step"), 1, 1, 3,
                 tgt_mask=_causal(1)),
            case("x (2, 7, d_model), memory (2, 1, d_model)", 2, 7, 1, tgt_mask=_causal(7)),
            case(tr("x (3, 5, d_model), memory (3, 8, d_model), a (B, T, T) tgt_mask, target lengths [5, 5, 3], "
                    "source lengths [8, 2, 6]"), 3, 5, 8, tgt_mask=per_example,
                 tgt_key_padding_mask=_padding([5, 5, 3], 5), memory_key_padding_mask=_padding([8, 2, 6], 8)),
            case(tr("x (4, 3, d_model), memory (4, 9, d_model), source lengths [9, 7, 1, 5]"), 4, 3, 9,
                 tgt_mask=_causal(3), memory_key_padding_mask=_padding([9, 7, 1, 5], 9)),
        ]
    return out


# ----------------------------------------------------------------------------------------
# Shared judging for the two modules
# ----------------------------------------------------------------------------------------

SHAPE_HINT = N_(
    "Mind the shapes: x is (B, T_tgt, d_model) and memory is (B, T_src, d_model). The self-attention takes its "
    "queries, keys and values from x, with tgt_mask (T_tgt, T_tgt) and tgt_key_padding_mask (B, T_tgt). The "
    "cross-attention takes its queries from x and its keys and values from memory, cross_attn(x, memory, memory, "
    "key_padding_mask=memory_key_padding_mask): the queries come from the decoder, and the causal mask does not "
    "belong there."
)


class _DecoderCheck(Check):
    forbidden = FORBIDDEN_LAYERS
    forbidden_ops = ("multi_head_attention",)  # _native_multi_head_attention
    # A wrong value on one case names a mistake more precisely than an exception the same mistake
    # causes on another case (a mask of the wrong length, say).
    values_first = True
    hints = (Hint("RuntimeError", lambda name, case, result: "\n".join(filter(None, (
        positional_padding_hint(case, result, ("tgt_key_padding_mask", "memory_key_padding_mask")), tr(SHAPE_HINT))))),)

    def oracle_module(self, case: Case) -> nn.Module:
        raise NotImplementedError

    def oracle_output(self, case: Case) -> torch.Tensor:
        x, memory = (t.double() for t in case.args)
        with torch.no_grad():
            return self.oracle_module(case)(x, memory, **_torch_masks(case, case.init["h"]))

    def variant(self, case: Case, **mistake) -> torch.Tensor:
        raise NotImplementedError

    def stages(self, case: Case) -> list[Stage]:
        return [] if case.train else self.eval_stages(case)

    def eval_stages(self, case: Case) -> list[Stage]:
        raise NotImplementedError

    def diagnoses(self, case: Case, dropout: float | None = None):
        """The catalogued mistakes; in training mode (``dropout``, its probability) with the dropout masks the
        learner's modules draw, so that each is verified on every case."""
        return [(lambda kw=kw: self.variant(case, **kw, **self._drops(case, dropout)), _advice(kw, msg))
                for kw, msg in LAYER_MISTAKES + _padding_mistakes(case)]

    @staticmethod
    def _drops(case: Case, dropout: float | None) -> dict:
        return {} if dropout is None else {"dropout": oracles.Dropout(dropout, case.args[0].dtype)}

    @rule("a tensor of x's shape")
    def _shape(self, case: Case, result: Any) -> None:
        expect_shape(module_output(result, self.function, case), case.args[0].shape,
                     tr("`{function}`'s output").format(function=self.function), case,
                     tr("The decoder keeps the shape of its input x, (B, T_tgt, d_model): one row per target position."))

    @rule("finite")
    def _finite(self, case: Case, result: Any) -> None:
        expect_finite(module_output(result, self.function, case),
                      tr("`{function}`'s output").format(function=self.function), case,
                      tr("No query in these cases is fully masked; look for a division by zero or a mask filled with "
                         "-inf that hides every key."))

    @rule("values")
    def _values(self, case: Case, result: Any) -> None:
        out, x = module_output(result, self.function, case), case.args[0]
        if case.train:
            self.judge_training(case, out)
            return
        expected = self.oracle_output(case)
        if not matches(out, expected, x.dtype):
            # The functional twin that makes the diagnoses must agree with PyTorch, or they mean nothing.
            assert matches(self.variant(case), expected, torch.float64), \
                "grader error: the functional oracle disagrees"  # english: the grader's own assertion
        expect_close(out, expected, tr("`{function}`'s output").format(function=self.function), case,
                     self.diagnoses(case), hint=tr(self.hint) if self.hint else "", dtype=x.dtype)

    rules = (_shape, _finite, _values)
    hint = ""

    def judge_training(self, case: Case, out: torch.Tensor) -> None:
        raise NotImplementedError

    @rule("a later target token changes no earlier position")
    def _causal(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        pair = tagged_pair(cases, results, "future-a", "future-b")
        if pair is None:
            return
        case, a, b = pair[0], pair[1].output, pair[2].output
        first_changed = 3
        early_a, early_b = a[:, :first_changed], b[:, :first_changed]
        if not matches(early_a, early_b):
            raise CheckFailed(tr(
                "`{function}`: changing the target tokens at positions 3 and later changed the output at an "
                "earlier position ({case}); {where}. Position i may only see "
                "positions j <= i: give tgt_mask to the self-attention."
            ).format(function=self.function, case=case.label, where=where_it_differs(early_b, early_a)))

    @rule("padded target positions change no real one")
    def _target_padding(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        pair = tagged_pair(cases, results, "tgtpad-a", "tgtpad-b")
        if pair is None:
            return
        case, a, b = pair[0], pair[1].output, pair[2].output
        real = ~case.kwargs["tgt_key_padding_mask"]  # (B, T_tgt)
        if not matches(a[real], b[real]):
            raise CheckFailed(tr(
                "`{function}`: changing padded target positions changed the outputs of real ones ({case}): "
                "padding must have no influence. Give tgt_key_padding_mask to the self-attention."
            ).format(function=self.function, case=case.label))

    @rule("padded memory changes nothing")
    def _memory_padding(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        pair = tagged_pair(cases, results, "mempad-a", "mempad-b")
        if pair is None:
            return
        case, a, b = pair[0], pair[1].output, pair[2].output
        if not matches(a, b):
            raise CheckFailed(tr(
                "`{function}`: changing padded positions of memory changed the output ({case}): padding "
                "must have no influence. Give memory_key_padding_mask to the cross-attention."
            ).format(function=self.function, case=case.label))

    rules_across = (_causal, _target_padding, _memory_padding)


# ----------------------------------------------------------------------------------------
# DecoderLayer
# ----------------------------------------------------------------------------------------

RESIDUAL_DROPOUT = N_(
    "The paper applies dropout to the output of each sub-layer, before it is added to the sub-layer's input and "
    "normalised: x = norm1(x + dropout1(self_attn(...))), x = norm2(x + dropout2(cross_attn(...))), "
    "x = norm3(x + dropout3(feed_forward(x)))."
)

TRAINING_MISTAKES: list[tuple[dict, str]] = [
    (dict(dropout_at="none"),
     N_("in training mode the residual dropout is missing: dropout1, dropout2 and dropout3 are built but never used. "
        "{advice}")),
    (dict(dropout_at="sum"),
     N_("dropout was applied to the residual sum x + Sublayer(x); it belongs on the sub-layer's output alone, so that "
        "the residual path x always gets through. {advice}")),
    (dict(dropout_at="norm"),
     N_("dropout was applied after the LayerNorm; it belongs on the sub-layer's output, before the residual sum. "
        "{advice}")),
]


def _training_case(g: torch.Generator, init: dict, make_state) -> Case:
    """A module in training mode: the learner's dropout masks are drawn from the seed the case runs with."""
    x, memory = torch.randn(2, 5, init["d_model"], generator=g), torch.randn(2, 6, init["d_model"], generator=g)
    label = tr("training mode, dropout={dropout}, x (2, 5, {d_model}), memory (2, 6, {d_model}), "
               "causal tgt_mask, source lengths [6, 4]").format(dropout=init["dropout"], d_model=init["d_model"])
    return Case(label, (x, memory), {"tgt_mask": _causal(5), "memory_key_padding_mask": _padding([6, 4], 6)}, "train",
                init=dict(init), state=make_state(g, init), train=True)


def _layer_state(g: torch.Generator, init: dict):
    return oracles.decoder_layer_state(g, init["d_model"], init["d_ff"])


class DecoderLayerCheck(_DecoderCheck):
    function = "DecoderLayer"
    trained_through = True  # a model learns through it: gradients must reach what it was made from
    oracle = N_("torch.nn.TransformerDecoderLayer (post-norm) with the same weights")
    hint = N_(
        "Check the three sub-layers in order, each wrapped as LayerNorm(x + Dropout(Sublayer(x))): masked "
        "self-attention (tgt_mask, tgt_key_padding_mask), cross-attention with queries from x and keys and values "
        "from memory (memory_key_padding_mask), then the feed-forward network."
    )
    hints = (Hint("StateMismatch", lambda name, case, result: tr(
        "`DecoderLayer`'s cross_attn and self_attn are one and the same MultiHeadAttention object on the case "
        "{case}, so the two attentions share one set of weights (PyTorch then lists them once, as "
        "self_attn). The names are right; the sharing is the fault. What a target position asks of the source "
        "is not what it asks of the target: build two separate modules, self.self_attn = "
        "MultiHeadAttention(d_model, h, dropout) and self.cross_attn = MultiHeadAttention(d_model, h, dropout)."
    ).format(case=case.label),
        when=lambda case, result: {"cross_attn", "self_attn"} <= {n for pair in state_mismatch(result).shared for n in pair},
        whole=True), *_DecoderCheck.hints)

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)
        init = {"d_model": 16, "h": 4, "d_ff": 32, "dropout": 0.1}
        out = _module_cases(g, hidden, init, _layer_state)
        if hidden:
            init = {"d_model": 32, "h": 8, "d_ff": 24, "dropout": 0.1}
            out += _module_cases(g, False, init, _layer_state)[:3]
        out.append(_training_case(g, {"d_model": 16, "h": 4, "d_ff": 32, "dropout": 0.3}, _layer_state))
        # Dropout with p = 1 drops every sub-layer's whole output: what is left is the three LayerNorms.
        init = {"d_model": 8, "h": 2, "d_ff": 16, "dropout": 1.0}
        x, memory = torch.randn(2, 3, 8, generator=g), torch.randn(2, 4, 8, generator=g)
        out.append(Case(tr("dropout=1.0 in training mode, x (2, 3, 8), memory (2, 4, 8), causal tgt_mask"), (x, memory),
                        {"tgt_mask": _causal(3)}, "dropout", init=init, state=_layer_state(g, init), train=True))
        return out

    def eval_stages(self, case: Case) -> list[Stage]:
        x, memory = (t.double() for t in case.args)
        return decoder_layer_stages(case, x, memory)

    def oracle_module(self, case: Case) -> nn.Module:
        i = case.init
        return oracles.torch_decoder_layer(oracles.double_state(case.state), i["d_model"], i["h"], i["d_ff"])

    def variant(self, case: Case, **mistake) -> torch.Tensor:
        x, memory = case.args
        with torch.no_grad():
            return layer_forward(case.state, x, memory, h=case.init["h"], **_masks(case), **mistake)

    def judge_training(self, case: Case, out: torch.Tensor) -> None:
        p, dtype = case.init["dropout"], case.args[0].dtype

        def drops() -> oracles.Dropout:
            return oracles.Dropout(p, dtype)

        advice = tr(RESIDUAL_DROPOUT)
        diagnoses = [(lambda kw=kw: self.variant(case, dropout=drops(), **kw), tr(message).format(advice=advice))
                     for kw, message in TRAINING_MISTAKES]
        diagnoses.append((lambda: self.variant(case),
                          tr("no dropout was applied at all in training mode. {advice}").format(advice=advice)))
        diagnoses += self.diagnoses(case, p)
        hint = advice
        if p == 1:
            hint = tr("With dropout=1.0 every sub-layer's output is dropped entirely, so the layer must return "
                      "norm3(norm2(norm1(x))). {advice}").format(advice=advice)
        expect_close(out, self.variant(case, dropout=drops()), tr("`{function}`'s output").format(function="DecoderLayer"),
                     case, diagnoses, hint=hint, dtype=dtype)


# ----------------------------------------------------------------------------------------
# Decoder
# ----------------------------------------------------------------------------------------

STACK_MISTAKES: list[tuple[dict, str]] = [
    (dict(stack="not-chained"),
     N_("each layer was applied to the decoder's input instead of the previous layer's output: write "
        "x = layer(x, ...) inside the loop, so that layer i + 1 reads what layer i produced.")),
    *((dict(stack=stack),
       N_("the later layers did not attend to the encoder's output: every layer's cross-attention reads the same "
          "memory, the encoder's final output, so pass memory unchanged to every layer."))
      for stack in ("memory-is-x", "memory-is-x-source-padding")),
    (dict(stack="reversed"),
     N_("the layers ran in reverse order: apply self.layers[0] first, as stored in the ModuleList.")),
    (dict(mask="tgt_mask"),
     N_("tgt_mask did not reach the layers: pass it to every layer, layer(x, memory, tgt_mask, ...).")),
    (dict(mask="tgt_key_padding_mask"),
     N_("tgt_key_padding_mask did not reach the layers: pass it to every layer.")),
    (dict(mask="memory_key_padding_mask"),
     N_("memory_key_padding_mask did not reach the layers: pass it to every layer.")),
]


def _stack_mismatch(case: Case, mismatch: Mismatch) -> str:
    if any(re.fullmatch(r"layers\.\d+", alias) for alias, _ in mismatch.shared):
        return tr("`Decoder`'s layers share their weights on the case {case} (N = {N}): every "
                  "entry of `layers` is the same DecoderLayer object, so the N layers are one. Build N separate "
                  "layers: nn.ModuleList([DecoderLayer(...) for _ in range(N)]).").format(case=case.label,
                                                                                          N=case.init["N"])
    extra = [n for n in mismatch.unexpected if n.startswith("norm")]
    if extra:
        return tr("`Decoder` has parameters the exercise does not ask for ({names}) on the case "
                  "{case}: in the paper's post-norm decoder each layer already ends with a LayerNorm (norm3), "
                  "so there is no final LayerNorm after the stack; remove it.").format(names=", ".join(extra),
                                                                                       case=case.label)
    return ""


def _stack_state(g: torch.Generator, init: dict):
    return oracles.stack_state(oracles.decoder_layer_state, g, init["N"], init["d_model"], init["d_ff"])


class DecoderCheck(_DecoderCheck):
    function = "Decoder"
    trained_through = True  # a model learns through it: gradients must reach what it was made from
    oracle = N_("torch.nn.TransformerDecoder (post-norm, no final norm) with the same weights")
    hint = N_(
        "If your DecoderLayer passes its checks, look at the loop: every layer takes the previous layer's output "
        "and the same memory and masks, and there is no final LayerNorm."
    )
    hints = (Hint("StateMismatch", lambda name, case, result: _stack_mismatch(case, state_mismatch(result)), whole=True),
             *_DecoderCheck.hints)

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)
        out = []
        n = 2 if not hidden else 3
        out += _module_cases(g, False, {"d_model": 16, "h": 4 if not hidden else 2, "d_ff": 32, "N": n, "dropout": 0.1},
                             _stack_state)
        init = {"d_model": 8, "h": 2, "d_ff": 16, "N": 1, "dropout": 0.1}
        out += _module_cases(g, False, init, _stack_state)[:3]
        out.append(_training_case(g, {"d_model": 16, "h": 4, "d_ff": 32, "N": 2, "dropout": 0.3}, _stack_state))
        if hidden:
            init = {"d_model": 16, "h": 4, "d_ff": 32, "N": 2, "dropout": 0.1}
            out += _module_cases(g, True, init, _stack_state)[-4:]
        return out

    def judge_training(self, case: Case, out: torch.Tensor) -> None:
        p, dtype = case.init["dropout"], case.args[0].dtype
        hint = tr("In training mode each layer drops with the decoder's dropout: build every layer with it, "
                  "DecoderLayer(d_model, h, d_ff, dropout).")
        expect_close(out, self.variant(case, dropout=oracles.Dropout(p, dtype)),
                     tr("`{function}`'s output").format(function="Decoder"), case, [
            (lambda: self.variant(case, dropout=oracles.Dropout(0.1, dtype)),
             tr("the layers drop with probability 0.1, not the decoder's dropout={p}. {hint}").format(p=p, hint=hint)),
            (lambda: self.variant(case), tr("no dropout was applied in training mode. {hint}").format(hint=hint)),
            *self.diagnoses(case, p),
        ], hint=hint, dtype=dtype)

    def eval_stages(self, case: Case) -> list[Stage]:
        return oracles.stack_stages(
            case.args[0], case.init["N"],
            lambda i, y: layer_forward(case.state, y, case.args[1], h=case.init["h"], prefix=f"layers.{i}.",
                                       **_masks(case)), "decoder")

    def oracle_module(self, case: Case) -> nn.Module:
        i = case.init
        return oracles.torch_decoder(oracles.double_state(case.state), i["N"], i["d_model"], i["h"], i["d_ff"])

    def variant(self, case: Case, stack: str = "chained", mask: str = "", **mistake) -> torch.Tensor:
        x, memory = (t.double() for t in case.args)
        masks = _masks(case)
        if mask:
            masks[mask] = None
        order = list(range(case.init["N"]))
        if stack == "reversed":
            order.reverse()
        y = x
        for i in order:
            source = x if stack == "not-chained" else y
            later = stack.startswith("memory-is-x") and i > 0
            mem = y if later else memory
            # Reading the previous layer as memory, its padding is the target's (or, by oversight, the source's).
            pads = masks | {"memory_key_padding_mask": masks["tgt_key_padding_mask"]} if later and stack == "memory-is-x" \
                else masks
            with torch.no_grad():
                y = layer_forward(case.state, source, mem, h=case.init["h"], prefix=f"layers.{i}.", **pads, **mistake)
        return y

    def diagnoses(self, case: Case, dropout: float | None = None):
        return [(lambda kw=kw: self.variant(case, **kw, **self._drops(case, dropout)), tr(msg))
                for kw, msg in STACK_MISTAKES] + super().diagnoses(case, dropout)


CHECKS = [SubsequentMaskCheck, DecoderLayerCheck, DecoderCheck]


# What the instructions state, and the visible case that holds a learner to it. The rules every graded
# function keeps (its arguments left unchanged, no view of them returned, the arguments' dtype and
# device followed, gradients reaching its parameters) are the base class's (Check.judge_effects,
# judge_dtype) and are not repeated here.
STATED = {
    "subsequent_mask": (
        Stated("the mask is boolean", "size=4", "returned a float tensor"),
        Stated("a query may attend to itself: True where j <= i", "size=4", "the diagonal is False"),
        Stated("True means may attend", "size=4", "the mask is inverted"),
        Stated("the shape is (size, size), with no batch axis", "size=4", "extra batch axis"),
        Stated("size=0 gives an empty (0, 0) mask", "empty", "an empty sequence is valid"),
        Stated("a negative size raises ValueError", "invalid", "raise ValueError"),
    ),
    "DecoderLayer": (
        Stated("with a causal tgt_mask a target token never changes an earlier position", "future-",
               "ignored tgt_mask"),
        Stated("tgt_mask is True where a position may attend", "causal tgt_mask (5, 5)", "tgt_mask was inverted"),
        Stated("target padding never changes a real position", "tgtpad-", "ignored tgt_key_padding_mask"),
        Stated("memory padding never changes a real position", "mempad-", "ignored memory_key_padding_mask"),
        Stated("no mask at all is allowed", "no masks at all", "raised AttributeError"),
        Stated("the cross-attention's keys and values come from memory", "causal tgt_mask (5, 5)",
               "keys and values of the cross-attention came from the decoder"),
        Stated("cross_attn has weights of its own", "causal tgt_mask (5, 5)", "used self_attn's weights"),
        Stated("post-norm, as in the paper", "causal tgt_mask (5, 5)", "pre-norm"),
        Stated("norm1, norm2, norm3 serve the sub-layers in order", "causal tgt_mask (5, 5)",
               "LayerNorms are used in the wrong places"),
        Stated("dropout acts on each sub-layer's output, before the residual sum", "train",
               "dropout was applied to the residual sum"),
    ),
    "Decoder": (
        Stated("each of the N layers has weights of its own", "causal tgt_mask (5, 5)",
               "the same DecoderLayer object"),
        Stated("the output is the last layer's, with no final LayerNorm", "causal tgt_mask (5, 5)",
               "no final LayerNorm"),
        Stated("every layer reads the same encoder output", "causal tgt_mask (5, 5)",
               "did not attend to the encoder's output"),
        Stated("tgt_mask reaches every layer", "future-", "tgt_mask did not reach the layers"),
        Stated("tgt_key_padding_mask reaches every layer", "tgtpad-", "tgt_key_padding_mask did not reach"),
        Stated("memory_key_padding_mask reaches every layer", "mempad-", "memory_key_padding_mask did not reach"),
        Stated("each layer is built with the decoder's dropout", "train", "the layers drop with probability 0.1"),
    ),
}
