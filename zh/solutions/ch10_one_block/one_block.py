# %% [markdown]
# # 第 10 章练习：一个模块，处理一切
#
# 混合专家语言模型、视觉 Transformer 和语音分类器，运行的都是第 3 章到第 5 章的那个模块。不同之处在于输入的是什么，以及（对专家模型而言）每个词元遇到的是哪个前馈网络。你将编写造成这些差别的七个部件：
#
# 1. `top_k_router`，为每个词元挑出它要去的专家，以及每个专家占多大分量；
# 2. `load_balancing_loss`，Switch Transformer 的辅助损失，防止路由器把所有词元都送给同一个专家；
# 3. `MoEFeedForward`，由多个专家组成的前馈层：每个词元送往其中 k 个专家，每个专家把送来的词元合成一批来处理，并且每个专家都有一个容量；
# 4. `patchify`，把图像切成正方形的图像块，排成一个序列；
# 5. `PatchEmbedding`，视觉 Transformer 的输入：图像块投影到 `d_model` 维，最前面放一个类别标记，再加上学出来的位置；
# 6. `frame_signal`，把波形切成相互重叠、加过窗的帧；
# 7. `log_mel`，这些帧的对数梅尔频谱：其中的梅尔滤波器组按公式亲手写出。
#
# 每个部件都有一个代码单元格供你写代码（替换掉 `raise NotImplementedError()`），紧接着是一个测试单元格。运行测试单元格：代码正确时，它会输出一行；否则它会告诉你哪里出了错、该去哪里找。评分时，你的代码还会在比这里看到的更多的情况下运行，所以要力求代码正确，而不只是能通过测试。
#
# 要在终端里检查整个笔记本，请在课程文件夹中运行：`.venv/bin/python -m autograder check zh/exercises/ch10_one_block/one_block.ipynb`。
#
# 答案中不要使用 `torch.nn.functional.unfold`、`torch.stft` 或 `torchaudio`：练习的目的正是亲手构建它们所做的事。下面导入的第 4 章的 `PositionwiseFeedForward` 就是每一个专家。

# %% tags=["export"]
import math

import torch
from torch import nn

from reference.encoder import PositionwiseFeedForward

# %% [markdown]
# ## 1. 把每个词元路由到 k 个专家
#
# 一个混合专家层包含 $E$ 个前馈网络（即专家）和一个路由器：路由器是一个线性映射，把一个词元的 $d_{\text{model}}$ 个特征变成 $E$ 个 logits，每个专家一个。每个词元去往 logits 最大的 $k$ 个专家（Mixtral 在 $E = 8$ 个中取 $k = 2$ 个），它们的输出相加，每个输出都乘以一个门控值。门控值是只对选中的 $k$ 个 logits 做的 softmax，因此无论其他 logits 是多少，门控值之和都为 1：
#
# $$\mathcal{T} = \operatorname{top}_k(z), \qquad
#   g_e = \frac{e^{z_e}}{\sum_{e' \in \mathcal{T}} e^{z_{e'}}} \quad (e \in \mathcal{T}).$$
#
# 编写 `top_k_router(logits, k)`：
#
# * `logits` 的形状为 `(..., E)`；返回 `(gates, experts)`，两者的形状都是 `(..., k)`：`experts`（`torch.long`）按 logit 从大到小列出选中的专家，`gates[..., j]` 是 `experts[..., j]` 的门控值，数据类型与 `logits` 相同；
# * 两个 logits 相等时，编号较小的专家排在前面。`torch.topk` 不保证相等值之间的顺序，稳定排序则可以保证；
# * `k` 不在 `1 .. E` 范围内时，抛出 `ValueError`。

