"""Wrong answers to chapter 2, as learners write them, and the words that must name each one."""
from __future__ import annotations

import math
import warnings

import torch

from . import Mistake, Spoiled

SOFTMAX = "attention.softmax"
SDPA = "attention.scaled_dot_product_attention"
ADDITIVE = "attention.additive_attention"
VARIANCE = "attention.score_variance"


SPOILED = Spoiled("softmax", "return exps / exps.sum(dim=dim, keepdim=True)", "return exps / exps.sum()")


# ----------------------------------------------------------------------------------------
# softmax
# ----------------------------------------------------------------------------------------


def softmax_no_max_subtraction(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def softmax_global_max(x, dim=-1):
    e = torch.exp(x - x.max())  # one maximum for the whole tensor
    return e / e.sum(dim=dim, keepdim=True)


def softmax_ignores_dim(x, dim=-1):
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def softmax_whole_sum(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum()


def softmax_no_normalisation(x, dim=-1):
    return torch.exp(x - x.amax(dim=dim, keepdim=True))


def softmax_log(x, dim=-1):
    shifted = x - x.amax(dim=dim, keepdim=True)
    return shifted - torch.log(torch.exp(shifted).sum(dim=dim, keepdim=True))


def softmax_no_exp(x, dim=-1):
    return x / x.sum(dim=dim, keepdim=True)


def softmax_no_keepdim(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim)


def softmax_float32(x, dim=-1):
    x = x.float()
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


# ----------------------------------------------------------------------------------------
# scaled dot-product attention
# ----------------------------------------------------------------------------------------


def _stable_softmax(scores):
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def _finish(scores, v, mask, fill=float("-inf"), softmax=_stable_softmax, zero_dead_rows=True):
    """Masking and the weighted sum done right, given (possibly wrong) scores."""
    if mask is None:
        weights = softmax(scores)
    else:
        visible = mask.any(dim=-1, keepdim=True)
        scores = scores.masked_fill(~mask, fill)
        if zero_dead_rows:
            scores = scores.masked_fill(~visible, 0.0)
        weights = softmax(scores)
        if zero_dead_rows:
            weights = weights * visible
    return weights @ v, weights


def sdpa_no_scale(q, k, v, mask=None):
    return _finish(q @ k.transpose(-2, -1), v, mask)


def sdpa_divides_by_d_k(q, k, v, mask=None):
    return _finish(q @ k.transpose(-2, -1) / q.shape[-1], v, mask)


def sdpa_scale_d_v(q, k, v, mask=None):
    return _finish(q @ k.transpose(-2, -1) / math.sqrt(v.shape[-1]), v, mask)


def sdpa_softmax_over_queries(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    e = torch.exp(scores - scores.amax(dim=-2, keepdim=True))  # the maximum and the sum over the queries
    weights = (e / e.sum(dim=-2, keepdim=True)).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_inverted_mask(q, k, v, mask=None):
    return _finish(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), v, None if mask is None else ~mask)


def sdpa_mask_after_softmax(q, k, v, mask=None):
    weights = _stable_softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
    if mask is not None:
        weights = weights * mask
    return weights @ v, weights


def _renormalised(scores, v, mask):
    weights = _stable_softmax(scores)
    if mask is not None:
        weights = weights * mask  # the mask applied late, then the rows repaired
        weights = (weights / weights.sum(dim=-1, keepdim=True)).nan_to_num(0.0)  # 0/0 for a query that sees nothing
    return weights @ v, weights


def sdpa_mask_then_renormalise(q, k, v, mask=None):
    return _renormalised(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), v, mask)


def sdpa_nan_on_fully_masked_rows(q, k, v, mask=None):
    return _finish(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), v, mask, zero_dead_rows=False)


def sdpa_minus_1e9(q, k, v, mask=None):
    return _finish(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), v, mask, fill=-1e9, zero_dead_rows=False)


def sdpa_multiplies_k(q, k, v, mask=None):
    _, weights = _finish(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), v, mask)
    return weights @ k, weights


def sdpa_k_T(q, k, v, mask=None):
    with warnings.catch_warnings():  # PyTorch warns that .T on a batch is deprecated; the check must still catch it
        warnings.simplefilter("ignore", UserWarning)
        return _finish(q @ k.T / math.sqrt(q.shape[-1]), v, mask)  # .T reverses every dimension


def sdpa_naive_softmax(q, k, v, mask=None):
    def naive(scores):
        e = torch.exp(scores)
        return e / e.sum(dim=-1, keepdim=True)

    return _finish(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), v, mask, softmax=naive)


# ----------------------------------------------------------------------------------------
# additive attention
# ----------------------------------------------------------------------------------------


