"""Chapter 4 checks: the position-wise feed-forward network, LayerNorm, the encoder layer, the encoder.

Oracles: the closed form of the FFN and ``nn.Linear``/``nn.ReLU``, ``nn.LayerNorm``,
``nn.TransformerEncoderLayer`` and ``nn.TransformerEncoder`` (post-norm, ReLU, dropout off), all
in float64 and loaded with the weights the learner's module receives (names in
:mod:`autograder.oracles`). In training mode the expected output is the functional layer of the
toolkit fed with the very dropout masks the learner's modules draw (:class:`autograder.oracles.Dropout`).
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from .. import oracles
from ..framework import (
    Case,
    Check,
    CheckFailed,
    Hint,
    Opaque,
    Raised,
    Stage,
    Stated,
    expect_close,
    expect_finite,
    expect_shape,
    matches,
    mismatched,
    module_output,
    raised_text,
    rule,
    tagged_pair,
)
from ..messages import N_, tr
from . import state_mismatch

State = dict[str, torch.Tensor]
Diagnoses = list[tuple[Callable[[], torch.Tensor], str]]

LAYER_BUILTINS = ("torch.nn.TransformerEncoderLayer", "torch.nn.TransformerEncoder", "torch.nn.Transformer",
                  "torch.nn.MultiheadAttention", "torch.nn.functional.multi_head_attention_forward")
#: the fused kernels behind them: _transformer_encoder_layer_fwd, _native_multi_head_attention
LAYER_OPS = ("transformer_encoder_layer", "multi_head_attention")
NORM_BUILTINS = (
    "torch.nn.LayerNorm", "torch.nn.functional.layer_norm", "torch.layer_norm", "torch.native_layer_norm",
    # each normalises over the last axis when the input is reshaped to suit it
    "torch.nn.GroupNorm", "torch.nn.functional.group_norm", "torch.nn.functional.instance_norm",
    "torch.nn.functional.batch_norm", "torch.nn.RMSNorm", "torch.nn.functional.rms_norm",
)
NORM_OPS = ("layer_norm", "group_norm", "instance_norm", "batch_norm", "rms_norm")


# ----------------------------------------------------------------------------------------
# PositionwiseFeedForward
# ----------------------------------------------------------------------------------------


class PositionwiseFeedForwardCheck(Check):
    function = "PositionwiseFeedForward"
    trained_through = True  # a model learns through it: gradients must reach what it was made from
    oracle = N_("max(0, x W_1 + b_1) W_2 + b_2 and nn.Linear, nn.ReLU, nn.Linear with the same weights")
    hints = (Hint("StateMismatch", lambda name, case, result: mismatched(
        name, case, result, tr("The paper's FFN has biases b_1 and b_2: keep nn.Linear's default bias=True.")),
        when=lambda case, result: (any(n.endswith(".bias") for n in state_mismatch(result).missing)
                                   and not state_mismatch(result).unexpected), whole=True),)

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(shape, d_ff, dropout=0.1, train=False, scale=1.0, extra=""):
            d_model = shape[-1]
            x = torch.randn(shape, generator=g) * scale
            mode = tr("training mode, dropout={dropout}").format(dropout=dropout) if train else tr("eval mode")
            return Case(
                f"d_model={d_model}, d_ff={d_ff}, x {tuple(shape)}, {mode}{extra}", (x,),
                init={"d_model": d_model, "d_ff": d_ff, "dropout": dropout},
                state=oracles.ffn_state(g, d_model, d_ff), train=train, tag="train" if train else "",
            )

        out = [
            case((2, 5, 16), 32),
            case((7, 8), 24, extra=tr(" (no batch axis)")),
            case((2, 3, 4, 12), 20, dropout=0.5, extra=tr(" (two leading axes)")),
            case((2, 4, 8), 32, dropout=0.5, train=True),
        ]
        if hidden:
            out += [
                case((3, 6, 32), 64, scale=3.0),
                case((1, 1, 8), 16),
                case((3, 5, 16), 48, dropout=0.3, train=True),
                case((4, 2, 3, 8), 8, dropout=0.2, train=True),
            ]
        return out

    @rule("a tensor of x's shape")
    def _shape(self, case: Case, result: Any) -> None:
        (x,) = case.args
        name = tr("`{function}`'s output").format(function=self.function)
        y = module_output(result, self.function, case)
        d_model, d_ff = case.init["d_model"], case.init["d_ff"]
        if tuple(y.shape) == (*x.shape[:-1], d_ff) and d_ff != d_model:
            raise CheckFailed(tr(
                "{name} has shape {shape}, the hidden width d_ff, on the case {case}: "
                "after the ReLU, w_2 maps the d_ff hidden features back to d_model."
            ).format(name=name, shape=tuple(y.shape), case=case.label))
        expect_shape(y, x.shape, name, case, tr("The FFN keeps the shape (..., d_model) of its input."))

    @rule("finite")
    def _finite(self, case: Case, result: Any) -> None:
        expect_finite(module_output(result, self.function, case),
                      tr("`{function}`'s output").format(function=self.function), case, "")

    @rule("values")
    def _values(self, case: Case, result: Any) -> None:
        (x,) = case.args
        name = tr("`{function}`'s output").format(function=self.function)
        y = module_output(result, self.function, case)
        d_model, d_ff, p = case.init["d_model"], case.init["d_ff"], case.init["dropout"]
        state, xd = case.state, x.double()

        def drops(probability: float = p) -> oracles.Dropout:
            """The masks the learner's module draws, in the order it draws them."""
            return oracles.Dropout(probability, x.dtype)

        pre = oracles.linear(state, xd, prefix="w_1.")  # (..., d_ff)
        evaluated = oracles.feed_forward(state, xd)
        diagnoses = self._diagnoses(case, xd, pre, evaluated)
        if not case.train:
            with torch.no_grad():  # the independent oracle: PyTorch's own layers with the same weights
                expected = oracles.torch_feed_forward(state, d_model, d_ff)(xd)
            diagnoses.append((lambda: oracles.feed_forward(state, xd, dropout=drops()),
                              tr("dropout is active in eval mode: torch.nn.functional.dropout defaults to training=True; "
                                 "use the nn.Dropout submodule self.dropout, which follows model.eval().")))
            expect_close(y, expected, name, case, diagnoses,
                         hint=tr("Check the formula: w_2(dropout(relu(w_1(x)))), with no residual inside the FFN."))
            return

        def twice() -> torch.Tensor:
            stream = drops()
            return stream(oracles.feed_forward(state, xd, dropout=stream))

        expected = oracles.feed_forward(state, xd, dropout=drops())
        diagnoses = [
            (lambda: evaluated, tr("in training mode no dropout was applied: use self.dropout on the hidden "
                                   "activations, after the ReLU (and build it as nn.Dropout(dropout)).")),
            (lambda: drops()(evaluated), tr("dropout was applied to the output of w_2; apply it to the hidden "
                                            "activations, right after the ReLU, as nn.TransformerEncoderLayer does.")),
            (lambda: oracles.feed_forward(state, drops()(xd)), tr("dropout was applied to the input x; apply it to the "
                                                                  "hidden activations, right after the ReLU.")),
            (twice, tr("dropout was applied twice (after the ReLU and again at the output); once, after the ReLU, "
                       "is enough.")),
        ] + [
            (lambda q=q: oracles.feed_forward(state, xd, dropout=drops(q)),
             tr("the dropout probability is {q}, not the constructor's dropout={p}: build the submodule from the "
                "argument, self.dropout = nn.Dropout(dropout).").format(q=q, p=p))
            for q in (0.1, 0.5) if q != p
        ] + self._diagnoses(case, xd, pre, lambda: expected, drops)
        expect_close(y, expected, name, case, diagnoses,
                     hint=tr("Check the formula: w_2(dropout(relu(w_1(x)))), with no residual inside the FFN."))

    rules = (_shape, _finite, _values)

    def stages(self, case: Case) -> list[Stage]:
        if case.train:
            return []  # the dropout masks are the learner's draw: nothing to locate against
        xd = case.args[0].double()
        pre = oracles.linear(case.state, xd, prefix="w_1.")  # (..., d_ff)
        return [Stage.of(tr("w_1(x), before the ReLU"), pre), Stage.of("relu(w_1(x))", torch.relu(pre)),
                Stage.of(tr("the output w_2(relu(w_1(x)))"), oracles.feed_forward(case.state, xd))]

    @staticmethod
    def _diagnoses(case: Case, xd, pre, evaluated, drops=None) -> Diagnoses:
        """The mistakes of the formula; in training mode, with the dropout masks the learner's module draws
        on the hidden activations (``drops``), so that each is verified on every case."""
        state = case.state
        full = evaluated if callable(evaluated) else (lambda: evaluated)

        def second(hidden):
            return oracles.linear(state, hidden if drops is None else drops()(hidden), prefix="w_2.")

        return [
            (lambda: second(pre), tr("the ReLU is missing: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2; without it the "
                                     "two linear maps collapse into one.")),
            (lambda: torch.relu(full()), tr("there is a ReLU on the FFN's output too: the only ReLU sits between "
                                            "w_1 and w_2, and the output must be able to go negative.")),
            (lambda: torch.relu(second(pre)), tr("the ReLU is on the FFN's output instead of between w_1 and w_2: "
                                                 "max(0, x W_1 + b_1), then W_2.")),
            (lambda: second(F.gelu(pre)), tr("this is GELU; the paper's FFN uses ReLU, max(0, ·).")),
            (lambda: xd + full(), tr("the FFN added its input x to its output: the residual connection belongs to "
                                     "the encoder layer, not to the FFN.")),
        ]


