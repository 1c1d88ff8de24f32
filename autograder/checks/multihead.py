"""Chapter 3 checks: split_heads, merge_heads, MultiHeadAttention.

Oracles: closed-form slicing and concatenation for the bookkeeping of heads, and PyTorch's own
``torch.nn.MultiheadAttention`` (batch_first=True) loaded with the same weights, in float64
(:mod:`autograder.oracles`). The diagnoses recompute, in float64, what a known mistake would
have returned, so that a wrong answer can be named.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .. import oracles
from ..framework import (
    Case,
    Check,
    CheckFailed,
    Hint,
    ModuleResult,
    Stated,
    expect_close,
    expect_finite,
    expect_shape,
    expect_tensor,
    matches,
    module_output,
    named_failure,
    rule,
    tagged_pair,
)
from ..locate import Stage
from ..messages import N_, tr
from ..oracles import double_state, mha_state, torch_attn_mask, torch_mha

# ----------------------------------------------------------------------------------------
# split_heads and merge_heads
# ----------------------------------------------------------------------------------------

def _blocks(x: torch.Tensor, h: int) -> torch.Tensor:
    """Closed form of the split: head i is the slice of features i*d_k .. (i+1)*d_k - 1."""
    d_k = x.shape[-1] // h
    return torch.stack([x[..., i * d_k:(i + 1) * d_k] for i in range(h)], dim=1)  # (B, h, T, d_k)


def _side_by_side(x: torch.Tensor) -> torch.Tensor:
    """Closed form of the merge: Concat(head_1, ..., head_h) along the features."""
    return torch.cat([x[:, i] for i in range(x.shape[1])], dim=-1)  # (B, T, h * d_k)


RESHAPE_HINTS = (
    Hint("RuntimeError", N_("`.view` needs a tensor laid out contiguously in memory, and a transposed tensor is not: "
                            "use `.reshape(...)` (or `.contiguous().view(...)`)."), containing="view size is not compatible"),
    Hint("RuntimeError", N_("The shape you asked for does not hold the same number of elements as the input: check B, "
                            "T, h and d_k."), containing="is invalid for input of size"),
)


def _names_both(d_model: int, h: int, message: str) -> str:
    """What a ValueError for d_model % h != 0 lacks: both numbers, or nothing."""
    if str(d_model) in message and str(h) in message:
        return ""
    return tr("good, but the message should name both numbers (d_model={d_model}, h={h}) so that whoever meets it "
              "knows what to change.").format(d_model=d_model, h=h)


#: (invalid_hint, invalid_returned) for the cases whose d_model h does not divide, by where it is checked
INDIVISIBLE = {
    "split_heads": (
        N_("d_model is not a multiple of h there: check `d_model % h != 0` yourself, in split_heads, and raise "
           "ValueError with a message that names both."),
        N_("{name} did not raise on the case {label}: d_model is not a multiple of h, so the heads cannot all have "
           "the same d_k. Check `d_model % h != 0` in split_heads and raise ValueError."),
    ),
    "__init__": (
        N_("d_model is not a multiple of h there: check `d_model % h != 0` yourself, in __init__, and raise "
           "ValueError with a message that names both."),
        N_("{name} did not raise on the case {label}: d_model is not a multiple of h, so the heads cannot all have "
           "the same d_k. Check `d_model % h != 0` in __init__ and raise ValueError."),
    ),
}


def _indivisible(where: str) -> tuple[str, str]:
    """(invalid_hint, invalid_returned) for the cases whose d_model h does not divide, checked in ``where``."""
    return INDIVISIBLE[where]


class _HeadsCheck(Check):
    hints = RESHAPE_HINTS
    may_return_view = True  # a reshape and a transpose of the input are the expected answer

    def refusal_lacks(self, case: Case, message: str) -> str:
        x, h = case.args
        return _names_both(x.shape[-1], h, message)


class SplitHeadsCheck(_HeadsCheck):
    function = "split_heads"
    trained_through = True  # a model learns through it: gradients must reach what it was made from
    invalid_hint, invalid_returned = _indivisible("split_heads")
    oracle = N_("slicing the features into h consecutive blocks of d_k")

    def stages(self, case: Case) -> list[Stage]:
        x, h = case.args
        B, T, d_model = x.shape
        blocks = x.double().reshape(B, T, h, d_model // h)
        return [Stage.of(N_("the features cut into h blocks of d_k, (B, T, h, d_k)"), blocks),
                Stage.of(N_("the head axis moved in front of the positions, (B, h, T, d_k)"), blocks.transpose(1, 2))]

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(B, T, d_model, h, dtype=torch.float32, tag=""):
            x = torch.randn(B, T, d_model, generator=g, dtype=torch.float64).to(dtype)
            return Case(f"x {(B, T, d_model)} {str(dtype)[6:]}, h={h}", (x, h), {}, tag)

        out = [
            case(2, 5, 8, 2),
            case(1, 3, 12, 3, torch.float64),
            case(3, 4, 16, 4),  # T == h: a missing transpose keeps the right shape
            case(2, 6, 8, 8),  # d_k = 1
            case(2, 3, 10, 4, tag="invalid"),
        ]
        if hidden:
            out += [
                case(4, 7, 32, 8),
                case(2, 5, 6, 1),
                case(3, 2, 24, 6, torch.float64),
                case(1, 9, 20, 5),
                case(2, 4, 12, 8, tag="invalid"),
            ]
        return out

    @rule("shape (B, h, T, d_k)")
    def _shape(self, case: Case, result: Any) -> None:
        x, h = case.args
        B, T, d_model = x.shape
        what = tr("`{function}`'s result").format(function=self.function)
        d_k = d_model // h
        y = expect_tensor(result, what, case)
        shape = (B, h, T, d_k)
        if tuple(y.shape) != shape:
            hints = {
                (B, T, h, d_k): N_("This is (B, T, h, d_k): the reshape is right; now move the head axis in front "
                                   "of the positions with .transpose(1, 2)."),
                (B, h, d_k, T): N_("This is (B, h, d_k, T): the positions ended up last. After the reshape to "
                                   "(B, T, h, d_k), swap axes 1 and 2 only: .transpose(1, 2)."),
                (B, d_k, T, h): N_("Here h and d_k are swapped: reshape to (B, T, h, d_k) with d_k = d_model // h, "
                                   "then transpose(1, 2)."),
                (B, T, d_k, h): N_("Here h and d_k are swapped: reshape to (B, T, h, d_k) with d_k = d_model // h."),
                (h, B, T, d_k): N_("The head axis went in front of the batch: it belongs at position 1, "
                                   "(B, h, T, d_k)."),
            }
            hint = hints.get(tuple(y.shape), "")
            expect_shape(y, shape, what, case, tr(hint) if hint else "")

    @rule("head i holds block i of the features")
    def _values(self, case: Case, y: torch.Tensor) -> None:
        x, h = case.args
        B, T, d_model = x.shape
        d_k = d_model // h
        xd = x.double()
        diagnoses = [
            (lambda: xd.reshape(B, h, T, d_k),
             tr("it has the right shape but was reshaped straight to (B, h, T, d_k) without the transpose, which cuts "
                "the flat memory of (T, d_model) into h pieces and so mixes positions into heads. Reshape to "
                "(B, T, h, d_k) first, then .transpose(1, 2).")),
            (lambda: xd.reshape(B, T, h, d_k),
             tr("the head axis was not moved in front of the positions: after the reshape to (B, T, h, d_k), "
                "add .transpose(1, 2).")),
            (lambda: xd.reshape(B, T, d_k, h).permute(0, 3, 1, 2),
             tr("each head took every h-th feature instead of a consecutive block: reshape to (B, T, h, d_k) "
                "(h before d_k) so that head i gets features i*d_k .. (i+1)*d_k - 1.")),
            (lambda: xd.reshape(B, T, h, d_k).transpose(1, 2).flip(1),
             tr("the heads are in reverse order: head 0 takes the first d_k features.")),
        ]
        expect_close(y, _blocks(xd, h), tr("`{function}`'s result").format(function=self.function), case, diagnoses,
                     hint=tr("Head i at position t must hold x[b, t, i*d_k:(i+1)*d_k]."))

    rules = (_shape, _values)


class MergeHeadsCheck(_HeadsCheck):
    function = "merge_heads"
    trained_through = True  # a model learns through it: gradients must reach what it was made from
    oracle = N_("concatenating the heads along the features (the inverse of the split)")

    def stages(self, case: Case) -> list[Stage]:
        (x,) = case.args
        B, h, T, d_k = x.shape
        moved = x.double().transpose(1, 2)
        return [Stage.of(N_("the head axis moved back behind the positions, (B, T, h, d_k)"), moved),
                Stage.of(N_("the heads side by side, (B, T, h * d_k)"), moved.reshape(B, T, h * d_k))]

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(B, h, T, d_k, dtype=torch.float32, tag="", label=""):
            x = torch.randn(B, h, T, d_k, generator=g, dtype=torch.float64).to(dtype)
            return Case(label or f"x {(B, h, T, d_k)} {str(dtype)[6:]}", (x,), {}, tag)

        out = [
            case(2, 2, 5, 4),
            case(1, 3, 4, 4, torch.float64),
            case(3, 4, 4, 2),
            case(2, 8, 3, 1),
        ]
        whole = torch.randn(2, 5, 12, generator=g)
        out.append(Case(tr("x = a (2, 5, 12) tensor cut into h=3 heads of d_k=4; merging must give it back"),
                        (_blocks(whole, 3),), {}, "round-trip"))
        if hidden:
            out += [
                case(4, 8, 7, 4, torch.float64),
                case(1, 1, 5, 6),
                case(2, 6, 1, 3),
                case(3, 2, 9, 16),
            ]
            whole = torch.randn(3, 7, 32, generator=g, dtype=torch.float64)
            out.append(Case(tr("x = a (3, 7, 32) float64 tensor cut into h=8 heads; merging must give it back"),
                            (_blocks(whole, 8),), {}, "round-trip"))
        return out

    @rule("shape (B, T, h * d_k)")
    def _shape(self, case: Case, result: Any) -> None:
        (x,) = case.args
        B, h, T, d_k = x.shape
        what = tr("`{function}`'s result").format(function=self.function)
        y = expect_tensor(result, what, case)
        shape = (B, T, h * d_k)
        if tuple(y.shape) != shape:
            # A shape alone does not say how it was made: each hint is given only where its values are those.
            hints = [
                (lambda: x.transpose(1, 2),
                 tr("The heads were moved back but not flattened: reshape to (B, T, h * d_k).")),
                (lambda: x.reshape(B, h, T * d_k),
                 tr("The heads were flattened in place; first .transpose(1, 2) to (B, T, h, d_k), then reshape.")),
                (lambda: x.reshape(B, h * T, d_k),
                 tr("The heads were stacked along the positions; Concat puts them side by side along the features.")),
                (lambda: x.sum(1), tr("The heads were summed; Concat puts them side by side: (B, T, h * d_k).")),
                (lambda: x.mean(1), tr("The heads were averaged; Concat puts them side by side: (B, T, h * d_k).")),
            ]
            hint = next((text for made, text in hints
                         if tuple(made().shape) == tuple(y.shape) and matches(y, made(), x.dtype)), "")
            expect_shape(y, shape, what, case, hint)

    @rule("the heads side by side")
    def _values(self, case: Case, y: torch.Tensor) -> None:
        (x,) = case.args
        B, h, T, d_k = x.shape
        xd = x.double()
        diagnoses = [
            (lambda: xd.reshape(B, T, h * d_k),
             tr("it has the right shape but the head axis was not moved back behind the positions before the "
                "reshape: (B, h, T, d_k).transpose(1, 2) gives (B, T, h, d_k), and only then reshape to "
                "(B, T, h * d_k).")),
            (lambda: xd.permute(0, 2, 3, 1).reshape(B, T, h * d_k),
             tr("the heads are interleaved feature by feature (the axes were permuted to (B, T, d_k, h)): transpose "
                "axes 1 and 2 only, so that head 0's d_k features come first, then head 1's, and so on.")),
            (lambda: xd.flip(1).transpose(1, 2).reshape(B, T, h * d_k),
             tr("the heads are concatenated in reverse order: head 0's features come first.")),
        ]
        expect_close(y, _side_by_side(xd), tr("`{function}`'s result").format(function=self.function), case,
                     diagnoses,
                     hint=tr("The result at [b, t] must be x[b, 0, t], x[b, 1, t], ..., x[b, h-1, t] side by side."))

    rules = (_shape, _values)


# ----------------------------------------------------------------------------------------
# MultiHeadAttention
# ----------------------------------------------------------------------------------------

EVAL_DROPOUT = N_(
    "In eval mode dropout must do nothing: apply self.dropout (an nn.Dropout, which follows module.eval()), not "
    "torch.nn.functional.dropout without training=self.training."
)
AFTER_DROPOUT = N_(
    "self.attn_weights holds the weights after dropout (some are 0, the others divided by 1 - p). Store the "
    "softmax weights before dropout, as the exercise asks: they are what a plot of the attention should show, "
    "and the dropped copy only serves the product with V in training mode."
)
MHA_BUILTINS = (
    "torch.nn.MultiheadAttention",
    "torch.nn.functional.multi_head_attention_forward",
    "torch.nn.functional.scaled_dot_product_attention",
    # layers that hold a multi-head attention
    "torch.nn.Transformer", "torch.nn.TransformerEncoderLayer", "torch.nn.TransformerDecoderLayer",
)
#: the private kernels behind them: _native_multi_head_attention, _scaled_dot_product_flash_attention, ...
MHA_OPS = ("multi_head_attention", "scaled_dot_product", "transformer_encoder_layer")
DROPOUT_P = 0.5


MISTAKEN = [
    (dict(split="no-transpose"),
     N_("the heads were made by reshaping the projections straight to (B, h, T, d_k), without the transpose: that "
        "mixes positions into heads. In split_heads, reshape to (B, T, h, d_k), then .transpose(1, 2).")),
    (dict(merge="no-transpose"),
     N_("the heads were merged in the wrong order: the context (B, h, T_q, d_k) was reshaped to (B, T_q, d_model) "
        "without first moving the head axis back with .transpose(1, 2), so positions got mixed up.")),
    (dict(split="no-transpose", merge="no-transpose"),
     N_("the heads were split and merged with reshapes alone, without the transposes: each 'head' then sees a "
        "slice of the flat memory (positions mixed in), not d_k features of every position. Reshape to "
        "(B, T, h, d_k) and .transpose(1, 2) to split; transpose back before reshaping to merge.")),
    (dict(merge="interleaved"),
     N_("the heads were merged in the wrong order: their features are interleaved (a permute to (B, T, d_k, h)); "
        "transpose axes 1 and 2 only, so head 0's features come first.")),
    (dict(use_w_o=False),
     N_("W^O is missing: after concatenating the heads, apply the output projection self.w_o.")),
    (dict(scale="d_model"),
     N_("the scores were divided by sqrt(d_model); each head works in d_k = d_model / h dimensions, so the scale is "
        "sqrt(d_k) (let scaled_dot_product_attention take d_k from the split heads).")),
    (dict(scale="d_model-linear"),
     N_("the scores were divided by d_model; the scale is sqrt(d_k), with d_k = d_model / h.")),
    (dict(scale="d_k-linear"),
     N_("the scores were divided by sqrt(d_k) twice, that is by d_k: scaled_dot_product_attention already "
        "divides by sqrt(d_k), so pass it the projected heads unscaled.")),
    (dict(scale="none"),
     N_("the scores were not divided by sqrt(d_k).")),
    (dict(projections=("w_q", "w_q", "w_q")),
     N_("one projection was shared by Q, K and V (self.w_q for all three): project the query with w_q, the key "
        "with w_k and the value with w_v.")),
    (dict(projections=("w_q", "w_k", "w_k")),
     N_("the value was projected with w_k; use w_v.")),
    (dict(projections=("w_q", "w_k", "w_q")),
     N_("the value was projected with w_q; use w_v.")),
    (dict(projections=("w_q", "w_q", "w_v")),
     N_("the key was projected with w_q; use w_k.")),
    (dict(projections=("w_k", "w_q", "w_v")),
     N_("w_q and w_k are swapped: the query goes through w_q and the key through w_k.")),
    (dict(padding_rule="ignored"),
     N_("key_padding_mask was ignored: padded keys (True in key_padding_mask) must get zero weight, so combine "
        "~key_padding_mask[:, None, None, :] (shape (B, 1, 1, T_k)) with the attention mask.")),
    (dict(padding_rule="inverted"),
     N_("key_padding_mask is inverted: it is True where a key IS padding, so the keys to keep are ~key_padding_mask.")),
    (dict(padding_rule="head-axis"),
     N_("key_padding_mask was lined up with the heads instead of the batch: reshape it to (B, 1, 1, T_k) "
        "(key_padding_mask[:, None, None, :]) before combining it with the scores (B, h, T_q, T_k).")),
    (dict(attn_rule="ignored"),
     N_("attn_mask was ignored: keys where attn_mask is False must get zero weight.")),
    (dict(attn_rule="inverted"),
     N_("attn_mask is inverted: it is True where a query MAY attend, so the keys to hide are those where it is False.")),
    (dict(attn_rule="no-head-axis"),  # english: a name of the code
     N_("the (B, T_q, T_k) attn_mask was lined up with the heads instead of the batch: give it a head axis, "
        "attn_mask.unsqueeze(1), shape (B, 1, T_q, T_k).")),
]


def _oracle(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch's layer with the same weights, in float64: (output, weights per head)."""
    d_model, h = case.init["d_model"], case.init["h"]
    query, key, value = (t.double() for t in case.args)
    attn_mask, kpm = case.kwargs.get("attn_mask"), case.kwargs.get("key_padding_mask")
    layer = torch_mha(double_state(case.state), d_model, h)
    with torch.no_grad():
        out, weights = layer(query, key, value, attn_mask=torch_attn_mask(attn_mask, h), key_padding_mask=kpm,
                             need_weights=True, average_attn_weights=False)
    # PyTorch leaves a query that sees no key as NaN; the course gives it zero weights, hence a zero
    # context, whose projection is the bias of W^O.
    dead = torch.isnan(weights).any(-1)  # (B, h, T_q)
    weights = weights.nan_to_num(nan=0.0)
    if dead.any():
        bias = case.state.get("w_o.bias")
        fill = torch.zeros(d_model, dtype=torch.float64) if bias is None else bias.double()
        out = torch.where(dead.any(1).unsqueeze(-1), fill, out)
    return out, weights


