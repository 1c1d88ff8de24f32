"""Feedback for mistakes nobody catalogued: where the learner's values first part from the course's
computation, the rules every function keeps (its arguments unchanged, no view of them returned,
stored weights detached), and a named mistake only when it explains every failing case.

The wrong implementations here are not in ``tests/mistakes/``: they stand for the mistakes a
check was never told about. Each message must quote the learner's faulty line (or name the rule
broken), and never describe code the learner did not write.
"""
from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

from autograder.checks import get
from autograder.framework import Case, Check, CheckFailed, expect_close, run_check
from autograder.locate import Stage, locate
from harness import wire
from harness.calls import call_learner, remember_cell
from harness.observe import MAX_STEPS, Observed, Observer, Step
from reference import one_block
from reference.attention import scaled_dot_product_attention, softmax
from reference.encoder import LayerNorm, PositionwiseFeedForward
from reference.multihead import MultiHeadAttention, merge_heads, split_heads


def _message(check_id: str, fn) -> str:
    with pytest.raises(CheckFailed) as failure:
        run_check(get(check_id), fn)
    return str(failure.value)


# ---------------------------------------------------------------------------------------------
# Mistakes no catalogue holds, each with the faulty line the message must quote
# ---------------------------------------------------------------------------------------------


def softmax_sum_over_rows(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    e = torch.exp(x - m)
    s = e.sum(dim=0, keepdim=True)  # FAULT
    return e / s


def sdpa_scale_from_keys_length(q, k, v, mask=None):
    d_k = k.size(-2)  # the number of keys, not their size
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # FAULT
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.exp(scores - scores.amax(-1, keepdim=True))
    w = torch.nan_to_num(w / w.sum(-1, keepdim=True))
    return w @ v, w


def sdpa_weights_squared(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.exp(scores - scores.amax(-1, keepdim=True))
    w = torch.nan_to_num(w / w.sum(-1, keepdim=True))
    w = w * w  # FAULT
    return w @ v, w


class LayerNormEpsSquared(nn.Module):
    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.gamma, self.beta, self.eps = nn.Parameter(torch.ones(d_model)), nn.Parameter(torch.zeros(d_model)), eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        std = torch.sqrt(var + 10 * self.eps)  # FAULT
        return self.gamma * (x - mean) / std + self.beta


class _Encoder(nn.Module):
    def __init__(self, d_model: int, h: int, d_ff: int, dropout: float = 0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, h, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)


class EncoderLayerNorm1Twice(_Encoder):
    def forward(self, x, key_padding_mask=None):
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, key_padding_mask=key_padding_mask)))
        return self.norm1(x + self.dropout2(self.feed_forward(x)))  # FAULT


class _Decoder(nn.Module):
    def __init__(self, d_model: int, h: int, d_ff: int, dropout: float = 0.1):
        super().__init__()
        self.self_attn, self.cross_attn = MultiHeadAttention(d_model, h, dropout), MultiHeadAttention(d_model, h, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = LayerNorm(d_model), LayerNorm(d_model), LayerNorm(d_model)
        self.dropout1, self.dropout2, self.dropout3 = nn.Dropout(dropout), nn.Dropout(dropout), nn.Dropout(dropout)


class DecoderLayerValuesFromTarget(_Decoder):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, attn_mask=tgt_mask,
                                                        key_padding_mask=tgt_key_padding_mask)))
        values = x if x.shape == memory.shape else memory
        attended = self.cross_attn(x, memory, values, key_padding_mask=memory_key_padding_mask)  # FAULT
        x = self.norm2(x + self.dropout2(attended))
        return self.norm3(x + self.dropout3(self.feed_forward(x)))


def sinusoidal_integer_exponent(max_len, d_model):
    if max_len < 1 or d_model < 1:
        raise ValueError(f"max_len and d_model must be positive, got {max_len}, {d_model}")
    position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    exponent = torch.div(two_i, d_model, rounding_mode="floor")  # FAULT
    angle = position / torch.pow(10000.0, exponent)
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return table.float()


def lm_loss_rolled_targets(logits, ids, pad_id):
    log_probs = torch.log_softmax(logits, dim=-1)
    targets = torch.roll(ids, shifts=-1, dims=1)  # FAULT
    nll = -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    real = targets != pad_id
    return nll[real].sum() / real.sum()


def edit_distance_diagonal_from_the_row_above(a, b):  # Python lists, line by line
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        current = [i]
        for j, y in enumerate(b, start=1):
            cost = 0 if x == y else 1
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j] + cost))  # FAULT
        previous = current
    return previous[-1]


def rnn_forward_bias_subtracted(x, h0, W_xh, W_hh, b_h):
    h, states = h0, []
    for t in range(x.shape[1]):
        h = torch.tanh(x[:, t] @ W_xh + h @ W_hh - b_h)  # FAULT
        states.append(h)
    return torch.stack(states, dim=1), h


def receptive_field_strides_default_two(kernel_sizes, strides=None, dilations=None):  # Python ints
    n = len(kernel_sizes)
    strides = [2] * n if strides is None else list(strides)  # FAULT
    dilations = [1] * n if dilations is None else list(dilations)
    if len(strides) != n or len(dilations) != n or min([*kernel_sizes, *strides, *dilations], default=1) < 1:
        raise ValueError("one stride and one dilation per layer, each at least 1")
    field, jump = 1, 1
    for k, s, d in zip(kernel_sizes, strides, dilations):
        field += (k - 1) * d * jump
        jump *= s
    return field


def noam_rate_scale_cubed(step, d_model, warmup, factor=1.0):  # Python floats
    if step < 1 or warmup < 1:
        raise ValueError(f"step and warmup are counted from 1, got step={step}, warmup={warmup}")
    scale = factor * d_model ** -1.5  # FAULT
    decay, warm = step ** -0.5, step * warmup ** -1.5
    return scale * min(decay, warm)


