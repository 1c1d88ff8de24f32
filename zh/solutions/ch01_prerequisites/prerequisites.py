# %% [markdown]
# # 第 1 章练习：预备知识与动机
#
# 在 Transformer 出现之前，读取一个序列要么靠卷积（它看到的窗口逐层变宽），要么靠循环神经网络（它一个位置接一个位置地读）。你将为这两者各写一小段代码，然后写出每个编码器-解码器用来生成文本的那个循环：
#
# 1. `receptive_field`：一叠一维卷积中的一个输出能看到多少个输入位置；
# 2. `rnn_forward`：tanh RNN 的前向传播，照它的本来面目写成一个沿时间的循环；
# 3. `greedy_decode`：用一个提供好的小模型，对一个批次做贪婪的自回归解码。
#
# 每个函数都有一个供你写代码的代码单元格（把 `raise NotImplementedError()` 替换掉），紧随其后是一个测试单元格。运行测试单元格：如果你的函数是对的，它会打印一行；否则，它会告诉你哪里错了、该往哪里找。这些测试会在若干个输入上，把你的结果与 PyTorch（`torch.nn.Conv1d`、`torch.nn.RNN`）以及测试自己的一个解码循环相比较。评分时还会用比这里能看到的更多的情形来运行你的代码，所以要力求写出一个正确的函数，而不只是一个能通过测试的函数。
#
# 要在终端里检查整个笔记本，请在课程的文件夹中运行：`.venv/bin/python -m autograder check zh/exercises/ch01_prerequisites/prerequisites.ipynb`。
#
# 第 2 部分的答案中不要使用 `torch.nn.RNN`：重点就是要看到这个循环。

# %% tags=["export"]
import math
from collections.abc import Sequence
from typing import Any

import torch

# %% [markdown]
# ## 1. 卷积堆叠的感受野
#
# 卷积核大小为 $k$、步幅（stride）为 $s$、扩张率（dilation）为 $d$ 的一维卷积，用彼此相隔 $d$ 的 $k$ 个输入来计算输出 $t$：
#
# $$y_t = \sum_{j=0}^{k-1} W_j\, x_{s t + d j} + b .$$
#
# 因此，一个输出依赖于一个由 $(k - 1)\,d + 1$ 个连续输入位置组成的窗口（当 $d > 1$ 时，其中有些位置被跳过）：这个窗口就是该层的**感受野**。把多层叠起来，窗口就会变宽。第 $\ell$ 层给窗口增加 $(k_\ell - 1)\,d_\ell$ 步，但在这个深度上，一“步”并不是一个输入位置：第 $\ell$ 层下面的每一个步幅，都已经把相邻的位置在输入中拉得更开了。对于按顺序应用的第 $\ell = 1, \dots, L$ 层，
#
# $$r = 1 + \sum_{\ell=1}^{L} (k_\ell - 1)\, d_\ell \prod_{i < \ell} s_i .$$
#
# 这个乘积只遍历第 $\ell$ 层*下面*的各层：一层自己的步幅决定的是它的输出落在哪里，而不是每个输出看得有多宽。如果一层都没有（$L = 0$），一个输出就是它的输入本身，所以 $r = 1$。
#
# 编写 `receptive_field(kernel_sizes, strides=None, dilations=None)`。这三个参数都是序列，每层一个元素，第一层在前；没有给出步幅或扩张率，就表示每一层都取 1。以 `int` 返回感受野。不合理的描述应当明确地报错：当长度不一致，或者任何卷积核大小、步幅或扩张率小于 1 时，抛出 `ValueError`，并在消息中说明哪里不对。

# %% tags=["solution"] grade_id="receptive_field"
def receptive_field(
    kernel_sizes: Sequence[int],
    strides: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
) -> int:
    """Input positions seen by one output of a stack of 1-D convolutions applied in order."""
    ### BEGIN SOLUTION
    n_layers = len(kernel_sizes)
    strides = [1] * n_layers if strides is None else list(strides)
    dilations = [1] * n_layers if dilations is None else list(dilations)
    if len(strides) != n_layers or len(dilations) != n_layers:
        raise ValueError(
            f"one stride and one dilation per layer: got {n_layers} kernel sizes, "
            f"{len(strides)} strides and {len(dilations)} dilations"
        )
    for what, values in (("kernel size", kernel_sizes), ("stride", strides), ("dilation", dilations)):
        for layer, value in enumerate(values):
            if value < 1:
                raise ValueError(f"every {what} must be at least 1; layer {layer} has {value}")
    field, jump = 1, 1  # jump: input positions between neighbouring outputs of the layers so far
    for k, s, d in zip(kernel_sizes, strides, dilations):
        field += (k - 1) * d * jump
        jump *= s
    return field
    ### END SOLUTION