# ----------------------------------------------------------------------------------------
# LayerNorm
# ----------------------------------------------------------------------------------------


def _last_axis_hint(message: str) -> str:
    got = re.search(r"but got (-?\d+)", message)
    if got:
        return tr("LayerNorm normalises each position over its own d_model features, the last axis (dim=-1, "
                  "keepdim=True), which every input has; you normalised over dim={dim}.").format(dim=got.group(1))
    return tr("LayerNorm normalises each position over its own d_model features, the last axis (dim=-1, "
              "keepdim=True), which every input has.")


class LayerNormCheck(Check):
    function = "LayerNorm"
    trained_through = True  # a model learns through it: gradients must reach what it was made from
    oracle = N_("torch.nn.LayerNorm with the same gamma and beta")
    forbidden = NORM_BUILTINS
    forbidden_ops = NORM_OPS
    hints = (
        Hint("IndexError", lambda name, case, result: _last_axis_hint(result.message), containing="Dimension out of range"),
        Hint("StateMismatch", lambda name, case, result: mismatched(
            name, case, result, tr("Name the scale `gamma` and the shift `beta`, as in the formula: "
            "self.gamma = nn.Parameter(torch.ones(d_model)), self.beta = nn.Parameter(torch.zeros(d_model)).")),
            when=lambda case, result: bool({"weight", "bias"} & set(state_mismatch(result).unexpected)), whole=True),
    )

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(shape, dtype=torch.float32, eps=None, offset=0.0, scale=1.0, state=True, tag="", extra=""):
            d = shape[-1]
            x = (torch.randn(shape, generator=g, dtype=torch.float64) * scale + offset).to(dtype)
            init = {"d_model": d} if eps is None else {"d_model": d, "eps": eps}
            label = f"d_model={d}, x {tuple(shape)} {str(dtype)[6:]}" + (f", eps={eps}" if eps is not None else "") + extra
            return Case(label, (x,), init=init, state=oracles.layer_norm_state(g, d) if state else None,
                        collect=("eps",), tag=tag)

        out = [
            case((2, 5, 16)),
            case((3, 8), state=False, tag="init", extra=", " + tr("a freshly built LayerNorm (no weights loaded)")),
            case((2, 4, 16), offset=100.0, tag="offset", extra=", " + tr("features near {value}").format(value="100")),
            case((2, 3, 8), eps=1e-3, scale=1e-2, tag="small", extra=", " + tr("features of size {size}").format(size="0.01")),
            case((4, 6, 12), dtype=torch.float64),
        ]
        if hidden:
            constant = torch.randn(3, 10, generator=g)
            constant[1] = 2.5  # a position whose features are all equal: variance 0
            out += [
                case((16,), extra=tr(" (a single position)")),
                case((2, 3, 4, 8)),
                case((2, 5, 32), dtype=torch.float64, offset=1e5, tag="offset",
                     extra=", " + tr("features near {value}").format(value="100000")),
                case((3, 7, 8), eps=0.1, tag="eps", extra=""),
                case((2, 6, 24), scale=1e-3, tag="small", extra=", " + tr("features of size {size}").format(size="0.001")),
                Case(tr("d_model=10, x (3, 10) float32 whose second row is constant"), (constant,), init={"d_model": 10},
                     state=oracles.layer_norm_state(g, 10), collect=("eps",), tag="constant"),
            ]
        return out

    def stages(self, case: Case) -> list[Stage]:
        return oracles.layer_norm_stages(case.state, case.args[0].double(), case.init.get("eps", 1e-5))

    @rule("a tensor of x's shape")
    def _shape(self, case: Case, result: Any) -> None:
        y = module_output(result, self.function, case)
        expect_shape(y, case.args[0].shape, tr("`{function}`'s output").format(function=self.function), case,
                     tr("LayerNorm keeps the shape of its input."))

    @rule("finite")
    def _finite(self, case: Case, result: Any) -> None:
        y = module_output(result, self.function, case)
        expect_finite(y, tr("`{function}`'s output").format(function=self.function), case,
                      tr("A position whose features are all equal has variance 0: eps inside the square "
                         "root, sqrt(var + eps), keeps the division finite.") if case.tag == "constant" else
                      tr("Is eps added inside the square root?"))

    @rule("eps stored")
    def _eps_stored(self, case: Case, result: Any) -> None:
        eps = case.init.get("eps", 1e-5)
        stored = result.attributes.get("eps")
        if isinstance(stored, torch.Tensor) and stored.numel() == 1:
            stored = stored.item()
        if isinstance(stored, bool) or not isinstance(stored, (int, float)) or not math.isclose(stored, eps, rel_tol=1e-6):
            raise CheckFailed(tr(
                "`{function}`'s attribute eps is {stored} on the case {case}, where {eps} was given: "
                "store the constructor's argument as self.eps (and use it in forward)."
            ).format(function=self.function, stored=repr(stored), case=case.label, eps=eps))

    @rule("values")
    def _values(self, case: Case, result: Any) -> None:
        (x,) = case.args
        name = tr("`{function}`'s output").format(function=self.function)
        y = module_output(result, self.function, case)
        d = x.shape[-1]
        eps = case.init.get("eps", 1e-5)
        xd = x.double()
        with torch.no_grad():
            expected = oracles.torch_layer_norm(case.state, d, eps)(xd)

        def norm(**mistake) -> torch.Tensor:
            # Far from zero, float32 rounding is as large as the tolerance: a mistake is then worked out in the
            # case's own dtype, where the learner's arithmetic happens, so that it is verified on this case too.
            z = x if case.tag == "offset" else xd
            return oracles.layer_norm(case.state, z, **({"eps": eps} | mistake)).double()

        diagnoses: Diagnoses = [
            (lambda: norm(unbiased=True),
             tr("this uses the unbiased variance (dividing by d_model - 1, torch.var's default); LayerNorm divides by "
                "d_model: var(dim=-1, unbiased=False), or the mean of the squared deviations.")),
            (lambda: norm(eps_outside=True),
             tr("eps is outside the square root: divide by sqrt(var + eps), not by sqrt(var) + eps.")),
            (lambda: norm(eps=0.0),
             tr("eps is missing: divide by sqrt(var + eps), with eps inside the square root.")),
            (lambda: norm(sqrt=False),
             tr("you divided by the variance; divide by the standard deviation, sqrt(var + eps).")),
        ]
        if not math.isclose(eps, 1e-5):
            diagnoses.append((lambda: norm(eps=1e-5),
                              tr("the eps argument is ignored (1e-5 is used whatever eps is): store it as self.eps and "
                                 "use it in forward.")))
        diagnoses += [
            (lambda o=o: norm(dims=(o,)),
             tr("you normalised over dim={dim}; LayerNorm normalises each position over its own d_model features, "
                "the last axis (dim=-1, keepdim=True).").format(dim=o))
            for o in range(x.dim() - 1)
        ]
        if x.dim() >= 2:
            diagnoses += [
                (lambda: norm(dims=range(x.dim())),
                 tr("the mean and the variance were taken over the whole tensor; take them per position, over the "
                    "last axis only (dim=-1, keepdim=True).")),
            ]
        if x.dim() >= 3:
            diagnoses += [
                (lambda: norm(dims=range(1, x.dim())),
                 tr("the mean and the variance were taken over a whole sequence (every axis but the batch); LayerNorm "
                    "normalises each position separately, over its d_model features (dim=-1).")),
            ]
        diagnoses += [
            (lambda: norm(scale=False), tr("gamma (the scale) is not applied: the output is gamma * x_hat + beta.")),
            (lambda: norm(shift=False), tr("beta (the shift) is not added: the output is gamma * x_hat + beta.")),
            (lambda: norm(scale=False, shift=False),
             tr("gamma and beta are not applied: the output is gamma * x_hat + beta.")),
            (lambda: norm(swap_affine=True), tr("gamma and beta are swapped: gamma multiplies, beta is added.")),
            # In the case's own dtype: the cancellation happens where the learner's arithmetic happens.
            (lambda: oracles.layer_norm(case.state, x, eps=eps, naive_variance=True).double(),
             tr("the variance was computed as E[x^2] - E[x]^2, which loses its digits when the features sit far from "
                "zero; compute it from the centred values: ((x - mean) ** 2).mean(dim=-1, keepdim=True).")),
        ]
        if case.tag == "init":
            diagnoses += [
                (lambda: torch.zeros_like(xd), tr("a fresh LayerNorm returned zeros: gamma must start at ones "
                                                  "(torch.ones(d_model)) and beta at zeros.")),
            ]
        hints = {
            "init": N_("A fresh LayerNorm starts with gamma = torch.ones(d_model) and beta = torch.zeros(d_model), "
                       "so its output is the plain normalised x."),
            "offset": N_("The features sit far from zero: compute the variance from the centred values x - mean "
                         "(E[x^2] - E[x]^2 cancels catastrophically)."),
            "small": N_("The features are tiny, so eps matters: divide by sqrt(var + eps), with the eps given to the "
                        "constructor."),
            "eps": N_("eps is large here: divide by sqrt(var + eps), with the eps given to the constructor."),
        }
        if case.tag == "offset" and x.dtype == torch.float32 and (y.double() - expected).abs().max() < 1e-4:
            # Far from zero, float32 itself rounds x near 100 to about 1e-5: nn.LayerNorm in float32 is off by as
            # much. The two-pass variance stays well inside 1e-4; E[x^2] - E[x]^2 misses by 1e-3 or more.
            return
        expect_close(y, expected, name, case, diagnoses, hint=tr(hints[case.tag]) if case.tag in hints else "")

    rules = (_shape, _finite, _eps_stored, _values)


