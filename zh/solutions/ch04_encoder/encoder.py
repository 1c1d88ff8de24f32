# %% [markdown]
# # 第 4 章练习：编码器
#
# 你将用第 4 章讲解的各个部件，自底向上地搭建 Transformer 的编码器：
#
# 1. `PositionwiseFeedForward`：对每个位置单独施加的前馈网络；
# 2. `LayerNorm`：层归一化，用基本的张量运算写成；
# 3. `EncoderLayer`：论文编码器中的一层，先是多头自注意力，再是前馈网络；
# 4. `Encoder`：由 `N` 个这样的层堆叠而成，每层有自己的权重。
#
# 本笔记本规定了测试和后续章节所依赖的接口：每个模块的构造函数、它的子模块和参数的名称、它的形状以及它的掩码。至于每个模块怎样计算输出，要由你根据本章的页面“编码器”（`book/ch04_encoder.md`）和论文自己弄清楚；下面每一节都会告诉你该去哪里找。
#
# 每个类都有一个供你编写代码的单元格（把每一处 `raise NotImplementedError()` 替换掉），紧随其后是一个测试单元格。运行测试单元格：类写对了，它会打印一行；否则它会告诉你哪里错了、该去哪里找。测试会按本笔记本给定的名称（`w_1`、`w_2`、`gamma`、`beta`、`self_attn`、`feed_forward`、`norm1`、`norm2`、`layers`）把固定的权重载入你的模块，所以请保留这些名称。测试会把你的模块与持有相同权重的 PyTorch 自带层（`nn.LayerNorm`、`nn.TransformerEncoderLayer`、`nn.TransformerEncoder`）进行比较。评分时，你的作业还会在比这里看到的更多的情形下运行，所以目标是写出真正正确的模块，而不是只求能通过测试的模块。
#
# 要在终端中检查整个笔记本，请在课程文件夹中运行：`.venv/bin/python -m autograder check zh/exercises/ch04_encoder/encoder.ipynb`。
#
# 你的答案中不要使用 `nn.LayerNorm`、`torch.nn.functional.layer_norm`、`nn.TransformerEncoderLayer` 或 `nn.TransformerEncoder`：你的代码正是要拿它们来检验的。`MultiHeadAttention` 是第 3 章的，已在下面导入；请原样使用它。

# %% tags=["export"]
import torch
from torch import nn

from reference.multihead import MultiHeadAttention

# %% [markdown]
# ## 1. 逐位置前馈网络
#
# 论文的公式 (2)，也就是页面中“子层 2：逐位置前馈网络”一节的主题：
#
# $$\operatorname{FFN}(x) = \max(0,\; x W_1 + b_1)\, W_2 + b_2$$
#
# 写出 `PositionwiseFeedForward(d_model, d_ff, dropout=0.1)`，它有三个子模块：
#
# * `w_1`：一个从 `d_model` 个特征映射到 `d_ff` 个特征的 `nn.Linear`，存放 $W_1$ 和 $b_1$；
# * `w_2`：一个从 `d_ff` 个特征映射到 `d_model` 个特征的 `nn.Linear`，存放 $W_2$ 和 $b_2$；
# * `dropout`：一个 `nn.Dropout(dropout)`。这个随机失活（dropout）不在论文中，论文没有提到这个网络内部有任何 dropout；课程遵循 PyTorch 的 `nn.TransformerEncoderLayer`（以及作者的 tensor2tensor 代码），它们对隐藏激活施加一个 dropout，位置紧跟在 ReLU 之后。
#
# `forward(x)` 接受形状为 `(..., d_model)` 的 `x`（前面可以有任意多个轴），返回形状相同的张量。

