# %% [markdown]
# # 第 3 章练习：多头注意力
#
# 你将分三步搭建 Transformer 实际使用的注意力层：
#
# 1. `split_heads`，把每个位置的 `d_model` 个特征切成 `h` 个头，每个头 `d_k` 个特征；
# 2. `merge_heads`，它的逆操作，把各个头重新并排放回去；
# 3. `MultiHeadAttention`，即这个层本身，建立在前两者之上。
#
# 这个笔记本规定了测试和后续各章所依赖的接口：函数的签名和形状、层的参数名、它保存的属性以及它接受的掩码。至于如何算出每个结果，要由你根据本章的页面 *多头注意力*（`book/ch03_multihead.md`）和论文自己去弄明白；下面每一节都会告诉你该去哪里找。
#
# 每个部分都有一个供你写代码的代码单元格（把 `raise NotImplementedError()` 替换掉），紧随其后是一个测试单元格。运行测试单元格：如果你的代码是对的，它会打印一行；否则，它会告诉你哪里错了、该往哪里找。`MultiHeadAttention` 会与载入了相同权重的 PyTorch 自带的 `torch.nn.MultiheadAttention` 相比较，覆盖自注意力、交叉注意力、掩码、填充、两种 dtype，以及带偏置和不带偏置的情形。评分时还会运行一些你在这里看不到的情形。
#
# 要在终端里检查整个笔记本，请在课程的文件夹中运行：`.venv/bin/python -m autograder check zh/exercises/ch03_multihead/multihead.ipynb`。
#
# 你的答案中不要使用 `torch.nn.MultiheadAttention`、`torch.nn.functional.multi_head_attention_forward` 或 `torch.nn.functional.scaled_dot_product_attention`。每个头内部的注意力，就是下面导入的第 2 章的 `scaled_dot_product_attention`。

# %% tags=["export"]
import torch
from torch import nn

from reference.attention import scaled_dot_product_attention

# %% [markdown]
# ## 1. 把特征切分成头
#
# 论文并排运行 $h$ 个注意力，每个作用在 $d_k = d_{\text{model}} / h$ 个特征上（$d_{\text{model}} = 512$、$h = 8$ 时，每个头处理 64 个特征）。与其保留 $h$ 个分开的小投影，不如用一个 `nn.Linear(d_model, d_model)` 一次把它们全部算出来，再把它的输出切成 $h$ 个连续的块，每块 $d_k$ 个特征：特征 `0 .. d_k-1` 属于头 0，接下来的 $d_k$ 个属于头 1，依此类推。
#
# 页面中的 *一次算出所有头：每种角色一个矩阵，再切分* 一节解释了这种排布，它的小节 *千万别忘了那次转置* 则展示了切分时可能出什么错。
#
# 编写 `split_heads(x, h)`：`x` 的形状为 `(B, T, d_model)`；返回形状 `(B, h, T, d_k)`，其中 `x_split[b, i, t]` 是头 `i` 在位置 `t` 上的那一块，即 `x[b, t, i*d_k:(i+1)*d_k]`。当 `d_model` 不是 `h` 的倍数时，抛出 `ValueError`，并在消息中写出这两个数。