# ----------------------------------------------------------------------------------------
# EncoderLayer and Encoder share their cases' shapes and the padding property
# ----------------------------------------------------------------------------------------


PADDING_LEAK = N_(
    "the key_padding_mask did not reach the self-attention: pass it on, "
    "self.self_attn(x, x, x, key_padding_mask=key_padding_mask), so that no position attends to padding."
)

# MultiHeadAttention.forward(query, key, value, attn_mask=None, key_padding_mask=None): a padding mask given
# as the fourth positional argument lands in attn_mask, where its (B, T_k) lines up with (T_q, T_k).
MASK_AS_ATTN_MASK = N_(
    "the padding mask reached `attn_mask`: pass it by name, `key_padding_mask=key_padding_mask` (attn_mask is "
    "True where a query may attend; key_padding_mask is True at padding)."
)
PADDING_INVERTED = N_(
    "key_padding_mask is inverted before it reaches the self-attention: it is True where a key IS padding, which "
    "is what MultiHeadAttention's key_padding_mask expects, so pass it on as it is, without ~."
)


def positional_padding_hint(case: Case, result: Raised, names: Sequence[str]) -> str:
    """A hint for a size error on a case with padding: the mask was probably passed positionally.

    A (B, T_k) padding mask taken for a (T_q, T_k) attention mask breaks broadcasting against the
    scores (B, h, T_q, T_k) whenever B differs from T_q, which is the size error seen here.
    """
    if result.type != "RuntimeError" or "must match the size" not in result.message:
        return ""
    if not any(case.kwargs.get(name) is not None for name in names):
        return ""
    # MASK_AS_ATTN_MASK, its subject "the padding mask" become "it"
    return tr("If you gave a padding mask to MultiHeadAttention positionally, as its fourth argument, it reached "
              "`attn_mask`: pass it by name, `key_padding_mask=key_padding_mask` (attn_mask is True where a query may "
              "attend; key_padding_mask is True at padding).")


