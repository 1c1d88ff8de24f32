"""Chapter 1 checks: the receptive field of a convolution stack, a tanh RNN, greedy decoding.

Oracles: the closed-form receptive field together with a measurement on real ``torch.nn.Conv1d``
stacks (the span of input positions one output has a nonzero gradient with respect to);
``torch.nn.RNN`` with the learner's weights copied in; and a greedy decoding loop run here,
on the grader's own copy of the provided toy model.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .. import toys  # noqa: F401  (registers the "toy_translator" provider)
from ..framework import (
    Case,
    Check,
    CheckFailed,
    Hint,
    Provided,
    Stated,
    draw,
    expect_close,
    expect_dtype,
    expect_finite,
    expect_shape,
    expect_tensor,
    expect_tuple,
    matches,
    materialize,
    named_failure,
    rule,
    tagged_pair,
)
from ..locate import Stage
from ..messages import N_, tr
from ..oracles import blank

# ----------------------------------------------------------------------------------------
# receptive_field
# ----------------------------------------------------------------------------------------


def _closed_form(kernels: Sequence[int], strides: Sequence[int], dilations: Sequence[int]) -> int:
    """r = 1 + sum_l (k_l - 1) d_l prod_{i<l} s_i."""
    r, jump = 1, 1
    for k, s, d in zip(kernels, strides, dilations):
        r += (k - 1) * d * jump
        jump *= s
    return r


def _measured(kernels: Sequence[int], strides: Sequence[int], dilations: Sequence[int]) -> int:
    """The span of inputs that output 0 of a real Conv1d stack has a nonzero gradient for.

    The input length is found by doubling until the stack produces an output, so this
    measurement does not lean on the formula it confirms.
    """
    if not kernels:
        return 1
    layers = [
        blank(torch.nn.Conv1d, 1, 1, k, stride=s, dilation=d, bias=False, dtype=torch.float64)
        for k, s, d in zip(kernels, strides, dilations)
    ]
    for layer in layers:
        torch.nn.init.constant_(layer.weight, 1.0)  # all positive: no two paths can cancel
    stack = torch.nn.Sequential(*layers)
    length = 8
    while True:
        x = torch.ones(1, 1, length, dtype=torch.float64, requires_grad=True)  # (B=1, C=1, L)
        try:
            y = stack(x)  # (1, 1, L_out)
        except RuntimeError:  # the input is shorter than the stack's window
            length *= 2
            continue
        if y.shape[-1] > 0:
            break
        length *= 2
    y[0, 0, 0].backward()
    seen = x.grad[0, 0].nonzero().flatten()  # (n_seen,)
    return int(seen.max() - seen.min()) + 1


class ReceptiveFieldCheck(Check):
    function = "receptive_field"
    invalid_hint = N_(
        "invalid arguments should raise ValueError with a message that says what is wrong: "
        "`raise ValueError(...)`, not an assert or another exception type."
    )
    invalid_returned = N_(
        "{name} returned {got} on the case {label}, which is not a valid stack (lengths differ, or a size, stride "
        "or dilation is below 1): raise ValueError instead, so that a typo in a network's description is caught "
        "rather than silently measured."
    )
    oracle = N_("the closed form and the span of nonzero input gradients of a torch.nn.Conv1d stack")

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(kernels, strides=None, dilations=None, tag=""):
            kwargs = {}
            if strides is not None:
                kwargs["strides"] = list(strides)
            if dilations is not None:
                kwargs["dilations"] = list(dilations)
            label = f"kernel_sizes={list(kernels)}" + "".join(f", {k}={v}" for k, v in kwargs.items())
            return Case(label, (list(kernels),), kwargs, tag)

        def rand(n, low, high):
            return torch.randint(low, high + 1, (n,), generator=g).tolist()

        out = [
            case([5]),
            case([3, 3, 3, 3]),
            case([3, 5, 2], strides=[2, 1, 3]),
            case([2, 2, 2, 2], dilations=[1, 2, 4, 8]),
            case([3, 4, 2, 5], strides=[1, 3, 2, 1], dilations=[2, 1, 3, 1]),
            case(rand(5, 2, 6), strides=rand(5, 1, 3), dilations=rand(5, 1, 4)),
            case([], tag="empty"),
            case([3, 3], strides=[2], tag="invalid"),
            case([3, 0, 3], tag="invalid"),
        ]
        if hidden:
            ones, deep, doubling = draw(g, 2, 5), draw(g, 6, 9), draw(g, 5, 7)
            out += [
                case([1] * ones),
                case([draw(g, 5, 9)], strides=[draw(g, 2, 5)], dilations=[draw(g, 2, 4)]),
                case([draw(g, 2, 4)] * deep, strides=[2] * deep),
                case([draw(g, 2, 3)] * doubling, dilations=[2 ** i for i in range(doubling)]),
                case([1, *rand(3, 2, 5)], strides=rand(4, 1, 3), dilations=rand(4, 1, 5)),
                case(rand(7, 1, 5), strides=rand(7, 1, 2), dilations=rand(7, 1, 3)),
                case([], strides=[], dilations=[], tag="empty"),
                case([3, 3], strides=[1, 0], tag="invalid"),
                case([3, 3], dilations=[1, -2], tag="invalid"),
                case([3, 3], strides=[1, 1], dilations=[1, 1, 1], tag="invalid"),
                case([-3], tag="invalid"),
            ]
        return out

    @staticmethod
    def _layers(case: Case) -> tuple[list[int], list[int], list[int]]:
        """(kernels, strides, dilations), the defaults filled in."""
        kernels = case.args[0]
        n = len(kernels)
        return kernels, case.kwargs.get("strides", [1] * n), case.kwargs.get("dilations", [1] * n)

    @staticmethod
    def _number(result: Any) -> Any:
        """An integer tensor of one element read as the int it holds."""
        if isinstance(result, torch.Tensor) and result.numel() == 1 and not result.is_floating_point():
            return int(result.item())
        return result

    def stages(self, case: Case) -> list[Stage]:
        """r layer by layer from the first layer up; beside it, the recursion r <- (r - 1) s + (k - 1) d + 1 from
        the last layer down. (The jump, the product of the strides so far, is left out: a small int agrees with
        some r by chance.)"""
        kernels, strides, dilations = self._layers(case)

        def numbers(*values: float) -> tuple[torch.Tensor, ...]:
            return tuple(torch.tensor(float(v), dtype=torch.float64) for v in values)

        downward, r = [], 1
        for k, s, d in zip(reversed(kernels), reversed(strides), reversed(dilations)):
            r = (r - 1) * s + (k - 1) * d + 1
            downward.append(r)
        # the lists, made or not, stand beside the start: a stage a learner may skip would hold back the rest
        lists = (torch.tensor(strides, dtype=torch.float64), torch.tensor(dilations, dtype=torch.float64)) if kernels else ()
        out = [Stage(tr("r = 1 before any layer (and the strides and the dilations, one per layer, 1 where none are "
                        "given)"), (*numbers(1), *lists))]
        r, jump = 1, 1
        for layer, (k, s, d) in enumerate(zip(kernels, strides, dilations)):
            r, jump = r + (k - 1) * d * jump, jump * s
            after = (tr("r after {count} layers (counted from the first layer up, or from the last down by the "
                        "recursion)").format(count=layer + 1) if layer else
                     tr("r after 1 layer (counted from the first layer up, or from the last down by the recursion)"))
            out.append(Stage(after, numbers(r, downward[layer])))
        return [*out, Stage(tr("the receptive field r"), numbers(r))]

    @rule("a Python int")
    def _an_int(self, case: Case, result: Any) -> None:
        result = self._number(result)
        if isinstance(result, bool) or not isinstance(result, int):
            raise CheckFailed(tr(
                "`receptive_field` returned {result} ({kind}) on the case {case}; "
                "return a Python int: a number of input positions."
            ).format(result=repr(result), kind=type(result).__name__, case=case.label))

    @rule("an empty stack sees one position")
    def _empty(self, case: Case, result: Any) -> None:
        result = self._number(result)
        if case.tag == "empty" and result != _closed_form(*self._layers(case)):
            raise CheckFailed(tr(
                "`receptive_field` returned {result} for an empty stack (no layers); with no layer, one output is "
                "one input position, so the answer is 1: start from r = 1 and let each layer add to it."
            ).format(result=result))

    @rule("value")
    def _value(self, case: Case, result: Any) -> None:
        result = self._number(result)
        kernels, strides, dilations = self._layers(case)
        n = len(kernels)
        expected = _closed_form(kernels, strides, dilations)
        measured = _measured(kernels, strides, dilations)
        if expected != measured:  # the two oracles must agree, or the grader itself is wrong
            raise RuntimeError(
                f"grader error on {case.label}: closed form {expected}, Conv1d measures {measured}")  # english: grader fault
        if result == expected:
            return

        def prefix_products(values: Sequence[int], inclusive: bool) -> list[int]:
            out, p = [], 1
            for v in values:
                p *= v
                out.append(p if inclusive else p // v)
            return out

        reverse = 1  # the recursion r <- (r - 1) s + (k - 1) d + 1 run from the first layer up
        for k, s, d in zip(kernels, strides, dilations):
            reverse = (reverse - 1) * s + (k - 1) * d + 1
        diagnoses: list[tuple[int, str]] = [
            (_closed_form(kernels, [1] * n, dilations),
             tr("the strides are ignored: each layer's (k - 1) d must be multiplied by the product of the strides of "
                "the layers below it, since one step at that depth spans that many input positions.")),
            (1 + sum((k - 1) * d * p for k, d, p in zip(kernels, dilations, prefix_products(strides, True))),
             tr("each layer was multiplied by its own stride as well: use the product of the strides of the layers "
                "*below* it (prod over i < l); a layer's own stride only spaces out its outputs.")),
            (_closed_form(kernels, strides, [1] * n),
             tr("the dilations are ignored: a kernel of size k with dilation d spans (k - 1) d + 1 positions.")),
            (1 + sum(k * d * p for k, d, p in zip(kernels, dilations, prefix_products(strides, False))),
             tr("each layer added k d instead of (k - 1) d: a kernel of size k spans (k - 1) d + 1 positions, which "
                "widens an existing window by (k - 1) d.")),
            (expected - 1, tr("you are one short: start from r = 1 (one output sees one position before any layer is "
                              "applied), then add (k - 1) d per layer.")),
            (expected + 1, tr("you are one over: start from r = 1 and add (k - 1) d per layer (not k d, and no extra "
                              "1).")),
            (sum(kernels), tr("you summed the kernel sizes; each layer adds (k - 1) d prod(strides below), and r starts "
                              "at 1.")),
            (math.prod(kernels) if kernels else 1,
             tr("you multiplied the kernel sizes; stacking layers adds to the window "
                "(r = 1 + sum of (k - 1) d prod(strides below)).")),
            (reverse, tr("the layers were taken in the wrong order: the recursion r <- (r - 1) s + (k - 1) d + 1 must "
                         "run from the last layer down to the first (or use the formula with strides of the layers "
                         "below).")),
        ]
        raise named_failure(
            tr("`receptive_field` returned {result} on the case {case}: ").format(result=result, case=case.label),
            [message for value, message in diagnoses if value == result and value != expected],
            tr("`receptive_field` returned {result} on the case {case} where {expected} was expected (also measured "
               "with a Conv1d stack): r = 1 + sum over layers l of (k_l - 1) * d_l * (product of s_i for the layers i "
               "below l).").format(result=result, case=case.label, expected=expected),
        )

    rules = (_an_int, _empty, _value)


# ----------------------------------------------------------------------------------------
# rnn_forward
# ----------------------------------------------------------------------------------------

# A product whose shapes do not fit points at the weights; any other shape error at the input's axes.
RNN_WEIGHTS_HINT = N_(
    "Mind the shapes: x_t @ W_xh needs W_xh (d_in, d_h) and h_{t-1} @ W_hh needs W_hh (d_h, d_h): "
    "check which weight goes with which input."
)
RNN_STEP_HINT = N_("Mind the shapes: x is (B, T, d_in), so the input at step t is x[:, t], shape (B, d_in).")


def _torch_rnn(x: torch.Tensor, h0: torch.Tensor, W_xh: torch.Tensor, W_hh: torch.Tensor, b_h: torch.Tensor):
    """torch.nn.RNN with the given weights, in float64: (outputs (B, T, d_h), h_T (B, d_h))."""
    d_in, d_h = W_xh.shape
    rnn = blank(torch.nn.RNN, d_in, d_h, nonlinearity="tanh", batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        # nn.RNN computes x W_ih^T + h W_hh^T + b_ih + b_hh: row vectors times transposed weights.
        rnn.weight_ih_l0.copy_(W_xh.double().T)  # (d_h, d_in)
        rnn.weight_hh_l0.copy_(W_hh.double().T)  # (d_h, d_h)
        rnn.bias_ih_l0.copy_(b_h.double())
        rnn.bias_hh_l0.zero_()
        outputs, h_n = rnn(x.double(), h0.double().unsqueeze(0))  # (B, T, d_h), (1, B, d_h)
    return outputs, h_n[0]


def _loop(x, h0, W_xh, W_hh, b_h, step: Callable) -> torch.Tensor:
    """States h_1..h_T of a recurrence h_t = step(x_t, h_{t-1}), stacked: (B, T, d_h)."""
    h, states = h0, []
    for t in range(x.shape[1]):
        h = step(x[:, t], h)  # (B, d_h)
        states.append(h)
    return torch.stack(states, dim=1)  # (B, T, d_h)


class RnnForwardCheck(Check):
    function = "rnn_forward"
    trained_through = True  # a model learns through it: gradients must reach what it was made from
    oracle = N_("torch.nn.RNN (tanh, batch_first) with the same weights")
    forbidden = ("torch.nn.RNN", "torch.nn.RNNCell", "torch.rnn_tanh", "torch.rnn_tanh_cell")
    forbidden_ops = ("rnn_tanh", "rnn_relu")  # what nn.RNN and nn.RNNCell run
    hints = (Hint("RuntimeError", RNN_WEIGHTS_HINT, containing="cannot be multiplied"),
             Hint(("RuntimeError", "IndexError"), RNN_STEP_HINT))

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def tensors(B, T, d_in, d_h, dtype):
            def rand(*shape, scale=1.0):
                return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)

            # Scales that keep tanh away from saturation, so that every mistake shows.
            return (rand(B, T, d_in), rand(B, d_h, scale=0.5), rand(d_in, d_h, scale=1 / math.sqrt(d_in)),
                    rand(d_h, d_h, scale=0.9 / math.sqrt(d_h)), rand(d_h, scale=0.3))

        def case(B, T, d_in, d_h, dtype=torch.float32, tag=""):
            args = tensors(B, T, d_in, d_h, dtype)
            return Case(f"x ({B}, {T}, {d_in}), d_h={d_h} {str(dtype)[6:]}", args, {}, tag)

        out = [
            case(2, 5, 3, 4),
            case(1, 7, 6, 3, torch.float64),
            case(3, 4, 5, 5),  # d_in = d_h: swapped weights run without an error here
            case(4, 1, 2, 3),
        ]
        a = case(2, 6, 3, 5, tag="pair-a")
        x, *rest = a.args
        x2 = x.clone()
        x2[:, 3:] = torch.randn(2, 3, 3, generator=g)  # only steps 4, 5, 6 change
        out += [a, Case(tr("the same weights with x changed from step 4 on"), (x2, *rest), {}, "pair-b")]
        if hidden:
            out += [
                case(5, 12, 8, 16, torch.float64),
                case(3, 3, 3, 3),  # B = T: stacking along the wrong dimension keeps the shape
                case(1, 20, 4, 6),
                case(6, 9, 10, 7),
            ]
        return out

    def stages(self, case: Case) -> list[Stage]:
        """Step by step: the state's part h_{t-1} @ W_hh (the input's part x_t @ W_xh too at the first step: later
        it agrees whatever the states, so it would say nothing of them), the sum with b_h (or without it, the
        partial sum), h_t; then every state stacked."""
        x, h0, W_xh, W_hh, b_h = (t.double() for t in case.args)
        h, out, states = h0, [], []
        for t in range(x.shape[1]):
            from_input, from_state = x[:, t] @ W_xh, h @ W_hh  # (B, d_h) each
            pre = from_input + from_state + b_h
            h = torch.tanh(pre)
            states.append(h)
            parts = (from_input, from_state) if t == 0 else (from_state,)
            out += [Stage(tr("step 1's parts x[:, 0] @ W_xh and h_0 @ W_hh") if t == 0 else
                          tr("step {step}'s h_{previous} @ W_hh").format(step=t + 1, previous=t), parts),
                    Stage.of(tr("step {step}'s sum x[:, {t}] @ W_xh + h_{t} @ W_hh + b_h, before the tanh").format(
                        step=t + 1, t=t), pre, from_input + from_state),
                    Stage.of(tr("h_{step} = tanh of that sum").format(step=t + 1), h)]
        return [*out, Stage.of(tr("the states h_1..h_T stacked along dim=1, (B, T, d_h)"), torch.stack(states, dim=1))]

    @staticmethod
    def _returned(case: Case, result: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """(outputs, h_T), each a tensor."""
        name = "`rnn_forward`"
        outputs, h_T = expect_tuple(result, 2, name, case, "outputs, h_T")
        return (expect_tensor(outputs, tr("{name}'s outputs").format(name=name), case),
                expect_tensor(h_T, tr("{name}'s h_T").format(name=name), case))

    @rule("outputs and h_T")
    def _two_tensors(self, case: Case, result: Any) -> None:
        self._returned(case, result)

    @rule("outputs are (B, T, d_h)")
    def _outputs_shape(self, case: Case, result: Any) -> None:
        x, W_hh = case.args[0], case.args[3]
        B, T, _ = x.shape
        d_h = W_hh.shape[0]
        name = "`rnn_forward`"
        outputs, _ = self._returned(case, result)
        if tuple(outputs.shape) == (T, B, d_h) and T != B:
            raise CheckFailed(tr(
                "{name}'s outputs have shape {shape} on the case {case}: the steps were stacked "
                "along dim 0. Stack h_1..h_T along dim=1, so that outputs is (B, T, d_h) = {expected}, like x."
            ).format(name=name, shape=tuple(outputs.shape), case=case.label, expected=(B, T, d_h)))
        expect_shape(outputs, (B, T, d_h), tr("{name}'s outputs").format(name=name), case,
                     tr("outputs stacks h_1..h_T along dim=1: (B, T, d_h)."))

    @rule("h_T is (B, d_h)")
    def _final_state_shape(self, case: Case, result: Any) -> None:
        x, W_hh = case.args[0], case.args[3]
        _, h_T = self._returned(case, result)
        expect_shape(h_T, (x.shape[0], W_hh.shape[0]), tr("{name}'s h_T").format(name="`rnn_forward`"), case,
                     tr("h_T is the state after the last step: (B, d_h)."))

    @rule("finite")
    def _finite(self, case: Case, result: Any) -> None:
        outputs, _ = self._returned(case, result)
        expect_finite(outputs, tr("{name}'s outputs").format(name="`rnn_forward`"), case,
                      tr("tanh keeps every state in (-1, 1): is it applied at each step?"))

    @staticmethod
    def _expected(case: Case) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The oracle's outputs and h_T, and the states h_0..h_{T-1}, float64."""
        expected, expected_T = _torch_rnn(*case.args)
        shifted = torch.cat([case.args[1].double().unsqueeze(1), expected[:, :-1]], dim=1)  # (B, T, d_h)
        return expected, expected_T, shifted

    @rule("outputs")
    def _outputs(self, case: Case, result: Any) -> None:
        x = case.args[0]
        B, T, _ = x.shape
        name = "`rnn_forward`"
        outputs, _ = self._returned(case, result)
        expected, _, shifted = self.worked_out(case, self._expected)
        xd, h0d, Wx, Wh, b = (t.double() for t in case.args)

        def rnn(step: Callable) -> Callable[[], torch.Tensor]:
            return lambda: _loop(xd, h0d, Wx, Wh, b, step)

        diagnoses = [
            (rnn(lambda xt, h: xt @ Wx + h @ Wh + b), tr("tanh is missing: h_t = tanh(x_t W_xh + h_{t-1} W_hh + b_h).")),
            (rnn(lambda xt, h: torch.sigmoid(xt @ Wx + h @ Wh + b)), tr("the nonlinearity is tanh, not sigmoid.")),
            (rnn(lambda xt, h: torch.relu(xt @ Wx + h @ Wh + b)), tr("the nonlinearity is tanh, not ReLU.")),
            (rnn(lambda xt, h: torch.tanh(xt @ Wx + h0d @ Wh + b)),
             tr("every step used h0 instead of the previous state: carry h forward (h = tanh(...) inside the loop, "
                "and use that h at the next step).")),
            (rnn(lambda xt, h: torch.tanh(xt @ Wx + h @ Wh)), tr("the bias b_h is missing.")),
            (rnn(lambda xt, h: torch.tanh(xt @ Wx + h @ Wh.T + b)),
             tr("W_hh was used transposed: with row vectors the recurrence is h_{t-1} @ W_hh (nn.RNN stores its "
                "transpose, weight_hh = W_hh.T).")),
            (rnn(lambda xt, h: torch.tanh(xt @ Wh + h @ Wx + b)),
             tr("W_xh and W_hh are swapped: check which weight goes with which input (x_t @ W_xh, h_{t-1} @ W_hh).")),
            (lambda: expected.flip(1), tr("the outputs are in reverse order: outputs[:, t] must be h_{t+1}, the state "
                                          "after reading x[:, t] (append each new state, do not prepend).")),
            (lambda: shifted, tr("the outputs are shifted by one step: they must be h_1..h_T (the states after each "
                                 "input), not h_0..h_{T-1}. Append h after updating it, not before.")),
            (lambda: _torch_rnn(xd.flip(1), h0d, Wx, Wh, b)[0],
             tr("the recurrence ran backwards in time (from x[:, T-1] to x[:, 0]); read the steps in order t = 0, 1, "
                "..., T-1.")),
            (lambda: _torch_rnn(xd.flip(1), h0d, Wx, Wh, b)[0].flip(1),
             tr("the recurrence ran backwards in time (from x[:, T-1] to x[:, 0]); read the steps in order t = 0, 1, "
                "..., T-1.")),
        ]
        if B == T:
            diagnoses.append((lambda: expected.transpose(0, 1),
                              tr("the steps were stacked along dim 0; stack h_1..h_T along dim=1 so that outputs is "
                                 "(B, T, d_h).")))
        expect_close(outputs, expected, tr("{name}'s outputs").format(name=name), case, diagnoses, dtype=x.dtype,
                     hint=tr("Compare your first step with tanh(x[:, 0] @ W_xh + h0 @ W_hh + b_h)."))

    @rule("h_T")
    def _final_state(self, case: Case, result: Any) -> None:
        _, h_T = self._returned(case, result)
        expected, expected_T, shifted = self.worked_out(case, self._expected)
        h0d = case.args[1].double()
        expect_close(
            h_T, expected_T, tr("{name}'s h_T").format(name="`rnn_forward`"), case,
            [(lambda: h0d, tr("h_T is h0: return the state after the last step (the h your loop ends with).")),
             (lambda: expected[:, 0],
              tr("h_T is the state after the first step; return the one after the last step, outputs[:, -1].")),
             (lambda: shifted[:, -1],
              tr("h_T is the state before the last step; return the one after it, outputs[:, -1]."))],
            hint=tr("The outputs are right, so h_T should be outputs[:, -1]."),
            dtype=case.args[0].dtype,
        )

    rules = (_two_tensors, _outputs_shape, _final_state_shape, _finite, _outputs, _final_state)

    @rule("no state depends on the future")
    def _causal(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        pair = tagged_pair(cases, results)
        if pair is not None:
            case_a, (out_a, _), (out_b, _) = pair
            if not matches(out_a[:, :3], out_b[:, :3]):
                raise CheckFailed(tr(
                    "`rnn_forward`'s outputs at steps 1-3 changed when only x at steps 4-6 changed ({case}): "
                    "a state may depend on the past, never on the future. Read x[:, t] in order t = 0, 1, ..., T-1."
                ).format(case=case_a.label))

    rules_across = (_causal,)


# ----------------------------------------------------------------------------------------
# greedy_decode
# ----------------------------------------------------------------------------------------


def _last_position(logits: torch.Tensor) -> torch.Tensor:
    return logits[:, -1].argmax(dim=-1)  # (B,)


def _greedy(
    model: Any,
    src: torch.Tensor,
    max_len: int,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    *,
    pick: Callable[[torch.Tensor], torch.Tensor] = _last_position,
    feed_back: bool = True,
    stop: str = "all",
    pad_after_eos: bool = True,
    fill: int | None = None,
    keep_eos: bool = True,
    keep_bos: bool = True,
    steps: int | None = None,
) -> torch.Tensor:
    """The grader's greedy decoder; the keyword arguments reproduce known mistakes.

    With the defaults this is the specification: BOS in column 0, at most ``max_len`` tokens
    after it, ``pad_id`` after a row's EOS, and a stop as soon as every row has produced EOS.
    """
    fill = pad_id if fill is None else fill
    memory = model.encode(src)
    B = src.shape[0]
    ys = torch.full((B, 1), bos_id, dtype=torch.long)  # (B, 1)
    fed = ys
    done = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len if steps is None else steps):
        nxt = pick(model.decode(memory, fed))  # (B,)
        if pad_after_eos:
            nxt = torch.where(done, torch.full_like(nxt, fill), nxt)
        ys = torch.cat([ys, nxt.unsqueeze(1)], dim=1)  # (B, t + 1)
        fed = ys if feed_back else fed
        done = done | (nxt == eos_id)
        if stop == "all" and bool(done.all()) or stop == "any" and bool(done.any()):
            break
    if not keep_eos:
        ys = ys.masked_fill(ys == eos_id, pad_id)
    return ys if keep_bos else ys[:, 1:]