# %% tags=["solution"] grade_id="PositionwiseFeedForward"
class PositionwiseFeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, the same network for every position.

    Submodules: ``w_1`` (d_model -> d_ff), ``w_2`` (d_ff -> d_model), ``dropout`` (after the ReLU).
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.1) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_model) -> (..., d_model)."""
        ### BEGIN SOLUTION
        hidden = torch.relu(self.w_1(x))  # (..., d_ff)
        # Dropout on the wide hidden layer, where PyTorch's encoder layer puts it too.
        return self.w_2(self.dropout(hidden))  # (..., d_model)
        ### END SOLUTION


# %% tags=["test"] grade_id="test_PositionwiseFeedForward" points=3
from autograder import check

check("encoder.PositionwiseFeedForward", PositionwiseFeedForward)
### BEGIN HIDDEN TESTS
check("encoder.PositionwiseFeedForward", PositionwiseFeedForward, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# “对每个位置都相同”：先输入一整个序列，再把它的每个位置单独输入，然后比较两者的结果。

# %%
torch.manual_seed(0)
ffn = PositionwiseFeedForward(d_model=8, d_ff=32).eval()
x = torch.randn(5, 8)  # (T, d_model)
whole = ffn(x)  # (T, d_model)
one_by_one = torch.stack([ffn(x[t]) for t in range(5)])  # (T, d_model)
print("whole sequence == position by position:", torch.allclose(whole, one_by_one, atol=1e-6))

# %% [markdown]
# ## 2. 层归一化
#
# 页面的“层归一化”一节定义了这个运算，
#
# $$\operatorname{LayerNorm}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta ,$$
#
# 并说明了 $x$、$\mu$、$\sigma^2$、$\epsilon$、$\gamma$ 和 $\beta$ 各是什么；它的小节“稳妥地计算方差”讲的是如何在浮点运算中计算它们。
#
# 写出 `LayerNorm(d_model, eps=1e-5)`，它包含
#
# * `gamma` 和 `beta`：形状为 `(d_model,)` 的 `nn.Parameter`，即缩放 $\gamma$ 和平移 $\beta$，初始值分别为全 1 和全 0；
# * `eps`：构造函数的 $\epsilon$，作为属性保存。
#
# `forward(x)` 接受形状为 `(..., d_model)` 的 `x`，返回形状相同的张量。无论特征的大小和偏移如何，它都必须与持有相同 $\gamma$ 和 $\beta$ 的 `nn.LayerNorm(d_model, eps=eps)` 结果一致。

# %% tags=["solution"] grade_id="LayerNorm"
class LayerNorm(nn.Module):
    """Layer normalisation of each position's d_model features, with a learnable scale and shift.

    Parameters ``gamma`` (ones) and ``beta`` (zeros), both of shape (d_model,); attribute ``eps``.
    """

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
        self.eps = eps
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_model) -> (..., d_model)."""
        ### BEGIN SOLUTION
        mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
        centred = x - mean  # (..., d_model)
        # Two passes (centre, then square): E[x^2] - E[x]^2 cancels catastrophically far from 0.
        variance = (centred * centred).mean(dim=-1, keepdim=True)  # (..., 1), divides by d_model
        return self.gamma * centred / torch.sqrt(variance + self.eps) + self.beta  # (..., d_model)
        ### END SOLUTION


