# %% [markdown]
# # 第 5 章练习：解码器
#
# 你将用第 3 章和第 4 章的部件搭建 Transformer 的解码器：
#
# 1. `subsequent_mask`：因果掩码，它让目标序列中的一个位置看不到它后面的位置；
# 2. `DecoderLayer`：论文解码器中的一层，包含掩码自注意力、作用于编码器输出的交叉注意力，以及前馈网络；
# 3. `Decoder`：由 `N` 个这样的层堆叠而成，每层有自己的权重，全都读取同一个编码器输出。
#
# 本笔记本规定了测试和后续章节所依赖的接口：每个模块的构造函数、它的子模块的名称、它的形状以及它的掩码。至于每个模块怎样计算输出，要由你根据本章的页面“解码器”（`book/ch05_decoder.md`）和论文自己弄清楚；下面每一节都会告诉你该去哪里找。
#
# 每个部分都有一个供你编写代码的单元格（把每一处 `raise NotImplementedError()` 替换掉），紧随其后是一个测试单元格。运行测试单元格：代码写对了，它会打印一行；否则它会告诉你哪里错了、该去哪里找。测试会按本笔记本给定的名称（`self_attn`、`cross_attn`、`feed_forward`、`norm1`、`norm2`、`norm3`、`layers`）把固定的权重载入你的模块，所以请保留这些名称。测试会把你的模块与持有相同权重的 PyTorch 自带层（`nn.TransformerDecoderLayer`、`nn.TransformerDecoder`）进行比较，还会检查解码器做出的两条承诺：未来的目标词元永远不会改变前面位置的输出，填充永远不会改变真实位置的输出。评分时，你的作业还会在比这里看到的更多的情形下运行，所以目标是写出真正正确的代码，而不是只求能通过测试的代码。
#
# 要在终端中检查整个笔记本，请在课程文件夹中运行：`.venv/bin/python -m autograder check zh/exercises/ch05_decoder/decoder.ipynb`。
#
# 你的答案中不要使用 `nn.TransformerDecoderLayer`、`nn.TransformerDecoder` 或 `nn.MultiheadAttention`：你的代码正是要拿它们来检验的。`MultiHeadAttention`（第 3 章）、`LayerNorm` 和 `PositionwiseFeedForward`（第 4 章）已在下面导入；请原样使用它们。

# %% tags=["export"]
import torch
from torch import nn

from reference.encoder import LayerNorm, PositionwiseFeedForward
from reference.multihead import MultiHeadAttention

# %% [markdown]
# ## 1. 后续掩码
#
# 解码器在学习预测目标句子的同时，又把这同一个句子当作自己的输入来读取。因此，位置 $i$ 不能看到位置 $i + 1, i + 2, \dots$：论文（第 3.2.3 节）把“softmax 输入中所有对应非法连接的值”屏蔽掉，做法是把它们的分数设为 $-\infty$。按本课程的约定（掩码在查询**可以**关注的地方为 True），这个掩码是
#
# $$\operatorname{mask}_{ij} = \begin{cases} \text{True} & j \le i \\ \text{False} & j > i \end{cases}$$
#
# 其中 $i$ 是查询的位置，$j$ 是键的位置。页面的“掩码自注意力”一节展示了同一个掩码在 PyTorch 中的加性形式。
#
# 写出 `subsequent_mask(size)`。它返回一个形状为 `(size, size)` 的布尔张量，不带批次轴（`(T, T)` 的掩码会自动广播到形状为 `(B, h, T, T)` 的分数上）。空序列也没问题：`size=0` 得到一个空的 `(0, 0)` 掩码。大小为负数是调用者的错误：抛出 `ValueError`。

# %% tags=["solution"] grade_id="subsequent_mask"
def subsequent_mask(size: int) -> torch.Tensor:
    """(size, size) bool mask, True where query i may attend to key j, i.e. j <= i."""
    ### BEGIN SOLUTION
    if size < 0:
        raise ValueError(f"size must be at least 0, got {size}")
    query_pos = torch.arange(size).unsqueeze(1)  # (size, 1)
    key_pos = torch.arange(size).unsqueeze(0)  # (1, size)
    # Broadcasting the two position vectors compares every query with every key.
    return key_pos <= query_pos  # (size, size)
    ### END SOLUTION


# %% tags=["test"] grade_id="test_subsequent_mask" points=2
from autograder import check