class GreedyDecodeCheck(Check):
    function = "greedy_decode"
    oracle = N_("a greedy decoding loop run by the grader on its own copy of the model")
    hints = (Hint("EncodedAgain", N_("The notebook says to call model.encode(src) once: the source does not change "
                                     "while you decode, so its memory is the same at every step.")),
             Hint(("RuntimeError", "IndexError"),
                  N_("Mind the shapes: model.decode(memory, ys) takes ys of shape (B, t) and returns logits (B, t, V); "
                     "the next token of every row is logits[:, -1].argmax(dim=-1), shape (B,), which you append as a "
                     "new column: torch.cat([ys, next_token.unsqueeze(1)], dim=1).")),)

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(lengths, max_len, seed, vocab_size=16, d=16, ids=(1, 2, 0), note=""):
            bos_id, eos_id, pad_id = ids
            ordinary = torch.tensor([i for i in range(vocab_size) if i not in ids])
            src = torch.full((len(lengths), max(lengths)), pad_id, dtype=torch.long)  # (B, S)
            for b, n in enumerate(lengths):
                src[b, :n] = ordinary[torch.randint(len(ordinary), (n,), generator=g)]
            model = Provided("toy_translator", {"vocab_size": vocab_size, "d": d, "seed": seed, "bos_id": bos_id,
                                                "eos_id": eos_id, "pad_id": pad_id, "encodes": 1})
            label = tr("a batch of {count} source(s) of lengths {lengths}, max_len={max_len}, "
                       "bos_id={bos_id}, eos_id={eos_id}, pad_id={pad_id}{note}").format(
                count=len(lengths), lengths=list(lengths), max_len=max_len, bos_id=bos_id, eos_id=eos_id,
                pad_id=pad_id, note=note)
            kwargs = {"max_len": max_len, "bos_id": bos_id, "eos_id": eos_id, "pad_id": pad_id}
            return Case(label, (model, src), kwargs)

        out = [
            case([3, 6, 1, 9], max_len=12, seed=0, note=tr(" (every row ends)")),
            case([4, 12, 2], max_len=8, seed=1, note=tr(" (one row never ends)")),
            case([5], max_len=10, seed=2),
            case([7, 3, 9, 8], max_len=3, seed=3, note=tr(" (no row ends)")),
            case([2, 10, 5, 6, 3], max_len=25, seed=4, vocab_size=20, d=12, ids=(5, 3, 7)),
        ]
        if hidden:
            out += [
                case([1, 1], max_len=5, seed=5),
                case([13, 4, 7, 11, 2, 5], max_len=30, seed=6, vocab_size=24, d=20, ids=(0, 23, 11)),
                case([20], max_len=6, seed=7, ids=(2, 0, 1)),
                case([6, 2, 9], max_len=1, seed=8),
                case([3, 8, 15, 4], max_len=12, seed=9, vocab_size=12, d=8, ids=(9, 4, 10)),
            ]
        return out

    @staticmethod
    def _run(case: Case, **mistake: Any) -> torch.Tensor:
        """The grader's greedy decoding of the case (with ``mistake``, a known mistake's)."""
        max_len, bos_id, eos_id, pad_id = (case.kwargs[k] for k in ("max_len", "bos_id", "eos_id", "pad_id"))
        return _greedy(materialize(case.args[0]), case.args[1].clone(), max_len, bos_id, eos_id, pad_id, **mistake)

    def stages(self, case: Case) -> list[Stage]:
        """The memory, then step by step the logits of the tokens so far, the next tokens (before and after the
        finished rows are padded), the rows finished so far and ys with the new column."""
        max_len, bos_id, eos_id, pad_id = (case.kwargs[k] for k in ("max_len", "bos_id", "eos_id", "pad_id"))
        model, src = materialize(case.args[0]), case.args[1].clone()
        with torch.no_grad():
            memory = model.encode(src)
            ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long)  # (B, 1)
            finished = torch.zeros(src.shape[0], dtype=torch.bool)
            out = [Stage.of(tr("the memory, model.encode(src)"), memory),
                   Stage.of(tr("ys = [[bos_id]] for every row, and no row finished"), ys, finished)]
            for t in range(1, max_len + 1):
                logits = model.decode(memory, ys)  # (B, t, V)
                best = logits[:, -1].argmax(dim=-1)  # (B,)
                token = best.masked_fill(finished, pad_id)
                ys = torch.cat([ys, token.unsqueeze(1)], dim=1)  # (B, t + 1)
                finished = finished | (token == eos_id)
                out += [Stage.of(tr("step {t}: the logits model.decode(memory, ys), (B, {t}, V)").format(t=t), logits,
                                 logits[:, -1]),
                        Stage.of(tr("step {t}: the next tokens, logits[:, -1].argmax(dim=-1), finished rows "
                                    "padded").format(t=t), best, token, token.unsqueeze(1)),
                        Stage.of(tr("step {t}: ys with its new column, (B, {columns}), and the rows finished so "
                                    "far").format(t=t, columns=t + 1), ys, finished)]
                if bool(finished.all()):
                    break
        return out

    @rule("integer ids")
    def _integer_ids(self, case: Case, result: Any) -> None:
        name = tr("`{function}`'s result").format(function="greedy_decode")
        ys = expect_tensor(result, name, case)
        if ys.is_floating_point() or ys.dtype == torch.bool:
            raise CheckFailed(tr(
                "{name} has dtype {dtype} on the case {case}: token ids are integers; return a LongTensor "
                "(argmax already gives one; avoid building ys with a float fill)."
            ).format(name=name, dtype=ys.dtype, case=case.label))
        expect_dtype(ys, torch.long, name, case)

    @rule("(B, L)")
    def _shape(self, case: Case, ys: torch.Tensor) -> None:
        B = case.args[1].shape[0]
        if ys.dim() != 2 or ys.shape[0] != B:
            raise CheckFailed(tr(
                "`greedy_decode`'s result has shape {shape} on the case {case}; it should be (B, L) = "
                "({B}, L): one row per source sentence, one column per position, starting with BOS."
            ).format(shape=tuple(ys.shape), case=case.label, B=B))

    @rule("known mistakes")
    def _known_mistakes(self, case: Case, ys: torch.Tensor) -> None:
        max_len, eos_id, pad_id = (case.kwargs[k] for k in ("max_len", "eos_id", "pad_id"))
        if torch.equal(ys, self.worked_out(case, self._run)):
            return

        def run(**mistake: Any) -> torch.Tensor:
            return self._run(case, **mistake)

        diagnoses: list[tuple[Callable[[], torch.Tensor], str]] = [
            (lambda: run(keep_bos=False),
             tr("BOS is missing: the output starts with bos_id in column 0, then the generated tokens.")),
            (lambda: run(pick=lambda lg: lg[:, 0].argmax(-1)),
             tr("every step produced the token that follows [BOS] alone. Either you read the logits of the first "
                "position (the next token comes from the last one, logits[:, -1]), or the decoder was always given "
                "[BOS] only (feed the tokens you generate back in: ys grows by one column each step).")),
            (lambda: run(pick=lambda lg: lg.argmax(1)[:, -1]),
             tr("the argmax ran over the positions (dim=1); it must run over the vocabulary: "
                "logits[:, -1].argmax(dim=-1).")),
            (lambda: run(stop="any"),
             tr("decoding stopped as soon as the first row produced EOS; continue until *every* row has.")),
            (lambda: run(stop="never", pad_after_eos=False),
             tr("EOS was ignored: after a row produces eos_id its later positions must be pad_id, and decoding stops "
                "as soon as every row has produced EOS.")),
            (lambda: run(pad_after_eos=False),
             tr("a row kept generating after its EOS: positions after a row's EOS must be pad_id (keep a `finished` "
                "mask).")),
            (lambda: run(stop="never"),
             tr("decoding ran on after every row had produced EOS: stop as soon as all rows are finished, so that L "
                "is as small as possible.")),
            (lambda: run(fill=eos_id), tr("positions after EOS were filled with eos_id; fill them with pad_id.")),
            (lambda: run(keep_eos=False),
             tr("the EOS token itself was replaced: keep eos_id where the row ended, pad after it.")),
            (lambda: run(steps=max_len + 1),
             tr("you generated max_len + 1 tokens: at most max_len tokens follow BOS, so L <= max_len + 1.")),
            (lambda: run(steps=max_len - 1),
             tr("you generated only max_len - 1 tokens: up to max_len tokens may follow BOS.")),
        ]
        if pad_id != 0:
            diagnoses.append((lambda: run(fill=0),
                              tr("positions after EOS were filled with 0; fill them with pad_id, which is not always "
                                 "0.")))
        explaining = []
        for mistaken, message in diagnoses:
            try:
                candidate = mistaken()
            except Exception:  # a mistake that cannot even run on this case
                continue
            if candidate.shape == ys.shape and torch.equal(candidate, ys):
                explaining.append(message)
        if explaining:  # the rules below say what is wrong where these do not explain every case
            raise named_failure(tr("`{function}`'s result is wrong on the case {case}: ").format(
                function="greedy_decode", case=case.label), explaining, None)

    # No known mistake fits: say where the output first departs from greedy decoding.
    @rule("starts with BOS")
    def _starts_with_bos(self, case: Case, ys: torch.Tensor) -> None:
        bos_id = case.kwargs["bos_id"]
        if not bool((ys[:, 0] == bos_id).all()):
            raise CheckFailed(tr(
                "`greedy_decode`'s result does not start with bos_id={bos_id} in column 0 on the case {case}.").format(
                bos_id=bos_id, case=case.label))

    @rule("at most max_len + 1 columns")
    def _at_most_max_len(self, case: Case, ys: torch.Tensor) -> None:
        max_len, name = case.kwargs["max_len"], tr("`{function}`'s result").format(function="greedy_decode")
        if ys.shape[1] > max_len + 1:
            raise CheckFailed(tr(
                "{name} has {columns} columns on the case {case}: at most max_len + 1 = {most} "
                "(BOS and up to max_len generated tokens)."
            ).format(name=name, columns=ys.shape[1], case=case.label, most=max_len + 1))

    @rule("tokens")
    def _tokens(self, case: Case, ys: torch.Tensor) -> None:
        expected, name = self.worked_out(case, self._run), tr("`{function}`'s result").format(function="greedy_decode")
        common = min(ys.shape[1], expected.shape[1])
        differ = (ys[:, :common] != expected[:, :common]).nonzero()
        if len(differ):
            b, t = (int(i) for i in differ[0])
            raise CheckFailed(tr(
                "{name} is wrong on the case {case}: row {row}, position {position} holds {token} where greedy "
                "decoding gives {expected} (the positions before it agree). Each step appends "
                "logits[:, -1].argmax(dim=-1) of model.decode(memory, ys) to ys; finished rows get pad_id."
            ).format(name=name, case=case.label, row=b, position=t, token=int(ys[b, t]), expected=int(expected[b, t])))

    @rule("stops when every row has ended")
    def _length(self, case: Case, ys: torch.Tensor) -> None:
        expected, name = self.worked_out(case, self._run), tr("`{function}`'s result").format(function="greedy_decode")
        if ys.shape != expected.shape:
            raise CheckFailed(tr(
                "{name} has {columns} columns on the case {case} where greedy decoding gives "
                "{expected} (the common positions agree): stop as soon as every row has produced EOS, or "
                "after max_len tokens."
            ).format(name=name, columns=ys.shape[1], case=case.label, expected=expected.shape[1]))

    rules = (_integer_ids, _shape, _known_mistakes, _starts_with_bos, _at_most_max_len, _tokens, _length)