def fits_as_attn_mask(padding: torch.Tensor | None, T_q: int) -> bool:
    """Whether a (B, T_k) padding mask taken for an attention mask broadcasts against (B, h, T_q, T_k)."""
    return padding is not None and padding.shape[0] in (1, T_q)


class _StackCheck(Check):
    forbidden = LAYER_BUILTINS
    forbidden_ops = LAYER_OPS
    # A wrong value names a mistake more precisely than the exception the same mistake raises on
    # another case (a padding mask taken for an attention mask, say).
    values_first = True
    hints = (
        Hint("RuntimeError", lambda name, case, result: positional_padding_hint(case, result, ("key_padding_mask",))),
        Hint("StateMismatch", lambda name, case, result: mismatched(
            name, case, result, tr("norm1 and norm2 must be your LayerNorm (parameters gamma and beta), not "
                                   "nn.LayerNorm.")),
            when=lambda case, result: any(re.search(r"norm\d\.(weight|bias)$", n) for n in state_mismatch(result).unexpected),
            whole=True),
        Hint("StateMismatch", lambda name, case, result: mismatched(
            name, case, result, tr("The self-attention is chapter 3's MultiHeadAttention (imported at the top, "
                                   "parameters w_q, w_k, w_v, w_o), not nn.MultiheadAttention.")),
            when=lambda case, result: any("in_proj" in n for n in state_mismatch(result).unexpected), whole=True),
    )
    N: int | None = None  # None for the single layer
    #: what the shape rule calls the module ("The encoder")
    keeps_the_shape = ""

    def state(self, g: torch.Generator, d_model: int, d_ff: int, N: int | None) -> State:
        if N is None:
            return oracles.encoder_layer_state(g, d_model, d_ff)
        return oracles.stack_state(oracles.encoder_layer_state, g, N, d_model, d_ff)

    def make_cases(self, g: torch.Generator, specs) -> list[Case]:
        out = []
        for spec in specs:
            # The training specs end with their dropout probability; the others run in eval mode.
            B, T, d_model, h, d_ff, lengths, N, tag, *train = spec
            p = train[0] if train else 0.1
            init = {"d_model": d_model, "h": h, "d_ff": d_ff} | ({} if N is None else {"N": N}) | {"dropout": p}
            x = torch.randn(B, T, d_model, generator=g)
            kwargs = {} if lengths is None else {"key_padding_mask": oracles.padding_mask(lengths, T)}
            where = "" if N is None else f"N={N}, "
            label = (f"{where}d_model={d_model}, h={h}, d_ff={d_ff}, x {(B, T, d_model)}"
                     + ("" if lengths is None else ", " + tr("sequences of lengths {lengths} padded to {T}").format(
                         lengths=list(lengths), T=T))
                     + (", " + tr("training mode, dropout={dropout}").format(dropout=p) if train else ""))
            collect = ("dropout1", "dropout2") if N is None else ()
            case = Case(label, (x,), kwargs, tag=tag, init=init, state=self.state(g, d_model, d_ff, N), collect=collect,
                        train=bool(train))
            out.append(case)
            if tag == "pair-a":
                garbage = x.clone()
                pad = kwargs["key_padding_mask"]
                # Only padded positions change, to values of another scale (float32 keeps its precision).
                garbage[pad] = 4.0 * torch.randn(int(pad.sum()), d_model, generator=g) + 3.0
                out.append(Case(label + ", " + tr("with other values at the padded positions"), (garbage,), kwargs,
                                tag="pair-b", init=init, state=case.state, collect=collect))
        return out

    @rule("padding changes no real position")
    def _padding_changes_nothing(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        pair = tagged_pair(cases, results)
        if pair is not None:
            case, a, b = pair
            real = ~case.kwargs["key_padding_mask"]  # (B, T)
            if not matches(a.output[real], b.output[real]):
                raise CheckFailed(tr(
                    "`{function}`: the outputs of real positions changed when only the padded positions of x "
                    "changed ({case}): padding must never influence real positions; {advice}"
                ).format(function=self.function, case=case.label, advice=tr(PADDING_LEAK)))

    rules_across = (_padding_changes_nothing,)

    @rule("a tensor of x's shape")
    def _shape(self, case: Case, result: Any) -> None:
        y = module_output(result, self.function, case)
        expect_shape(y, case.args[0].shape, tr("`{function}`'s output").format(function=self.function), case,
                     tr("{module} keeps the shape (B, T, d_model) of its input.").format(
                         module=tr(self.keeps_the_shape)))

    @rule("finite")
    def _finite(self, case: Case, result: Any) -> None:
        expect_finite(module_output(result, self.function, case),
                      tr("`{function}`'s output").format(function=self.function), case, "")

    def expect_layer(self, y: torch.Tensor, expected: torch.Tensor, case: Case, diagnoses: Diagnoses) -> None:
        name = tr("`{function}`'s output").format(function=self.function)
        expect_close(y, expected, name, case, diagnoses,
                     hint=tr("Compare your forward with x = norm1(x + dropout1(self_attn(x, x, x, "
                             "key_padding_mask=...))), then x = norm2(x + dropout2(feed_forward(x)))."))


# ----------------------------------------------------------------------------------------
# EncoderLayer
# ----------------------------------------------------------------------------------------


def encoder_layer(
    state: State,
    x: torch.Tensor,
    *,
    h: int,
    prefix: str = "",
    key_padding_mask: torch.Tensor | None = None,
    dropout: oracles.Dropout | None = None,
    attn_dropout: oracles.Dropout | None | str = "same",
    ffn_dropout: oracles.Dropout | None | str = "same",
    wiring: tuple[str, str] = ("post", "post"),
    dropout_at: tuple[str, str] = ("sublayer", "sublayer"),
    order: tuple[str, str] = ("attn", "ffn"),
    norms: tuple[str, str] = ("norm1", "norm2"),
    ffn_reads: str = "previous",
    residual_from: str = "previous",
    padding: str = "given",
) -> torch.Tensor:
    """One encoder layer as a function (in the dtype of x); the keywords reproduce learners' mistakes.

    ``dropout`` draws the residual dropout's masks (training mode) and, unless told otherwise, those
    of the attention weights and the FFN's hidden layer: the learner's modules draw them in the same
    order, from one generator. ``ffn_reads``/``residual_from`` = "input" make the second sub-layer
    read, or add back, the layer's input instead of the first sub-layer's output. ``padding`` says
    what became of the key_padding_mask: "given" (right), "none", "inverted" or "as-attn-mask" (handed
    to the attention's attn_mask, as passing it positionally does).
    """
    attn_dropout = dropout if attn_dropout == "same" else attn_dropout
    ffn_dropout = dropout if ffn_dropout == "same" else ffn_dropout
    masks = {
        "given": {"key_padding_mask": key_padding_mask},
        "none": {},
        "inverted": {"key_padding_mask": None if key_padding_mask is None else ~key_padding_mask},
        "as-attn-mask": {"attn_mask": key_padding_mask},  # english: a name of the code
    }[padding]

    def attn(z: torch.Tensor) -> torch.Tensor:
        return oracles.multi_head_attention(state, z, z, z, h=h, prefix=f"{prefix}self_attn.", dropout=attn_dropout,
                                            **masks)[0]

    def ffn(z: torch.Tensor) -> torch.Tensor:
        return oracles.feed_forward(state, z, prefix=f"{prefix}feed_forward.", dropout=ffn_dropout)

    blocks = {"attn": attn, "ffn": ffn}
    y = x
    for step, (block, norm, wire, where) in enumerate(zip(order, norms, wiring, dropout_at)):
        f, base = blocks[block], y
        if step == 1 and (ffn_reads == "input" or residual_from == "input"):
            source = x if ffn_reads == "input" else y
            base = x if residual_from == "input" else y
            def f(_, f=f, source=source):  # post-norm wiring only
                return f(source)
        y = oracles.sublayer(state, base, f, norm=f"{prefix}{norm}", wiring=wire, dropout=dropout, dropout_at=where)
    return y


def encoder_layer_stages(case: Case, x: torch.Tensor, prefix: str = "") -> list[Stage]:
    """The stages of one encoder layer in eval mode: each sub-layer's output, residual sum and norm."""
    h, mask = case.init["h"], case.kwargs.get("key_padding_mask")

    def attn(z: torch.Tensor) -> torch.Tensor:
        return oracles.multi_head_attention(case.state, z, z, z, h=h, prefix=f"{prefix}self_attn.",
                                            key_padding_mask=mask)[0]

    def ffn(z: torch.Tensor) -> torch.Tensor:
        return oracles.feed_forward(case.state, z, prefix=f"{prefix}feed_forward.")

    return oracles.post_norm_stages(case.state, x, [("self_attn", attn, f"{prefix}norm1"),
                                                    ("feed_forward", ffn, f"{prefix}norm2")])


def _layer_mistakes(mask: torch.Tensor | None, T: int) -> list[tuple[dict, str]]:
    """The wrong wirings of an encoder layer, as keywords of :func:`encoder_layer`, and their names."""
    wrong = [
        (dict(wiring=("pre", "pre")),
         tr("this is the pre-norm layer x + Sublayer(LayerNorm(x)); the paper's layer, asked for here, normalises "
            "after the residual sum: LayerNorm(x + Sublayer(x)).")),
        (dict(wiring=("inner", "inner")),
         tr("the residual was added after the normalisation, LayerNorm(Sublayer(x)) + x; add the sub-layer's input "
            "first, then normalise: LayerNorm(x + Sublayer(x)).")),
        (dict(wiring=("none", "none")),
         tr("there is no residual connection: add each sub-layer's input to its output before normalising, "
            "LayerNorm(x + Sublayer(x)).")),
        (dict(wiring=("post", "none")),
         tr("the feed-forward sub-layer has no residual connection: norm2(x + dropout2(feed_forward(x))).")),
        (dict(wiring=("none", "post")),
         tr("the self-attention sub-layer has no residual connection: norm1(x + dropout1(self_attn(x, x, x, ...))).")),
        (dict(norms=("norm2", "norm1")),
         tr("norm1 and norm2 are swapped: norm1 follows the self-attention, norm2 the feed-forward network.")),
        (dict(order=("ffn", "attn")),
         tr("the sub-layers are in the wrong order: self-attention comes first, then the feed-forward network.")),
        (dict(residual_from="input"),
         tr("the second residual adds the layer's input; it must add the input of the feed-forward sub-layer, which "
            "is the output of the first sub-layer.")),
        (dict(ffn_reads="input"),
         tr("the feed-forward network was applied to the layer's input; it takes the output of the first sub-layer "
            "(after norm1).")),
    ]
    if mask is not None:
        wrong[:0] = [(dict(padding="none"), tr(PADDING_LEAK)), (dict(padding="inverted"), tr(PADDING_INVERTED))]
        if fits_as_attn_mask(mask, T):
            wrong.insert(0, (dict(padding="as-attn-mask"), tr(MASK_AS_ATTN_MASK)))  # english: a name of the code
    return wrong


RESIDUAL_DROPOUT = N_(
    "The paper applies dropout to the output of each sub-layer, before it is added to the sub-layer's input and "
    "normalised: x = norm1(x + dropout1(self_attn(x, x, x, ...))), then x = norm2(x + dropout2(feed_forward(x)))."
)

#: each message is told with {advice}, RESIDUAL_DROPOUT, filled in
TRAINING_MISTAKES: list[tuple[dict, str]] = [
    (dict(dropout_at=("none", "none")),
     N_("in training mode the residual dropout is missing: dropout1 and dropout2 are built but never used. "
        "{advice}")),
    (dict(dropout_at=("sum", "sum")),
     N_("dropout was applied to the residual sum x + Sublayer(x); it belongs on the sub-layer's output alone, so "
        "that the residual path x always gets through. {advice}")),
    (dict(dropout_at=("norm", "norm")),
     N_("dropout was applied after the LayerNorm; it belongs on the sub-layer's output, before the residual sum. "
        "{advice}")),
    (dict(dropout_at=("sublayer", "none")),
     N_("dropout2 is never applied: the feed-forward sub-layer needs its dropout too. {advice}")),
    (dict(dropout_at=("none", "sublayer")),
     N_("dropout1 is never applied: the self-attention sub-layer needs its dropout too. {advice}")),
]


def _training_mistakes(p: float) -> list[tuple[Callable[[oracles.Dropout], dict], str]]:
    """Mistakes of the dropout probabilities: keywords built from the case's stream of masks."""
    return [
        (lambda d: dict(attn_dropout=None),
         tr("the self-attention drops no attention weights: build it with the layer's dropout, "
            "MultiHeadAttention(d_model, h, dropout).")),
        (lambda d: dict(ffn_dropout=d.at(0.1)),
         tr("the feed-forward network drops with probability 0.1, not the layer's dropout={p}: build it with the "
            "layer's dropout, PositionwiseFeedForward(d_model, d_ff, dropout).").format(p=p)),
        (lambda d: dict(dropout=d.at(0.1), attn_dropout=d, ffn_dropout=d),
         tr("dropout1 and dropout2 drop with probability 0.1, not the layer's dropout={p}: build them from the "
            "argument, nn.Dropout(dropout).").format(p=p)),
    ] if p != 0.1 else []


class EncoderLayerCheck(_StackCheck):
    function = "EncoderLayer"
    trained_through = True  # a model learns through it: gradients must reach what it was made from
    oracle = N_("nn.TransformerEncoderLayer (post-norm, ReLU) with the same weights")

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)
        specs = [  # B, T, d_model, h, d_ff, lengths, N, tag[, dropout in training mode]
            (2, 5, 16, 4, 32, None, None, ""),
            (2, 6, 16, 2, 24, (6, 4), None, "pair-a"),
            (3, 4, 8, 2, 16, (4, 2, 3), None, ""),
            # B == T: a padding mask taken for an attention mask broadcasts, so the mistake has values to name.
            (4, 4, 16, 4, 32, (4, 2, 3, 1), None, ""),
            (2, 5, 16, 4, 32, (5, 3), None, "train", 0.3),
        ]
        if hidden:
            specs += [
                (1, 7, 32, 8, 64, None, None, ""),
                (4, 6, 12, 3, 20, (6, 1, 3, 5), None, ""),
                (3, 5, 24, 4, 16, (2, 5, 4), None, "pair-a"),
                (3, 6, 24, 3, 48, None, None, "train", 0.5),
            ]
        return self.make_cases(g, specs)

    def stages(self, case: Case) -> list[Stage]:
        return [] if case.train else encoder_layer_stages(case, case.args[0].double())

    keeps_the_shape = N_("An encoder layer")

    @rule("dropout submodules")
    def _dropout_submodules(self, case: Case, result: Any) -> None:
        for attr in ("dropout1", "dropout2"):
            got = result.attributes.get(attr)
            if not (isinstance(got, Opaque) and got.type == "Dropout"):
                raise CheckFailed(tr(
                    "`{function}` has no submodule {attr} of type nn.Dropout on the case {case}: "
                    "the paper applies dropout to each sub-layer's output before the residual sum; build "
                    "self.{attr} = nn.Dropout(dropout)."
                ).format(function=self.function, attr=attr, case=case.label))

    @rule("values")
    def _values(self, case: Case, result: Any) -> None:
        (x,) = case.args
        y = module_output(result, self.function, case)
        d_model, h, d_ff, p = (case.init[k] for k in ("d_model", "h", "d_ff", "dropout"))
        mask = case.kwargs.get("key_padding_mask")
        xd = x.double()

        def layer(stream: oracles.Dropout | None = None, **mistake) -> torch.Tensor:
            with torch.no_grad():
                return encoder_layer(case.state, xd, h=h, key_padding_mask=mask, **({"dropout": stream} | mistake))

        def drops() -> oracles.Dropout:
            return oracles.Dropout(p, x.dtype)

        if case.train:
            # The learner's nn.Dropout modules draw their masks from the seed the case runs with; PyTorch's
            # layers cannot be given those masks, so the functional layer, checked against nn.TransformerEncoderLayer
            # on every eval case, computes the expected output with them.
            diagnoses = [(lambda kw=kw: layer(drops(), **kw), tr(message).format(advice=tr(RESIDUAL_DROPOUT)))
                         for kw, message in TRAINING_MISTAKES]
            diagnoses += [(lambda f=f: (lambda d: layer(d, **f(d)))(drops()), message)
                          for f, message in _training_mistakes(p)]
            diagnoses.append((lambda: layer(None), tr("no dropout was applied at all in training mode. {advice}").format(
                advice=tr(RESIDUAL_DROPOUT))))
            diagnoses += [(lambda kw=kw: layer(drops(), **kw), message) for kw, message in _layer_mistakes(mask, x.shape[1])]
            self.expect_layer(y, layer(drops()), case, diagnoses)
            return
        with torch.no_grad():
            expected = oracles.torch_encoder_layer(case.state, d_model, h, d_ff)(xd, src_key_padding_mask=mask)
        if not matches(y, expected, x.dtype):
            # The functional twin that names the mistakes must agree with PyTorch, or its names mean nothing.
            assert matches(layer(), expected, torch.float64), \
                "grader error: the functional encoder layer disagrees"  # english: the grader's own assertion
        diagnoses = [(lambda kw=kw: layer(**kw), message) for kw, message in _layer_mistakes(mask, x.shape[1])]
        if p > 0:
            diagnoses.append((lambda: layer(drops(), attn_dropout=None, ffn_dropout=None),
                              tr("dropout is active in eval mode: use the submodules dropout1 and dropout2 "
                                 "(nn.Dropout, which follows module.eval()) rather than torch.nn.functional.dropout.")))
        self.expect_layer(y, expected, case, diagnoses)

    rules = (_StackCheck._shape, _StackCheck._finite, _dropout_submodules, _values)


