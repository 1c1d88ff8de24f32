"""The rules every graded function keeps beside its values, judged by the checks' base class: a floating
result in the arguments' dtype, a result that follows the arguments to their device, gradients that reach
what the result was made from. Each wrong function here returns the right values on the CPU, so only its
rule can catch it; each correct one is written in a style the course's solutions do not use."""
from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from autograder.checks import get
from autograder.framework import Case, CheckFailed, run_check
from harness import wire
from harness.calls import call_learner
from harness.observe import Observer
from harness.probes import SLOWEST_CALL, probe
from reference.encoder import LayerNorm, PositionwiseFeedForward


def _message(check_id: str, fn) -> str:
    with pytest.raises(CheckFailed) as failure:
        run_check(get(check_id), fn)
    return str(failure.value)


# -- gradients ------------------------------------------------------------------------------------


def softmax_detached(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return (e / e.sum(dim=dim, keepdim=True)).detach()


def softmax_sum_detached(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True).detach()


class LayerNormVarianceDetached(LayerNorm):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        variance = ((x - mean) ** 2).mean(-1, keepdim=True).detach()
        return self.gamma * (x - mean) / torch.sqrt(variance + self.eps) + self.beta


class FeedForwardThroughData(PositionwiseFeedForward):
    def forward(self, x):
        hidden = torch.relu(F.linear(x, self.w_1.weight.data, self.w_1.bias))
        return self.w_2(self.dropout(hidden))


def test_a_result_cut_off_from_the_graph_fails_with_its_own_message():
    message = _message("attention.softmax", softmax_detached)
    assert "does not require a gradient although `x` does" in message and "`.detach()`" in message


@pytest.mark.parametrize(("check_id", "fn", "reaching"), [
    ("attention.softmax", softmax_sum_detached, "`x`"),
    ("encoder.LayerNorm", LayerNormVarianceDetached, "`x`"),
    ("encoder.PositionwiseFeedForward", FeedForwardThroughData, "`self.w_1.weight`"),
], ids=["softmax's sum", "LayerNorm's variance", "a weight's .data"])
def test_a_part_cut_off_from_the_graph_names_what_its_gradient_misses(check_id, fn, reaching):
    message = _message(check_id, fn)
    assert f"values are right but the gradient reaching {reaching} is wrong" in message, message


# -- devices --------------------------------------------------------------------------------------


def sdpa_mask_made_on_the_cpu(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        bias = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))  # FAULT
        scores = scores + bias
    w = torch.exp(scores - scores.amax(-1, keepdim=True))
    w = torch.nan_to_num(w / w.sum(-1, keepdim=True))
    return w @ v, w


class LayerNormWithPlainShift(LayerNorm):
    def __init__(self, d_model, eps=1e-5):
        super().__init__(d_model, eps)
        self.shift = torch.zeros(d_model)  # not a buffer: .to(device) leaves it behind

    def forward(self, x):
        return super().forward(x) + self.shift


def test_a_tensor_made_on_the_cpu_and_mixed_with_the_arguments_fails_at_its_line():
    message = _message("attention.scaled_dot_product_attention", sdpa_mask_made_on_the_cpu)
    assert "mixes a tensor made on the CPU with its arguments" in message
    assert "bias = torch.zeros(mask.shape)" in message and "device=x.device" in message


def test_a_plain_tensor_attribute_is_told_to_be_a_buffer():
    message = _message("encoder.LayerNorm", LayerNormWithPlainShift)
    assert "`self.shift` is a plain tensor attribute" in message and 'register_buffer("shift"' in message


def test_a_result_left_on_the_cpu_is_a_finding():
    def zeros_like_but_on_the_cpu(x, dim=-1):
        return torch.zeros(x.shape)

    case = Case("x", (torch.randn(2, 3),), {"dim": -1})
    assert probe(zeros_like_but_on_the_cpu, case, ("device",)) == {"device": ("returned", "the result", "cpu")}


def test_a_probe_that_cannot_run_says_nothing():
    def needs_values(x, dim=-1):
        return torch.softmax(x, dim) if float(x.abs().max()) < 100 else x  # .item() on the meta device raises

    assert probe(needs_values, Case("x", (torch.randn(2, 3),)), ("device",)) == {}