# %% tags=["test"] grade_id="test_receptive_field" points=2
from autograder import check

check("prerequisites.receptive_field", receptive_field)
### BEGIN HIDDEN TESTS
check("prerequisites.receptive_field", receptive_field, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 一个卷积编码器要有多深，一个 100 个词元的句子的第一个词才能影响到一个同时也看得到最后一个词的输出？比较三种卷积核大小为 3 的设计：普通的层、每层把分辨率减半的层（步幅 2），以及扩张率逐层翻倍的层（1, 2, 4, ...）。作为对照，一个自注意力层在深度 1 就能看到整个句子。

# %%
import matplotlib.pyplot as plt

depths = range(1, 13)
designs = {
    "k=3": lambda n: receptive_field([3] * n),
    "k=3, stride 2": lambda n: receptive_field([3] * n, strides=[2] * n),
    "k=3, dilation 1, 2, 4, ...": lambda n: receptive_field([3] * n, dilations=[2**i for i in range(n)]),
}
fig, ax = plt.subplots(figsize=(5.5, 3.4))
for (label, field_at), style in zip(designs.items(), ["o-", "s-", "x--"]):
    needed = next(n for n in range(1, 101) if field_at(n) >= 100)
    print(f"{label:28s} sees 100 positions from depth {needed}")
    ax.semilogy(depths, [field_at(n) for n in depths], style, ms=4, label=label)
ax.axhline(100, color="grey", ls=":", label="a 100-token sentence")
ax.set(xlabel="number of layers", ylabel="receptive field (positions)", title="how far one output can see")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# 普通的堆叠需要 50 层，每两个词元一层。步幅和扩张让窗口呈指数增长（两条曲线是重合的：当 $k = 3$ 时，两者都给出 $r = 2^{L+1} - 1$，一个靠缩短序列，另一个靠把卷积核拉开），这就是 ByteNet 等卷积翻译模型使用扩张的原因。尽管如此，从一个词到一个远处的词，路径仍然要穿过好几层，而且卷积的权重取决于相对*位置*，从来不取决于这些词说了什么。
#
# ## 2. 循环网络，一次一步
#
# Elman RNN 维护一个状态 $h_t$，用来概括到目前为止的序列，并在每个位置更新它一次：
#
# $$h_t = \tanh\left(x_t W_{xh} + h_{t-1} W_{hh} + b_h\right), \qquad t = 1, \dots, T .$$
#
# 这里 $x_t$ 和 $h_t$ 是行向量，批次中的每个序列一个，PyTorch 就是这样存放它们的：`x[:, t]` 的形状为 `(B, d_in)`，`W_xh` 的形状为 `(d_in, d_h)`，`W_hh` 的形状为 `(d_h, d_h)`，`b_h` 的形状为 `(d_h,)`。（如果像本章页面那样用列向量来写，同样的更新就写作 $W_{xh} x_t + W_{hh} h_{t-1}$，其中的矩阵是转置过的；`torch.nn.RNN` 把这些转置后的矩阵存为 `weight_ih_l0` 和 `weight_hh_l0`。）
#
# 编写 `rnn_forward(x, h0, W_xh, W_hh, b_h)`，其中 `x` 的形状为 `(B, T, d_in)`，初始状态 `h0` 的形状为 `(B, d_h)`。返回 `(outputs, h_T)`：形状为 `(B, T, d_h)` 的 `outputs` 存放 $h_1, \dots, h_T$（每个输入之后的状态，不包括 $h_0$），形状为 `(B, d_h)` 的 `h_T` 是其中的最后一个。对 $t$ 使用 Python 循环：$h_t$ 无法在 $h_{t-1}$ 之前算出，而这条由 $T$ 个相互依赖的步骤组成的链条，正是 Transformer 着手要去掉的东西。

# %% tags=["solution"] grade_id="rnn_forward"
def rnn_forward(
    x: torch.Tensor, h0: torch.Tensor, W_xh: torch.Tensor, W_hh: torch.Tensor, b_h: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """A tanh RNN over x (B, T, d_in) from h0 (B, d_h): the states h_1..h_T and h_T."""
    ### BEGIN SOLUTION
    h = h0
    states = []
    for t in range(x.shape[1]):  # serial: step t cannot start before step t - 1 is done
        h = torch.tanh(x[:, t] @ W_xh + h @ W_hh + b_h)  # (B, d_h)
        states.append(h)
    return torch.stack(states, dim=1), h  # (B, T, d_h), (B, d_h)
    ### END SOLUTION


# %% tags=["test"] grade_id="test_rnn_forward" points=3
check("prerequisites.rnn_forward", rnn_forward)
### BEGIN HIDDEN TESTS
check("prerequisites.rnn_forward", rnn_forward, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 你的循环是可微的，所以 autograd 能告诉我们每个输入到最后还有多大影响。根据链式法则，$\partial h_T / \partial x_t$ 是 $t$ 与 $T$ 之间每一步一个雅可比矩阵 $\operatorname{diag}(1 - h_j^2)\, W_{hh}^\top$ 的乘积，所以它的大小往往随距离 $T - t$ 按几何级数缩小（或增长）。下面，$W_{hh}$ 的元素是随机的，标准差为 $g / \sqrt{d_h}$，增益 $g$ 取三个值。

# %%
torch.manual_seed(0)
B, T, d_in, d_h = 1, 60, 4, 32
x = torch.randn(B, T, d_in, dtype=torch.float64, requires_grad=True)
h0 = torch.zeros(B, d_h, dtype=torch.float64)
W_xh = torch.randn(d_in, d_h, dtype=torch.float64) / math.sqrt(d_in)
b_h = torch.zeros(d_h, dtype=torch.float64)

fig, ax = plt.subplots(figsize=(5.5, 3.4))
for gain in (0.5, 1.0, 3.0):
    W_hh = torch.randn(d_h, d_h, dtype=torch.float64) * gain / math.sqrt(d_h)
    x.grad = None
    _, h_T = rnn_forward(x, h0, W_xh, W_hh, b_h)
    h_T.sum().backward()
    influence = x.grad[0].norm(dim=-1).flip(0)  # (T,): |d sum(h_T) / d x_t| by distance T - t
    print(f"gain {gain}: {influence[0].item():.1e} for the last input, {influence[-1].item():.1e} for the first")
    ax.semilogy(range(T), influence, label=f"gain {gain}")
ax.set(xlabel="steps between x_t and h_T", ylabel="|d sum(h_T) / d x_t|", title="what the last state still knows")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# 增益较小时，一个输入的影响在几十步之内就衰减了好几个数量级：本可以教会网络利用这个输入的梯度*消失*了。增益较大时，网络变得混沌，梯度反而会*爆炸*。门控单元（LSTM、GRU）能缓解第一个问题；但什么也去不掉这 $T$ 个串行步骤。
#
# ## 为什么需要新东西
#
# 把两种架构放在一起看，它们留下了五个难点，而论文的设计回答了这些难点：
#
# | 难点 | 卷积 | 循环 | 自注意力 |
# |---|---|---|---|
# | **长距离依赖** | 需要很多层 | 必须挺过很多步 | 一步 |
# | **基于内容的相关性** | 权重取决于相对位置 | 一个状态装下所有东西 | 权重由词本身计算得出 |
# | 两个位置之间的**路径长度**（梯度必须走完这条路） | 随距离 / 深度增长 | 线性增长 | 常数 |
# | **感受野** | 只能靠堆叠来变宽（第 1 部分） | 整个过去，但要经过一个瓶颈 | 整个序列 |
# | 跨位置的**并行计算** | 可以 | 不行：一连 $T$ 步（第 2 部分） | 可以 |
#
# 长距离依赖的例子有：一个代词与它所指代的名词，或者一个被移到德语从句末尾的动词。基于内容的相关性是指：一个词对另一个词有多重要，取决于这两个词说了什么，而不是它们相隔多远。
#
# ## 3. 编码器-解码器概览：贪婪解码
#
# Transformer 保留了早期翻译模型的编码器-解码器结构。以输入“Lab4AI is”为例。它被切分成词元（`Lab`、`4`、`AI`、`is`），每个词元先变成一个整数 id，再变成一个向量，然后**编码器**把这些向量转换成*上下文相关*的表示：每个词元一个向量，这个向量还携带着句子其余部分关于该词元所说的信息。这个向量序列，也就是记忆（`memory`），只计算一次。
#
# 接着，**解码器**一次一个词元地写出输出。它从一个特殊的序列开始词元 `<bos>` 起步，读取记忆和到目前为止已写出的词元，并为词表中的每个词元返回一个作为下一个词元的分数（一个 logit）。**贪婪解码**取其中最高的那个：
#
# $$y_{t} = \operatorname*{arg\,max}_{v}\; p\left(v \mid y_0, \dots, y_{t-1};\ \text{memory}\right),
# \qquad y_0 = \texttt{<bos>} .$$
#
# 选中的词元会被追加到解码器下一步的输入中，所以每一次预测都以之前的预测为条件：这种解码是**自回归**的。在我们的例子中，解码器可能先生成 `All`，然后读入 `<bos> All`，生成 `you`，接着是 `need`，最后是序列结束词元 `<eos>`。
#
# 编写 `greedy_decode(model, src, max_len, bos_id, eos_id, pad_id)`，对一整个批次的源句子 `src`（一个形状为 `(B, S)` 的 `LongTensor`）进行解码：
#
# * `model.encode(src)` 返回记忆；只调用它一次。`model.decode(memory, ys)` 接收到目前为止的词元，即形状为 `(B, t)` 的 `ys`，并返回形状为 `(B, t, V)` 的 logits：位置 $i$ 存放的是紧跟在 `ys[:, :i + 1]` 之后那个词元的 logits，所以下一个词元取自**最后**一个位置。
# * 每一行的第 0 列都以 `bos_id` 开头，在它之后最多生成 `max_len` 个词元。
# * 一个批次中的句子会在不同的步骤结束。一旦某一行生成了 `eos_id`（在输出中保留这个 `eos_id`），这一行之后的每个位置都是 `pad_id`，无论模型说什么。
# * 一旦每一行都生成了 `eos_id`，就立即停止，让结果尽可能短。
#
# 返回一个形状为 `(B, L)` 的 `LongTensor`，其中 $L \le$ `max_len` $+ 1$。

# %% tags=["solution"] grade_id="greedy_decode"
def greedy_decode(model: Any, src: torch.Tensor, max_len: int, bos_id: int, eos_id: int, pad_id: int) -> torch.Tensor:
    """Greedy autoregressive decoding of a batch: (B, L) token ids starting with bos_id."""
    ### BEGIN SOLUTION
    memory = model.encode(src)  # computed once, read at every step
    batch = src.shape[0]
    ys = torch.full((batch, 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    finished = torch.zeros(batch, dtype=torch.bool, device=src.device)  # (B,)
    for _ in range(max_len):
        logits = model.decode(memory, ys)  # (B, t, V)
        next_token = logits[:, -1].argmax(dim=-1)  # (B,)
        # A finished row has said all it has to say: pad it, whatever the model proposes.
        next_token = next_token.masked_fill(finished, pad_id)
        ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)  # (B, t + 1)
        finished = finished | (next_token == eos_id)
        if bool(finished.all()):
            break
    return ys
    ### END SOLUTION


# %% tags=["test"] grade_id="test_greedy_decode" points=4
check("prerequisites.greedy_decode", greedy_decode)
### BEGIN HIDDEN TESTS
check("prerequisites.greedy_decode", greedy_decode, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 来看看这个循环在例子上是怎样工作的。下面这个替身“模型”把一对句子背了下来：它的 logits 只看最新的那个词元（真正的解码器会读取整个前缀和记忆）。把它包装一下，就能看到你的 `greedy_decode` 在每一步给解码器输入了什么。

# %%
vocab = ["<pad>", "<bos>", "<eos>", "Lab", "4", "AI", "is", "All", "you", "need"]
ids = {token: i for i, token in enumerate(vocab)}


class PhraseBook:
    """Knows one answer to 'Lab4AI is': the next token is fixed by the previous one."""

    def __init__(self) -> None:
        follows = {"<bos>": "All", "All": "you", "you": "need", "need": "<eos>"}
        self.table = torch.full((len(vocab), len(vocab)), -5.0)  # (previous token, next token)
        for before, after in follows.items():
            self.table[ids[before], ids[after]] = 5.0
        self.calls: list[list[str]] = []

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        return src  # nothing to encode: the answer is learnt by heart

    def decode(self, memory: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        self.calls.append([vocab[i] for i in ys[0].tolist()])
        return self.table[ys]  # (B, t, V)


phrase_book = PhraseBook()
src = torch.tensor([[ids[t] for t in ["Lab", "4", "AI", "is"]]])  # (1, 4)
out = greedy_decode(phrase_book, src, max_len=10, bos_id=ids["<bos>"], eos_id=ids["<eos>"], pad_id=ids["<pad>"])
for step, seen in enumerate(phrase_book.calls, start=1):
    print(f"step {step}: the decoder reads {' '.join(seen)}")
print("output:", " ".join(vocab[i] for i in out[0].tolist()))

# %% [markdown]
# 再在一个批次上试试，用的是测试所用的那个未经训练的小模型。它的句子在生成了与源句子差不多一样多的词元之后停止，所以各行在不同的步骤结束（`2` 是 `<eos>`，`0` 是 `<pad>`），而那个 9 个词元的源句子被 `max_len` 截断了。

# %%
from autograder.toys import ToyTranslator

toy = ToyTranslator(vocab_size=16, d=16, seed=0)
src = torch.tensor([
    [5, 9, 0, 0, 0, 0, 0, 0, 0],
    [7, 3, 12, 4, 0, 0, 0, 0, 0],
    [11, 6, 8, 14, 3, 9, 10, 4, 13],
])  # (B=3, S=9), padded with 0
print(greedy_decode(toy, src, max_len=6, bos_id=1, eos_id=2, pad_id=0))