# ----------------------------------------------------------------------------------------
# Encoder
# ----------------------------------------------------------------------------------------


def _encoder_mismatch(name: str, case: Case, result: Raised) -> str:
    mismatch = state_mismatch(result)
    missing, unexpected, N = mismatch.missing, mismatch.unexpected, case.init["N"]
    outside = [n for n in unexpected if not n.startswith("layers.")]
    head = tr("{name}'s parameters do not match on the case {case}: {message}").format(
        name=name, case=case.label, message=raised_text(result))
    if outside:
        if any("norm" in n or "gamma" in n or "beta" in n for n in outside):
            return tr(
                "{head} Your Encoder has parameters outside `layers` ({names}): a final LayerNorm? The paper's "
                "post-norm encoder ends with the last layer's own norm2: add no final LayerNorm (a final norm "
                "belongs to pre-norm stacks)."
            ).format(head=head, names=", ".join(outside))
        return tr(
            "{head} Your Encoder has parameters outside `layers` ({names}). Everything the encoder holds lives in "
            "its N layers."
        ).format(head=head, names=", ".join(outside))
    if any(re.fullmatch(r"layers\.\d+", alias) for alias, _ in mismatch.shared):
        return tr(
            "{name}'s layers share their weights on the case {case}: the same EncoderLayer "
            "object was repeated ([layer] * N), so all N={N} entries of `layers` are one layer. Create a new "
            "EncoderLayer for each of the N layers: nn.ModuleList(EncoderLayer(...) for _ in range(N))."
        ).format(name=name, case=case.label, N=N)
    layers = sorted({int(m.group(1)) for n in missing if (m := re.match(r"layers\.(\d+)\.", n))})
    if missing and not unexpected and layers:
        if layers[0] == 0:
            return tr(
                "{head} PyTorch sees no layer at all: a plain Python list hides its modules (use "
                "nn.ModuleList), and the stack needs N layers, for _ in range(N)."
            ).format(head=head)
        return tr(
            "{head} Your stack has only {count} of the N={N} layers: build N layers, for _ in range(N)."
        ).format(head=head, count=layers[0], N=N)
    return ""