# -- dtypes ---------------------------------------------------------------------------------------


class LayerNormInFloat32(LayerNorm):
    def forward(self, x):
        return super().forward(x).float()


class LayerNormComputedInFloat32(LayerNorm):
    def forward(self, x):  # float32 inside, float64 again by gamma: rounding, not a gradient cut off
        return super().forward(x.float())


def test_rounding_inside_is_not_taken_for_a_gradient_cut_off():
    case = next(c for c in get("encoder.LayerNorm").cases(False) if c.state is not None)
    assert probe(LayerNormComputedInFloat32, case, ("gradient",)) == {}


def test_a_floating_result_keeps_the_arguments_dtype():
    message = _message("encoder.LayerNorm", LayerNormInFloat32)
    assert "has dtype torch.float32 but the inputs were torch.float64" in message
    assert "keep the input's dtype" in message


# -- correct code in other styles passes every rule -----------------------------------------------


def softmax_logsumexp(x, dim=-1):
    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))


def softmax_shift_detached(x, dim=-1):  # a constant shift changes neither the values nor the gradient
    e = torch.exp(x - x.amax(dim=dim, keepdim=True).detach())
    return e / e.sum(dim=dim, keepdim=True)


def sdpa_with_scalar_tensors(q, k, v, mask=None):
    # 0-dimensional tensors made on the CPU mix with any device's: a GPU allows them
    scores = torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(float("-inf")))
        scores = scores.masked_fill(~mask.any(-1, keepdim=True), torch.tensor(0.0))
    w = torch.exp(scores - scores.amax(-1, keepdim=True))
    w = w / w.sum(-1, keepdim=True)
    if mask is not None:
        w = w * mask.any(-1, keepdim=True)
    return w @ v, w


class LayerNormRsqrt(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.gamma, self.beta, self.eps = nn.Parameter(torch.ones(d_model)), nn.Parameter(torch.zeros(d_model)), eps

    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        return self.gamma * centred * torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + self.eps) + self.beta


def rnn_forward_preallocated(x, h0, W_xh, W_hh, b_h):
    B, T, _ = x.shape
    outputs = x.new_zeros(B, T, h0.shape[-1])
    h = h0
    for t in range(T):
        h = torch.tanh(x[:, t] @ W_xh + h @ W_hh + b_h)
        outputs[:, t] = h
    return outputs, h


@pytest.mark.parametrize(("check_id", "fn"), [
    ("attention.softmax", softmax_logsumexp),
    ("attention.softmax", softmax_shift_detached),
    ("attention.scaled_dot_product_attention", sdpa_with_scalar_tensors),
    ("encoder.LayerNorm", LayerNormRsqrt),
    ("prerequisites.rnn_forward", rnn_forward_preallocated),
], ids=lambda v: getattr(v, "__name__", v))
def test_correct_code_in_another_style_passes_every_rule(check_id, fn):
    for hidden in (False, True):
        assert run_check(get(check_id), fn, hidden=hidden).startswith("✓")


# -- the findings travel as data ------------------------------------------------------------------


def test_findings_cross_the_wire_and_malformed_ones_are_refused():
    seen = Observer(trace=False)
    case = Case("x", (torch.randn(2, 3),), {"dim": -1})
    call_learner(softmax_detached, case, observer=seen)
    seen.findings = probe(softmax_detached, case, ("device", "gradient"))
    assert set(seen.findings) == {"gradient"}
    sent = json.loads(json.dumps(wire.encode_observed(seen.observed())))
    assert wire.decode_observed(sent).findings == seen.findings
    for broken in ({"elsewhere": ["x"]}, {"gradient": "detached"}, {"gradient": ["x"] * 9}, {"gradient": [1]}):
        with pytest.raises(wire.WireError):
            wire.decode_observed({**sent, "findings": broken})


def test_a_slow_call_is_not_probed_so_that_a_right_function_never_runs_out_of_time():
    case = Case("x", (torch.randn(2, 3),), {"dim": -1})
    assert probe(softmax_detached, case, ("gradient",), call_seconds=0.0) != {}
    assert probe(softmax_detached, case, ("gradient",), call_seconds=SLOWEST_CALL + 0.1) == {}