check("decoder.subsequent_mask", subsequent_mask)
### BEGIN HIDDEN TESTS
check("decoder.subsequent_mask", subsequent_mask, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# PyTorch 用它自己的约定构造同样的掩码：`nn.Transformer.generate_square_subsequent_mask` 返回一个浮点掩码，它会被*加*到分数上，允许关注的地方为 0，不允许的地方为 $-\infty$。两者说的是同一件事：

# %%
print(subsequent_mask(4))
print(nn.Transformer.generate_square_subsequent_mask(4))
print("same mask:", torch.equal(subsequent_mask(4), nn.Transformer.generate_square_subsequent_mask(4) == 0))

# %% [markdown]
# ## 2. 解码器层
#
# 一个解码器层有三个子层：作用于目标序列的掩码多头自注意力、作用于编码器输出（`memory`）的多头交叉注意力，以及前馈网络。每个子层都像在编码器中一样，按照论文第 3.1 节包装起来，
#
# $$\operatorname{LayerNorm}\big(x + \operatorname{Sublayer}(x)\big),$$
#
# 并在论文第 5.4 节规定的位置施加随机失活（dropout）：施加在每个子层的输出上，在残差求和之前。（注意力和前馈网络在自身内部也施加 dropout，作用在注意力权重上和 ReLU 之后；这不在论文中，而是遵循 PyTorch，第 4 章的页面对此有说明。）页面在“掩码自注意力”和“交叉注意力：目标提问，源句子作答”两节中逐一讲解这些子层，并在“三个子层，各自带有残差连接和 LayerNorm”一节中把它们包装起来。
#
# 写出 `DecoderLayer(d_model, h, d_ff, dropout=0.1)`，它包含以下子模块：
#
# * `self_attn` 和 `cross_attn`：第 3 章的 `MultiHeadAttention`，各自用 `d_model`、`h` 和 `dropout` 构建，各有自己的权重；
# * `feed_forward`：第 4 章的 `PositionwiseFeedForward`，用 `d_model`、`d_ff` 和 `dropout` 构建；
# * `norm1`、`norm2` 和 `norm3`：第 4 章的宽度为 `d_model` 的 `LayerNorm`，各有自己的 $\gamma$ 和 $\beta$；
# * `dropout1`、`dropout2` 和 `dropout3`：`nn.Dropout(dropout)` 模块。
#
# 名称中的数字是子层的编号：`norm1` 和 `dropout1` 服务于自注意力，`norm2` 和 `dropout2` 服务于交叉注意力，`norm3` 和 `dropout3` 服务于前馈网络。
#
# `forward(x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None)`：
#
# * `x` 是目标序列，形状为 `(B, T_tgt, d_model)`，`memory` 是编码器的输出，形状为 `(B, T_src, d_model)`；输出的形状与 `x` 相同；
# * `tgt_mask`：布尔型，形状为 `(T_tgt, T_tgt)` 或 `(B, T_tgt, T_tgt)`，在一个目标位置可以关注另一个目标位置的地方为 True（通常是 `subsequent_mask(T_tgt)`）；
# * `tgt_key_padding_mask`：布尔型，形状为 `(B, T_tgt)`，在目标位置是填充的地方为 True；
# * `memory_key_padding_mask`：布尔型，形状为 `(B, T_src)`，在源位置是填充的地方为 True。
#
# 这些都是第 3 章 `MultiHeadAttention` 的约定（运行 `help(MultiHeadAttention)` 可以查看它的参数）。你的层必须信守页面“实测掩码的承诺”一节所描述的承诺：使用因果的 `tgt_mask` 时，一个目标词元永远不会改变它前面位置上的输出；填充位置上无论放的是什么（无论是目标序列的填充位置还是记忆的填充位置），都永远不会改变真实位置上的输出。

# %% tags=["solution"] grade_id="DecoderLayer"
class DecoderLayer(nn.Module):
    """One decoder layer of the paper (post-norm): masked self-attention, cross-attention over memory, then the FFN.

    Submodules: ``self_attn``, ``cross_attn``, ``feed_forward``, ``norm1``, ``norm2``, ``norm3``,
    ``dropout1``, ``dropout2``, ``dropout3``.
    """

    def __init__(self, d_model: int, h: int, d_ff: int, dropout: float = 0.1) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        self.self_attn = MultiHeadAttention(d_model, h, dropout)
        # Its own weights: what a position asks of the source is not what it asks of the target.
        self.cross_attn = MultiHeadAttention(d_model, h, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = LayerNorm(d_model), LayerNorm(d_model), LayerNorm(d_model)
        self.dropout1, self.dropout2, self.dropout3 = nn.Dropout(dropout), nn.Dropout(dropout), nn.Dropout(dropout)
        ### END SOLUTION

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        tgt_mask: torch.Tensor | None = None,
        tgt_key_padding_mask: torch.Tensor | None = None,
        memory_key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x (B, T_tgt, d_model), memory (B, T_src, d_model) -> (B, T_tgt, d_model)."""
        ### BEGIN SOLUTION
        # The target attends to itself, each position only to itself and what came before.
        attended = self.self_attn(x, x, x, attn_mask=tgt_mask, key_padding_mask=tgt_key_padding_mask)  # (B, T_tgt, d_model)
        x = self.norm1(x + self.dropout1(attended))  # (B, T_tgt, d_model)
        # The target asks (queries from x); the source answers (keys and values from memory).
        looked_up = self.cross_attn(x, memory, memory, key_padding_mask=memory_key_padding_mask)  # (B, T_tgt, d_model)
        x = self.norm2(x + self.dropout2(looked_up))  # (B, T_tgt, d_model)
        return self.norm3(x + self.dropout3(self.feed_forward(x)))  # (B, T_tgt, d_model)
        ### END SOLUTION


# %% tags=["test"] grade_id="test_DecoderLayer" points=5
check("decoder.DecoderLayer", DecoderLayer)
### BEGIN HIDDEN TESTS
check("decoder.DecoderLayer", DecoderLayer, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 因果掩码的作用：改变最后两个目标词元，前面几个位置的输出丝毫不动。没有掩码时，每个位置都会变化。

# %%
torch.manual_seed(0)
layer = DecoderLayer(d_model=16, h=4, d_ff=32).eval()
memory = torch.randn(1, 6, 16)  # (B, T_src, d_model): the encoder's output
x = torch.randn(1, 5, 16)  # (B, T_tgt, d_model)
x_new = x.clone()
x_new[:, 3:] = torch.randn(1, 2, 16)  # new tokens at positions 3 and 4
with torch.no_grad():
    for mask in (subsequent_mask(5), None):
        change = (layer(x, memory, mask) - layer(x_new, memory, mask)).abs().amax(dim=-1)  # (B, T_tgt)
        print("causal mask" if mask is not None else "no mask    ", "largest change per position:", change[0])

# %% [markdown]
# ## 3. 解码器：由 N 个层组成的堆叠
#
# 页面的“由 N 个相同层组成的堆叠”一节描述了这个堆叠，以及它的每一层读取什么。
#
# 写出 `Decoder(d_model, h, d_ff, N, dropout=0.1)`，它只有一个子模块 `layers`：一个由 `N` 个解码器层组成的 `nn.ModuleList`，每一层都是用 `d_model`、`h`、`d_ff` 和 `dropout` 构建的 `DecoderLayer`，并且有自己的权重。它的 `forward` 接受与 `DecoderLayer.forward` 相同的参数，名称、形状和约定都相同；与论文一样，解码器的输出就是它最后一层的输出。

# %% tags=["solution"] grade_id="Decoder"
class Decoder(nn.Module):
    """A stack of N decoder layers, each with its own weights; its output is the last layer's.

    Submodule: ``layers``, an ``nn.ModuleList`` of N ``DecoderLayer``.
    """

    def __init__(self, d_model: int, h: int, d_ff: int, N: int, dropout: float = 0.1) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        self.layers = nn.ModuleList(DecoderLayer(d_model, h, d_ff, dropout) for _ in range(N))
        ### END SOLUTION

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        tgt_mask: torch.Tensor | None = None,
        tgt_key_padding_mask: torch.Tensor | None = None,
        memory_key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x (B, T_tgt, d_model), memory (B, T_src, d_model) -> (B, T_tgt, d_model)."""
        ### BEGIN SOLUTION
        for decoder_layer in self.layers:
            # memory stays the encoder's output; only the target representation is refined.
            x = decoder_layer(x, memory, tgt_mask, tgt_key_padding_mask, memory_key_padding_mask)  # (B, T_tgt, d_model)
        return x
        ### END SOLUTION


# %% tags=["test"] grade_id="test_Decoder" points=3
check("decoder.Decoder", Decoder)
### BEGIN HIDDEN TESTS
check("decoder.Decoder", Decoder, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 一次传播完成教师强制。训练时，整个（右移过的）目标句子一次性送入；多亏了掩码，输出的第 $t$ 行恰好等于只给解码器前 $t + 1$ 个词元时它算出的结果，而生成时正是这样。在一个小堆叠上验证一下：

# %%
torch.manual_seed(0)
decoder = Decoder(d_model=16, h=4, d_ff=32, N=2).eval()
memory = torch.randn(1, 6, 16)  # (B, T_src, d_model)
target = torch.randn(1, 5, 16)  # (B, T_tgt, d_model): embedded "<bos> All you need ..."
with torch.no_grad():
    all_at_once = decoder(target, memory, subsequent_mask(5))  # (B, T_tgt, d_model)
    one_by_one = torch.cat(
        [decoder(target[:, : t + 1], memory, subsequent_mask(t + 1))[:, -1:] for t in range(5)], dim=1
    )  # (B, T_tgt, d_model), one prefix at a time
print("one pass == five growing prefixes:", torch.allclose(all_at_once, one_by_one, atol=1e-5))

# %% [markdown]
# 论文的基础解码器：六层，$d_\text{model} = 512$，$h = 8$，$d_\text{ff} = 2048$。每一层比编码器层多一个注意力模块。

# %%
base = Decoder(d_model=512, h=8, d_ff=2048, N=6)
per_layer = sum(p.numel() for p in base.layers[0].parameters())
print(f"parameters per layer: {per_layer:,}; whole decoder: {sum(p.numel() for p in base.parameters()):,}")
