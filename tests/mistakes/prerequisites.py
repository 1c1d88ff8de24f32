"""Wrong answers to chapter 1, as learners write them, and the words that must name each one."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from . import Mistake, Spoiled

RF = "prerequisites.receptive_field"
RNN = "prerequisites.rnn_forward"
GREEDY = "prerequisites.greedy_decode"


SPOILED = Spoiled("rnn_forward", "h = torch.tanh(", "h = torch.sigmoid(")


# ----------------------------------------------------------------------------------------
# receptive_field
# ----------------------------------------------------------------------------------------


def _layers(kernel_sizes, strides, dilations, check_values: bool = True, check_strides: bool = True):
    """The validation a careful learner writes, shared by mistakes that are wrong elsewhere."""
    n = len(kernel_sizes)
    strides = [1] * n if strides is None else list(strides)
    dilations = [1] * n if dilations is None else list(dilations)
    if len(strides) != n or len(dilations) != n:
        raise ValueError("one stride and one dilation per layer")
    if check_values:
        checked = (kernel_sizes, strides, dilations) if check_strides else (kernel_sizes,)
        if any(v < 1 for values in checked for v in values):
            raise ValueError("sizes, strides and dilations must be at least 1")
    return list(zip(kernel_sizes, strides, dilations))


def rf_ignores_strides(kernel_sizes: Sequence[int], strides=None, dilations=None) -> int:
    return 1 + sum((k - 1) * d for k, s, d in _layers(kernel_sizes, strides, dilations))


def rf_own_stride_included(kernel_sizes: Sequence[int], strides=None, dilations=None) -> int:
    r, jump = 1, 1
    for k, s, d in _layers(kernel_sizes, strides, dilations):
        jump *= s  # updated before use: prod over i <= l
        r += (k - 1) * d * jump
    return r


def rf_ignores_dilation(kernel_sizes: Sequence[int], strides=None, dilations=None) -> int:
    r, jump = 1, 1
    for k, s, _ in _layers(kernel_sizes, strides, dilations):
        r += (k - 1) * jump
        jump *= s
    return r


def rf_starts_at_zero(kernel_sizes: Sequence[int], strides=None, dilations=None) -> int:
    r, jump = 0, 1
    for k, s, d in _layers(kernel_sizes, strides, dilations):
        r += (k - 1) * d * jump
        jump *= s
    return r


def rf_adds_k_times_d(kernel_sizes: Sequence[int], strides=None, dilations=None) -> int:
    r, jump = 1, 1
    for k, s, d in _layers(kernel_sizes, strides, dilations):
        r += k * d * jump
        jump *= s
    return r


def rf_sums_kernels(kernel_sizes: Sequence[int], strides=None, dilations=None) -> int:
    _layers(kernel_sizes, strides, dilations)
    return sum(kernel_sizes)


def rf_multiplies_kernels(kernel_sizes: Sequence[int], strides=None, dilations=None) -> int:
    _layers(kernel_sizes, strides, dilations)
    return math.prod(kernel_sizes)


def rf_layers_in_wrong_order(kernel_sizes: Sequence[int], strides=None, dilations=None) -> int:
    r = 1
    for k, s, d in _layers(kernel_sizes, strides, dilations):  # the output-to-input recursion, run bottom-up
        r = (r - 1) * s + (k - 1) * d + 1
    return r


def rf_no_validation(kernel_sizes: Sequence[int], strides=None, dilations=None) -> int:
    n = len(kernel_sizes)
    strides = strides or [1] * n
    dilations = dilations or [1] * n
    r, jump = 1, 1
    for k, s, d in zip(kernel_sizes, strides, dilations):
        r += (k - 1) * d * jump
        jump *= s
    return r


def rf_asserts(kernel_sizes: Sequence[int], strides=None, dilations=None) -> int:
    n = len(kernel_sizes)
    strides = [1] * n if strides is None else strides
    dilations = [1] * n if dilations is None else dilations
    assert len(strides) == n and len(dilations) == n, "lengths differ"
    assert all(v >= 1 for v in [*kernel_sizes, *strides, *dilations]), "values must be >= 1"
    return rf_no_validation(kernel_sizes, strides, dilations)


def rf_checks_kernels_only(kernel_sizes: Sequence[int], strides=None, dilations=None) -> int:
    r, jump = 1, 1
    for k, s, d in _layers(kernel_sizes, strides, dilations, check_strides=False):
        r += (k - 1) * d * jump
        jump *= s
    return r


def rf_float(kernel_sizes: Sequence[int], strides=None, dilations=None) -> float:
    r, jump = 1.0, 1.0  # float accumulators: the answer comes back as 13.0, not 13
    for k, s, d in _layers(kernel_sizes, strides, dilations):
        r += (k - 1) * d * jump
        jump *= s
    return r


# ----------------------------------------------------------------------------------------
# rnn_forward
# ----------------------------------------------------------------------------------------


def _rnn(x, h0, step, collect=lambda h_prev, h: h):
    h, states = h0, []
    for t in range(x.shape[1]):
        h_new = step(x[:, t], h)
        states.append(collect(h, h_new))
        h = h_new
    return torch.stack(states, dim=1), h


def rnn_no_tanh(x, h0, W_xh, W_hh, b_h):
    return _rnn(x, h0, lambda xt, h: xt @ W_xh + h @ W_hh + b_h)


def rnn_sigmoid(x, h0, W_xh, W_hh, b_h):
    return _rnn(x, h0, lambda xt, h: torch.sigmoid(xt @ W_xh + h @ W_hh + b_h))


def rnn_h_not_carried(x, h0, W_xh, W_hh, b_h):
    states = [torch.tanh(x[:, t] @ W_xh + h0 @ W_hh + b_h) for t in range(x.shape[1])]
    return torch.stack(states, dim=1), states[-1]


def rnn_outputs_reversed(x, h0, W_xh, W_hh, b_h):
    h, states = h0, []
    for t in range(x.shape[1]):
        h = torch.tanh(x[:, t] @ W_xh + h @ W_hh + b_h)
        states.insert(0, h)  # prepends
    return torch.stack(states, dim=1), h


def rnn_outputs_include_h0(x, h0, W_xh, W_hh, b_h):
    # appends the state before updating it: h_0 .. h_{T-1}
    return _rnn(x, h0, lambda xt, h: torch.tanh(xt @ W_xh + h @ W_hh + b_h), collect=lambda h_prev, h: h_prev)


def rnn_weights_swapped(x, h0, W_xh, W_hh, b_h):
    return _rnn(x, h0, lambda xt, h: torch.tanh(xt @ W_hh + h @ W_xh + b_h))


def rnn_W_hh_transposed(x, h0, W_xh, W_hh, b_h):
    return _rnn(x, h0, lambda xt, h: torch.tanh(xt @ W_xh + h @ W_hh.T + b_h))


def rnn_returns_h0(x, h0, W_xh, W_hh, b_h):
    outputs, _ = _rnn(x, h0, lambda xt, h: torch.tanh(xt @ W_xh + h @ W_hh + b_h))
    return outputs, h0


def rnn_returns_first_state(x, h0, W_xh, W_hh, b_h):
    outputs, _ = _rnn(x, h0, lambda xt, h: torch.tanh(xt @ W_xh + h @ W_hh + b_h))
    return outputs, outputs[:, 0]


def rnn_time_major_indexing(x, h0, W_xh, W_hh, b_h):
    h, states = h0, []
    for t in range(x.shape[1]):
        h = torch.tanh(x[t] @ W_xh + h @ W_hh + b_h)  # x[t] is batch element t, not step t
        states.append(h)
    return torch.stack(states, dim=1), h


def rnn_stacked_on_dim0(x, h0, W_xh, W_hh, b_h):
    h, states = h0, []
    for t in range(x.shape[1]):
        h = torch.tanh(x[:, t] @ W_xh + h @ W_hh + b_h)
        states.append(h)
    return torch.stack(states), h  # (T, B, d_h)


def rnn_no_bias(x, h0, W_xh, W_hh, b_h):
    return _rnn(x, h0, lambda xt, h: torch.tanh(xt @ W_xh + h @ W_hh))


def rnn_backwards_in_time(x, h0, W_xh, W_hh, b_h):
    h, states = h0, []
    for t in reversed(range(x.shape[1])):
        h = torch.tanh(x[:, t] @ W_xh + h @ W_hh + b_h)
        states.append(h)
    return torch.stack(states, dim=1), h


def rnn_uses_torch_rnn(x, h0, W_xh, W_hh, b_h):
    d_in, d_h = W_xh.shape
    rnn = torch.nn.RNN(d_in, d_h, batch_first=True, dtype=x.dtype)
    with torch.no_grad():
        rnn.weight_ih_l0.copy_(W_xh.T)
        rnn.weight_hh_l0.copy_(W_hh.T)
        rnn.bias_ih_l0.copy_(b_h)
        rnn.bias_hh_l0.zero_()
    outputs, h_n = rnn(x, h0.unsqueeze(0))
    return outputs, h_n[0]


# ----------------------------------------------------------------------------------------
# greedy_decode
# ----------------------------------------------------------------------------------------


def _decode(
    model: Any, src, max_len, bos_id, eos_id, pad_id, *, position=-1, feed=True, until="all", pad=True,
    fill=None, extra=0, keep_bos=True, axis=-1,
):
    memory = model.encode(src)
    B = src.shape[0]
    ys = torch.full((B, 1), bos_id, dtype=torch.long)
    start = ys
    finished = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len + extra):
        logits = model.decode(memory, ys if feed else start)
        if axis == -1:
            token = logits[:, position].argmax(dim=-1)
        else:
            token = logits.argmax(dim=axis)[:, position]
        if pad:
            token = token.masked_fill(finished, pad_id if fill is None else fill)
        ys = torch.cat([ys, token.unsqueeze(1)], dim=1)
        finished = finished | (token == eos_id)
        if until == "all" and finished.all() or until == "first" and finished.any():
            break
    return ys if keep_bos else ys[:, 1:]


def greedy_encodes_every_step(model, src, max_len, bos_id, eos_id, pad_id):
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long)
    finished = torch.zeros(src.shape[0], dtype=torch.bool)
    for _ in range(max_len):
        token = model(src, ys)[:, -1].argmax(dim=-1).masked_fill(finished, pad_id)  # encodes src again each step
        ys = torch.cat([ys, token.unsqueeze(1)], dim=1)
        finished = finished | (token == eos_id)
        if finished.all():
            break
    return ys


def greedy_ignores_eos(model, src, max_len, bos_id, eos_id, pad_id):
    return _decode(model, src, max_len, bos_id, eos_id, pad_id, until="never", pad=False)


def greedy_stops_at_first_eos(model, src, max_len, bos_id, eos_id, pad_id):
    return _decode(model, src, max_len, bos_id, eos_id, pad_id, until="first")


def greedy_first_position(model, src, max_len, bos_id, eos_id, pad_id):
    return _decode(model, src, max_len, bos_id, eos_id, pad_id, position=0)


def greedy_no_feedback(model, src, max_len, bos_id, eos_id, pad_id):
    return _decode(model, src, max_len, bos_id, eos_id, pad_id, feed=False)


def greedy_argmax_over_positions(model, src, max_len, bos_id, eos_id, pad_id):
    return _decode(model, src, max_len, bos_id, eos_id, pad_id, axis=1)


def greedy_argmax_over_batch(model, src, max_len, bos_id, eos_id, pad_id):
    memory = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long)
    for _ in range(max_len):
        token = model.decode(memory, ys)[:, -1].argmax(dim=0)  # (V,): over the batch
        ys = torch.cat([ys, token.unsqueeze(1)], dim=1)
        if (ys == eos_id).any(dim=1).all():
            break
    return ys


def greedy_pads_with_eos(model, src, max_len, bos_id, eos_id, pad_id):
    return _decode(model, src, max_len, bos_id, eos_id, pad_id, fill=eos_id)


def greedy_pads_with_zero(model, src, max_len, bos_id, eos_id, pad_id):
    return _decode(model, src, max_len, bos_id, eos_id, pad_id, fill=0)


def greedy_one_step_too_many(model, src, max_len, bos_id, eos_id, pad_id):
    return _decode(model, src, max_len, bos_id, eos_id, pad_id, extra=1)


def greedy_drops_bos(model, src, max_len, bos_id, eos_id, pad_id):
    return _decode(model, src, max_len, bos_id, eos_id, pad_id, keep_bos=False)


def greedy_no_early_stop(model, src, max_len, bos_id, eos_id, pad_id):
    return _decode(model, src, max_len, bos_id, eos_id, pad_id, until="never")


def greedy_no_padding(model, src, max_len, bos_id, eos_id, pad_id):
    return _decode(model, src, max_len, bos_id, eos_id, pad_id, pad=False)


def greedy_float_tokens(model, src, max_len, bos_id, eos_id, pad_id):
    memory = model.encode(src)
    B = src.shape[0]
    ys = torch.full((B, 1), float(bos_id))  # a float tensor: the model cannot index with it
    finished = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len):
        token = model.decode(memory, ys.long())[:, -1].argmax(dim=-1).masked_fill(finished, pad_id)
        ys = torch.cat([ys, token.unsqueeze(1).float()], dim=1)
        finished = finished | (token == eos_id)
        if finished.all():
            break
    return ys


MISTAKES = [
    # receptive_field
    Mistake(RF, "ignores the strides", rf_ignores_strides, "the strides are ignored", rule="value"),
    Mistake(RF, "multiplies by the layer's own stride too", rf_own_stride_included, "its own stride", rule="value"),
    Mistake(RF, "ignores the dilations", rf_ignores_dilation, "the dilations are ignored", rule="value"),
    Mistake(RF, "starts counting at 0", rf_starts_at_zero, "start from r = 1", rule="value"),
    Mistake(RF, "adds k d per layer instead of (k - 1) d", rf_adds_k_times_d, "instead of (k - 1) d", rule="value"),
    Mistake(RF, "sums the kernel sizes", rf_sums_kernels, "you summed the kernel sizes", rule="value"),
    Mistake(RF, "multiplies the kernel sizes", rf_multiplies_kernels, "you multiplied the kernel sizes", rule="value"),
    Mistake(RF, "runs the recursion from the first layer up", rf_layers_in_wrong_order, "wrong order", rule="value"),
    Mistake(RF, "no validation at all", rf_no_validation, "raise ValueError instead", rule="refusal"),
    Mistake(RF, "validates with assert", rf_asserts, "not an assert", rule="refusal"),
    Mistake(RF, "validates kernel sizes but not strides or dilations", rf_checks_kernels_only,
            "raise ValueError instead", hidden_only=True, rule="refusal"),
    Mistake(RF, "returns a float", rf_float, "return a Python int", rule="a Python int"),
    # rnn_forward
    Mistake(RNN, "no tanh", rnn_no_tanh, "tanh is missing", rule="outputs"),
    Mistake(RNN, "sigmoid instead of tanh", rnn_sigmoid, "not sigmoid", rule="outputs"),
    Mistake(RNN, "h0 used at every step", rnn_h_not_carried, "instead of the previous state", rule="outputs"),
    Mistake(RNN, "outputs in reverse order", rnn_outputs_reversed, "reverse order", rule="outputs"),
    Mistake(RNN, "outputs are h_0..h_{T-1}", rnn_outputs_include_h0, "shifted by one step", rule="outputs"),
    Mistake(RNN, "W_xh and W_hh swapped", rnn_weights_swapped, "which weight goes with which input", rule="raises nothing"),
    Mistake(RNN, "W_hh transposed", rnn_W_hh_transposed, "W_hh was used transposed", rule="outputs"),
    Mistake(RNN, "returns h0 as h_T", rnn_returns_h0, "h_T is h0", rule="h_T"),
    Mistake(RNN, "returns the first state as h_T", rnn_returns_first_state, "state after the first step", rule="h_T"),
    Mistake(RNN, "x[t] instead of x[:, t]", rnn_time_major_indexing, "the input at step t is x[:, t]", rule="raises nothing"),
    Mistake(RNN, "states stacked along dim 0", rnn_stacked_on_dim0, "stacked along dim 0", rule="outputs are (B, T, d_h)"),
    Mistake(RNN, "no bias", rnn_no_bias, "the bias b_h is missing", rule="outputs"),
    Mistake(RNN, "runs backwards in time", rnn_backwards_in_time, "backwards in time", rule="outputs"),
    Mistake(RNN, "calls torch.nn.RNN", rnn_uses_torch_rnn, "build yourself", rule="no forbidden built-in"),
    # greedy_decode
    Mistake(GREEDY, "ignores EOS", greedy_ignores_eos, "EOS was ignored", rule="known mistakes"),
    Mistake(GREEDY, "stops when the first row ends", greedy_stops_at_first_eos, "as soon as the first row",
            rule="known mistakes"),
    Mistake(GREEDY, "first position's logits", greedy_first_position, "you read the logits of the first position",
            rule="known mistakes"),
    Mistake(GREEDY, "never feeds its tokens back", greedy_no_feedback, "the decoder was always given [BOS] only",
            rule="known mistakes"),
    Mistake(GREEDY, "argmax over the positions", greedy_argmax_over_positions, "argmax ran over the positions",
            rule="known mistakes"),
    Mistake(GREEDY, "argmax over the batch", greedy_argmax_over_batch, "next token of every row is logits[:, -1]",
            rule="raises nothing"),
    Mistake(GREEDY, "pads with eos_id", greedy_pads_with_eos, "filled with eos_id", rule="known mistakes"),
    Mistake(GREEDY, "pads with 0 instead of pad_id", greedy_pads_with_zero, "were filled with 0; fill them with pad_id",
            rule="known mistakes"),
    Mistake(GREEDY, "one token too many", greedy_one_step_too_many, "max_len + 1 tokens", rule="known mistakes"),
    Mistake(GREEDY, "drops BOS", greedy_drops_bos, "BOS is missing", rule="known mistakes"),
    Mistake(GREEDY, "does not stop early", greedy_no_early_stop, "ran on after every row", rule="known mistakes"),
    Mistake(GREEDY, "no padding after EOS", greedy_no_padding, "kept generating after its EOS", rule="known mistakes"),
    Mistake(GREEDY, "returns float token ids", greedy_float_tokens, "LongTensor", rule="integer ids"),
    Mistake(GREEDY, "encodes the source at every step", greedy_encodes_every_step, "call model.encode(src) once",
            rule="raises nothing"),
]