# %% tags=["solution"] grade_id="split_heads"
def split_heads(x: torch.Tensor, h: int) -> torch.Tensor:
    """(B, T, d_model) -> (B, h, T, d_k), head i taking features i*d_k .. (i+1)*d_k - 1."""
    ### BEGIN SOLUTION
    B, T, d_model = x.shape
    if d_model % h != 0:
        raise ValueError(f"d_model={d_model} is not divisible by h={h}")
    # The reshape alone would already have the right shape, but it would mix positions into heads:
    # the head axis must be cut out of the features, then moved in front of the positions.
    return x.reshape(B, T, h, d_model // h).transpose(1, 2)  # (B, h, T, d_k)
    ### END SOLUTION


# %% tags=["test"] grade_id="test_split_heads" points=2
from autograder import check

check("multihead.split_heads", split_heads)
### BEGIN HIDDEN TESTS
check("multihead.split_heads", split_heads, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. 把各个头合并回去
#
# 注意力之后，每个头在每个位置返回 `d_k` 个特征。论文把它们拼接起来，$\operatorname{Concat}(\text{head}_1, \dots, \text{head}_h)$，使每个位置重新得到 `h * d_k = d_model` 个特征，顺序与 `split_heads` 切分它们时相同。
#
# 编写 `merge_heads(x)`：从 `(B, h, T, d_k)` 变为 `(B, T, h * d_k)`，它是 `split_heads` 的精确逆操作，使得 `merge_heads(split_heads(x, h))` 能还原出 `x`。

# %% tags=["solution"] grade_id="merge_heads"
def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, h, T, d_k) -> (B, T, h * d_k): the heads' features side by side, head 0 first."""
    ### BEGIN SOLUTION
    B, h, T, d_k = x.shape
    return x.transpose(1, 2).reshape(B, T, h * d_k)  # (B, T, h, d_k) -> (B, T, d_model)
    ### END SOLUTION


# %% tags=["test"] grade_id="test_merge_heads" points=2
check("multihead.merge_heads", merge_heads)
### BEGIN HIDDEN TESTS
check("multihead.merge_heads", merge_heads, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 这两个函数互为逆操作，而且切分确实把特征切成了连续的块：

# %%
x = torch.arange(2 * 3 * 8, dtype=torch.float32).reshape(2, 3, 8)  # B=2, T=3, d_model=8
heads = split_heads(x, h=2)  # (2, 2, 3, 4)
print("head 0 of position 0:", heads[0, 0, 0].tolist(), "  head 1 of position 0:", heads[0, 1, 0].tolist())
print("round trip exact:", torch.equal(merge_heads(heads), x))

# %% [markdown]
# ## 3. 多头注意力
#
# $$\operatorname{MultiHead}(Q, K, V) = \operatorname{Concat}(\text{head}_1, \dots, \text{head}_h)\, W^O
# \quad\text{where}\quad \text{head}_i = \operatorname{Attention}(Q W_i^Q, K W_i^K, V W_i^V)$$
#
# 其中 $W_i^Q, W_i^K \in \mathbb{R}^{d_{\text{model}} \times d_k}$，$W_i^V \in \mathbb{R}^{d_{\text{model}} \times d_v}$，$W^O \in \mathbb{R}^{h d_v \times d_{\text{model}}}$，并且与论文一样，$d_k = d_v = d_{\text{model}} / h$。
#
# 把 $h$ 个矩阵 $W_i^Q$ 并排放在一起，就构成一个 $d_{\text{model}} \times d_{\text{model}}$ 的矩阵 $W^Q$（见页面中的 *一次算出所有头* 一节），所以单个 `nn.Linear(d_model, d_model)` 就存放了每个头的查询投影，头 0 的块在最前面。$W^K$ 和 $W^V$ 也是如此。
#
# 编写 `MultiHeadAttention(d_model, h, dropout=0.0, bias=True)`，它是一个 `nn.Module`，具有：
#
# * `w_q`、`w_k`、`w_v`、`w_o`：各是一个 `nn.Linear(d_model, d_model, bias=bias)`，分别存放 $W^Q$、$W^K$、$W^V$ 和 $W^O$（和 PyTorch 的层一样，`nn.Linear` 会加上偏置；`bias=False` 则不加）。自动评分器正是按这些名字载入权重的。
# * `dropout`：一个 `nn.Dropout(dropout)`；
# * `h` 和 `d_k`：头的数量和每个头的宽度；
# * `attn_weights`：每次调用之后，存放每个头的注意力权重，形状为 `(B, h, T_q, T_k)`，要从计算图中分离（detach），并且取自随机失活（dropout）之前，以便你把它们画出来。
#
# 当 `d_model` 不是 `h` 的倍数时，构造函数抛出 `ValueError`，并在消息中写出这两个数。
#
# `forward(query, key, value, attn_mask=None, key_padding_mask=None)` 接受形状为 `(B, T_q, d_model)` 的 `query`，以及形状为 `(B, T_k, d_model)` 的 `key` 和 `value`，并返回 `(B, T_q, d_model)`。每个头内部的注意力是第 2 章的 `scaled_dot_product_attention`。在训练模式下，dropout 作用于注意力权重，与 PyTorch 的层一样：一个权重被丢弃，意味着在这一步中，这个查询忽略那个键。在评估（eval）模式下，dropout 什么也不做。这种 dropout 并不在论文中，论文只对每个子层的输出和嵌入使用 dropout；它来自作者的 tensor2tensor 代码，以及 PyTorch，测试正是拿你的层与 PyTorch 的层作比较。
#
# 掩码遵循本课程的规则：
#
# * `attn_mask`：布尔型，在查询**可以**关注键的地方为 `True`；形状为 `(T_q, T_k)`（对每个序列都相同），或 `(B, T_q, T_k)`（每个序列一个）；
# * `key_padding_mask`：布尔型，形状为 `(B, T_k)`，在键**是填充**的地方为 `True`。
#
# 注意两者方向相反：`True` 在 `attn_mask` 中表示允许关注，在 `key_padding_mask` 中则表示禁止关注。（PyTorch 的 `nn.MultiheadAttention` 把它的两个布尔掩码都理解为“`True` = 不允许”，所以它的 `attn_mask` 与本课程的正好相反。）
#
# 只有在注意力掩码允许、**并且**该键不是填充时，一个查询才能关注这个键。一个根本不能关注任何键的查询，得到全零的权重和零输出，与第 2 章相同（而 `nn.MultiheadAttention` 会给出 NaN）。

# %% tags=["solution"] grade_id="MultiHeadAttention"
class MultiHeadAttention(nn.Module):
    """Multi-head attention: h scaled dot-product attentions over learned projections, then W^O.

    Parameters: w_q, w_k, w_v, w_o (each nn.Linear(d_model, d_model)); attributes h, d_k,
    dropout (on the attention weights) and, after each forward, attn_weights (B, h, T_q, T_k),
    detached and taken before dropout.
    """

    def __init__(self, d_model: int, h: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        if d_model % h != 0:
            raise ValueError(f"d_model={d_model} must be divisible by the number of heads h={h}")
        self.h = h
        self.d_k = d_model // h
        # One d_model x d_model matrix holds the h per-head projections W_i side by side.
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.attn_weights: torch.Tensor | None = None
        ### END SOLUTION

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """query (B, T_q, d_model), key and value (B, T_k, d_model) -> (B, T_q, d_model).

        attn_mask: bool (T_q, T_k) or (B, T_q, T_k), True where a query may attend.
        key_padding_mask: bool (B, T_k), True where a key is padding.
        """
        ### BEGIN SOLUTION
        q = split_heads(self.w_q(query), self.h)  # (B, h, T_q, d_k)
        k = split_heads(self.w_k(key), self.h)  # (B, h, T_k, d_k)
        v = split_heads(self.w_v(value), self.h)  # (B, h, T_k, d_k)

        mask = None
        if attn_mask is not None:
            # A per-sequence mask needs a head axis; a (T_q, T_k) mask broadcasts as it is.
            mask = attn_mask.unsqueeze(1) if attn_mask.dim() == 3 else attn_mask  # (B, 1, T_q, T_k) or (T_q, T_k)
        if key_padding_mask is not None:
            real_key = ~key_padding_mask[:, None, None, :]  # (B, 1, 1, T_k)
            mask = real_key if mask is None else mask & real_key  # (B, 1, T_q, T_k)

        context, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, h, T_q, d_k), (B, h, T_q, T_k)
        self.attn_weights = weights.detach()
        if self.training and self.dropout.p > 0:
            # Dropout acts on the weights, so the weighted sum is taken again with the dropped weights.
            context = self.dropout(weights) @ v  # (B, h, T_q, d_k)
        return self.w_o(merge_heads(context))  # (B, T_q, d_model)
        ### END SOLUTION


# %% tags=["test"] grade_id="test_MultiHeadAttention" points=6
check("multihead.MultiHeadAttention", MultiHeadAttention)
### BEGIN HIDDEN TESTS
check("multihead.MultiHeadAttention", MultiHeadAttention, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 看看你的层
#
# 一个随机初始化的层，4 个头，作用在一个有 6 个位置、带因果掩码的序列上：每个头都有自己的权重，而且没有一个头看向未来。

# %%
import matplotlib.pyplot as plt

torch.manual_seed(0)
mha = MultiHeadAttention(d_model=32, h=4).eval()
x = torch.randn(1, 6, 32)
causal = torch.tril(torch.ones(6, 6, dtype=torch.bool))
y = mha(x, x, x, attn_mask=causal)
print("output:", tuple(y.shape), "  weights:", tuple(mha.attn_weights.shape))
fig, axes = plt.subplots(1, 4, figsize=(10, 2.8))
for i, ax in enumerate(axes):
    ax.imshow(mha.attn_weights[0, i], cmap="viridis", vmin=0, vmax=1)
    ax.set(title=f"head {i}", xlabel="key", ylabel="query" if i == 0 else None)
plt.tight_layout()
plt.show()

# %% [markdown]
# 多个头的参数并不比一个头多：无论 $h$ 是多少，四个投影都是 $d_{\text{model}} \times d_{\text{model}}$ 的。

# %%
for h in (1, 2, 4, 8):
    layer = MultiHeadAttention(d_model=64, h=h)
    print(f"h={h}: d_k={layer.d_k:2d}, parameters={sum(p.numel() for p in layer.parameters())}")
