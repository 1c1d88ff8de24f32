# %% [markdown]
# # 第 6 章练习：位置编码
#
# 自注意力把它的输入当作一个集合：把词元打乱，输出也会以同样的方式被打乱，仅此而已。Transformer 给每个词元加上一个只取决于其位置的向量，以此告诉它自己所在的位置。你将搭建完成这件事的两个部分：
#
# 1. `sinusoidal_encoding`：论文第 3.5 节那张由正弦和余弦组成的表；
# 2. `PositionalEmbedding`：把词元 id 变成向量、把它们乘以 $\sqrt{d_\text{model}}$、加上这张表并施加随机失活（dropout）的层。
#
# 每个答案都有一个供你编写代码的单元格（把 `raise NotImplementedError()` 替换掉），紧随其后是一个测试单元格。运行测试单元格：代码写对了，它会打印一行；否则它会告诉你哪里错了、该去哪里找。测试会把你的表与论文的公式进行比较（在多种长度和宽度下以 float64 求值，也包括奇数宽度），并检查它的各项性质；你的层会载入一个给定的嵌入矩阵，在 eval 模式和训练模式下与公式进行比较。评分时，你的作业还会在比这里看到的更多的情形下运行，所以目标是写出真正正确的代码，而不是只求能通过测试的代码。
#
# 要在终端中检查整个笔记本，请在课程文件夹中运行：`.venv/bin/python -m autograder check zh/exercises/ch06_positional/positional.ipynb`。

# %% tags=["export"]
import math

import torch
from torch import nn

# %% [markdown]
# ## 1. 正弦表
#
# 对于位置 $pos$ 和对的编号 $i$，论文令
#
# $$PE_{(pos,\,2i)} = \sin\!\left(\frac{pos}{10000^{2i/d_\text{model}}}\right), \qquad
#   PE_{(pos,\,2i+1)} = \cos\!\left(\frac{pos}{10000^{2i/d_\text{model}}}\right).$$
#
# 逐列来读这个公式。表的第 $j$ 列属于第 $i = \lfloor j / 2 \rfloor$ 对；一对中的偶数列是正弦，奇数列是**同一个角度**的余弦，而且两者的指数都用 $2i$，也就是这一对中*偶数*列的编号。因此第一对的除数是 $10000^0 = 1$（第 0 列是 $\sin(pos)$，第 1 列是 $\cos(pos)$），沿着一行往右，除数按几何级数增大，逐渐趋近 10000。
#
# 写出 `sinusoidal_encoding(max_len, d_model)`：
#
# * 返回一个形状为 `(max_len, d_model)` 的 `float32` 张量，它的第 `pos` 行是位置 `pos` 的编码，`pos = 0, 1, ..., max_len - 1`；
# * 偶数列放正弦，奇数列放余弦，按公式交错排列（而不是先放全部正弦、再放全部余弦）；
# * 当 `d_model` 为奇数时，最后一列，即第 `d_model - 1` 列，是偶数列：它是一个正弦，它的余弦搭档本应是第 `d_model` 列，而这一列并不存在。公式本身不需要特殊处理，但向量化的解法必须让余弦比正弦少一个频率；
# * 当 `max_len < 1` 或 `d_model < 1` 时，抛出带有清晰错误信息的 `ValueError`：调用者想要的从来都不会是一张空表。
#
# 注意精度：对于很长的表，角度 `pos / 10000^(2i/d_model)` 是一个很大的数，用 float32 计算会丢失有效数字。在这里，先用 float64 计算、最后再转换，不会带来任何代价。