# %% tags=["solution"] grade_id="top_k_router"
def top_k_router(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k experts with the largest logits, largest first, and their gates: a softmax over those k."""
    ### BEGIN SOLUTION
    E = logits.shape[-1]
    if not 1 <= k <= E:
        raise ValueError(f"k must be between 1 and the number of experts {E}, got {k}")
    # A stable sort keeps equal logits in index order, so ties go to the lower expert.
    order = torch.sort(logits, dim=-1, descending=True, stable=True).indices  # (..., E)
    experts = order[..., :k]  # (..., k)
    chosen = logits.gather(-1, experts)  # (..., k)
    return torch.softmax(chosen, dim=-1), experts
    ### END SOLUTION


# %% tags=["test"] grade_id="test_top_k_router" points=2
from autograder import check

check("one_block.top_k_router", top_k_router)
### BEGIN HIDDEN TESTS
check("one_block.top_k_router", top_k_router, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. 负载均衡损失
#
# 如果放任不管，路由器会学会偏爱那些碰巧在早期表现较好的专家：它们分到更多词元，变得更好，而其余专家则“挨饿”。Switch Transformer（Fedus et al., 2021）加入了一个小小的损失，词元分布得越均匀，它就越小。在一个含 $N$ 个词元的批次上，设 $f_e$ 为路由器的选择中落到专家 $e$ 的比例，$P_e$ 为路由器给 $e$ 的平均概率（对全部 $E$ 个 logits 做 softmax，再对词元取平均）：
#
# $$\mathcal{L}_{\text{balance}} = E \sum_{e=1}^{E} f_e\, P_e,
#   \qquad f_e = \frac{1}{N k} \sum_{t=1}^{N} \#\{j : \text{expert}_{t,j} = e\},
#   \qquad P_e = \frac{1}{N} \sum_{t=1}^{N} p_{t,e}.$$
#
# 每个词元有 $k$ 次选择，每一次都计数：$f$ 对所有专家求和为 1。路由均匀时，每个 $f_e = P_e = 1/E$，损失恰好为 1；当每个词元都送往同一个专家、且路由器对此十分确定时，损失为 $E$。$f$ 来自一次选择，而选择没有梯度；$P$ 负责把梯度传回路由器。
#
# 编写 `load_balancing_loss(router_probs, expert_index, n_experts)`：
#
# * `router_probs` 的形状为 `(..., E)`（每行之和为 1），`expert_index` 的形状为 `(..., k)`，是为同一批词元选中的专家（`torch.long`）；前面的各轴都对应词元，不论有几个轴；
# * 返回一个 0 维张量，数据类型与 `router_probs` 相同，梯度能通过它传到 `router_probs`。

# %% tags=["solution"] grade_id="load_balancing_loss"
def load_balancing_loss(router_probs: torch.Tensor, expert_index: torch.Tensor, n_experts: int) -> torch.Tensor:
    """E * sum_e f_e P_e: the fraction of choices each expert got times the router's mean probability for it."""
    ### BEGIN SOLUTION
    probs = router_probs.reshape(-1, n_experts)  # (N, E)
    chosen = expert_index.reshape(probs.shape[0], -1)  # (N, k)
    counts = torch.bincount(chosen.flatten(), minlength=n_experts)  # (E,) choices per expert
    f = counts.to(probs.dtype) / chosen.numel()  # (E,) sums to 1
    P = probs.mean(dim=0)  # (E,)
    return n_experts * (f * P).sum()
    ### END SOLUTION


# %% tags=["test"] grade_id="test_load_balancing_loss" points=2
check("one_block.load_balancing_loss", load_balancing_loss)
### BEGIN HIDDEN TESTS
check("one_block.load_balancing_loss", load_balancing_loss, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 这个刻度的两端：词元均匀分布，以及每个词元都送往路由器十分确定的那个专家。

# %%
E, N = 4, 8
even = torch.full((N, E), 1 / E)
print("uniform routing:  ", load_balancing_loss(even, torch.arange(N)[:, None] % E, E).item())
sure = torch.nn.functional.one_hot(torch.zeros(N, dtype=torch.long), E).float()
print("one expert for all:", load_balancing_loss(sure, torch.zeros(N, 1, dtype=torch.long), E).item())

# %% [markdown]
# ## 3. 由专家组成的前馈层
#
# 这一层在模块中取代第 4 章的前馈网络。对每个词元 $x_t$，路由器给出它的专家 $\mathcal{T}_t$ 和门控值 $g_{t,e}$，于是
#
# $$\operatorname{MoE}(x_t) = \sum_{e \in \mathcal{T}_t} g_{t,e}\, \operatorname{FFN}_e(x_t).$$
#
# 无论 $E$ 是多少，每个词元都只为 $k$ 个专家付出计算：一个有 8 个专家、$k = 2$ 的模型，持有的前馈权重是稠密模型的四倍，而每个词元的计算量是它的两倍。这只有在每个专家恰好只对送给它的那些词元做乘法、并且这些词元被收集成一批时才成立：让每个专家处理每个词元、再把未被选中的输出置零，每个词元就要付出 $E$ 个专家的代价；而对词元逐个循环，处理器一次只能拿到一行。
#
# 加速器需要固定的形状，所以每个专家每次调用最多接收
#
# $$C = \left\lceil \text{capacity\_factor} \cdot \frac{N k}{E} \right\rceil$$
#
# 个词元，其中 $N$ 是这次调用中的词元数。送往一个专家的词元按它们在批次中出现的顺序依次处理（按展平后的顺序：先按批次中的行，再按位置）；排在前 $C$ 个之后的词元会被这个专家丢弃：这些词元的和里不计入这个专家的那一项（其他门控值不变），模块的残差连接会把它们带过这一层。
#
# 编写模块 `MoEFeedForward(d_model, d_ff, n_experts, k, capacity_factor=None)`：
#
# * 子模块 `router`，是一个 `nn.Linear(d_model, n_experts, bias=False)`；以及 `experts`，是由 `n_experts` 个第 4 章的 `PositionwiseFeedForward(d_model, d_ff, dropout=0.0)` 组成的 `nn.ModuleList`；属性 `n_experts`、`k` 和 `capacity_factor`（为 `None` 时表示没有容量限制，不丢弃任何词元）；
# * `forward(x)` 接收形状为 `(B, T, d_model)` 的 `x`，返回 `(y, balance)`：`y` 的形状与 `x` 相同；`balance` 是这次调用的路由所对应的负载均衡损失（在全部 `B * T` 个词元上计算，各次选择在任何丢弃发生之前计数），供训练循环加到它的损失上；
# * 用你的 `top_k_router` 对路由器的 logits 做路由，并对全部 `E` 个 logits 的 softmax 求 `load_balancing_loss`。

# %% tags=["solution"] grade_id="MoEFeedForward"
class MoEFeedForward(nn.Module):
    """A mixture of n_experts feed-forward networks, each token sent to k of them by a learned router.

    Submodules ``router`` (d_model -> n_experts, no bias) and ``experts`` (an nn.ModuleList of
    chapter 4's PositionwiseFeedForward); attributes ``n_experts``, ``k``, ``capacity_factor``.
    """

    def __init__(self, d_model: int, d_ff: int, n_experts: int, k: int, capacity_factor: float | None = None) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        self.router = nn.Linear(d_model, n_experts, bias=False)
        self.experts = nn.ModuleList(PositionwiseFeedForward(d_model, d_ff, dropout=0.0) for _ in range(n_experts))
        self.n_experts, self.k, self.capacity_factor = n_experts, k, capacity_factor
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, T, d_model) -> ((B, T, d_model), the load-balancing loss of this call)."""
        ### BEGIN SOLUTION
        tokens = x.reshape(-1, x.shape[-1])  # (N, d_model)
        N = tokens.shape[0]
        logits = self.router(tokens)  # (N, E)
        gates, experts = top_k_router(logits, self.k)  # (N, k) each
        balance = load_balancing_loss(torch.softmax(logits, dim=-1), experts, self.n_experts)
        capacity = N * self.k if self.capacity_factor is None else math.ceil(self.capacity_factor * N * self.k / self.n_experts)
        y = torch.zeros_like(tokens)  # (N, d_model)
        for e, expert in enumerate(self.experts):
            token, slot = (experts == e).nonzero(as_tuple=True)  # in token order: nonzero reads row by row
            token, slot = token[:capacity], slot[:capacity]  # the first C tokens sent to e; the rest dropped
            if len(token):
                y.index_add_(0, token, gates[token, slot, None] * expert(tokens[token]))  # (n_e, d_model) added back
        return y.reshape(x.shape), balance
        ### END SOLUTION


# %% tags=["test"] grade_id="test_MoEFeedForward" points=4
check("one_block.MoEFeedForward", MoEFeedForward)
### BEGIN HIDDEN TESTS
check("one_block.MoEFeedForward", MoEFeedForward, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 在三种容量因子下，每个专家被送来多少个词元，又丢弃了多少个：

# %%
torch.manual_seed(0)
moe = MoEFeedForward(d_model=16, d_ff=32, n_experts=4, k=2)
x = torch.randn(2, 32, 16)  # (B, T, d_model): 64 tokens, 128 choices, 32 per expert if even
_, chosen = top_k_router(moe.router(x.reshape(-1, 16)), 2)  # (64, 2)
sent = torch.bincount(chosen.flatten(), minlength=4)  # (E,)
for factor in (None, 1.0, 1.25):
    moe.capacity_factor = factor
    y, balance = moe(x)
    C = 128 if factor is None else math.ceil(factor * 128 / 4)
    print(f"capacity factor {factor}: C = {C}, sent {sent.tolist()}, dropped {(sent - C).clamp(min=0).tolist()}, "
          f"balance loss {balance.item():.3f}")

# %% [markdown]
# ## 4. 把图像当作图像块的序列
#
# 视觉 Transformer（Dosovitskiy et al., 2021）读图像的方式，和编码器读句子的方式一样。一幅图像有 $C$ 个通道、$H \times W$ 个像素，被切成 $p \times p$ 像素的正方形图像块，共 $N = (H/p)(W/p)$ 块；每个图像块展平成 $C p^2$ 个数，成为一个词元。
#
# 编写 `patchify(images, patch)`：
#
# * `images` 的形状为 `(B, C, H, W)`；`H` 和 `W` 必须是 `patch` 的倍数（否则抛出 `ValueError`）；
# * 返回 `(B, N, C * patch * patch)`：图像块按阅读顺序排列（沿最上面一行图像块从左到右，然后是下一行），每块展平时先按通道，再按像素行，最后按像素列，这正是 `nn.Conv2d` 存放卷积核权重 `weight[d, c, i, j]` 的顺序。

# %% tags=["solution"] grade_id="patchify"
def patchify(images: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, (H/p) (W/p), C p p): the image's p x p patches in reading order, flattened."""
    ### BEGIN SOLUTION
    B, C, H, W = images.shape
    if patch < 1 or H % patch or W % patch:
        raise ValueError(f"an image of {H} x {W} pixels does not cut into patches of {patch} x {patch}")
    rows, cols = H // patch, W // patch
    grid = images.reshape(B, C, rows, patch, cols, patch)  # (B, C, rows, i, cols, j)
    grid = grid.permute(0, 2, 4, 1, 3, 5)  # (B, rows, cols, C, i, j)
    return grid.reshape(B, rows * cols, C * patch * patch)
    ### END SOLUTION


# %% tags=["test"] grade_id="test_patchify" points=2
check("one_block.patchify", patchify)
### BEGIN HIDDEN TESTS
check("one_block.patchify", patchify, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. 图像块嵌入
#
# 每个展平的图像块由一个线性映射 $W_E$ 投影到 $d_{\text{model}}$ 个特征，所有图像块共用这一个映射。图像块前面放一个学出来的类别标记 $x_{\text{class}}$，它在编码器顶层的输出就是分类器读取的内容，就像第 7 章中 BERT 的 `[CLS]`；每个词元（包括类别标记）都要加上一个学出来的位置向量（一幅图像的图像块并没有什么更适合用正弦函数来表示的顺序）：
#
# $$z_0 = [\,x_{\text{class}};\ x^1_p W_E;\ \dots;\ x^N_p W_E\,] + E_{\text{pos}},$$
#
# 其中 $W_E \in \mathbb{R}^{(C p^2) \times d_{\text{model}}}$，$E_{\text{pos}} \in \mathbb{R}^{(N + 1) \times d_{\text{model}}}$。
#
# 编写模块 `PatchEmbedding(in_channels, patch, d_model, n_patches)`：
#
# * `proj`，一个 `nn.Linear(in_channels * patch * patch, d_model)`（带偏置）；`cls_token`，一个形状为 `(1, 1, d_model)` 的 `nn.Parameter`；`positions`，一个形状为 `(1, n_patches + 1, d_model)` 的 `nn.Parameter`；这两个参数的初始值都是标准差为 0.02 的正态分布随机数；属性 `patch`；
# * `forward(images)` 接收形状为 `(B, in_channels, H, W)` 的 `images`，返回 `(B, n_patches + 1, d_model)`，类别标记在最前面。无法切成 `n_patches` 个图像块的图像抛出 `ValueError`。
#
# 图像块的投影就是一个卷积，它的卷积核就是一个图像块，步幅也是一个图像块：测试会把你的模块与持有相同权重的 `nn.Conv2d(in_channels, d_model, patch, stride=patch)` 对照检查。

# %% tags=["solution"] grade_id="PatchEmbedding"
class PatchEmbedding(nn.Module):
    """A class token, then each p x p patch projected to d_model, with a learned position added to each.

    Submodule ``proj``; parameters ``cls_token`` (1, 1, d_model) and ``positions`` (1, n_patches + 1, d_model).
    """

    def __init__(self, in_channels: int, patch: int, d_model: int, n_patches: int) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        self.patch = patch
        self.proj = nn.Linear(in_channels * patch * patch, d_model)
        self.cls_token = nn.Parameter(torch.randn(1, 1, d_model) * 0.02)
        self.positions = nn.Parameter(torch.randn(1, n_patches + 1, d_model) * 0.02)
        ### END SOLUTION

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, n_patches + 1, d_model)."""
        ### BEGIN SOLUTION
        patches = patchify(images, self.patch)  # (B, N, C p p)
        if patches.shape[1] + 1 != self.positions.shape[1]:
            raise ValueError(f"the images cut into {patches.shape[1]} patches, the embedding has positions for "
                             f"{self.positions.shape[1] - 1}")
        tokens = self.proj(patches)  # (B, N, d_model)
        cls = self.cls_token.expand(images.shape[0], -1, -1)  # (B, 1, d_model)
        return torch.cat([cls, tokens], dim=1) + self.positions  # (B, N + 1, d_model)
        ### END SOLUTION


# %% tags=["test"] grade_id="test_PatchEmbedding" points=3
check("one_block.PatchEmbedding", PatchEmbedding)
### BEGIN HIDDEN TESTS
check("one_block.PatchEmbedding", PatchEmbedding, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 这个投影是一个步幅等于卷积核大小的卷积：给 `nn.Conv2d` 相同的权重，然后比较两者。

# %%
torch.manual_seed(0)
embed = PatchEmbedding(in_channels=3, patch=4, d_model=8, n_patches=4)
images = torch.randn(2, 3, 8, 8)
conv = nn.Conv2d(3, 8, kernel_size=4, stride=4)
conv.weight.data = embed.proj.weight.data.reshape(8, 3, 4, 4)  # (d_model, C, p, p)
conv.bias.data = embed.proj.bias.data
by_conv = conv(images).flatten(2).transpose(1, 2)  # (B, d_model, 2, 2) -> (B, 4, d_model)
mine = embed(images)[:, 1:] - embed.positions[:, 1:]  # the patches' tokens, before their positions
print("patch embedding == strided convolution:", torch.allclose(mine, by_conv, atol=1e-6))

# %% [markdown]
# ## 6. 把声音当作帧的序列
#
# 一段录音就是一条波形：每秒 $S$ 个气压采样值。语音在几十毫秒的尺度上变化，所以语音模型按帧来读它：每帧是一个 `frame_length` 个采样点的窗口（比如 25 ms），每隔 `hop` 个采样点取一帧（10 ms），帧与帧相互重叠。第 $t$ 帧包含采样点 $t \cdot \text{hop}, \dots, t \cdot \text{hop} + \text{frame\_length} - 1$，并乘上一个汉宁窗，它把帧的两端平滑地压到零，使得把这一帧切出来时不会凭空添加它自己的频率：
#
# $$w[n] = \tfrac12 - \tfrac12 \cos\frac{2 \pi n}{L}, \qquad n = 0, \dots, L - 1,
#   \qquad \text{frames}[t, n] = w[n]\; x[t \cdot \text{hop} + n].$$
#
# （$L$ 即 `frame_length`；这是“周期”（periodic）窗，即 `torch.hann_window(L)`，你可以使用它。）
#
# 编写 `frame_signal(wave, frame_length, hop)`：
#
# * `wave` 的形状为 `(..., S)`；返回 `(..., n_frames, frame_length)`，其中 `n_frames = 1 + (S - frame_length) // hop`：即每一个能完整放下的帧，没有一帧经过填充；
# * 波形比一帧还短，或者 `frame_length` 或 `hop` 小于 1 时，抛出 `ValueError`。

# %% tags=["solution"] grade_id="frame_signal"
def frame_signal(wave: torch.Tensor, frame_length: int, hop: int) -> torch.Tensor:
    """(..., S) -> (..., n_frames, frame_length): every whole frame, one per hop, times a Hann window."""
    ### BEGIN SOLUTION
    S = wave.shape[-1]
    if hop < 1:
        raise ValueError(f"hop must be at least 1 sample, got {hop}")
    if frame_length < 1 or S < frame_length:
        raise ValueError(f"frame_length must be between 1 and the wave's {S} samples, got {frame_length}")
    frames = wave.unfold(-1, frame_length, hop)  # (..., n_frames, frame_length), a view
    window = torch.hann_window(frame_length, dtype=wave.dtype, device=wave.device)  # (frame_length,)
    return frames * window
    ### END SOLUTION


# %% tags=["test"] grade_id="test_frame_signal" points=2
check("one_block.frame_signal", frame_signal)
### BEGIN HIDDEN TESTS
check("one_block.frame_signal", frame_signal, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 7. 对数梅尔频谱
#
# 每一帧的功率谱，即它的实数傅里叶变换（`torch.fft.rfft`；$s$ 是采样率）在 $L/2 + 1$ 个频率 $f \cdot s / L$ 上的 $|X[f]|^2$，说明这一帧含有各个频率的多少。人耳对低频分辨得细，对高频分辨得粗，梅尔刻度正是依照这一点设计的：
#
# $$\operatorname{mel}(f) = 2595 \log_{10}\!\left(1 + \frac{f}{700}\right).$$
#
# 在梅尔刻度上从 $\operatorname{mel}(0)$ 到 $\operatorname{mel}(s/2)$ 均匀地取 $M + 2$ 个点，再把它们换算回频率 $f_0 < f_1 < \dots < f_{M+1}$（单位为赫兹）。第 $m = 1, \dots, M$ 个滤波器是一个三角形：在 $f_{m-1}$ 处为 0，升到 $f_m$ 处的 1，再降回 $f_{m+1}$ 处的 0，随赫兹线性变化：
#
# $$H_m(f) = \max\!\left(0,\ \min\!\left(\frac{f - f_{m-1}}{f_m - f_{m-1}},\ \frac{f_{m+1} - f}{f_{m+1} - f_m}\right)\right).$$
#
# 对数梅尔频谱就是对每一帧、每个滤波器计算 $\log\!\big(\sum_f H_m(f)\, |X[f]|^2 + 10^{-6}\big)$：每帧 $M$ 个数（语音模型中为 40 或 80 个），取代原来的 $L/2 + 1$ 个，并且处在人耳感受响度时所用的对数尺度上。$10^{-6}$ 让静音时的结果保持有限。
#
# 编写 `log_mel(frames, sample_rate, n_mels)`：
#
# * `frames` 的形状为 `(..., n_frames, L)`，已经加过窗（即 `frame_signal` 的结果）；
# * 返回 `(..., n_frames, n_mels)`，数据类型与 `frames` 相同：每一帧的功率谱，乘以上面那组在频率 $f \cdot s / L$（$f = 0, \dots, L/2$）上取值的滤波器组，再取对数；
# * 按公式自己写出滤波器组（不用 `torchaudio`）；`n_mels` 小于 1 时抛出 `ValueError`。

# %% tags=["solution"] grade_id="log_mel"
def log_mel(frames: torch.Tensor, sample_rate: int, n_mels: int) -> torch.Tensor:
    """(..., n_frames, L) windowed frames -> (..., n_frames, n_mels): log of the mel filters' power."""
    ### BEGIN SOLUTION
    if n_mels < 1:
        raise ValueError(f"n_mels must be at least 1, got {n_mels}")
    L = frames.shape[-1]
    power = torch.fft.rfft(frames, dim=-1).abs() ** 2  # (..., n_frames, L // 2 + 1)
    # The filter bank in float64, from the formula; then in the dtype of the frames.
    freqs = torch.arange(L // 2 + 1, dtype=torch.float64) * sample_rate / L  # (F,) each bin's frequency
    top = 2595 * math.log10(1 + sample_rate / 2 / 700)
    mels = torch.linspace(0.0, top, n_mels + 2, dtype=torch.float64)  # (M + 2,) even on the mel scale
    edges = 700 * (10 ** (mels / 2595) - 1)  # (M + 2,) back in hertz
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]  # (M, 1) each
    rising = (freqs - lower) / (centre - lower)  # (M, F)
    falling = (upper - freqs) / (upper - centre)  # (M, F)
    bank = torch.clamp(torch.minimum(rising, falling), min=0).to(frames.dtype)  # (M, F)
    return torch.log(power @ bank.T + 1e-6)  # (..., n_frames, M)
    ### END SOLUTION


# %% tags=["test"] grade_id="test_log_mel" points=3
check("one_block.log_mel", log_mel)
### BEGIN HIDDEN TESTS
check("one_block.log_mel", log_mel, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 一声上升的口哨，8 kHz 采样、长一秒，按模型将看到的样子呈现：98 帧，每帧 40 个梅尔滤波器的输出。最亮的滤波器随音高一起攀升。

# %%
sample_rate = 8000
t = torch.arange(sample_rate) / sample_rate
whistle = torch.sin(2 * math.pi * (300 + 1500 * t) * t)  # from 300 Hz up to 3,300 Hz
features = log_mel(frame_signal(whistle, 200, 80), sample_rate, 40)  # (n_frames, n_mels)
print("frames x filters:", tuple(features.shape))
print("brightest filter every 20 frames:", features.argmax(dim=-1)[::20].tolist())
