"""Chapter 4 checks: the position-wise feed-forward network, LayerNorm, the encoder layer, the encoder.

Oracles: the closed form of the FFN, ``nn.LayerNorm``, ``nn.TransformerEncoderLayer`` and
``nn.TransformerEncoder`` (post-norm, ReLU, dropout off), all in float64 and loaded with the
weights the learner's module receives (names in :mod:`autograder.oracles`).
"""
from __future__ import annotations

import math
import re
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .. import oracles
from ..framework import (
    raised_message,
    Case,
    Check,
    CheckFailed,
    ModuleResult,
    Opaque,
    Raised,
    expect_close,
    expect_dtype,
    expect_finite,
    expect_shape,
    expect_tensor,
    matches,
    seeded,
)

State = dict[str, torch.Tensor]
Diagnoses = list[tuple[Callable[[], torch.Tensor], str]]

LAYER_BUILTINS = ("torch.nn.TransformerEncoderLayer", "torch.nn.TransformerEncoder")
NORM_BUILTINS = ("torch.nn.LayerNorm", "torch.nn.functional.layer_norm", "torch.layer_norm")


def _output(result: Any, name: str, case: Case) -> torch.Tensor:
    out = result.output if isinstance(result, ModuleResult) else result
    return expect_tensor(out, f"`{name}`'s output", case)


def _padding(lengths: Sequence[int], T: int) -> torch.Tensor:
    """(B, T) key-padding mask, True where a position is padding."""
    return torch.arange(T)[None, :] >= torch.tensor(lengths)[:, None]


def _names(message: str, intro: str) -> list[str]:
    """Parameter names listed after ``intro`` in a StateMismatch message."""
    found = re.search(re.escape(intro) + r" ([^;]*?)(?:;|\. Use exactly)", message)
    return [n.strip() for n in found.group(1).split(",")] if found else []


def _missing_and_unexpected(result: Raised) -> tuple[list[str], list[str]]:
    return (
        _names(result.message, "it has no parameter named"),
        _names(result.message, "it has parameters the exercise does not ask for:"),
    )


# ----------------------------------------------------------------------------------------
# float64 pieces built from the state the learner's module received
# ----------------------------------------------------------------------------------------


_linear = oracles.linear


def _ffn(state: State, x: torch.Tensor, prefix: str = "") -> torch.Tensor:
    return oracles.feed_forward(state, x, prefix)


def _norm(state: State, prefix: str, x: torch.Tensor) -> torch.Tensor:
    return oracles.layer_norm(state, x, prefix)


def _attention(state: State, h: int, x: torch.Tensor, mask: torch.Tensor | None, prefix: str = "") -> torch.Tensor:
    mha = oracles.torch_mha(state, x.shape[-1], h, f"{prefix}self_attn.")
    return mha(x, x, x, key_padding_mask=mask, need_weights=False)[0]  # (B, T, d_model)


