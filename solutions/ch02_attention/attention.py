# %% [markdown]
# # Chapter 2 exercises: attention
#
# You will write the four pieces that chapter 2 explains:
#
# 1. a numerically stable `softmax`;
# 2. `scaled_dot_product_attention`, with an optional boolean mask and any leading batch dimensions;
# 3. `additive_attention`, the scoring function of Bahdanau et al. that the paper compares against;
# 4. `score_variance`, the experiment behind the $1/\sqrt{d_k}$ scale.
#
# Each function has a cell for your code (replace `raise NotImplementedError()`) and a test cell
# right after it. Run the test cell: it prints one line when your function is right, and otherwise
# tells you what is wrong and where to look. The tests compare your results with PyTorch's own
# functions on random inputs of several shapes and dtypes. Graded work is also run against more
# cases than the ones you see here, so aim for a function that is right, not one that passes.
#
# To check the whole notebook from a terminal, in the course's folder:
# `.venv/bin/python -m autograder check exercises/ch02_attention/attention.ipynb`.
#
# Do not use `torch.softmax` or `torch.nn.functional.scaled_dot_product_attention` in your answers:
# the point is to build them.

# %% tags=["export"]
import math

import torch

# %% [markdown]
# ## 1. Softmax
#
# $$\operatorname{softmax}(x)_i = \frac{e^{x_i}}{\sum_j e^{x_j}}$$
#
# taken along one dimension `dim` of a tensor. Written literally it breaks: `torch.exp(torch.tensor(1000.))`
# is `inf`, and `inf / inf` is `nan`. Subtracting the maximum $m$ of each slice changes nothing
# mathematically, because $e^{x_i - m} / \sum_j e^{x_j - m} = e^{x_i} / \sum_j e^{x_j}$, and it keeps
# every exponent at or below zero. Entries equal to $-\infty$ (masked scores, later) must get exactly
# zero probability.
#
# Write `softmax(x, dim=-1)`. It returns a tensor of the same shape and dtype as `x`.

# %% tags=["solution"] grade_id="softmax"
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable softmax of ``x`` along ``dim``."""
    ### BEGIN SOLUTION
    # The maximum of each slice, not of the whole tensor: slices may live on very different scales.
    shifted = x - x.amax(dim=dim, keepdim=True)
    exps = torch.exp(shifted)
    return exps / exps.sum(dim=dim, keepdim=True)
    ### END SOLUTION


# %% tags=["test"] grade_id="test_softmax" points=2
from autograder import check

check("attention.softmax", softmax)
### BEGIN HIDDEN TESTS
check("attention.softmax", softmax, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Try it on scores far too large for a naive `exp`:

# %%
softmax(torch.tensor([[1000.0, 1001.0, 1002.0], [-5.0, 0.0, float("-inf")]]))

# %% [markdown]
# ## 2. Scaled dot-product attention
#
# $$\operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right) V$$
#
# * `q` has shape `(..., T_q, d_k)`, `k` has shape `(..., T_k, d_k)` and `v` has shape `(..., T_k, d_v)`,
#   where `...` is any number of batch dimensions (none, a batch, a batch and heads, ...).
# * `mask`, when given, is a boolean tensor that broadcasts to `(..., T_q, T_k)`. `True` means
#   "this query may attend to this key", as in the boolean `attn_mask` of
#   `torch.nn.functional.scaled_dot_product_attention`. Masked scores become $-\infty$
#   *before* the softmax, so a masked key gets exactly zero weight. Careful: PyTorch's
#   `nn.MultiheadAttention` (and the `nn.Transformer` layers built on it) reads a boolean mask
#   the other way round, `True` meaning "may **not** attend". So will the course's own
#   `key_padding_mask` from chapter 3 on, which is `True` where a key is padding, that is, blocked.
# * A query whose keys are all masked has nothing to attend to. Its softmax would be $0/0$;
#   the course defines its weights and its output to be zero. So does
#   `F.scaled_dot_product_attention` in the PyTorch version this course uses, while
#   `nn.MultiheadAttention` returns NaN for such a query.
#
# Return `(output, weights)`: `output` of shape `(..., T_q, d_v)` and `weights` of shape `(..., T_q, T_k)`.
# Use your `softmax`.

# %% tags=["solution"] grade_id="scaled_dot_product_attention"
def scaled_dot_product_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T / sqrt(d_k)) v, with masked keys given zero weight."""
    ### BEGIN SOLUTION
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., T_q, T_k)
    if mask is None:
        weights = softmax(scores, dim=-1)  # (..., T_q, T_k)
    else:
        visible = mask.any(dim=-1, keepdim=True)  # (..., T_q, 1): does the query see any key?
        scores = scores.masked_fill(~mask, float("-inf"))
        # A row of nothing but -inf would give 0/0; give it finite scores and zero it afterwards,
        # which also keeps its gradient free of NaN.
        scores = scores.masked_fill(~visible, 0.0)
        weights = softmax(scores, dim=-1) * visible  # (..., T_q, T_k)
    return weights @ v, weights  # (..., T_q, d_v), (..., T_q, T_k)
    ### END SOLUTION