def _features(q, k, W_q, W_k):
    return (q @ W_q).unsqueeze(-2) + (k @ W_k).unsqueeze(-3)  # (..., T_q, T_k, d_a)


def additive_no_tanh(q, k, v, W_q, W_k, w_v, mask=None):
    return _finish(_features(q, k, W_q, W_k) @ w_v, v, mask)


def additive_relu(q, k, v, W_q, W_k, w_v, mask=None):
    return _finish(torch.relu(_features(q, k, W_q, W_k)) @ w_v, v, mask)


def additive_scaled(q, k, v, W_q, W_k, w_v, mask=None):
    return _finish(torch.tanh(_features(q, k, W_q, W_k)) @ w_v / math.sqrt(q.shape[-1]), v, mask)


def additive_tanh_after_projection(q, k, v, W_q, W_k, w_v, mask=None):
    return _finish(torch.tanh(_features(q, k, W_q, W_k) @ w_v), v, mask)


def additive_sum_instead_of_w_v(q, k, v, W_q, W_k, w_v, mask=None):
    return _finish(torch.tanh(_features(q, k, W_q, W_k)).sum(-1), v, mask)


def additive_inverted_mask(q, k, v, W_q, W_k, w_v, mask=None):
    return _finish(torch.tanh(_features(q, k, W_q, W_k)) @ w_v, v, None if mask is None else ~mask)


def additive_mask_then_renormalise(q, k, v, W_q, W_k, w_v, mask=None):
    return _renormalised(torch.tanh(_features(q, k, W_q, W_k)) @ w_v, v, mask)


def additive_unsqueeze_swapped(q, k, v, W_q, W_k, w_v, mask=None):
    features = (q @ W_q).unsqueeze(-3) + (k @ W_k).unsqueeze(-2)  # (..., T_k, T_q, d_a): keys first
    return _finish(torch.tanh(features) @ w_v, v, mask)


def additive_nan_on_fully_masked_rows(q, k, v, W_q, W_k, w_v, mask=None):
    return _finish(torch.tanh(_features(q, k, W_q, W_k)) @ w_v, v, mask, zero_dead_rows=False)


def additive_W_q_for_keys(q, k, v, W_q, W_k, w_v, mask=None):
    return _finish(torch.tanh(_features(q, k, W_q, W_q)) @ w_v, v, mask)


def additive_mask_after_softmax(q, k, v, W_q, W_k, w_v, mask=None):
    weights = _stable_softmax(torch.tanh(_features(q, k, W_q, W_k)) @ w_v)
    if mask is not None:
        weights = weights * mask
    return weights @ v, weights


# ----------------------------------------------------------------------------------------
# score variance
# ----------------------------------------------------------------------------------------


def _scores(q, k, scaled):
    s = (q * k).sum(-1)
    return s / math.sqrt(q.shape[-1]) if scaled else s


def variance_biased(q, k, scaled=False):
    return _scores(q, k, scaled).var(unbiased=False).item()


def variance_std(q, k, scaled=False):
    return _scores(q, k, scaled).std().item()


def variance_whole_matrix(q, k, scaled=False):
    s = q @ k.T
    return (s / math.sqrt(q.shape[-1]) if scaled else s).var().item()


def variance_never_scales(q, k, scaled=False):
    return (q * k).sum(-1).var().item()


def variance_divides_by_d_k(q, k, scaled=False):
    s = (q * k).sum(-1)
    return (s / q.shape[-1] if scaled else s).var().item()


def variance_elementwise(q, k, scaled=False):
    s = q * k
    return (s / math.sqrt(q.shape[-1]) if scaled else s).var().item()


def variance_returns_tensor(q, k, scaled=False):
    return _scores(q, k, scaled).var()  # a 0-dimensional tensor, not a float


def variance_mean(q, k, scaled=False):
    return _scores(q, k, scaled).mean().item()