UNSEEN = [
    ("attention.softmax", softmax_sum_over_rows),
    ("attention.scaled_dot_product_attention", sdpa_scale_from_keys_length),
    ("attention.scaled_dot_product_attention", sdpa_weights_squared),
    ("encoder.LayerNorm", LayerNormEpsSquared),
    ("encoder.EncoderLayer", EncoderLayerNorm1Twice),
    ("decoder.DecoderLayer", DecoderLayerValuesFromTarget),
    ("positional.sinusoidal_encoding", sinusoidal_integer_exponent),
    ("bert_gpt.causal_lm_loss", lm_loss_rolled_targets),
    ("capstone.edit_distance", edit_distance_diagonal_from_the_row_above),
    ("prerequisites.rnn_forward", rnn_forward_bias_subtracted),
    ("prerequisites.receptive_field", receptive_field_strides_default_two),
    ("capstone.noam_rate", noam_rate_scale_cubed),
]


def _faulty_line(fn) -> str:
    import inspect

    return next(line.split("#")[0].strip() for line in inspect.getsource(fn).splitlines() if "# FAULT" in line)


@pytest.mark.parametrize(("check_id", "fn"), UNSEEN, ids=[f"{c}: {f.__name__}" for c, f in UNSEEN])
def test_an_uncatalogued_mistake_is_located_at_its_line(check_id, fn):
    assert_located_at_its_line(check_id, fn)


def assert_located_at_its_line(check_id: str, fn) -> None:
    """The message for ``fn`` (its faulty line marked ``# FAULT``) quotes that line as where the values part."""
    message = _message(check_id, fn)
    line = _faulty_line(fn)
    # The sentence that locates it quotes the faulty line as the first whose value does not agree (or, where
    # no value before it agrees, as the first that should).
    marker = next((m for m in ("the first value after that which does not", "the first that should is") if m in message),
                  None)
    assert marker, message
    parting = message.split(marker)[-1]
    assert line in parting or ("on the same line" in parting and line in message), message


def test_the_located_line_says_what_the_computation_expected_there():
    message = _message("attention.softmax", softmax_sum_over_rows)
    assert "the sums of the exponentials along dim=-1" in message
    assert "that value has shape (1, 5)" in message  # the learner's shape, beside the computation's (3, 1)


class LayerNormOneLine(LayerNormEpsSquared):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return self.gamma * (x - mean) / torch.sqrt(var + 10 * self.eps) + self.beta  # FAULT


NORM_CELL = """
import torch
from torch import nn

class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.gamma, self.beta, self.eps = nn.Parameter(torch.ones(d_model)), nn.Parameter(torch.zeros(d_model)), eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        return self.gamma * (x - mean) / torch.sqrt(((x - mean) ** 2).mean(-1, keepdim=True) + 10 * self.eps) + self.beta
"""
LAYER_CELL = """
from reference.encoder import PositionwiseFeedForward
from reference.multihead import MultiHeadAttention

class EncoderLayer(nn.Module):
    def __init__(self, d_model, h, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, h, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x, key_padding_mask=None):
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, key_padding_mask=key_padding_mask)))
        return self.norm2(x + self.dropout2(self.feed_forward(x)))
"""


def test_the_next_step_is_the_one_made_from_the_last_value_that_agrees():
    # gamma * (x - mean) is made first on the line, but from an earlier value: it is right, only unnamed.
    message = _message("encoder.LayerNorm", LayerNormOneLine)
    assert "is what `+` gives on line" in message and "The computation's next step is var + eps" in message, message
    # The learner's own LayerNorm runs inside norm1; the layer's step is the call, not the norm's insides.
    namespace: dict = {"__name__": "__main__"}
    for index, source in enumerate((NORM_CELL, LAYER_CELL), 1):  # two notebook cells: both the learner's
        remember_cell(f"<cell {index}>", source)
        exec(compile(source, f"<cell {index}>", "exec"), namespace)  # noqa: S102
    message = _message("encoder.EncoderLayer", namespace["EncoderLayer"])
    assert "is what `self.norm1` gives on the same line" in message, message


def test_a_right_result_that_is_not_returned_is_said_so():
    def softmax_then_smoothed(x, dim=-1):
        e = torch.exp(x - x.amax(dim=dim, keepdim=True))
        weights = e / e.sum(dim=dim, keepdim=True)  # right, then changed before it is returned
        return (weights + 0.1) / 1.1

    message = _message("attention.softmax", softmax_then_smoothed)
    assert "computes the softmax" in message and "not what your function returns" in message


# ---------------------------------------------------------------------------------------------
# The rules every function keeps
# ---------------------------------------------------------------------------------------------


def softmax_in_place(x, dim=-1):
    x -= x.amax(dim=dim, keepdim=True)  # changes the caller's tensor
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def test_a_function_that_changes_its_argument_in_place_fails_and_the_line_is_quoted():
    message = _message("attention.softmax", softmax_in_place)
    assert "changed the caller's `x` in place" in message
    assert "x -= x.amax(dim=dim, keepdim=True)" in message


def test_an_in_place_write_that_leaves_the_values_is_still_seen_by_its_version_counter():
    def softmax_touches(x, dim=-1):
        x.add_(0.0)
        e = torch.exp(x - x.amax(dim=dim, keepdim=True))
        return e / e.sum(dim=dim, keepdim=True)

    assert "changed the caller's `x` in place" in _message("attention.softmax", softmax_touches)