CHECKS = [ReceptiveFieldCheck, RnnForwardCheck, GreedyDecodeCheck]


# What the instructions state, and the visible case that holds a learner to it. The rules every graded
# function keeps (its arguments left unchanged, no view of them returned, the arguments' dtype and
# device followed, gradients reaching them) are the base class's (Check.judge_effects, judge_dtype)
# and are not repeated here.
STATED = {
    "receptive_field": (
        Stated("the receptive field is returned as an int", "kernel_sizes=[5]", "return a Python int"),
        Stated("with no layer at all, r = 1", "empty", "for an empty stack"),
        Stated("missing strides or dilations mean 1 for every layer", "kernel_sizes=[3, 3, 3, 3]",
               "This case is valid"),
        Stated("the product runs over the strides of the layers below only", "strides=[2, 1, 3]",
               "its own stride"),
        Stated("each layer adds (k - 1) d steps", "dilations=[1, 2, 4, 8]", "the dilations are ignored"),
        Stated("lengths that differ raise ValueError", "strides=[2]", "raise ValueError instead"),
        Stated("a kernel size, stride or dilation below 1 raises ValueError", "kernel_sizes=[3, 0, 3]",
               "raise ValueError instead"),
        Stated("a description that makes no sense fails with ValueError, not an assert", "invalid",
               "not an assert"),
    ),
    "rnn_forward": (
        Stated("outputs holds h_1 .. h_T, not h_0", "x (2, 5, 3)", "shifted by one step"),
        Stated("h_T is the last state", "x (2, 5, 3)", "state after the first step"),
        Stated("outputs has shape (B, T, d_h)", "x (2, 5, 3)", "stacked along dim 0"),
        Stated("x[:, t] is the input at step t", "x (2, 5, 3)", "the input at step t is x[:, t]"),
        Stated("W_hh multiplies the previous state on the right, as (d_h, d_h)", "x (2, 5, 3)",
               "W_hh was used transposed"),
        Stated("h_t depends on the inputs up to step t only", "pair-", "backwards in time"),
    ),
    "greedy_decode": (
        Stated("model.encode(src) is called once", "every row ends", "call model.encode(src) once"),
        Stated("the next token comes from the last position", "every row ends",
               "you read the logits of the first position"),
        Stated("every row starts with bos_id in column 0", "every row ends", "BOS is missing"),
        Stated("at most max_len tokens follow bos_id", "no row ends", "max_len + 1 tokens"),
        Stated("after its eos_id a row holds pad_id, whatever the model says", "every row ends",
               "kept generating after its EOS"),
        Stated("the padding is pad_id, not a fixed id", "pad_id=7", "fill them with pad_id"),
        Stated("decoding stops as soon as every row has produced eos_id", "every row ends",
               "ran on after every row"),
        Stated("decoding goes on while any row has not ended", "every row ends", "as soon as the first row"),
        Stated("the result is a LongTensor", "every row ends", "LongTensor"),
    ),
}
