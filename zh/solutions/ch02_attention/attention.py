# %% [markdown]
# # 第 2 章练习：注意力
#
# 你将编写第 2 章讲解的四个部分：
#
# 1. 一个数值稳定的 `softmax`；
# 2. `scaled_dot_product_attention`，支持一个可选的布尔掩码和任意多个前导批维度；
# 3. `additive_attention`，即 Bahdanau 等人的打分函数，论文拿它来作比较；
# 4. `score_variance`，即 $1/\sqrt{d_k}$ 这个缩放背后的实验。
#
# 每个函数都有一个供你写代码的代码单元格（把 `raise NotImplementedError()` 替换掉），紧随其后是一个测试单元格。运行测试单元格：如果你的函数是对的，它会打印一行；否则，它会告诉你哪里错了、该往哪里找。这些测试会在若干种形状和 dtype 的随机输入上，把你的结果与 PyTorch 自己的函数相比较。评分时还会用比这里能看到的更多的情形来运行你的代码，所以要力求写出一个正确的函数，而不只是一个能通过测试的函数。
#
# 要在终端里检查整个笔记本，请在课程的文件夹中运行：`.venv/bin/python -m autograder check zh/exercises/ch02_attention/attention.ipynb`。
#
# 你的答案中不要使用 `torch.softmax` 或 `torch.nn.functional.scaled_dot_product_attention`：重点就是要亲手把它们搭出来。

# %% tags=["export"]
import math

import torch

# %% [markdown]
# ## 1. softmax
#
# $$\operatorname{softmax}(x)_i = \frac{e^{x_i}}{\sum_j e^{x_j}}$$
#
# 它沿张量的某一个维度 `dim` 计算。照字面写出来，它会出问题：`torch.exp(torch.tensor(1000.))` 是 `inf`，而 `inf / inf` 是 `nan`。从每个切片中减去它的最大值 $m$，在数学上什么都不改变，因为 $e^{x_i - m} / \sum_j e^{x_j - m} = e^{x_i} / \sum_j e^{x_j}$，而且这能让每个指数都不超过零。等于 $-\infty$ 的元素（也就是后面会遇到的被掩码屏蔽的分数）必须得到恰好为零的概率。
#
# 编写 `softmax(x, dim=-1)`。它返回一个与 `x` 形状相同、dtype 相同的张量。

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
# 在一些对朴素的 `exp` 来说大得离谱的分数上试一试：

# %%
softmax(torch.tensor([[1000.0, 1001.0, 1002.0], [-5.0, 0.0, float("-inf")]]))

# %% [markdown]
# ## 2. 缩放点积注意力
#
# $$\operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right) V$$
#
# * `q` 的形状为 `(..., T_q, d_k)`，`k` 的形状为 `(..., T_k, d_k)`，`v` 的形状为 `(..., T_k, d_v)`，其中 `...` 是任意数量的批维度（没有批维度、一个批次维度、一个批次维度加一个头维度……）。
# * `mask` 如果给出，是一个能广播到 `(..., T_q, T_k)` 的布尔张量。`True` 表示“这个查询可以关注这个键”，与 `torch.nn.functional.scaled_dot_product_attention` 的布尔型 `attn_mask` 相同。被屏蔽的分数要在 softmax *之前*变成 $-\infty$，这样被屏蔽的键得到的权重恰好为零。小心：PyTorch 的 `nn.MultiheadAttention`（以及建立在它之上的 `nn.Transformer` 各层）对布尔掩码的理解正好相反，`True` 表示“**不**可以关注”。从第 3 章起，本课程自己的 `key_padding_mask` 也是这样：它在键是填充的地方，也就是被屏蔽的地方，为 `True`。
# * 一个所有键都被屏蔽的查询无可关注。它的 softmax 会是 $0/0$；本课程规定它的权重和输出都为零。在本课程所用的 PyTorch 版本中，`F.scaled_dot_product_attention` 也是这样做的，而 `nn.MultiheadAttention` 对这样的查询会返回 NaN。
#
# 返回 `(output, weights)`：形状为 `(..., T_q, d_v)` 的 `output` 和形状为 `(..., T_q, T_k)` 的 `weights`。请使用你自己的 `softmax`。

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
# 看看因果掩码对权重做了什么：每个查询都能看到自己和过去，却永远看不到未来。

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
# ## 3. 加性注意力
#
# 在 Transformer 之前，注意力用一个小型前馈网络来给查询与键的匹配打分（Bahdanau 等人，2015）：
#
# $$\operatorname{score}(q_i, k_j) = w_v^\top \tanh(q_i W_q + k_j W_k)$$
#
# 其中 `W_q` 的形状为 `(d_q, d_a)`，`W_k` 的形状为 `(d_k, d_a)`，`w_v` 的形状为 `(d_a,)`。其余部分与前面相同：被屏蔽的分数变成 $-\infty$，在键上做 softmax，再对 `v` 加权求和。这里没有 $1/\sqrt{d_k}$。每个（查询，键）对都要经过这个网络，所以中间张量的形状为 `(..., T_q, T_k, d_a)`：把 `(..., T_q, 1, d_a)` 与 `(..., 1, T_k, d_a)` 进行广播，无需循环就能构建出它。
#
# 返回 `(output, weights)`，形状和掩码规则都与第 2 部分相同。

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
# ## 4. 为什么要除以 $\sqrt{d_k}$？
#
# 如果 $q$ 和 $k$ 的各个分量相互独立，均值为 0，方差为 1，那么 $q \cdot k = \sum_{i=1}^{d_k} q_i k_i$ 是 $d_k$ 个方差为 1 的独立项之和，所以它的方差是 $d_k$，标准差是 $\sqrt{d_k}$。无论键有多宽，除以 $\sqrt{d_k}$ 都能把方差拉回到 1。
#
# 编写 `score_variance(q, k, scaled=False)`：`q` 和 `k` 的形状为 `(n, d_k)`，每行一个样本。计算 $n$ 个分数 $q_i \cdot k_i$，当 `scaled` 为真时把它们除以 $\sqrt{d_k}$，并以 Python float 的形式返回它们的样本方差（即 `torch.var` 的默认做法，除以 $n - 1$）。

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
# 现在来运行这个实验：未缩放分数的方差与 $d_k$ 成正比地增长，缩放后的方差则保持在 1 附近。

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