# %% tags=["solution"] grade_id="sinusoidal_encoding"
def sinusoidal_encoding(max_len: int, d_model: int) -> torch.Tensor:
    """The sinusoidal positional encoding of the paper, shape (max_len, d_model), float32.

    Column 2i holds sin(pos / 10000^(2i/d_model)) and column 2i + 1 the cos of the same angle;
    for odd d_model the last column is a sin.
    """
    ### BEGIN SOLUTION
    if max_len < 1 or d_model < 1:
        raise ValueError(f"need max_len >= 1 and d_model >= 1, got max_len={max_len}, d_model={d_model}")
    # float64 keeps the angle pos * frequency exact to ~1e-12 even for pos in the thousands.
    position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
    even_columns = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(d_model / 2),) the values 2i
    frequency = torch.pow(10000.0, -even_columns / d_model)  # 1 / 10000^(2i/d_model)
    angle = position * frequency  # (max_len, 1) * (ceil(d_model / 2),) -> (max_len, ceil(d_model / 2))
    table = torch.empty(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    # With odd d_model the last sine has no cosine partner: one frequency fewer for the cosines.
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return table.to(torch.float32)
    ### END SOLUTION


# %% tags=["test"] grade_id="test_sinusoidal_encoding" points=4
from autograder import check

check("positional.sinusoidal_encoding", sinusoidal_encoding)
### BEGIN HIDDEN TESTS
check("positional.sinusoidal_encoding", sinusoidal_encoding, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 看看你的表：每一列都是一条波，左边的变化很快，越往右越慢。

# %%
import matplotlib.pyplot as plt

table = sinusoidal_encoding(100, 64)
fig, ax = plt.subplots(figsize=(6, 3.2))
image = ax.imshow(table, cmap="RdBu", vmin=-1, vmax=1, aspect="auto")
ax.set(xlabel="column (feature) j", ylabel="position pos", title="sinusoidal_encoding(100, 64)")
fig.colorbar(image, ax=ax)
plt.show()

# %% [markdown]
# 论文所依赖的性质：对于固定的偏移量 $k$，位置 $pos + k$ 上的每一对 $(\sin, \cos)$，都是位置 $pos$ 上的那一对旋转角度 $k\,\omega_i$ 的结果，无论 $pos$ 是多少。表的第 $k$ 行存放的恰好是这些角度的正弦和余弦，所以这个旋转可以直接从表中读出来：

# %%
k = 5
sin_k, cos_k = table[k, 0::2], table[k, 1::2]  # (32,) each: sin(k w_i), cos(k w_i)
sin_p, cos_p = table[:-k, 0::2], table[:-k, 1::2]  # (95, 32) each: the pairs at pos
rotated_sin = sin_p * cos_k + cos_p * sin_k  # sin(a + b) = sin a cos b + cos a sin b
rotated_cos = cos_p * cos_k - sin_p * sin_k  # cos(a + b) = cos a cos b - sin a sin b
print("largest error of M_k PE(pos) against PE(pos + k):",
      max((rotated_sin - table[k:, 0::2]).abs().max().item(), (rotated_cos - table[k:, 1::2]).abs().max().item()))

# %% [markdown]
# ## 2. 把位置编码加到嵌入上
#
# 编码器和解码器用一张嵌入表把词元 id 变成向量，再加上位置编码。论文第 3.4 节先把嵌入乘以 $\sqrt{d_\text{model}}$，第 5.4 节再对这个和施加 dropout：
#
# $$x_{b,t} = \operatorname{Dropout}\!\left(E[\text{tokens}_{b,t}]\,\sqrt{d_\text{model}} + PE_{t}\right),
#   \qquad t = 0, \dots, T - 1 .$$
#
# 位置编码是逐元素*加*上去的，所以输出仍然有 $d_\text{model}$ 个特征；而且它只取决于位置 $t$，所以批次中的每个序列加上的都是表中的同一行。
#
# 写出类 `PositionalEmbedding(vocab_size, d_model, dropout=0.1, max_len=5000)`。构造函数已经创建了两个子模块 `embedding` 和 `dropout`；请保留它们的名称（测试会把权重载入 `embedding`）。
#
# * 在 `__init__` 中，用你的 `sinusoidal_encoding(max_len, d_model)` 构建这张表，并把它注册为名为 `pe` 的**缓冲区**（buffer）：`self.register_buffer("pe", table, persistent=False)`。缓冲区会随模块一起移动（`.to(device)`），但它不是参数，所以优化器不会去动它；`persistent=False` 让它不进入 `state_dict()`，因为它随时都可以重新算出来。嵌入的权重仍然是这个模块唯一的参数。
# * `forward(tokens)` 接受形状为 `(B, T)` 的 `LongTensor`，返回 `(B, T, d_model)`：`dropout(embedding(tokens) * sqrt(d_model) + pe[:T])`。
# * 比表更长的序列无法编码：当 `T > max_len` 时，抛出 `ValueError`，错误信息中要给出 `T` 和 `max_len`。

# %% tags=["solution"] grade_id="PositionalEmbedding"
class PositionalEmbedding(nn.Module):
    """Token embeddings scaled by sqrt(d_model), plus the sinusoidal encoding, then dropout."""

    def __init__(self, vocab_size: int, d_model: int, dropout: float = 0.1, max_len: int = 5000) -> None:
        super().__init__()
        self.d_model = d_model
        self.max_len = max_len
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.dropout = nn.Dropout(dropout)
        ### BEGIN SOLUTION
        # Fixed, not learned; recomputed on construction, so it need not be saved either.
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        ### END SOLUTION

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, T) of ids -> (B, T, d_model)."""
        ### BEGIN SOLUTION
        T = tokens.shape[1]
        if T > self.max_len:
            raise ValueError(f"a sequence of {T} tokens is longer than the table's max_len={self.max_len}")
        # The scale lifts the small embedding vectors to the size of the encoding (norm ~ sqrt(d_model)).
        scaled = self.embedding(tokens) * math.sqrt(self.d_model)  # (B, T, d_model)
        with_position = scaled + self.pe[:T]  # (B, T, d_model) + (T, d_model) -> (B, T, d_model)
        return self.dropout(with_position)
        ### END SOLUTION


# %% tags=["test"] grade_id="test_PositionalEmbedding" points=4
check("positional.PositionalEmbedding", PositionalEmbedding)
### BEGIN HIDDEN TESTS
check("positional.PositionalEmbedding", PositionalEmbedding, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 使用中的层：嵌入的权重是唯一的参数，而表是一个缓冲区，`state_dict()` 不会包含它。没有位置编码时，同一个词无论出现在哪里，都会得到同一个向量；有了它，下面词元 3 的两次出现就不一样了。

# %%
torch.manual_seed(0)
layer = PositionalEmbedding(vocab_size=10, d_model=16).eval()
tokens = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6], [3, 5, 8, 9, 7, 9, 3, 2]])  # (B, T) = (2, 8)
x = layer(tokens)  # (2, 8, 16)
print("output:", tuple(x.shape))
print("parameters:", [name for name, _ in layer.named_parameters()])
print("state_dict keys:", list(layer.state_dict()))
print("token 3 at positions 0 and 6 of the second sequence, same vector?", torch.allclose(x[1, 0], x[1, 6]))