def _dropout_mask(shape: Sequence[int], p: float, dtype: torch.dtype) -> torch.Tensor:
    """The scaled mask nn.Dropout draws first after torch.manual_seed(0), as the case runs it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return F.dropout(torch.ones(tuple(shape), dtype=dtype), p, training=True).double()


def _torch_ffn_half(state: State, d_model: int, d_ff: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """The feed-forward half of nn.TransformerEncoderLayer (eval mode) holding the FFN's weights."""
    layer = nn.TransformerEncoderLayer(d_model, 1, d_ff, dropout=0.0, activation="relu", batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        for mine, theirs in (("w_1", layer.linear1), ("w_2", layer.linear2)):
            theirs.weight.copy_(state[f"{mine}.weight"])
            theirs.bias.copy_(state[f"{mine}.bias"])
    layer.eval()
    return lambda x: layer.linear2(layer.dropout(layer.activation(layer.linear1(x))))


# ----------------------------------------------------------------------------------------
# PositionwiseFeedForward
# ----------------------------------------------------------------------------------------


class PositionwiseFeedForward(Check):
    function = "PositionwiseFeedForward"
    oracle = "max(0, x W_1 + b_1) W_2 + b_2 and the feed-forward half of nn.TransformerEncoderLayer"

    def cases(self, hidden: bool) -> list[Case]:
        g = seeded(41 if not hidden else 410)

        def case(shape, d_ff, dropout=0.1, train=False, scale=1.0, extra=""):
            d_model = shape[-1]
            x = torch.randn(shape, generator=g) * scale
            mode = f"training mode, dropout={dropout}" if train else "eval mode"
            return Case(
                f"d_model={d_model}, d_ff={d_ff}, x {tuple(shape)}, {mode}{extra}", (x,),
                init={"d_model": d_model, "d_ff": d_ff, "dropout": dropout},
                state=oracles.ffn_state(g, d_model, d_ff), train=train, tag="train" if train else "",
            )

        out = [
            case((2, 5, 16), 32),
            case((7, 8), 24, extra=" (no batch axis)"),
            case((2, 3, 4, 12), 20, dropout=0.5, extra=" (two leading axes)"),
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

    def judge(self, case: Case, result: Any) -> None:
        (x,) = case.args
        name = f"`{self.function}`'s output"
        y = _output(result, self.function, case)
        d_model, d_ff, p = case.init["d_model"], case.init["d_ff"], case.init["dropout"]
        if tuple(y.shape) == (*x.shape[:-1], d_ff) and d_ff != d_model:
            raise CheckFailed(
                f"{name} has shape {tuple(y.shape)}, the hidden width d_ff, on the case {case.label}: "
                "after the ReLU, w_2 maps the d_ff hidden features back to d_model."
            )
        expect_shape(y, x.shape, name, case, "The FFN keeps the shape (..., d_model) of its input.")
        expect_dtype(y, x.dtype, name, case)
        expect_finite(y, name, case, "")

        state = case.state
        xd = x.double()
        pre = _linear(state, "w_1.", xd)  # (..., d_ff)
        hidden_shape = (*x.shape[:-1], d_ff)

        def second(hidden: torch.Tensor) -> torch.Tensor:
            return _linear(state, "w_2.", hidden)  # (..., d_model)

        evaluated = second(torch.relu(pre))
        hidden_mask = _dropout_mask(hidden_shape, p, x.dtype)
        if case.train:
            expected = second(torch.relu(pre) * hidden_mask)
        else:
            expected = evaluated
            # The independent oracle: PyTorch's encoder layer computes the same feed-forward half.
            expect_close(y, _torch_ffn_half(state, d_model, d_ff)(xd), name, case, self._diagnoses(case, xd, pre, evaluated, hidden_mask))

        diagnoses = self._diagnoses(case, xd, pre, evaluated, hidden_mask)
        if case.train:
            out_mask = _dropout_mask(x.shape, p, x.dtype)
            diagnoses = [
                (lambda: evaluated, "in training mode no dropout was applied: use self.dropout on the hidden "
                                    "activations, after the ReLU (and build it as nn.Dropout(dropout))."),
                (lambda: evaluated * out_mask, "dropout was applied to the output of w_2; apply it to the hidden "
                                               "activations, right after the ReLU, as nn.TransformerEncoderLayer does."),
                (lambda: _ffn(state, xd * out_mask), "dropout was applied to the input x; apply it to the hidden "
                                                     "activations, right after the ReLU."),
                (lambda: second(torch.relu(pre) * hidden_mask) * _dropout_mask_second(hidden_shape, x.shape, p, x.dtype),
                 "dropout was applied twice (after the ReLU and again at the output); once, after the ReLU, is enough."),
            ] + diagnoses
        expect_close(y, expected, name, case, diagnoses,
                     hint="Check the formula: w_2(dropout(relu(w_1(x)))), with no residual inside the FFN.")

    @staticmethod
    def _diagnoses(case: Case, xd, pre, evaluated, hidden_mask) -> Diagnoses:
        state = case.state

        def second(hidden):
            return _linear(state, "w_2.", hidden)

        return [
            (lambda: second(pre), "the ReLU is missing: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2; without it the "
                                  "two linear maps collapse into one."),
            (lambda: torch.relu(evaluated), "there is a ReLU on the FFN's output too: the only ReLU sits between "
                                            "w_1 and w_2, and the output must be able to go negative."),
            (lambda: torch.relu(second(pre)), "the ReLU is on the FFN's output instead of between w_1 and w_2: "
                                               "max(0, x W_1 + b_1), then W_2."),
            (lambda: second(F.gelu(pre)), "this is GELU; the paper's FFN uses ReLU, max(0, ·)."),
            (lambda: xd + evaluated, "the FFN added its input x to its output: the residual connection belongs to "
                                     "the encoder layer, not to the FFN."),
            (lambda: second(torch.relu(pre) * hidden_mask), "dropout is active in eval mode: torch.nn.functional.dropout "
                                                            "defaults to training=True; use the nn.Dropout submodule "
                                                            "self.dropout, which follows model.eval()."),
        ]

    def reject_non_results(self, case: Case, result: Any) -> None:
        if isinstance(result, Raised) and result.type == "StateMismatch":
            missing, unexpected = _missing_and_unexpected(result)
            if any(n.endswith(".bias") for n in missing) and not unexpected:
                raise CheckFailed(
                    f"`{self.function}`'s parameters do not match on the case {case.label}: {result.message} "
                    "The paper's FFN has biases b_1 and b_2: keep nn.Linear's default bias=True."
                )
        super().reject_non_results(case, result)


def _dropout_mask_second(first_shape, second_shape, p, dtype) -> torch.Tensor:
    """The second of two masks drawn one after the other after torch.manual_seed(0)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        F.dropout(torch.ones(tuple(first_shape), dtype=dtype), p, training=True)
        return F.dropout(torch.ones(tuple(second_shape), dtype=dtype), p, training=True).double()


# ----------------------------------------------------------------------------------------
# LayerNorm
# ----------------------------------------------------------------------------------------


def _normalise(x: torch.Tensor, dims, unbiased: bool = False, eps: float = 1e-5, eps_outside: bool = False,
               sqrt: bool = True) -> torch.Tensor:
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, keepdim=True, unbiased=unbiased)
    if eps_outside:
        return (x - mean) / (var.sqrt() + eps)
    return (x - mean) / ((var + eps).sqrt() if sqrt else var + eps)


class LayerNorm(Check):
    function = "LayerNorm"
    oracle = "torch.nn.LayerNorm with the same gamma and beta"
    forbidden = NORM_BUILTINS

    def cases(self, hidden: bool) -> list[Case]:
        g = seeded(42 if not hidden else 420)

        def case(shape, dtype=torch.float32, eps=None, offset=0.0, scale=1.0, state=True, tag="", extra=""):
            d = shape[-1]
            x = (torch.randn(shape, generator=g, dtype=torch.float64) * scale + offset).to(dtype)
            init = {"d_model": d} if eps is None else {"d_model": d, "eps": eps}
            label = f"d_model={d}, x {tuple(shape)} {str(dtype)[6:]}" + (f", eps={eps}" if eps is not None else "") + extra
            return Case(label, (x,), init=init, state=oracles.layer_norm_state(g, d) if state else None,
                        collect=("eps",), tag=tag)

        out = [
            case((2, 5, 16)),
            case((3, 8), state=False, tag="init", extra=", a freshly built LayerNorm (no weights loaded)"),
            case((2, 4, 16), offset=100.0, tag="offset", extra=", features near 100"),
            case((2, 3, 8), eps=1e-3, scale=1e-2, tag="small", extra=", features of size 0.01"),
            case((4, 6, 12), dtype=torch.float64),
        ]
        if hidden:
            constant = torch.randn(3, 10, generator=g)
            constant[1] = 2.5  # a position whose features are all equal: variance 0
            out += [
                case((16,), extra=" (a single position)"),
                case((2, 3, 4, 8)),
                case((2, 5, 32), dtype=torch.float64, offset=1e5, tag="offset", extra=", features near 100000"),
                case((3, 7, 8), eps=0.1, tag="eps", extra=""),
                case((2, 6, 24), scale=1e-3, tag="small", extra=", features of size 0.001"),
                Case("d_model=10, x (3, 10) float32 whose second row is constant", (constant,), init={"d_model": 10},
                     state=oracles.layer_norm_state(g, 10), collect=("eps",), tag="constant"),
            ]
        return out

    def judge(self, case: Case, result: Any) -> None:
        (x,) = case.args
        name = f"`{self.function}`'s output"
        y = _output(result, self.function, case)
        expect_shape(y, x.shape, name, case, "LayerNorm keeps the shape of its input.")
        expect_dtype(y, x.dtype, name, case)
        d = x.shape[-1]
        eps = case.init.get("eps", 1e-5)
        expect_finite(y, name, case, "A position whose features are all equal has variance 0: eps inside the square "
                                     "root, sqrt(var + eps), keeps the division finite." if case.tag == "constant" else
                      "Is eps added inside the square root?")

        stored = result.attributes.get("eps")
        if isinstance(stored, torch.Tensor) and stored.numel() == 1:
            stored = stored.item()
        if isinstance(stored, bool) or not isinstance(stored, (int, float)) or not math.isclose(stored, eps, rel_tol=1e-6):
            raise CheckFailed(
                f"`{self.function}`'s attribute eps is {stored!r} on the case {case.label}, where {eps} was given: "
                "store the constructor's argument as self.eps (and use it in forward)."
            )

        if case.state is None:
            gamma, beta = torch.ones(d, dtype=torch.float64), torch.zeros(d, dtype=torch.float64)
        else:
            gamma, beta = case.state["gamma"].double(), case.state["beta"].double()
        xd = x.double()
        oracle = nn.LayerNorm(d, eps=eps, dtype=torch.float64)
        with torch.no_grad():
            oracle.weight.copy_(gamma)
            oracle.bias.copy_(beta)
            expected = oracle(xd)

        def affine(z):
            return gamma * z + beta

        last = (-1,)
        diagnoses: Diagnoses = [
            (lambda: affine(_normalise(xd, last, unbiased=True, eps=eps)),
             "this uses the unbiased variance (dividing by d_model - 1, torch.var's default); LayerNorm divides by "
             "d_model: var(dim=-1, unbiased=False), or the mean of the squared deviations."),
            (lambda: affine(_normalise(xd, last, eps=eps, eps_outside=True)),
             "eps is outside the square root: divide by sqrt(var + eps), not by sqrt(var) + eps."),
            (lambda: affine(_normalise(xd, last, eps=0.0)),
             "eps is missing: divide by sqrt(var + eps), with eps inside the square root."),
            (lambda: affine(_normalise(xd, last, eps=eps, sqrt=False)),
             "you divided by the variance; divide by the standard deviation, sqrt(var + eps)."),
        ]
        if not math.isclose(eps, 1e-5):
            diagnoses.append((lambda: affine(_normalise(xd, last, eps=1e-5)),
                              "the eps argument is ignored (1e-5 is used whatever eps is): store it as self.eps and "
                              "use it in forward."))
        diagnoses += [
            (lambda o=o: affine(_normalise(xd, (o,), eps=eps)),
             f"you normalised over dim={o}; LayerNorm normalises each position over its own d_model features, "
             "the last axis (dim=-1, keepdim=True).")
            for o in range(x.dim() - 1)
        ]
        if x.dim() >= 2:
            diagnoses += [
                (lambda: affine(_normalise(xd, tuple(range(x.dim())), eps=eps)),
                 "the mean and the variance were taken over the whole tensor; take them per position, over the last "
                 "axis only (dim=-1, keepdim=True)."),
            ]
        if x.dim() >= 3:
            diagnoses += [
                (lambda: affine(_normalise(xd, tuple(range(1, x.dim())), eps=eps)),
                 "the mean and the variance were taken over a whole sequence (every axis but the batch); LayerNorm "
                 "normalises each position separately, over its d_model features (dim=-1)."),
            ]
        xhat = _normalise(xd, last, eps=eps)
        naive_mean = x.mean(dim=-1, keepdim=True)
        naive_var = (x * x).mean(dim=-1, keepdim=True) - naive_mean * naive_mean  # in the case's own dtype
        diagnoses += [
            (lambda: xhat + beta, "gamma (the scale) is not applied: the output is gamma * x_hat + beta."),
            (lambda: gamma * xhat, "beta (the shift) is not added: the output is gamma * x_hat + beta."),
            (lambda: xhat, "gamma and beta are not applied: the output is gamma * x_hat + beta."),
            (lambda: beta * xhat + gamma, "gamma and beta are swapped: gamma multiplies, beta is added."),
            (lambda: affine(((x - naive_mean) / torch.sqrt(naive_var + eps)).double()),
             "the variance was computed as E[x^2] - E[x]^2, which loses its digits when the features sit far from "
             "zero; compute it from the centred values: ((x - mean) ** 2).mean(dim=-1, keepdim=True)."),
        ]
        if case.tag == "init":
            diagnoses += [
                (lambda: torch.zeros_like(xd), "a fresh LayerNorm returned zeros: gamma must start at ones "
                                               "(torch.ones(d_model)) and beta at zeros."),
            ]
        hints = {
            "init": "A fresh LayerNorm starts with gamma = torch.ones(d_model) and beta = torch.zeros(d_model), "
                    "so its output is the plain normalised x.",
            "offset": "The features sit far from zero: compute the variance from the centred values x - mean "
                      "(E[x^2] - E[x]^2 cancels catastrophically).",
            "small": "The features are tiny, so eps matters: divide by sqrt(var + eps), with the eps given to the constructor.",
            "eps": "eps is large here: divide by sqrt(var + eps), with the eps given to the constructor.",
        }
        if case.tag == "offset" and x.dtype == torch.float32 and (y.double() - expected).abs().max() < 1e-4:
            # Far from zero, float32 itself rounds x near 100 to about 1e-5: nn.LayerNorm in float32 is off by as
            # much. The two-pass variance stays well inside 1e-4; E[x^2] - E[x]^2 misses by 1e-3 or more.
            return
        expect_close(y, expected, name, case, diagnoses, hint=hints.get(case.tag, ""))

    def reject_non_results(self, case: Case, result: Any) -> None:
        if isinstance(result, Raised) and result.type == "IndexError" and "Dimension out of range" in result.message:
            got = re.search(r"but got (-?\d+)", result.message)
            raise CheckFailed(
                raised_message(f"`{self.function}`", case, result)
                + "\nLayerNorm normalises each position over its own d_model features, the last axis (dim=-1, "
                "keepdim=True), which every input has"
                + (f"; you normalised over dim={got.group(1)}." if got else ".")
            )
        if isinstance(result, Raised) and result.type == "StateMismatch":
            _, unexpected = _missing_and_unexpected(result)
            if {"weight", "bias"} & set(unexpected):
                raise CheckFailed(
                    f"`{self.function}`'s parameters do not match on the case {case.label}: {result.message} "
                    "Name the scale `gamma` and the shift `beta`, as in the formula: "
                    "self.gamma = nn.Parameter(torch.ones(d_model)), self.beta = nn.Parameter(torch.zeros(d_model))."
                )
        super().reject_non_results(case, result)


# ----------------------------------------------------------------------------------------
# EncoderLayer and Encoder share their cases' shapes and the padding property
# ----------------------------------------------------------------------------------------


PADDING_LEAK = (
    "the key_padding_mask did not reach the self-attention: pass it on, "
    "self.self_attn(x, x, x, key_padding_mask=key_padding_mask), so that no position attends to padding."
)


class _StackCheck(Check):
    forbidden = LAYER_BUILTINS
    N: int | None = None  # None for the single layer

    def state(self, g: torch.Generator, d_model: int, d_ff: int, N: int | None) -> State:
        if N is None:
            return oracles.encoder_layer_state(g, d_model, d_ff)
        return oracles.stack_state(oracles.encoder_layer_state, g, N, d_model, d_ff)

    def make_cases(self, g: torch.Generator, specs) -> list[Case]:
        out = []
        for spec in specs:
            B, T, d_model, h, d_ff, lengths, N, tag = spec
            init = {"d_model": d_model, "h": h, "d_ff": d_ff} | ({} if N is None else {"N": N}) | {"dropout": 0.1}
            x = torch.randn(B, T, d_model, generator=g)
            kwargs = {} if lengths is None else {"key_padding_mask": _padding(lengths, T)}
            where = "" if N is None else f"N={N}, "
            label = (f"{where}d_model={d_model}, h={h}, d_ff={d_ff}, x {(B, T, d_model)}"
                     + ("" if lengths is None else f", sequences of lengths {list(lengths)} padded to {T}"))
            collect = ("dropout1", "dropout2") if N is None else ()
            case = Case(label, (x,), kwargs, tag=tag, init=init, state=self.state(g, d_model, d_ff, N), collect=collect)
            out.append(case)
            if tag == "pair-a":
                garbage = x.clone()
                pad = kwargs["key_padding_mask"]
                # Only padded positions change, to values of another scale (float32 keeps its precision).
                garbage[pad] = 4.0 * torch.randn(int(pad.sum()), d_model, generator=g) + 3.0
                out.append(Case(label + ", with other values at the padded positions", (garbage,), kwargs,
                                tag="pair-b", init=init, state=case.state, collect=collect))
        return out

    def judge_all(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        pairs = {c.tag: (c, r) for c, r in zip(cases, results) if c.tag.startswith("pair-")}
        if {"pair-a", "pair-b"} <= pairs.keys():
            (case, a), (_, b) = pairs["pair-a"], pairs["pair-b"]
            real = ~case.kwargs["key_padding_mask"]  # (B, T)
            if not matches(a.output[real], b.output[real]):
                raise CheckFailed(
                    f"`{self.function}`: the outputs of real positions changed when only the padded positions of x "
                    f"changed ({case.label}): padding must never influence real positions; {PADDING_LEAK}"
                )

    def reject_non_results(self, case: Case, result: Any) -> None:
        if isinstance(result, Raised) and result.type == "StateMismatch":
            missing, unexpected = _missing_and_unexpected(result)
            name, msg = self.function, result.message
            if any(re.search(r"norm\d\.(weight|bias)$", n) for n in unexpected):
                raise CheckFailed(
                    f"`{name}`'s parameters do not match on the case {case.label}: {msg} norm1 and norm2 must be "
                    "your LayerNorm (parameters gamma and beta), not nn.LayerNorm."
                )
            if any("in_proj" in n for n in unexpected):
                raise CheckFailed(
                    f"`{name}`'s parameters do not match on the case {case.label}: {msg} The self-attention is "
                    "chapter 3's MultiHeadAttention (imported at the top, parameters w_q, w_k, w_v, w_o), not "
                    "nn.MultiheadAttention."
                )
        super().reject_non_results(case, result)

    def expect_layer(self, y: torch.Tensor, expected: torch.Tensor, case: Case, diagnoses: Diagnoses) -> None:
        name = f"`{self.function}`'s output"
        expect_close(y, expected, name, case, diagnoses,
                     hint="Compare your forward with x = norm1(x + dropout1(self_attn(x, x, x, key_padding_mask=...))), "
                          "then x = norm2(x + dropout2(feed_forward(x))).")


# ----------------------------------------------------------------------------------------
# EncoderLayer
# ----------------------------------------------------------------------------------------


def _layer_variants(state: State, h: int, x: torch.Tensor, mask: torch.Tensor | None, prefix: str = ""):
    """What a correct layer and several wrong ones compute, float64."""

    def attn(z, m=mask):
        return _attention(state, h, z, m, prefix)

    def ffn(z):
        return _ffn(state, z, f"{prefix}feed_forward.")

    def n1(z):
        return _norm(state, f"{prefix}norm1.", z)

    def n2(z):
        return _norm(state, f"{prefix}norm2.", z)

    def right():
        y = n1(x + attn(x))
        return n2(y + ffn(y))

    def pre_norm():
        y = x + attn(n1(x))
        return y + ffn(n2(y))

    def residual_after_norm():
        y = n1(attn(x)) + x
        return n2(ffn(y)) + y

    def no_residual():
        return n2(ffn(n1(attn(x))))

    def no_residual_ffn():
        return n2(ffn(n1(x + attn(x))))

    def no_residual_attn():
        y = n1(attn(x))
        return n2(y + ffn(y))

    def no_mask():
        y = n1(x + attn(x, None))
        return n2(y + ffn(y))

    def norms_swapped():
        y = n2(x + attn(x))
        return n1(y + ffn(y))

    def ffn_first():
        y = n1(x + ffn(x))
        return n2(y + attn(y))

    def second_residual_from_input():
        y = n1(x + attn(x))
        return n2(x + ffn(y))

    def ffn_on_input():
        y = n1(x + attn(x))
        return n2(y + ffn(x))

    wrong: Diagnoses = [
        (pre_norm, "this is the pre-norm layer x + Sublayer(LayerNorm(x)); the paper's layer, asked for here, "
                   "normalises after the residual sum: LayerNorm(x + Sublayer(x))."),
        (residual_after_norm, "the residual was added after the normalisation, LayerNorm(Sublayer(x)) + x; add the "
                              "sub-layer's input first, then normalise: LayerNorm(x + Sublayer(x))."),
        (no_residual, "there is no residual connection: add each sub-layer's input to its output before "
                      "normalising, LayerNorm(x + Sublayer(x))."),
        (no_residual_ffn, "the feed-forward sub-layer has no residual connection: norm2(x + dropout2(feed_forward(x)))."),
        (no_residual_attn, "the self-attention sub-layer has no residual connection: norm1(x + dropout1(self_attn(x, x, x, ...)))."),
        (norms_swapped, "norm1 and norm2 are swapped: norm1 follows the self-attention, norm2 the feed-forward network."),
        (ffn_first, "the sub-layers are in the wrong order: self-attention comes first, then the feed-forward network."),
        (second_residual_from_input, "the second residual adds the layer's input; it must add the input of the "
                                     "feed-forward sub-layer, which is the output of the first sub-layer."),
        (ffn_on_input, "the feed-forward network was applied to the layer's input; it takes the output of the first "
                       "sub-layer (after norm1)."),
    ]
    if mask is not None:
        wrong.insert(0, (no_mask, PADDING_LEAK))
    return right, wrong


class EncoderLayer(_StackCheck):
    function = "EncoderLayer"
    oracle = "nn.TransformerEncoderLayer (post-norm, ReLU) with the same weights"

    def cases(self, hidden: bool) -> list[Case]:
        g = seeded(43 if not hidden else 430)
        specs = [  # B, T, d_model, h, d_ff, lengths, N, tag
            (2, 5, 16, 4, 32, None, None, ""),
            (2, 6, 16, 2, 24, (6, 4), None, "pair-a"),
            (3, 4, 8, 2, 16, (4, 2, 3), None, ""),
        ]
        if hidden:
            specs += [
                (1, 7, 32, 8, 64, None, None, ""),
                (4, 6, 12, 3, 20, (6, 1, 3, 5), None, ""),
                (3, 5, 24, 4, 16, (2, 5, 4), None, "pair-a"),
            ]
        return self.make_cases(g, specs)

    def judge(self, case: Case, result: Any) -> None:
        (x,) = case.args
        name = f"`{self.function}`'s output"
        y = _output(result, self.function, case)
        expect_shape(y, x.shape, name, case, "An encoder layer keeps the shape (B, T, d_model) of its input.")
        expect_dtype(y, x.dtype, name, case)
        expect_finite(y, name, case, "")
        for attr in ("dropout1", "dropout2"):
            got = result.attributes.get(attr)
            if not (isinstance(got, Opaque) and got.type == "Dropout"):
                raise CheckFailed(
                    f"`{self.function}` has no submodule {attr} of type nn.Dropout on the case {case.label}: "
                    "the paper applies dropout to each sub-layer's output before the residual sum; build "
                    f"self.{attr} = nn.Dropout(dropout)."
                )
        d_model, h, d_ff = (case.init[k] for k in ("d_model", "h", "d_ff"))
        mask = case.kwargs.get("key_padding_mask")
        with torch.no_grad():
            expected = oracles.torch_encoder_layer(case.state, d_model, h, d_ff)(x.double(), src_key_padding_mask=mask)
        _, wrong = _layer_variants(case.state, h, x.double(), mask)
        self.expect_layer(y, expected, case, [(lambda f=f: _no_grad(f), m) for f, m in wrong])


def _no_grad(f: Callable[[], torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return f()


# ----------------------------------------------------------------------------------------
# Encoder
# ----------------------------------------------------------------------------------------


class Encoder(_StackCheck):
    function = "Encoder"
    oracle = "nn.TransformerEncoder (post-norm, no final norm) with the same weights"

    def cases(self, hidden: bool) -> list[Case]:
        g = seeded(44 if not hidden else 440)
        specs = [  # B, T, d_model, h, d_ff, lengths, N, tag
            (2, 5, 16, 4, 32, None, 1, ""),
            (2, 6, 16, 2, 24, (6, 4), 2, "pair-a"),
            (3, 4, 8, 2, 16, None, 3, ""),
        ]
        if hidden:
            specs += [
                (3, 5, 24, 4, 32, (5, 2, 4), 3, ""),
                (2, 7, 32, 8, 16, None, 2, ""),
                (4, 6, 12, 3, 20, (6, 1, 3, 5), 3, "pair-a"),
            ]
        return self.make_cases(g, specs)

    def judge(self, case: Case, result: Any) -> None:
        (x,) = case.args
        name = f"`{self.function}`'s output"
        y = _output(result, self.function, case)
        expect_shape(y, x.shape, name, case, "The encoder keeps the shape (B, T, d_model) of its input.")
        expect_dtype(y, x.dtype, name, case)
        expect_finite(y, name, case, "")
        d_model, h, d_ff, N = (case.init[k] for k in ("d_model", "h", "d_ff", "N"))
        mask = case.kwargs.get("key_padding_mask")
        xd = x.double()
        with torch.no_grad():
            expected = oracles.torch_encoder(case.state, N, d_model, h, d_ff)(xd, src_key_padding_mask=mask)

        def layer(i: int, z: torch.Tensor, m=mask) -> torch.Tensor:
            with torch.no_grad():
                return _layer_variants(case.state, h, z, m, f"layers.{i}.")[0]()

        def run(order, m=mask, first_mask_only=False):
            z = xd
            for step, i in enumerate(order):
                z = layer(i, z, m if (step == 0 or not first_mask_only) else None)
            return z

        diagnoses: Diagnoses = []
        if mask is not None:
            diagnoses += [
                (lambda: run(range(N), None), "the key_padding_mask did not reach the layers: pass it to every "
                                              "layer, x = layer(x, key_padding_mask)."),
                (lambda: run(range(N), first_mask_only=True), "the key_padding_mask reached only the first layer: "
                                                              "pass it to every layer, x = layer(x, key_padding_mask)."),
            ]
        if N > 1:
            diagnoses += [
                (lambda: layer(N - 1, xd), "every layer was applied to the encoder's input and only the last result "
                                           "was kept: feed each layer the previous layer's output, x = layer(x, ...)."),
                (lambda: layer(0, xd), "only the first layer ran: is the return statement inside the loop? "
                                       "All N layers must run, one after the other."),
                (lambda: run(reversed(range(N))), "the layers ran in reverse order: layers[0] comes first."),
            ]
        diagnoses += [
            (lambda: F.layer_norm(expected, (d_model,)), "the output was normalised once more at the end: the paper's "
                                                         "post-norm encoder ends with the last layer's own norm2, so add "
                                                         "no final LayerNorm."),
        ]
        expect_close(y, expected, name, case, diagnoses,
                     hint="If your EncoderLayer passes its checks, look at the loop: x = layer(x, key_padding_mask) "
                          "for every layer in self.layers, in order, and return x.")

    def reject_non_results(self, case: Case, result: Any) -> None:
        if isinstance(result, Raised) and result.type == "StateMismatch":
            missing, unexpected = _missing_and_unexpected(result)
            N = case.init["N"]
            outside = [n for n in unexpected if not n.startswith("layers.")]
            head = f"`{self.function}`'s parameters do not match on the case {case.label}: {result.message}"
            if outside:
                extra = " a final LayerNorm" if any("norm" in n or "gamma" in n or "beta" in n for n in outside) else ""
                raise CheckFailed(
                    f"{head} Your Encoder has parameters outside `layers` ({', '.join(outside)}){':' if extra else '.'}"
                    + (f"{extra}? The paper's post-norm encoder ends with the last layer's own norm2: add no final "
                       "LayerNorm (a final norm belongs to pre-norm stacks)." if extra else
                       " Everything the encoder holds lives in its N layers.")
                )
            layers = sorted({int(m.group(1)) for n in missing if (m := re.match(r"layers\.(\d+)\.", n))})
            if missing and not unexpected and layers:
                if layers[0] == 0:
                    raise CheckFailed(
                        f"{head} PyTorch sees no layer at all: a plain Python list hides its modules (use "
                        "nn.ModuleList), and the stack needs N layers, for _ in range(N)."
                    )
                if layers[0] == 1:
                    raise CheckFailed(
                        f"{head} Only layers.0 has parameters, although N={N}: the same EncoderLayer object was "
                        "probably repeated ([layer] * N), so every layer shares one set of weights, and PyTorch lists "
                        "shared parameters once. (Or fewer than N layers were built.) Create a new EncoderLayer for "
                        "each of the N layers: nn.ModuleList(EncoderLayer(...) for _ in range(N))."
                    )
                raise CheckFailed(
                    f"{head} Your stack has only {layers[0]} of the N={N} layers: build N layers, for _ in range(N)."
                )
        super().reject_non_results(case, result)


CHECKS = [PositionwiseFeedForward, LayerNorm, EncoderLayer, Encoder]