class EncoderCheck(_StackCheck):
    function = "Encoder"
    trained_through = True  # a model learns through it: gradients must reach what it was made from
    oracle = N_("nn.TransformerEncoder (post-norm, no final norm) with the same weights")
    hints = (Hint("StateMismatch", _encoder_mismatch, whole=True), *_StackCheck.hints)

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)
        # N > 1 first: with one layer, a stack of none cannot tell N - 1 layers from a list PyTorch cannot see.
        specs = [  # B, T, d_model, h, d_ff, lengths, N, tag[, dropout in training mode]
            (3, 4, 8, 2, 16, None, 3, ""),
            (2, 5, 16, 4, 32, None, 1, ""),
            (2, 6, 16, 2, 24, (6, 4), 2, "pair-a"),
            (2, 5, 16, 4, 32, (5, 2), 2, "train", 0.3),
        ]
        if hidden:
            specs += [
                (3, 5, 24, 4, 32, (5, 2, 4), 3, ""),
                (2, 7, 32, 8, 16, None, 2, ""),
                (4, 6, 12, 3, 20, (6, 1, 3, 5), 3, "pair-a"),
            ]
        return self.make_cases(g, specs)

    def stages(self, case: Case) -> list[Stage]:
        if case.train:
            return []
        return oracles.stack_stages(
            case.args[0].double(), case.init["N"],
            lambda i, z: encoder_layer(case.state, z, h=case.init["h"], prefix=f"layers.{i}.",
                                       key_padding_mask=case.kwargs.get("key_padding_mask")), "encoder")

    keeps_the_shape = N_("The encoder")

    @rule("values")
    def _values(self, case: Case, result: Any) -> None:
        (x,) = case.args
        name = tr("`{function}`'s output").format(function=self.function)
        y = module_output(result, self.function, case)
        d_model, h, d_ff, N, p = (case.init[k] for k in ("d_model", "h", "d_ff", "N", "dropout"))
        mask = case.kwargs.get("key_padding_mask")
        xd = x.double()

        def layer(i: int, z: torch.Tensor, m=mask, stream: oracles.Dropout | None = None) -> torch.Tensor:
            with torch.no_grad():
                return encoder_layer(case.state, z, h=h, prefix=f"layers.{i}.", key_padding_mask=m, dropout=stream)

        def run(order, m=mask, first_mask_only=False, stream: oracles.Dropout | None = None):
            z = xd
            for step, i in enumerate(order):
                z = layer(i, z, m if (step == 0 or not first_mask_only) else None, stream)
            return z

        def mistakes(stream=None) -> Diagnoses:
            """The stack's mistakes; in training mode with the dropout masks the learner's layers draw, in
            the order they draw them, so that each is verified on every case."""
            fresh = (lambda: None) if stream is None else (lambda: oracles.Dropout(p, x.dtype))
            found: Diagnoses = []
            if mask is not None:
                found += [
                    (lambda: run(range(N), None, stream=fresh()), tr("the key_padding_mask did not reach the "
                     "layers: pass it to every layer, x = layer(x, key_padding_mask).")),
                    (lambda: run(range(N), first_mask_only=True, stream=fresh()), tr("the key_padding_mask reached "
                     "only the first layer: pass it to every layer, x = layer(x, key_padding_mask).")),
                ]
            if N > 1:
                def each_on_input():
                    d = fresh()
                    return [layer(i, xd, stream=d) for i in range(N)][-1]

                found += [
                    (each_on_input, tr("every layer was applied to the encoder's input and only the last result "
                                       "was kept: feed each layer the previous layer's output, x = layer(x, ...).")),
                    (lambda: layer(0, xd, stream=fresh()), tr("only the first layer ran: is the return statement "
                                                             "inside the loop? All N layers must run, one after the "
                                                             "other.")),
                    (lambda: run(reversed(range(N)), stream=fresh()), tr("the layers ran in reverse order: layers[0] "
                                                                         "comes first.")),
                ]
            found += [
                (lambda: F.layer_norm(run(range(N), stream=fresh()), (d_model,)), tr("the output was normalised "
                 "once more at the end: the paper's post-norm encoder ends with the last layer's own norm2, so add "
                 "no final LayerNorm.")),
            ]
            return found

        if case.train:
            hint = tr("In training mode each layer drops with the encoder's dropout: build every layer with it, "
                      "EncoderLayer(d_model, h, d_ff, dropout).")
            expect_close(y, run(range(N), stream=oracles.Dropout(p, x.dtype)), name, case, [
                (lambda: run(range(N), stream=oracles.Dropout(0.1, x.dtype)),
                 tr("the layers drop with probability 0.1, not the encoder's dropout={p}. {hint}").format(p=p, hint=hint)),
                (lambda: run(range(N)), tr("no dropout was applied in training mode. {hint}").format(hint=hint)),
                *mistakes(stream=True),
            ], hint=hint)
            return
        with torch.no_grad():
            expected = oracles.torch_encoder(case.state, N, d_model, h, d_ff)(xd, src_key_padding_mask=mask)
        expect_close(y, expected, name, case, mistakes(),
                     hint=tr("If your EncoderLayer passes its checks, look at the loop: x = layer(x, "
                             "key_padding_mask) for every layer in self.layers, in order, and return x."))

    rules = (_StackCheck._shape, _StackCheck._finite, _values)