class MultiHeadAttentionCheck(Check):
    detached_attributes = ("attn_weights",)  # the exercise: "detached from the graph ..., so that you can plot them"
    function = "MultiHeadAttention"
    trained_through = True  # a model learns through it: gradients must reach what it was made from
    oracle = N_("torch.nn.MultiheadAttention with the same weights")
    forbidden = MHA_BUILTINS
    forbidden_ops = MHA_OPS
    invalid_hint, invalid_returned = _indivisible("__init__")
    hints = (
        Hint("RuntimeError", N_("A mask must broadcast to the scores (B, h, T_q, T_k): give an attn_mask (B, T_q, T_k) "
                                "a head axis, attn_mask.unsqueeze(1), and make a key_padding_mask (B, T_k) into "
                                "(B, 1, 1, T_k)."),
             containing=("must match the size", "The size of tensor")),
        Hint("RuntimeError", N_("Keep the input's dtype: avoid creating tensors with a fixed dtype inside forward."),
             containing="dtype"),
        *RESHAPE_HINTS,
    )

    def refusal_lacks(self, case: Case, message: str) -> str:
        return _names_both(case.init["d_model"], case.init["h"], message)

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)
        float64 = torch.float64

        def rand(*shape, dtype=torch.float32):
            return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)

        def case(label, B, T_q, T_k, d_model, h, *, kind="self", dtype=torch.float32, bias=True, attn_mask=None,
                 kpm=None, tag="", dropout=0.0, state=None, inputs=None):
            state = state if state is not None else mha_state(g, d_model, bias=bias)
            if dtype == torch.float64:
                state = double_state(state)
            if inputs is None:
                query = rand(B, T_q, d_model, dtype=dtype)
                if kind == "self":
                    inputs = (query, query, query)
                elif kind == "cross":  # key and value are the same memory, as in a decoder
                    memory = rand(B, T_k, d_model, dtype=dtype)
                    inputs = (query, memory, memory)
                else:
                    inputs = (query, rand(B, T_k, d_model, dtype=dtype), rand(B, T_k, d_model, dtype=dtype))
            kwargs = {}
            if attn_mask is not None:
                kwargs["attn_mask"] = attn_mask
            if kpm is not None:
                kwargs["key_padding_mask"] = kpm
            init = {"d_model": d_model, "h": h, "dropout": dropout, "bias": bias}
            extra = f", {str(dtype)[6:]}" + ("" if bias else ", bias=False") + (f", dropout={dropout}" if dropout else "")
            return Case(f"{label} (d_model={d_model}, h={h}{extra})", inputs, kwargs, tag, init=init, state=state,
                        collect=("attn_weights", "h", "d_k"), train=tag == "dropout")

        def causal(T):
            return torch.tril(torch.ones(T, T, dtype=torch.bool))

        def padding(B, T_k, lengths):
            return torch.arange(T_k).expand(B, T_k) >= torch.tensor(lengths).unsqueeze(1)  # True = padding

        def random_mask(B, T_q, T_k):
            mask = torch.rand(B, T_q, T_k, generator=g) > 0.4
            mask[..., 0] = True  # every query sees at least one key here; dead rows have their own case
            return mask

        out = [
            case(tr("self-attention, x (2, 5, 24)"), 2, 5, 5, 24, 4),
            case(tr("cross-attention, query (2, 3, 16), key = value (2, 6, 16)"), 2, 3, 6, 16, 2, kind="cross", dtype=float64),
            case(tr("query (2, 4, 8), key (2, 5, 8), value (2, 5, 8) three different tensors"), 2, 4, 5, 8, 2, kind="qkv"),
            case(tr("self-attention, x (2, 5, 16), causal attn_mask (5, 5)"), 2, 5, 5, 16, 4, attn_mask=causal(5)),
            # B == h: a mask without its head axis broadcasts silently and must be caught by its values
            case(tr("cross-attention, query (2, 4, 16), key = value (2, 6, 16), attn_mask (2, 4, 6)"), 2, 4, 6, 16, 2,
                 kind="cross", attn_mask=random_mask(2, 4, 6)),
            case(tr("cross-attention, query (2, 3, 16), key = value (2, 6, 16), key_padding_mask (2, 6)"), 2, 3, 6, 16, 2,
                 kind="cross", kpm=padding(2, 6, [6, 4])),
            case(tr("self-attention, x (3, 5, 24), attn_mask (3, 5, 5) and key_padding_mask (3, 5)"), 3, 5, 5, 24, 3,
                 attn_mask=random_mask(3, 5, 5), kpm=padding(3, 5, [5, 3, 4]), dtype=float64),
            case(tr("self-attention, x (1, 6, 16)"), 1, 6, 6, 16, 4, bias=False),
        ]
        pair = case(tr("self-attention, x (2, 6, 16), key_padding_mask (2, 6)"), 2, 6, 6, 16, 2,
                    kpm=padding(2, 6, [6, 3]), tag="pair-a")
        query, key, value = (t.clone() for t in pair.args)
        key[1, 3:], value[1, 3:] = 40.0, -1e3  # only padded keys and values change
        out += [
            pair,
            Case(tr("the same layer and query with different keys and values at the padded positions"),
                 (query, key, value), pair.kwargs, "pair-b", init=pair.init, state=pair.state, collect=pair.collect),
        ]
        out.append(self._dropout_case(g, case, rand, B=2, T=6, d_model=32, h=2, dtype=float64))
        # Built with dropout but called in eval mode: the dropout must then do nothing.
        out.append(case(tr("self-attention, x (2, 5, 16), dropout=0.3 in eval mode"), 2, 5, 5, 16, 4, dropout=0.3,
                        attn_mask=causal(5)))
        # The course gives a query that may attend to no key zero weights, where PyTorch's layer gives NaN.
        blind = torch.ones(2, 3, 5, dtype=torch.bool)
        blind[0, 1] = False
        out.append(case(tr("cross-attention, query (2, 3, 16), key = value (2, 5, 16), attn_mask (2, 3, 5) with a "
                           "query that may attend to nothing"), 2, 3, 5, 16, 2, kind="cross", attn_mask=blind,
                        tag="fully-masked"))
        out.append(Case("MultiHeadAttention(d_model=12, h=5)", (), {}, "invalid",
                        init={"d_model": 12, "h": 5}, method="extra_repr"))
        if hidden:
            out += [
                case(tr("self-attention, x (3, 7, 32)"), 3, 7, 7, 32, 8, dtype=float64),
                case(tr("cross-attention, query (1, 2, 16), key = value (1, 9, 16), key_padding_mask (1, 9)"), 1, 2, 9, 16, 4,
                     kind="cross", kpm=padding(1, 9, [5])),
                case(tr("self-attention, x (2, 4, 12), one head"), 2, 4, 4, 12, 1),
                case(tr("self-attention, x (2, 3, 8), d_k = 1"), 2, 3, 3, 8, 8, dtype=float64),
                case(tr("query (4, 3, 16), key and value (4, 5, 16) different, attn_mask (4, 3, 5), key_padding_mask (4, 5)"),
                     4, 3, 5, 16, 4, kind="qkv", attn_mask=random_mask(4, 3, 5), kpm=padding(4, 5, [5, 2, 4, 3]), bias=False),
                case(tr("self-attention, x (2, 7, 16), causal attn_mask (7, 7) and key_padding_mask (2, 7)"), 2, 7, 7, 16, 2,
                     attn_mask=causal(7), kpm=padding(2, 7, [7, 5]), dtype=float64, bias=False),
            ]
            dead = random_mask(2, 4, 6)
            dead[1, 2] = False  # this query may attend to no key at all
            out.append(case(tr("cross-attention, query (2, 4, 16), key = value (2, 6, 16), attn_mask (2, 4, 6) with a "
                               "query that may attend to nothing"), 2, 4, 6, 16, 4, kind="cross", attn_mask=dead,
                            tag="fully-masked"))
            out.append(self._dropout_case(g, case, rand, B=3, T=5, d_model=24, h=3, dtype=torch.float32))
            out.append(Case("MultiHeadAttention(d_model=30, h=8)", (), {}, "invalid",
                            init={"d_model": 30, "h": 8}, method="extra_repr"))
        return out

    @staticmethod
    def _dropout_case(g, case, rand, B: int, T: int, d_model: int, h: int, dtype: torch.dtype) -> Case:
        """Training mode with W^V and W^O the identity, so that the output reveals the dropped weights."""
        state = mha_state(g, d_model)
        eye, zero = torch.eye(d_model), torch.zeros(d_model)
        state |= {"w_v.weight": eye, "w_v.bias": zero, "w_o.weight": eye.clone(), "w_o.bias": zero.clone()}
        return case(tr("self-attention in training mode, x ({B}, {T}, {d_model}), W^V = W^O = identity").format(
                    B=B, T=T, d_model=d_model), B, T, T, d_model, h,
                    dtype=dtype, state=state, dropout=DROPOUT_P, tag="dropout")

    def stages(self, case: Case) -> list[Stage]:
        """Eval mode: the three projections, the heads cut from them, each head's context, the heads side by
        side, the output. (The masks are no values a stage compares: they are made of booleans.)"""
        if case.train:
            return []
        h = case.init["h"]
        query, key, value = (t.double() for t in case.args)
        state = double_state(case.state)
        B, T_q, d_model = query.shape
        projected = [oracles.linear(state, x, prefix=f"{name}.") for x, name in
                     ((query, "w_q"), (key, "w_k"), (value, "w_v"))]
        heads = [oracles.split_heads(p, h) for p in projected]  # (B, h, T, d_k) each
        _, weights = _oracle(case)
        context = weights @ heads[2]  # (B, h, T_q, d_k)
        merged = context.transpose(1, 2).reshape(B, T_q, d_model)
        return [Stage(N_("the projections w_q(query), w_k(key), w_v(value), (B, T, d_model)"), tuple(projected)),
                Stage(N_("the heads cut from them, (B, h, T, d_k)"), tuple(heads)),
                Stage.of(N_("each head's attention weights and context, weights @ v, (B, h, T_q, d_k)"), weights,
                         context),
                Stage.of(N_("the heads side by side again, (B, T_q, d_model)"), merged),
                Stage.of(N_("the output w_o(...)"), oracles.linear(state, merged, prefix="w_o."))]

    @staticmethod
    def _mistaken(case: Case, kwargs: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """The output and weights of the course's computation with one catalogued mistake (``kwargs``)."""
        query, key, value = (t.double() for t in case.args)
        return oracles.multi_head_attention(case.state, query, key, value, h=case.init["h"],
                                            attn_mask=case.kwargs.get("attn_mask"),
                                            key_padding_mask=case.kwargs.get("key_padding_mask"), **kwargs)

    @rule("shape (B, T_q, d_model)")
    def _shape(self, case: Case, result: Any) -> None:
        B, T_q, d_model = case.args[0].shape
        expect_shape(module_output(result, self.function, case), (B, T_q, d_model),
                     tr("`{function}`'s output").format(function=self.function), case,
                     tr("The output has one d_model vector per query: merge the heads and apply w_o."))

    @rule("finite")
    def _finite(self, case: Case, result: Any) -> None:
        expect_finite(module_output(result, self.function, case), tr("`{function}`'s output").format(function=self.function),
                      case, tr("a query that may attend to no key must get zero weights (scaled_dot_product_attention "
                               "already does this), so its output is w_o's bias.") if case.tag == "fully-masked" else "")

    @rule("output")
    def _values(self, case: Case, result: Any) -> None:
        out, query = module_output(result, self.function, case), case.args[0]
        expected_out, expected_w = self.worked_out(case, _oracle)
        if case.tag == "dropout":
            self._judge_dropout(case, out, expected_out, expected_w)
            return
        diagnoses = [(lambda kw=kw: self._mistaken(case, kw)[0], tr(message)) for kw, message in MISTAKEN]
        hint = ""
        if case.init.get("dropout"):
            hint = tr(EVAL_DROPOUT)
            # What dropout left on would have drawn: the same masks, from the same seed.
            diagnoses.insert(0, (lambda: self._mistaken(case, {"dropout": oracles.Dropout(case.init["dropout"],
                                                                                          query.dtype)})[0],
                                 tr("dropout is active although the layer is in eval mode. {advice}").format(
                                     advice=tr(EVAL_DROPOUT))))
        expect_close(out, expected_out, tr("`{function}`'s output").format(function=self.function), case, diagnoses,
                     hint=hint, dtype=query.dtype)

    @rule("attn_weights")
    def _weights(self, case: Case, result: Any) -> None:
        _, expected_w = self.worked_out(case, _oracle)
        if case.tag == "dropout":
            # The mask nn.Dropout drew on the weights, which the layer must not store.
            dropped = oracles.Dropout(case.init["dropout"], case.args[0].dtype).mask(expected_w.shape) * expected_w
            diagnoses = [(lambda: dropped, tr(AFTER_DROPOUT))]
        else:
            diagnoses = [(lambda kw=kw: self._mistaken(case, kw)[1], tr(message)) for kw, message in MISTAKEN]
        self._judge_weights(case, result, expected_w, diagnoses)

    @rule("h and d_k stored")
    def _attributes(self, case: Case, result: Any) -> None:
        self._judge_attributes(case, result)

    rules = (_shape, _finite, _values, _weights, _attributes)

    def _judge_weights(self, case: Case, result: ModuleResult, expected_w: torch.Tensor, diagnoses) -> None:
        """self.attn_weights: every head's softmax weights, (B, h, T_q, T_k), before dropout."""
        function = self.function
        what = tr("`{function}`'s attn_weights").format(function=function)
        query, key, _ = case.args
        B, T_q, _ = query.shape
        T_k, h = key.shape[1], case.init["h"]
        weights = result.attributes.get("attn_weights")
        if weights is None:
            raise CheckFailed(tr(
                "`{function}` did not set self.attn_weights on the case {case}: store the attention weights of "
                "every head, (B, h, T_q, T_k), detached, during forward."
            ).format(function=function, case=case.label))
        weights = expect_tensor(weights, what, case)
        if tuple(weights.shape) == (B, T_q, T_k) and h > 1:
            raise CheckFailed(tr(
                "`{function}`'s attn_weights has shape {shape} on the case {case}: keep one map per "
                "head, (B, h, T_q, T_k), rather than averaging them."
            ).format(function=function, shape=tuple(weights.shape), case=case.label))
        expect_shape(weights, (B, h, T_q, T_k), what, case,
                     tr("Store the weights of every head as scaled_dot_product_attention returns them: "
                        "(B, h, T_q, T_k)."))
        alive = expected_w.sum(-1) > 0.5  # (B, h, T_q) queries that see at least one key
        sums = weights.double().sum(-1)
        if not torch.allclose(sums[alive], torch.ones_like(sums[alive]), atol=1e-4):
            raise named_failure(
                tr("`{function}`'s attn_weights are wrong on the case {case}: ").format(function=function, case=case.label),
                [message for mistaken, message in diagnoses if matches(weights, mistaken(), query.dtype)],
                tr("`{function}`'s attn_weights rows do not sum to 1 on the case {case}: store the softmax weights "
                   "themselves (before dropout), not the scores or the dropped-out weights.").format(
                    function=function, case=case.label),
            )
        expect_close(weights, expected_w, what, case, diagnoses, dtype=query.dtype)

    def _judge_attributes(self, case: Case, result: ModuleResult) -> None:
        d_model, h = case.init["d_model"], case.init["h"]
        for attribute, expected in (("h", h), ("d_k", d_model // h)):
            got = result.attributes.get(attribute)
            if isinstance(got, torch.Tensor) and got.numel() == 1:
                got = got.item()
            if isinstance(got, bool) or got != expected:
                said = tr(
                    "`{function}`'s attribute {attribute} is missing on the case {case}, where {expected} "
                    "was expected: store the number of heads as self.h and the size of each head as "
                    "self.d_k = d_model // h in __init__, as the exercise asks."
                ) if got is None else tr(
                    "`{function}`'s attribute {attribute} is {got} on the case {case}, where {expected} "
                    "was expected: store the number of heads as self.h and the size of each head as "
                    "self.d_k = d_model // h in __init__, as the exercise asks."
                )
                raise CheckFailed(said.format(function=self.function, attribute=attribute, got=repr(got),
                                              case=case.label, expected=expected))

    def _judge_dropout(self, case: Case, out: torch.Tensor, eval_out: torch.Tensor, eval_w: torch.Tensor) -> None:
        """In training mode every weight is dropped (0) or scaled by 1/(1-p), and the output follows from them."""
        query, _, value = case.args
        B, T, d_model = query.shape
        h = case.init["h"]
        keep = 1.0 - case.init["dropout"]
        o = out.double()
        if matches(out, eval_out, query.dtype):
            raise CheckFailed(tr(
                "`{function}` ignored dropout in training mode on the case {case}: apply self.dropout to the "
                "attention weights (between the softmax and the product with V), as PyTorch does."
            ).format(function=self.function, case=case.label))
        atol = 1e-6 if query.dtype == torch.float64 else 1e-4
        per_entry = ((o.abs() < atol) | torch.isclose(o, eval_out / keep, atol=atol, rtol=1e-3)).all()
        # With W^V = W^O = I the output of each head is C @ V_head; C holds the weights actually used.
        v_heads = value.double().reshape(B, T, h, -1).transpose(1, 2)  # (B, h, T_k, d_k)
        o_heads = o.reshape(B, T, h, -1).transpose(1, 2)  # (B, h, T_q, d_k)
        used = o_heads @ torch.linalg.pinv(v_heads)  # (B, h, T_q, T_k)
        explained = torch.allclose(used @ v_heads, o_heads, atol=atol * 10)
        dropped = used.abs() < atol * 10
        kept = torch.isclose(used, eval_w / keep, atol=atol * 10, rtol=1e-3)
        if explained and bool((dropped | kept).all()) and bool(dropped.any()) and bool(kept.any()):
            return
        if per_entry:
            raise CheckFailed(tr(
                "`{function}` applied dropout to the output on the case {case}, not to the attention weights: "
                "PyTorch (and the paper's reference code) drops attention weights, so that a query ignores some "
                "keys for one step. Apply self.dropout to the weights, then multiply by V."
            ).format(function=self.function, case=case.label))
        if explained and bool((dropped | torch.isclose(used, eval_w, atol=atol * 10, rtol=1e-3)).all()):
            raise CheckFailed(tr(
                "`{function}`'s dropped weights were not rescaled by 1 / (1 - p) on the case {case}: use nn.Dropout, "
                "which scales the kept weights so that their expected value does not change."
            ).format(function=self.function, case=case.label))
        raise CheckFailed(tr(
            "`{function}`'s output in training mode is not what dropout on the attention weights gives, on the case "
            "{case}: each weight must be either dropped (0) or divided by (1 - p), and the output computed "
            "from those weights. Apply self.dropout once, to the weights, between the softmax and the product with V."
        ).format(function=self.function, case=case.label))

    @rule("padded keys change nothing")
    def _padding(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        pair = tagged_pair(cases, results)
        if pair is not None:
            case_a, a, b = pair
            if not matches(a.output, b.output):
                raise CheckFailed(tr(
                    "`{function}`'s output changed when only the padded keys and values changed "
                    "({case}): a padded key must have no influence at all. Combine "
                    "~key_padding_mask[:, None, None, :] with the attention mask before the softmax."
                ).format(function=self.function, case=case_a.label))

    rules_across = (_padding,)


CHECKS = [SplitHeadsCheck, MergeHeadsCheck, MultiHeadAttentionCheck]


# What the instructions state, and the visible case that holds a learner to it. The rules every graded
# function keeps (its arguments left unchanged, no view of them returned where the exercise does not
# allow one, the arguments' dtype and device followed, gradients reaching them, attributes stored
# detached where the exercise says so) are the base class's (Check.judge_effects, judge_dtype) and
# are not repeated here, except the detached attn_weights, which this exercise asks for by name.
STATED = {
    "split_heads": (
        Stated("head i takes features i*d_k .. (i+1)*d_k - 1 at every position", "x (2, 5, 8)",
               "without the transpose"),
        Stated("the blocks are consecutive, not every h-th feature", "x (2, 5, 8)", "every h-th feature"),
        Stated("d_model not a multiple of h raises ValueError", "invalid", "raise ValueError"),
        Stated("that ValueError names both numbers", "invalid", "name both numbers"),
    ),
    "merge_heads": (
        Stated("merging is the exact inverse of split_heads", "round-trip", "interleaved"),
        Stated("the head axis goes back behind the positions", "x (2, 2, 5, 4)",
               "not moved back behind the positions"),
        Stated("the heads are concatenated, not summed", "x (2, 2, 5, 4)", "The heads were summed"),
    ),
    "MultiHeadAttention": (
        Stated("bias=False leaves the biases out", "bias=False", "parameters the exercise does not ask for"),
        Stated("the layer keeps h and d_k", "x (2, 5, 24)", "store the number of heads as self.h"),
        Stated("attn_weights is stored detached from the graph", "x (2, 5, 24)",
               "still attached to the autograd graph"),
        Stated("attn_weights holds every head's weights", "x (2, 5, 24)", "rather than averaging them"),
        Stated("attn_weights is taken before dropout", "dropout=0.5", "holds the weights after dropout"),
        Stated("in training mode dropout acts on the attention weights", "dropout=0.5",
               "applied dropout to the output"),
        Stated("in eval mode dropout does nothing", "in eval mode", "dropout is active although the layer is in eval"),
        Stated("d_model not a multiple of h raises ValueError in the constructor", "invalid", "did not raise"),
        Stated("that ValueError names both numbers", "invalid", "name both numbers"),
        Stated("attn_mask is True where a query may attend", "causal attn_mask (5, 5)", "attn_mask is inverted"),
        Stated("attn_mask may be (B, T_q, T_k), one per sequence", "attn_mask (2, 4, 6)",
               "attn_mask.unsqueeze(1)"),
        Stated("key_padding_mask is True where a key is padding", "pair-", "key_padding_mask is inverted"),
        Stated("padded keys never change the output", "pair-", "key_padding_mask was ignored"),
        Stated("key and value are separate tensors", "three different tensors",
               "the value was projected with w_k"),
        Stated("a query that may attend to no key gets zero weights and a zero output, not NaN", "fully-masked",
               "a query that may attend to no key must get zero weights"),
    ),
}