# %% tags=["test"] grade_id="test_scaled_dot_product_attention" points=4
check("attention.scaled_dot_product_attention", scaled_dot_product_attention)
### BEGIN HIDDEN TESTS
check("attention.scaled_dot_product_attention", scaled_dot_product_attention, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Look at what a causal mask does to the weights: every query sees itself and the past, never the future.

# %%
import matplotlib.pyplot as plt

torch.manual_seed(0)
q = k = v = torch.randn(6, 8)
causal = torch.tril(torch.ones(6, 6, dtype=torch.bool))
_, weights = scaled_dot_product_attention(q, k, v, causal)
fig, ax = plt.subplots(figsize=(3.5, 3))
ax.imshow(weights, cmap="viridis")
ax.set(xlabel="key position", ylabel="query position", title="causal attention weights")
plt.show()

# %% [markdown]
# ## 3. Additive attention
#
# Before the Transformer, attention scored a query against a key with a small feed-forward network
# (Bahdanau et al., 2015):
#
# $$\operatorname{score}(q_i, k_j) = w_v^\top \tanh(q_i W_q + k_j W_k)$$
#
# with `W_q` of shape `(d_q, d_a)`, `W_k` of shape `(d_k, d_a)` and `w_v` of shape `(d_a,)`. The rest is
# as before: masked scores become $-\infty$, a softmax over the keys, then a weighted sum of `v`.
# There is no $1/\sqrt{d_k}$ here. Every (query, key) pair goes through the network, so the
# intermediate tensor has shape `(..., T_q, T_k, d_a)`: broadcasting `(..., T_q, 1, d_a)` against
# `(..., 1, T_k, d_a)` builds it without a loop.
#
# Return `(output, weights)` with the same shapes and the same masking rules as in part 2.

# %% tags=["solution"] grade_id="additive_attention"
def additive_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    W_q: torch.Tensor,
    W_k: torch.Tensor,
    w_v: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Bahdanau attention: softmax over keys of w_v . tanh(q W_q + k W_k), then weights @ v."""
    ### BEGIN SOLUTION
    features = (q @ W_q).unsqueeze(-2) + (k @ W_k).unsqueeze(-3)  # (..., T_q, T_k, d_a)
    scores = torch.tanh(features) @ w_v  # (..., T_q, T_k)
    if mask is None:
        weights = softmax(scores, dim=-1)  # (..., T_q, T_k)
    else:
        visible = mask.any(dim=-1, keepdim=True)  # (..., T_q, 1)
        scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~visible, 0.0)
        weights = softmax(scores, dim=-1) * visible  # (..., T_q, T_k)
    return weights @ v, weights  # (..., T_q, d_v), (..., T_q, T_k)
    ### END SOLUTION


# %% tags=["test"] grade_id="test_additive_attention" points=3
check("attention.additive_attention", additive_attention)
### BEGIN HIDDEN TESTS
check("attention.additive_attention", additive_attention, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Why divide by $\sqrt{d_k}$?
#
# If the components of $q$ and $k$ are independent with mean 0 and variance 1, then
# $q \cdot k = \sum_{i=1}^{d_k} q_i k_i$ is a sum of $d_k$ independent terms of variance 1, so its
# variance is $d_k$ and its standard deviation $\sqrt{d_k}$. Dividing by $\sqrt{d_k}$ brings the
# variance back to 1, whatever the width of the keys.
#
# Write `score_variance(q, k, scaled=False)`: `q` and `k` have shape `(n, d_k)`, one sample per row.
# Compute the $n$ scores $q_i \cdot k_i$, divide them by $\sqrt{d_k}$ when `scaled` is true, and return
# their sample variance as a Python float (`torch.var`'s default, which divides by $n - 1$).

# %% tags=["solution"] grade_id="score_variance"
def score_variance(q: torch.Tensor, k: torch.Tensor, scaled: bool = False) -> float:
    """Sample variance of the row-wise scores q_i . k_i, optionally divided by sqrt(d_k)."""
    ### BEGIN SOLUTION
    scores = (q * k).sum(dim=-1)  # (n,)
    if scaled:
        scores = scores / math.sqrt(q.shape[-1])
    return scores.var().item()
    ### END SOLUTION


# %% tags=["test"] grade_id="test_score_variance" points=2
check("attention.score_variance", score_variance)
### BEGIN HIDDEN TESTS
check("attention.score_variance", score_variance, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Now run the experiment: the variance of unscaled scores grows like $d_k$, the scaled one stays near 1.

# %%
torch.manual_seed(0)
widths = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
raw, scaled = [], []
for d_k in widths:
    q, k = torch.randn(4000, d_k), torch.randn(4000, d_k)
    raw.append(score_variance(q, k))
    scaled.append(score_variance(q, k, scaled=True))
fig, ax = plt.subplots(figsize=(5, 3.2))
ax.loglog(widths, raw, "o-", label="q·k")
ax.loglog(widths, scaled, "s-", label="q·k / √d_k")
ax.loglog(widths, widths, "k:", label="d_k")
ax.set(xlabel="d_k", ylabel="variance of the score", title="the variance the scale removes")
ax.legend()
plt.show()