MISTAKES = [
    # softmax
    Mistake(SOFTMAX, "no max subtraction", softmax_no_max_subtraction, "subtract the maximum along `dim`", rule="finite"),
    Mistake(SOFTMAX, "one maximum for the whole tensor", softmax_global_max, "not one maximum of the whole tensor",
            rule="finite"),
    Mistake(SOFTMAX, "ignores the dim argument", softmax_ignores_dim, "use the `dim` argument", rule="values"),
    Mistake(SOFTMAX, "divides by the sum of the whole tensor", softmax_whole_sum, "sum of the whole tensor", rule="values"),
    Mistake(SOFTMAX, "no normalisation", softmax_no_normalisation, "did not divide by the sum", rule="values"),
    Mistake(SOFTMAX, "log-softmax", softmax_log, "log-softmax", rule="values"),
    Mistake(SOFTMAX, "no exp", softmax_no_exp, "without exponentiating", rule="values"),
    Mistake(SOFTMAX, "sum without keepdim", softmax_no_keepdim, "drops that dimension unless you pass keepdim=True",
            rule="raises nothing"),
    Mistake(SOFTMAX, "casts to float32", softmax_float32, "keep the input's dtype", rule="dtype"),
    # scaled dot-product attention
    Mistake(SDPA, "no 1/sqrt(d_k)", sdpa_no_scale, "not divided by sqrt(d_k)", rule="weights"),
    Mistake(SDPA, "divides by d_k", sdpa_divides_by_d_k, "divided by d_k", rule="weights"),
    Mistake(SDPA, "scales by sqrt(d_v)", sdpa_scale_d_v, "sqrt(d_v)", rule="weights"),
    Mistake(SDPA, "softmax over the queries", sdpa_softmax_over_queries, "over the queries (dim=-2)", rule="rows sum to one"),
    Mistake(SDPA, "inverted mask", sdpa_inverted_mask, "mask is inverted", rule="masked keys get zero weight"),
    Mistake(SDPA, "mask applied after the softmax", sdpa_mask_after_softmax, "masked keys to -inf before the softmax",
            rule="rows sum to one"),
    Mistake(SDPA, "softmax, then mask, then renormalise", sdpa_mask_then_renormalise, "divided by their new sums",
            rule="mask before the softmax"),
    Mistake(SDPA, "NaN for a fully masked query", sdpa_nan_on_fully_masked_rows, "replace the NaN rows", rule="finite"),
    Mistake(SDPA, "-1e9 instead of -inf", sdpa_minus_1e9, "-1e9 instead of -inf", rule="a fully masked query gets zero weights"),
    Mistake(SDPA, "weights @ k", sdpa_multiplies_k, "multiplied k instead of v", rule="output is (..., T_q, d_v)"),
    Mistake(SDPA, "k.T on a batched tensor", sdpa_k_T, "k.T reverses every axis", rule="raises nothing"),
    Mistake(SDPA, "softmax without max subtraction", sdpa_naive_softmax, "subtract the row maximum", hidden_only=True,
            rule="finite"),
    # additive attention
    Mistake(ADDITIVE, "no tanh", additive_no_tanh, "the tanh is missing", rule="weights"),
    Mistake(ADDITIVE, "ReLU instead of tanh", additive_relu, "not ReLU", rule="weights"),
    Mistake(ADDITIVE, "1/sqrt(d_k) scale added", additive_scaled, "no 1/sqrt(d_k) scale", rule="weights"),
    Mistake(ADDITIVE, "tanh after projecting with w_v", additive_tanh_after_projection, "after projecting with w_v",
            rule="weights"),
    Mistake(ADDITIVE, "sums features instead of projecting with w_v", additive_sum_instead_of_w_v, "project them with w_v",
            rule="weights"),
    Mistake(ADDITIVE, "inverted mask", additive_inverted_mask, "mask is inverted", rule="masked keys get zero weight"),
    Mistake(ADDITIVE, "softmax, then mask, then renormalise", additive_mask_then_renormalise, "divided by their new sums",
            rule="mask before the softmax"),
    Mistake(ADDITIVE, "unsqueeze axes swapped", additive_unsqueeze_swapped, "(q @ W_q).unsqueeze(-2) is", rule="raises nothing"),
    Mistake(ADDITIVE, "NaN for a fully masked query", additive_nan_on_fully_masked_rows, "replace the NaN rows", rule="finite"),
    Mistake(ADDITIVE, "W_q used for the keys", additive_W_q_for_keys, "the keys were projected with W_q", rule="weights"),
    Mistake(ADDITIVE, "mask applied after the softmax", additive_mask_after_softmax, "masked keys to -inf before the softmax",
            rule="rows sum to one"),
    # score variance
    Mistake(VARIANCE, "biased variance", variance_biased, "biased variance", rule="value"),
    Mistake(VARIANCE, "standard deviation", variance_std, "standard deviation", rule="value"),
    Mistake(VARIANCE, "variance of the whole matrix q @ k.T", variance_whole_matrix, "whole matrix", rule="value"),
    Mistake(VARIANCE, "never scales", variance_never_scales, "not divided by sqrt(d_k) although scaled=True", rule="value"),
    Mistake(VARIANCE, "divides by d_k", variance_divides_by_d_k, "divided by d_k", rule="value"),
    Mistake(VARIANCE, "variance of the element-wise products", variance_elementwise, "element-wise products", rule="value"),
    Mistake(VARIANCE, "mean instead of variance", variance_mean, "mean of the scores", rule="value"),
    Mistake(VARIANCE, "returns a 0-dimensional tensor", variance_returns_tensor, "for a Python float", rule="a Python float"),
]