# %% tags=["test"] grade_id="test_LayerNorm" points=3
check("encoder.LayerNorm", LayerNorm)
### BEGIN HIDDEN TESTS
check("encoder.LayerNorm", LayerNorm, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 归一化之后（取初始的 $\gamma = 1$、$\beta = 0$），每个位置的均值为 0，有偏方差略小于 1；无偏方差是它的 $d_\text{model} / (d_\text{model} - 1)$ 倍。

# %%
torch.manual_seed(0)
y = LayerNorm(8)(3.0 * torch.randn(2, 4, 8) + 5.0)  # (B, T, d_model)
print("means:", y.mean(dim=-1).abs().max().item())
print("biased variances:", y.var(dim=-1, unbiased=False).flatten()[:4])
print("unbiased variances:", y.var(dim=-1).flatten()[:4])

# %% [markdown]
# ## 3. 编码器层
#
# 论文第 3.1 节给这一层设置了两个子层，先是多头自注意力，再是前馈网络，并把每个子层都包在一个残差连接里，随后做层归一化：
#
# $$\operatorname{LayerNorm}\big(x + \operatorname{Sublayer}(x)\big).$$
#
# 论文第 5.4 节说明了 dropout 放在哪里：施加在每个子层的输出上，在残差求和之前。（`self_attn` 和 `feed_forward` 在自身内部施加的 dropout，即作用在注意力权重上和 ReLU 之后的那些，是课程从 PyTorch 借来的补充；论文中没有。）在页面上，“包装方式：论文中的后归一化”一节把这些组合在一起，“子层 1：覆盖整个句子的自注意力”一节则说明了自注意力的查询、键和值从哪里来，以及它可以看哪些位置。
#
# 写出 `EncoderLayer(d_model, h, d_ff, dropout=0.1)`，它包含以下子模块：
#
# * `self_attn`：第 3 章的 `MultiHeadAttention`，用 `d_model`、`h` 和 `dropout` 构建；
# * `feed_forward`：你的 `PositionwiseFeedForward`，用 `d_model`、`d_ff` 和 `dropout` 构建；
# * `norm1` 和 `norm2`：你的宽度为 `d_model` 的 `LayerNorm`，各有自己的 $\gamma$ 和 $\beta$；
# * `dropout1` 和 `dropout2`：`nn.Dropout(dropout)` 模块。
#
# 名称中的数字是子层的编号：`norm1` 和 `dropout1` 服务于自注意力，`norm2` 和 `dropout2` 服务于前馈网络。
#
# `forward(x, key_padding_mask=None)` 接受形状为 `(B, T, d_model)` 的 `x`，返回形状相同的张量。`key_padding_mask` 如果给出，是一个布尔型 `(B, T)` 张量，**在填充位置为 True**，这是第 3 章 `MultiHeadAttention` 的约定（运行 `help(MultiHeadAttention)` 可以查看它的参数）。填充位置上无论放的是什么，都绝不能改变真实位置上的输出。

# %% tags=["solution"] grade_id="EncoderLayer"
class EncoderLayer(nn.Module):
    """One encoder layer of the paper (post-norm): multi-head self-attention, then the feed-forward network.

    Submodules: ``self_attn``, ``feed_forward``, ``norm1``, ``norm2``, ``dropout1``, ``dropout2``.
    """

    def __init__(self, d_model: int, h: int, d_ff: int, dropout: float = 0.1) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        self.self_attn = MultiHeadAttention(d_model, h, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        ### END SOLUTION

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, d_model) -> (B, T, d_model); key_padding_mask (B, T) is True at padding."""
        ### BEGIN SOLUTION
        attended = self.self_attn(x, x, x, key_padding_mask=key_padding_mask)  # (B, T, d_model)
        # Post-norm: the residual sum is normalised, as in the paper.
        x = self.norm1(x + self.dropout1(attended))  # (B, T, d_model)
        return self.norm2(x + self.dropout2(self.feed_forward(x)))  # (B, T, d_model)
        ### END SOLUTION


# %% tags=["test"] grade_id="test_EncoderLayer" points=4
check("encoder.EncoderLayer", EncoderLayer)
### BEGIN HIDDEN TESTS
check("encoder.EncoderLayer", EncoderLayer, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 填充不会泄漏到真实位置：在掩码标为“填充”的地方放上垃圾数据，真实位置的输出纹丝不动。

# %%
torch.manual_seed(0)
layer = EncoderLayer(d_model=16, h=4, d_ff=32).eval()
x = torch.randn(2, 5, 16)  # (B, T, d_model)
padding = torch.tensor([[False] * 5, [False, False, False, True, True]])  # (B, T): True = padding
garbage = x.clone()
garbage[1, 3:] = 1e3  # only padded positions change
same = torch.allclose(layer(x, padding)[1, :3], layer(garbage, padding)[1, :3], atol=1e-5)
print("real positions unchanged by what sits in the padding:", same)

# %% [markdown]
# ## 4. 编码器：由 N 个层组成的堆叠
#
# 页面的“堆叠：N = 6 层，每层有自己的权重”一节描述了这个堆叠。
#
# 写出 `Encoder(d_model, h, d_ff, N, dropout=0.1)`，它只有一个子模块 `layers`：一个由 `N` 个编码器层组成的 `nn.ModuleList`，每一层都是用 `d_model`、`h`、`d_ff` 和 `dropout` 构建的 `EncoderLayer`，并且有自己的权重。`forward(x, key_padding_mask=None)` 接受与 `EncoderLayer.forward` 相同的参数，形状和约定也相同；与论文一样，编码器的输出就是它最后一层的输出。

# %% tags=["solution"] grade_id="Encoder"
class Encoder(nn.Module):
    """A stack of N encoder layers, each with its own weights; its output is the last layer's.

    Submodule: ``layers``, an ``nn.ModuleList`` of N ``EncoderLayer``.
    """

    def __init__(self, d_model: int, h: int, d_ff: int, N: int, dropout: float = 0.1) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        # A new layer per iteration: N independent sets of weights.
        self.layers = nn.ModuleList(EncoderLayer(d_model, h, d_ff, dropout) for _ in range(N))
        ### END SOLUTION

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, d_model) -> (B, T, d_model); key_padding_mask (B, T) is True at padding."""
        ### BEGIN SOLUTION
        for layer in self.layers:
            x = layer(x, key_padding_mask)  # (B, T, d_model)
        return x
        ### END SOLUTION


# %% tags=["test"] grade_id="test_Encoder" points=3
check("encoder.Encoder", Encoder)
### BEGIN HIDDEN TESTS
check("encoder.Encoder", Encoder, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 论文的基础编码器：六层，$d_\text{model} = 512$，$h = 8$，$d_\text{ff} = 2048$。数一数它的参数，并看看一个批次从头到尾都保持着原来的形状。

# %%
base = Encoder(d_model=512, h=8, d_ff=2048, N=6).eval()
per_layer = sum(p.numel() for p in base.layers[0].parameters())
print(f"parameters per layer: {per_layer:,}; whole encoder: {sum(p.numel() for p in base.parameters()):,}")
with torch.no_grad():
    tokens = torch.randn(2, 10, 512)  # (B, T, d_model): embeddings plus positions, as chapter 6 builds them
    print("output shape:", tuple(base(tokens).shape))