CHECKS = [PositionwiseFeedForwardCheck, LayerNormCheck, EncoderLayerCheck, EncoderCheck]


# What the instructions state, and the visible case that holds a learner to it. The rules every graded
# module keeps (its arguments left unchanged, no view of them returned, the arguments' dtype and device
# followed, gradients reaching its parameters) are the base class's (Check.judge_effects, judge_dtype)
# and are not repeated here.
STATED = {
    "PositionwiseFeedForward": (
        Stated("x may have any number of leading axes", "no batch axis", "not enough values to unpack"),
        Stated("a ReLU sits between w_1 and w_2", "x (2, 5, 16)", "the ReLU is missing"),
        Stated("dropout acts on the hidden activations, after the ReLU", "train",
               "dropout was applied to the output of w_2"),
        Stated("dropout drops with the constructor's probability", "train", "not the constructor's dropout=0.5"),
        Stated("in eval mode dropout does nothing", "x (2, 5, 16), eval mode", "dropout is active in eval mode"),
    ),
    "LayerNorm": (
        Stated("gamma starts at ones and beta at zeros", "init", "gamma must start at ones"),
        Stated("the constructor's eps is used", "small", "the eps argument is ignored"),
        Stated("eps sits inside the square root", "small", "eps is outside the square root"),
        Stated("the variance is biased, as nn.LayerNorm's", "x (2, 5, 16)", "unbiased variance"),
        Stated("it agrees with nn.LayerNorm whatever the offset of the features", "offset", "E[x^2] - E[x]^2"),
        Stated("each position's d_model features are normalised", "x (2, 5, 16)", "you normalised over dim="),
        Stated("the parameters are named gamma and beta", "x (2, 5, 16)", "Name the scale `gamma`"),
        Stated("F.layer_norm is not used", "x (2, 5, 16)", "asks you to build yourself"),
    ),
    "EncoderLayer": (
        Stated("post-norm: LayerNorm(x + Sublayer(x))", "x (2, 5, 16)", "this is the pre-norm layer"),
        Stated("whatever sits at a padded position never changes a real one", "pair-",
               "did not reach the self-attention"),
        Stated("key_padding_mask is True where a position is padding", "lengths [4, 2, 3]",
               "key_padding_mask is inverted"),
        Stated("the padding mask goes to the attention's key_padding_mask", "lengths [4, 2, 3, 1]",
               "the padding mask reached `attn_mask`"),
        Stated("norm1 serves the self-attention and norm2 the feed-forward network", "x (2, 5, 16)",
               "norm1 and norm2 are swapped"),
        Stated("norm1 and norm2 each have their own gamma and beta", "x (2, 5, 16)",
               "one and the same object"),
        Stated("dropout acts on each sub-layer's output, before the residual sum", "train",
               "dropout was applied to the residual sum"),
        Stated("dropout1 and dropout2 are submodules", "x (2, 5, 16)", "has no submodule dropout1"),
        Stated("self_attn is built with the layer's dropout", "train", "drops no attention weights"),
    ),
    "Encoder": (
        Stated("each of the N layers has weights of its own", "N=3", "the same EncoderLayer object was repeated"),
        Stated("the output is the last layer's, with no final LayerNorm", "N=3", "add no final LayerNorm"),
        Stated("the padding mask reaches every layer", "pair-", "reached only the first layer"),
        Stated("there are N layers", "N=3", "only 2 of the N=3 layers"),
        Stated("layers is an nn.ModuleList", "N=3", "a plain Python list hides its modules"),
        Stated("each layer is built with the encoder's dropout", "train", "the layers drop with probability 0.1"),
    ),
}