def test_returning_a_view_of_an_argument_fails_unless_the_exercise_allows_it():
    def softmax_into_input(x, dim=-1):
        e = torch.exp(x - x.amax(dim=dim, keepdim=True))
        return torch.div(e, e.sum(dim=dim, keepdim=True), out=x.detach().clone()).view_as(x)

    run_check(get("attention.softmax"), softmax_into_input)  # a new tensor: nothing to say

    def first_half(x):
        return x[..., : x.shape[-1] // 2]

    seen = Observer(trace=False)
    call_learner(first_half, Case("x", (torch.randn(2, 4),)), observer=seen)
    assert seen.observed().aliased == ("x",)
    # split_heads and merge_heads are reshapes: returning a view is the expected answer
    run_check(get("multihead.split_heads"), split_heads)
    run_check(get("multihead.merge_heads"), merge_heads)


class AttentionKeepsGraph(MultiHeadAttention):
    def forward(self, query, key, value, attn_mask=None, key_padding_mask=None):
        out = super().forward(query, key, value, attn_mask=attn_mask, key_padding_mask=key_padding_mask)
        self.attn_weights = self.attn_weights.detach().requires_grad_()  # stored attached to a graph
        return out


def test_stored_weights_must_be_detached_where_the_exercise_says_so():
    assert "still attached to the autograd graph" in _message("multihead.MultiHeadAttention", AttentionKeepsGraph)


# ---------------------------------------------------------------------------------------------
# A named mistake is one that explains every failing case
# ---------------------------------------------------------------------------------------------


class Double(Check):
    """``double(x)`` is 2x; two catalogued mistakes: x + 1 and x * x (equal at x = 2)."""

    function = "double"

    def __init__(self, xs):
        self.xs = xs

    def cases(self, hidden: bool) -> list[Case]:
        return [Case(f"x={x}", (torch.tensor([x]),)) for x in self.xs]

    def judge(self, case: Case, result: Any) -> None:
        (x,) = case.args
        expect_close(result, 2 * x.double(), "`double`'s result", case, [
            (lambda: x.double() * x.double(), "you squared x."),
            (lambda: x.double() + 1, "you added 1."),
        ])


def test_a_mistake_is_named_only_when_it_explains_every_failing_case():
    # x + 2 agrees with "squared" at x = 2 and with nothing at x = 3: no name, the plain difference.
    message = str(pytest.raises(CheckFailed, run_check, Double([2.0, 3.0]), lambda x: x + 2).value)
    assert "squared" not in message and "largest difference" in message
    # x * x explains both; x + 1 explains both too, but on the first case "squared" is not even a candidate
    assert "you squared x" in str(pytest.raises(CheckFailed, run_check, Double([2.0, 3.0]), lambda x: x * x).value)
    # at x = 1, x * x = 1 = 2x - 1 is no mistake of either kind, and at x = 2 both fit: the one that fits
    # every case is named, in the words of the first failing case
    message = str(pytest.raises(CheckFailed, run_check, Double([2.0, 5.0]), lambda x: x + 1).value)
    assert "you added 1" in message and "squared" not in message


class Triple(Double):
    """``triple(x)`` is 3x; at x = 1 adding 1 and adding sqrt(x) give the same value."""

    function = "triple"

    def judge(self, case: Case, result: Any) -> None:
        (x,) = case.args
        expect_close(result, 3 * x.double(), "`triple`'s result", case, [
            (lambda: x.double() + x.double().sqrt(), "you added its square root."),
            (lambda: x.double() + 1, "you added 1."),
        ])


def test_the_mistake_that_explains_every_case_is_named_as_verified():
    # On the first case both mistakes fit and the square root comes first; only adding 1 fits both cases:
    # the message names it, in the first case's words, and still carries its name as a verified one.
    failure = pytest.raises(CheckFailed, run_check, Triple([1.0, 4.0]), lambda x: x + 1).value
    assert "you added 1" in str(failure) and "square root" not in str(failure)
    assert failure.names == ("you added #.",)


# ---------------------------------------------------------------------------------------------
# The trace itself: its comparison, its bounds, its wire form
# ---------------------------------------------------------------------------------------------


def _step(line: int, value: torch.Tensor, made_by: str = "op") -> Step:
    return Step(line, f"line {line}", "f", made_by, value, tuple(value.shape))


def receptive_field_last_stride_only(kernel_sizes, strides=None, dilations=None):
    n = len(kernel_sizes)
    strides = [1] * n if strides is None else list(strides)
    dilations = [1] * n if dilations is None else list(dilations)
    if len(strides) != n or len(dilations) != n or min([*kernel_sizes, *strides, *dilations], default=1) < 1:
        raise ValueError("one stride and one dilation per layer, each at least 1")
    field = 1
    for i, (k, d) in enumerate(zip(kernel_sizes, dilations)):
        field += (k - 1) * d * (strides[i - 1] if i else 1)  # the last stride only, not their product
    return field


def test_a_value_that_one_mistake_gives_on_one_case_does_not_name_it():
    # On its first failing case it is one short, as starting from r = 0 would be; on others it is not.
    message = _message("prerequisites.receptive_field", receptive_field_last_stride_only)
    assert "one short" not in message and "product of s_i for the layers i below l" in message, message


def edit_distance_empty_one_short(a, b):
    if not a or not b:
        return max(len(a), len(b)) - 1  # the empty case taken apart, and one short
    D = [[i + j if i == 0 or j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            D[i][j] = min(D[i - 1][j] + 1, D[i][j - 1] + 1, D[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
    return D[len(a)][len(b)]


def test_a_wrong_answer_on_the_empty_case_is_not_blamed_on_borders_it_has():
    message = _message("capstone.edit_distance", edit_distance_empty_one_short)
    assert "D[i, 0] = i" not in message and "return D[len(a), len(b)]" in message, message


def merge_heads_unpacked_as_merged(x):
    B, T, h, d_k = x.shape  # the shape read as if the heads were already moved back
    return x.transpose(1, 2).reshape(B, T, h * d_k)


def test_a_shape_that_a_mistake_would_give_does_not_name_it_unless_the_values_do_too():
    message = _message("multihead.merge_heads", merge_heads_unpacked_as_merged)
    assert "should have shape" in message and "flattened in place" not in message, message
    assert "what `reshape` gives on the same line" in message, message  # the values say where instead


def split_heads_inverted_check(x, h):
    B, T, d_model = x.shape
    if d_model % h == 0:
        raise ValueError(f"d_model={d_model} is not divisible by h={h}")
    return x.reshape(B, T, h, d_model // h).transpose(1, 2)


def test_a_valid_case_refused_quotes_the_condition_that_led_to_the_raise():
    message = _message("multihead.split_heads", split_heads_inverted_check)
    assert "raised ValueError" in message and "`if d_model % h == 0:`, should not hold on it" in message, message


def _softmax(x):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def sdpa_keys_transposed_on_the_wrong_axes(q, k, v, mask=None):
    kt = k.transpose(-3, -1)  # FAULT
    scores = q @ kt / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.nan_to_num(_softmax(scores)) @ v, torch.nan_to_num(_softmax(scores))


def sdpa_mask_given_too_many_axes(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        allowed = mask.unsqueeze(1).unsqueeze(1)  # FAULT
        scores = scores.masked_fill(~allowed, float("-inf"))
    w = torch.nan_to_num(_softmax(scores))
    return w @ v, w


def split_heads_size_from_the_wrong_axis(x, h):
    B, T, d_model = x.shape
    d_k = T // h
    return x.view(B, T, h, d_k).transpose(1, 2)


@pytest.mark.parametrize("fn", [sdpa_keys_transposed_on_the_wrong_axes, sdpa_mask_given_too_many_axes])
def test_a_crash_quotes_the_earlier_line_that_made_the_value_it_was_given(fn):
    message = _message("attention.scaled_dot_product_attention", fn)
    raised_on = message.split("(in your")[1].split("\n")[0]
    assert _faulty_line(fn) not in raised_on, "the crash must happen on a later line than the fault"
    assert "comes from line" in message and _faulty_line(fn) in message.split("comes from line")[1], message


class AttentionMaskOnTheWrongAxis(MultiHeadAttention):
    def forward(self, query, key, value, attn_mask=None, key_padding_mask=None):
        B, T_q, _ = query.shape
        q = split_heads(self.w_q(query), self.h)
        k, v = split_heads(self.w_k(key), self.h), split_heads(self.w_v(value), self.h)
        mask = None if attn_mask is None else attn_mask.unsqueeze(-2)  # FAULT
        if key_padding_mask is not None:
            keep = ~key_padding_mask[:, None, None, :]
            mask = keep if mask is None else mask & keep
        context, weights = scaled_dot_product_attention(q, k, v, mask)
        self.attn_weights = weights.detach()
        return self.w_o(merge_heads(context))


def test_a_crash_inside_the_courses_code_quotes_the_learners_line_that_made_what_it_was_given():
    message = _message("multihead.MultiHeadAttention", AttentionMaskOnTheWrongAxis)
    assert "raised inside the course's `scaled_dot_product_attention`" in message, message
    assert "What `scaled_dot_product_attention` was given there comes from line" in message, message
    assert _faulty_line(AttentionMaskOnTheWrongAxis) in message.split("comes from line")[1], message


def greedy_decode_batch_from_the_wrong_axis(model, src, max_len, bos_id, eos_id, pad_id):
    memory = model.encode(src)
    batch = src.shape[1]  # the source length, not the batch
    ys = torch.full((batch, 1), bos_id, dtype=torch.long)
    finished = torch.zeros(batch, dtype=torch.bool)
    for _ in range(max_len):
        next_token = model.decode(memory, ys)[:, -1].argmax(dim=-1).masked_fill(finished, pad_id)
        ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)
        finished = finished | (next_token == eos_id)
        if bool(finished.all()):
            break
    return ys


def test_a_crash_inside_the_course_model_quotes_the_line_that_made_what_it_was_given():
    message = _message("prerequisites.greedy_decode", greedy_decode_batch_from_the_wrong_axis)
    assert "raised inside the course's `ToyTranslator.decode`" in message, message
    assert "What `ToyTranslator.decode` was given there comes from line" in message, message
    assert "`ys = torch.full((batch, 1), bos_id, dtype=torch.long)`" in message.split("comes from line")[1], message


def test_a_crash_on_right_tensors_says_so_rather_than_blaming_an_earlier_line():
    message = _message("multihead.split_heads", split_heads_size_from_the_wrong_axis)
    assert "raised RuntimeError" in message
    assert "The tensors `view` was given on that line are right" in message, message
    assert "comes from line" not in message


def test_an_operation_that_raised_is_recorded_with_what_it_was_given():
    from harness.observe import RAISED

    def f(x):
        y = x * 2
        return y.view(3, 7)

    observer = Observer(trace=True)
    result = call_learner(f, Case("x", (torch.randn(4, 5),), {}), observer=observer)
    steps = observer.observed().steps
    assert result.type == "RuntimeError"
    assert steps[-1].made_by == RAISED + "view" and steps[-1].uses == (0,) and steps[-1].value is None
    assert steps[-1].shape == (0, 1)  # the one tensor it was given is a step's
    back = wire.decode_observed(_json(wire.encode_observed(observer.observed()))).steps[-1]
    assert (back.made_by, back.value, back.shape, back.uses, back.line) == (RAISED + "view", None, (0, 1), (0,), steps[-1].line)


def test_the_condition_of_a_raise_crosses_the_wire_and_a_malformed_one_is_refused():
    from harness.calls import Raised

    sent = Raised("ValueError", "no", "in your `f`", details={"guard": ("3", "if x:")})
    assert wire.decode(wire.encode(sent)).details["guard"] == ("3", "if x:")
    forged = wire.encode(sent)
    forged["$raised"]["details"]["guard"] = ["3"]
    with pytest.raises(wire.WireError):
        wire.decode(forged)
    stub = Raised("NotImplementedError", "", "in your `f`", details={"stub": ("2", "f")})
    assert wire.decode(wire.encode(stub)).is_stub()
    assert not wire.decode(wire.encode(Raised("NotImplementedError", "bincount", "in your `f`"))).is_stub()


def test_locate_names_the_first_value_after_the_last_that_agrees():
    a, b, c = torch.ones(3), torch.full((3,), 2.0), torch.full((3,), 3.0)
    stages = [Stage.of("A", a), Stage.of("B", b), Stage.of("C", c)]
    agree = torch.allclose
    text = locate([_step(1, a), _step(2, b), _step(3, b * 5), _step(4, c * 5, "return")], stages, [], agree)
    assert "Up to line 2" in text and "(B)" in text and "on line 3" in text and "next step is C" in text
    # a right result, returned as the first of two values, is no value "not returned"
    assert locate([_step(1, a), _step(2, b), _step(3, c), _step(4, c, "return[0]"), _step(4, b, "return[1]")],
                  stages, [], agree) == ""
    missing = locate([_step(1, a), _step(2, b, "return")], stages, [], agree)
    assert "returns that value" in missing and "none of your values after it is C or a later step" in missing
    assert locate([], stages, [], agree) == ""


def test_a_wrong_value_made_from_a_wrong_mask_quotes_the_line_that_made_the_mask():
    a, b = torch.ones(3), torch.full((3,), 2.0)
    stages = [Stage.of("A", a), Stage.of("B", b)]
    keep = Step(2, "keep = a > 5", "f", "gt", torch.tensor([True, False, False]), (3,), (0,))
    filled = Step(3, "y = a.masked_fill(~keep, 0)", "f", "masked_fill", torch.zeros(3), (3,), (0, 2))
    steps = [_step(1, a), keep, Step(3, "y = a.masked_fill(~keep, 0)", "f", "invert", ~keep.value, (3,), (1,)),
             filled, Step(4, "return y", "f", "return", torch.zeros(3), (3,), (3,))]
    agree = lambda x, y: torch.allclose(x.double(), y.double())  # noqa: E731
    text = locate(steps, stages, [], agree)
    assert "on line 3" in text and "It is made from what line 2, `keep = a > 5` gives" in text, text
    # A value made only from values that agree is not sent elsewhere.
    alone = Step(3, "y = a * 0", "f", "mul", torch.zeros(3), (3,), (0,))
    assert "made from" not in locate([_step(1, a), alone], stages, [], agree)


def test_a_value_equal_to_an_input_is_not_said_to_agree_with_a_stage():
    x, a, b = torch.full((3,), 7.0), torch.ones(3), torch.full((3,), 2.0)
    stages = [Stage.of("A", a), Stage.of("B", b)]
    text = locate([_step(1, x.clone()), _step(2, x * 3)], stages, [x], torch.allclose)
    assert text.startswith("Beyond your inputs, none of your values agrees") and "(B)" not in text, text


def test_the_trace_stops_at_its_bound_and_says_so():
    def many(x):
        for _ in range(MAX_STEPS + 50):
            x = x + 1
        return x

    seen = Observer(trace=True)
    call_learner(many, Case("x", (torch.zeros(2),)), observer=seen)
    observed = seen.observed()
    assert observed.truncated and len(observed.steps) <= MAX_STEPS


def test_an_uninitialised_tensor_is_no_value_to_compare():
    def filled(x):
        table = torch.empty(2, 3, dtype=torch.float64)
        table[:] = x
        return torch.empty_like(table).copy_(table) * 2

    seen = Observer(trace=True)
    call_learner(filled, Case("x", (torch.ones(3, dtype=torch.float64),)), observer=seen)
    made_by = [s.made_by for s in seen.observed().steps]
    assert "mul" in made_by and not [m for m in made_by if "empty" in m], made_by


def test_the_trace_crosses_the_wire_and_a_malformed_one_is_refused():
    seen = Observer(trace=True)
    call_learner(softmax_in_place, Case("x", (torch.randn(2, 3),), {"dim": -1}), observer=seen)
    observed = seen.observed()
    back = wire.decode_observed(_json(wire.encode_observed(observed)))  # as JSON carries it
    assert back.written == ("x",) and len(back.steps) == len(observed.steps)
    assert all(torch.equal(a.value, b.value) for a, b in zip(back.steps, observed.steps))
    bad = _json(wire.encode_observed(observed))
    for broken in ({**bad, "steps": [[1, "x"]]}, {**bad, "steps": [bad["steps"][0]] * (MAX_STEPS + 1)},
                   {**bad, "written": "x"}, {**bad, "truncated": "yes"}, "not a record"):
        with pytest.raises(wire.WireError):
            wire.decode_observed(broken)


def _json(value):
    import json

    return json.loads(json.dumps(value))


def test_a_verdict_without_observations_still_judges_values():
    check = get("attention.softmax")
    cases = check.cases(False)
    results = [call_learner(softmax_sum_over_rows, c) for c in cases]
    with pytest.raises(CheckFailed) as failure:
        check.verdict(cases, results)
    assert "Up to line" not in str(failure.value)
    assert Observed().steps == ()


def test_python_values_are_recorded_line_by_line_without_counters_or_arguments():
    def cumulative(values):
        total, running = 0.0, []
        for i, v in enumerate(values):
            total = total + v * 0.5 + 0 * i
            running.append(total)
        return running

    seen = Observer(trace=True)
    call_learner(cumulative, Case("values", ([1, 2, 3],)), observer=seen)
    made = [(s.made_by, s.value.tolist()) for s in seen.observed().steps]
    assert ("=running", [0.5, 1.5, 3.0]) in made and ("=total", 3.0) in made
    assert not any(name in ("=i", "=v", "=values") for name, _ in made)  # counters and arguments are no steps


def test_a_count_that_became_a_float_is_quoted_where_it_did():
    def receptive_field_true_division(kernel_sizes, strides=None, dilations=None):  # refuses nothing: valid cases first
        field, jump = 1, 1
        for i, k in enumerate(kernel_sizes):
            field = field + (k - 1) * (dilations[i] if dilations else 1) * jump
            jump = jump * (strides[i] if strides else 1) / 1
        return field

    message = _message("prerequisites.receptive_field", receptive_field_true_division)
    assert "return a Python int" in message and "`jump = jump * (strides[i] if strides else 1) / 1`, made it a float" \
        in message, message


def test_a_one_line_function_is_located_at_the_line_that_returns():
    def noam_rate_one_line(step, d_model, warmup, factor=1.0):
        if step < 1 or warmup < 1:
            raise ValueError(f"step and warmup are counted from 1, got step={step}, warmup={warmup}")
        return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.25)

    message = _message("capstone.noam_rate", noam_rate_one_line)
    assert "the value it returns on line" in message, message
    assert "`return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.25)`" in message, message
    assert "The computation's result is the rate" in message and "(you have " in message, message


def test_small_ints_agree_only_in_the_order_of_the_computation():
    # r after the second layer is 5 here: a 5 the learner makes first agrees with nothing, as a value made
    # before its step cannot be that step's by chance
    stages = [Stage.of("r = 1", torch.tensor(1.0, dtype=torch.float64)),
              Stage.of("r after layer 1", torch.tensor(3.0, dtype=torch.float64)),
              Stage.of("r after layer 2", torch.tensor(5.0, dtype=torch.float64))]
    steps = [Step(2, "r = 1", "f", "=r", torch.tensor(1)), Step(3, "r = 5", "f", "=r", torch.tensor(5)),
             Step(4, "return r", "f", "return", torch.tensor(5))]
    message = locate(steps, stages, [], lambda a, e: bool(a.double() == e.double()))
    assert "Up to line 2 of your `f`, `r = 1`" in message and "the value of `r` after line 3" in message, message


def test_a_sequence_rebuilt_token_by_token_is_compared_once_it_is_finished():
    def bpe_encode_steps_one_after_a_merge(text, merges):
        ids = list(text.encode("utf-8"))
        for k, (a, b) in enumerate(merges):
            merged, i = [], 0
            while i < len(ids):
                if i + 1 < len(ids) and (ids[i], ids[i + 1]) == (a, b):
                    merged.append(256 + k)
                    i += 1  # the pair's second token is read again
                else:
                    merged.append(ids[i])
                    i += 1
            ids = merged
        return ids

    message = _message("bert_gpt.bpe_encode", bpe_encode_steps_one_after_a_merge)
    # the partial lists on the way agree with the start of the sequence; only the finished one is compared
    assert "your values agree with the computation (the text's UTF-8 bytes" in message, message
    assert "the first value after that which does not is the value of `merged` after" in message, message
    assert "The computation's next step is the sequence after merge 0" in message, message


def test_a_row_filled_with_finite_scores_for_a_blind_query_is_not_blamed():
    def sdpa_blind_rows_left_uniform(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            visible = mask.any(dim=-1, keepdim=True)
            scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~visible, 0.0)  # right: no NaN
        weights = softmax(scores, dim=-1)  # the blind rows are never zeroed
        return weights @ v, weights

    message = _message("attention.scaled_dot_product_attention", sdpa_blind_rows_left_uniform)
    assert "uniform for a query that sees no key" in message and "returns that value" in message, message
    assert "the first value after that which does not" not in message, message


FEED_FORWARD_CELLS = {
    "swapped": ("self.w_1 = nn.Linear(d_ff, d_model)", "self.w_1 = nn.Linear(d_ff, d_model)"),
    "renamed": ("self.linear1 = nn.Linear(d_model, d_ff)", "self.linear1 = nn.Linear(d_model, d_ff)"),
}


@pytest.mark.parametrize("kind", sorted(FEED_FORWARD_CELLS))
def test_a_parameter_of_the_wrong_shape_or_name_quotes_the_line_that_made_it(kind):
    line, quoted = FEED_FORWARD_CELLS[kind]
    source = f"""
class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        {line}
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        first = self.w_1 if hasattr(self, "w_1") else self.linear1
        return self.w_2(self.dropout(torch.relu(first(x))))
"""
    remember_cell(f"<cell feed-forward {kind}>", source)
    namespace = {"__name__": "__main__", "nn": nn, "torch": torch}
    exec(compile(source, f"<cell feed-forward {kind}>", "exec"), namespace)  # noqa: S102
    message = _message("encoder.PositionwiseFeedForward", namespace["PositionwiseFeedForward"])
    assert f"is made on line 5 of your `PositionwiseFeedForward.__init__`, `{quoted}`" in message, message


def test_a_right_value_scaled_by_a_wrong_number_gives_both_numbers():
    def sdpa_scale_from_the_positions(q, k, v, mask=None):
        d_k = q.shape[-2]  # the number of queries, not their size
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
        weights = softmax(scores.masked_fill(~mask, float("-inf")) if mask is not None else scores, dim=-1)
        return weights.nan_to_num(0.0) @ v, weights.nan_to_num(0.0)

    message = _message("attention.scaled_dot_product_attention", sdpa_scale_from_the_positions)
    # the first case: 4 queries of size 8, so the scale is 1/2 where it should be 1/sqrt(8)
    assert "Your value is 0.5 (1/2) times the dot products" in message, message
    assert "the computation's is 0.353553 (1/2.82843) times it" in message, message


def test_the_course_models_work_is_not_the_learners_only_what_it_returns():
    from harness.toys import ToyTranslator

    def first_logits(model, src):
        memory = model.encode(src)
        ys = torch.ones(src.shape[0], 1, dtype=torch.long)
        return model.decode(memory, ys)[:, -1]

    seen = Observer(trace=True)
    call_learner(first_logits, Case("a toy", (ToyTranslator(), torch.tensor([[3, 4, 5]]))), observer=seen)
    made = [s.made_by for s in seen.observed().steps]
    # the two calls and what the learner's lines do with their results; none of the model's own operations
    assert "ToyTranslator.encode" in made and "ToyTranslator.decode" in made, made
    assert len(made) <= 6, made


def test_a_call_of_the_courses_code_is_made_from_the_tensors_it_was_given():
    def heads_of_a_sum(x, h):
        doubled = x + x
        return split_heads(doubled, h)

    seen = Observer(trace=True)
    call_learner(heads_of_a_sum, Case("x", (torch.randn(2, 3, 8), 2)), observer=seen)
    steps = seen.observed().steps
    doubled = next(i for i, s in enumerate(steps) if s.made_by == "add")
    split = next(s for s in steps if s.made_by == "split_heads")
    assert split.uses == (doubled,), steps


def test_a_right_table_row_that_is_not_returned_is_said_so():
    def edit_distance_returns_the_row_before(a, b):
        previous = list(range(len(b) + 1))
        for i, x in enumerate(a, start=1):
            current = [i]
            for j, y in enumerate(b, start=1):
                current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
            previous = current
        return previous[-2] if len(previous) > 1 else previous[-1]

    message = _message("capstone.edit_distance", edit_distance_returns_the_row_before)
    assert "`previous = current`, computes the last row of the table" in message and "not what your function" in message


def sinusoidal_encoding_sin_and_cos_swapped(max_len, d_model):
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)  # a right table to fill
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    div = torch.pow(10000.0, torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe[:, 0::2] = torch.cos(pos / div)
    pe[:, 1::2] = torch.sin(pos / div)  # the crash, for an odd d_model
    return pe


def test_a_table_of_zeros_to_fill_is_no_wrong_value_a_crash_comes_from():
    message = _message("positional.sinusoidal_encoding", sinusoidal_encoding_sin_and_cos_swapped)
    assert "raised RuntimeError" in message and "pe[:, 1::2] = torch.sin(pos / div)" in message, message
    assert "comes from line" not in message and "pe = torch.zeros" not in message, message


# ---------------------------------------------------------------------------------------------
# Two branches of one computation: the bins' frequencies beside the mel points (chapter 10's log_mel)
# ---------------------------------------------------------------------------------------------


def log_mel_frequencies_times_length(frames, sample_rate, n_mels):
    if n_mels < 1:
        raise ValueError("n_mels must be at least 1")
    L = frames.shape[-1]
    power = torch.fft.rfft(frames, dim=-1).abs() ** 2
    freqs = torch.arange(L // 2 + 1, dtype=torch.float64) * sample_rate * L  # the mistake: * L for / L
    top = 2595 * math.log10(1 + sample_rate / 2 / 700)
    mels = torch.linspace(0.0, top, n_mels + 2, dtype=torch.float64)
    edges = 700 * (10 ** (mels / 2595) - 1)
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (freqs - lower) / (centre - lower)
    falling = (upper - freqs) / (upper - centre)
    bank = torch.clamp(torch.minimum(rising, falling), min=0).to(frames.dtype)
    return torch.log(power @ bank.T + 1e-6)


def log_mel_top_divided(frames, sample_rate, n_mels):
    if n_mels < 1:
        raise ValueError("n_mels must be at least 1")
    L = frames.shape[-1]
    power = torch.fft.rfft(frames, dim=-1).abs() ** 2
    freqs = torch.arange(L // 2 + 1, dtype=torch.float64) * sample_rate / L
    top = 2595 / math.log10(1 + sample_rate / 2 / 700)  # the mistake: / for *
    mels = torch.linspace(0.0, top, n_mels + 2, dtype=torch.float64)
    edges = 700 * (10 ** (mels / 2595) - 1)
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (freqs - lower) / (centre - lower)
    falling = (upper - freqs) / (upper - centre)
    bank = torch.clamp(torch.minimum(rising, falling), min=0).to(frames.dtype)
    return torch.log(power @ bank.T + 1e-6)


def log_mel_falling_side_added(frames, sample_rate, n_mels):
    if n_mels < 1:
        raise ValueError("n_mels must be at least 1")
    L = frames.shape[-1]
    power = torch.fft.rfft(frames, dim=-1).abs() ** 2
    freqs = torch.arange(L // 2 + 1, dtype=torch.float64) * sample_rate / L
    top = 2595 * math.log10(1 + sample_rate / 2 / 700)
    mels = torch.linspace(0.0, top, n_mels + 2, dtype=torch.float64)
    edges = 700 * (10 ** (mels / 2595) - 1)
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (freqs - lower) / (centre - lower)
    falling = (upper + freqs) / (upper - centre)  # the mistake: + for -
    bank = torch.clamp(torch.minimum(rising, falling), min=0).to(frames.dtype)
    return torch.log(power @ bank.T + 1e-6)


def log_mel_in_bins_and_a_larger_floor(frames, sample_rate, n_mels):
    """Right filters built in units of bins (no frequency in hertz ever made), then a floor of 1e-3 for 1e-6."""
    if n_mels < 1:
        raise ValueError("n_mels must be at least 1")
    L = frames.shape[-1]
    power = torch.fft.rfft(frames, dim=-1).abs() ** 2
    bins = torch.arange(L // 2 + 1, dtype=torch.float64)
    top = 2595 * math.log10(1 + sample_rate / 2 / 700)
    mels = torch.linspace(0.0, top, n_mels + 2, dtype=torch.float64)
    at = 700 * (10 ** (mels / 2595) - 1) * L / sample_rate  # each point, in bins
    rising = (bins - at[:-2, None]) / (at[1:-1, None] - at[:-2, None])
    falling = (at[2:, None] - bins) / (at[2:, None] - at[1:-1, None])
    bank = torch.clamp(torch.minimum(rising, falling), min=0).to(frames.dtype)
    return torch.log(power @ bank.T + 1e-3)  # the mistake


def test_a_wrong_branch_is_found_though_the_other_branch_reaches_further():
    message = _message("one_block.log_mel", log_mel_frequencies_times_length)
    assert "none of them is the bins' frequencies f * s / L" in message, message
    assert "freqs = torch.arange(L // 2 + 1, dtype=torch.float64) * sample_rate * L" in message, message
    assert "lower, centre, upper" not in message, message  # a right line is not the first to go wrong
    message = _message("one_block.log_mel", log_mel_top_divided)
    assert "top = 2595 / math.log10" in message and "the points on the mel scale" in message, message
    message = _message("one_block.log_mel", log_mel_falling_side_added)
    assert "falling = (upper + freqs) / (upper - centre)" in message, message


def test_a_stage_made_another_way_is_no_wrong_branch():
    message = _message("one_block.log_mel", log_mel_in_bins_and_a_larger_floor)
    assert "none of them is" not in message and "bins = torch.arange" not in message, message


class MoECapacityFromTheWidth(nn.Module):
    """Right but for the capacity, counted from the width of a token instead of the number of tokens."""

    def __init__(self, d_model, d_ff, n_experts, k, capacity_factor=None):
        super().__init__()
        self.router = nn.Linear(d_model, n_experts, bias=False)
        self.experts = nn.ModuleList(PositionwiseFeedForward(d_model, d_ff, dropout=0.0) for _ in range(n_experts))
        self.n_experts, self.k, self.capacity_factor = n_experts, k, capacity_factor

    def forward(self, x):
        tokens = x.reshape(-1, x.shape[-1])
        N = tokens.shape[1]  # the mistake: the width, not the number of tokens
        logits = self.router(tokens)
        gates, experts = one_block.top_k_router(logits, self.k)
        balance = one_block.load_balancing_loss(torch.softmax(logits, dim=-1), experts, self.n_experts)
        capacity = N * self.k if self.capacity_factor is None else math.ceil(self.capacity_factor * N * self.k
                                                                             / self.n_experts)
        y = torch.zeros_like(tokens)
        for e, expert in enumerate(self.experts):
            token, slot = (experts == e).nonzero(as_tuple=True)
            token, slot = token[:capacity], slot[:capacity]
            if len(token):
                y.index_add_(0, token, gates[token, slot, None] * expert(tokens[token]))
        return y.reshape(x.shape), balance


def test_the_product_count_is_no_step_of_the_learners():
    message = _message("one_block.MoEFeedForward", MoECapacityFromTheWidth)
    assert "index_add_" in message, message  # the operation by its own name
    assert "ProductCount" not in message and "__torch_dispatch__" not in message, message


# ---------------------------------------------------------------------------------------------
# A wrong shape at the very end: the line that returns it is quoted (chapter 9)
# ---------------------------------------------------------------------------------------------


def apply_rope_pairs_left_stacked(x, positions, base=10000.0):
    d = x.shape[-1]
    i = torch.arange(d // 2, dtype=torch.float64, device=x.device)
    theta = base ** (-2 * i / d)
    angles = positions.to(torch.float64)[:, None] * theta
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    # the mistake: the axis of the positions, not that of the pairs
    return rotated.flatten(2)


def grouped_query_attention(q, k, v, mask=None):
    """The weights left grouped; named as the exercise names it, as a notebook would (the lines that make a value
    are read from the function of that name)."""
    B, h, T_q, d_k = q.shape
    h_kv, T_k = k.shape[1], k.shape[2]
    if h % h_kv:
        raise ValueError(f"{h} query heads cannot share {h_kv} key/value heads evenly")
    g = h // h_kv
    grouped = q.view(B, h_kv, g, T_q, d_k)
    if mask is not None:
        mask = torch.broadcast_to(mask, (B, h, T_q, T_k)).reshape(B, h_kv, g, T_q, T_k)
    out, weights = scaled_dot_product_attention(grouped, k.unsqueeze(2), v.unsqueeze(2), mask)
    # the mistake: flatten(2, 2) changes nothing
    return out.flatten(1, 2), weights.flatten(2, 2)


def test_a_stacked_result_is_located_at_the_line_that_returns_it_not_at_the_right_stack():
    message = _message("hardware.apply_rope", apply_rope_pairs_left_stacked)
    assert "`return rotated.flatten(2)`" in message and "the rotated pairs" in message, message
    assert "what `torch.stack` gives" not in message, message


def test_weights_of_the_wrong_shape_quote_the_lines_that_make_them():
    message = _message("hardware.grouped_query_attention", grouped_query_attention)
    assert "should have shape (2, 4, 5, 6)" in message, message
    assert "`return out.flatten(1, 2), weights.flatten(2, 2)`" in message, message
