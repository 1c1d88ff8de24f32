# %% [markdown]
# # 第 9 章练习：注意力遇上硬件
#
# 长上下文模型计算的仍然是第 2 章的注意力。变了的是计算的方式：按一种顾及机器内存的顺序来算。你将写出近来每个模型都在用的五个部件：
#
# 1. `tiled_attention`：一次处理一块键、边算边更新 softmax 的注意力（FlashAttention 的前向传播），它从不持有完整的 `T x T` 分数矩阵；
# 2. `apply_rope`：旋转位置编码，它让分数取决于两个词元相距多远，而不是它们位于何处；
# 3. `grouped_query_attention`：几个查询头共享同一个键和值的头；
# 4. `KVCache`：用于生成的缓存，只分配一次、原地写入，其大小由键/值头的数量而不是查询头的数量决定；
# 5. `sliding_window_mask`：长上下文模型的局部注意力，每个词元只读取它之前最近的几个词元。
#
# 每个部件都有一个代码单元格供你填写（把 `raise NotImplementedError()` 换成你的代码），紧接着是一个测试单元格。运行测试单元格：代码正确时，它会打印一行；否则它会告诉你哪里错了、该去哪里找。评分时，你的作业还会在比这里所见更多的情形下运行，所以要写出真正正确的代码，而不是只求通过测试的代码。
#
# 要在终端中检查整个笔记本，请在课程文件夹中运行：`.venv/bin/python -m autograder check zh/exercises/ch09_hardware/hardware.ipynb`。
#
# 你的答案中不要使用 `torch.nn.functional.scaled_dot_product_attention`、`torch.nn.MultiheadAttention` 或它们的同类：练习的意义就在于亲手搭出它们所做的事。下面导入的第 2 章的 `scaled_dot_product_attention`，在某一部分说明可以使用的地方，你就可以用它。

# %% tags=["export"]
import math

import torch
from torch import nn

from reference.attention import scaled_dot_product_attention

# %% [markdown]
# ## 1. 分块注意力
#
# 第 2 章的注意力会算出每个查询对每个键的分数 $S = QK^\top/\sqrt{d_k}$：每个头 $T_q \times T_k$ 个数。在 $T = 32{,}768$ 个词元时，这就是十亿个数，以 float32 存储要 4 GiB，而这只是一层中的一个头。输出一旦算出，这些数就一个也用不着了：每个查询的那一行权重只用一次，用来对值做一次加权求和。所以可以一次处理一块键来计算这个和，并且对每个查询行 $i$ 只保留三个边算边更新的量：
#
# * $m_i$：目前为止见到的最大分数；
# * $\ell_i$：对目前为止见过的键求的 $e^{s_{ij} - m_i}$ 之和；
# * $a_i$：对目前为止见过的键求的 $e^{s_{ij} - m_i}\, v_j$ 之和（一个含 $d_v$ 个数的向量）。
#
# 新来的一块键 $B$ 带来它的分数 $s_{ij}$，$j \in B$。最大值可能增大到 $m_i' = \max(m_i, \max_{j \in B} s_{ij})$，而此前累加的一切都是相对于旧的最大值算的，所以在加上这一块自己的项之前，要先把它们乘以 $e^{m_i - m_i'}$ 重新缩放：
#
# $$\ell_i' = e^{m_i - m_i'}\,\ell_i + \sum_{j \in B} e^{s_{ij} - m_i'}, \qquad
#   a_i' = e^{m_i - m_i'}\,a_i + \sum_{j \in B} e^{s_{ij} - m_i'}\, v_j .$$
#
# 处理完最后一块后，$a_i / \ell_i$ 恰好就是 $\operatorname{softmax}(S)\,V$ 的第 $i$ 行，而 $m_i + \log \ell_i$ 是分数第 $i$ 行的对数求和指数（log-sum-exp），即 $\log \sum_j e^{s_{ij}}$。把它也返回：反向传播要重新算出任何一个权重 $e^{s_{ij} - \mathrm{lse}_i}$，只需要它，而永远不必存储那个矩阵。
#
# 写出 `tiled_attention(q, k, v, block_size, causal=False)`：
#
# * `q` 的形状为 `(..., T_q, d_k)`，`k` 为 `(..., T_k, d_k)`，`v` 为 `(..., T_k, d_v)`，批维度的个数不限；键按每块 `block_size` 个分块（最后一块可以更短）；
# * 使用 `causal=True` 时（要求 `T_q == T_k`，否则抛出 `ValueError`），查询 `i` 只能读取位置 `j <= i` 的键。位置是在整个序列中计数的，而不是在一块之内计数；
# * 返回 `(output, lse)`：`output` 的形状为 `(..., T_q, d_v)`，`lse` 的形状为 `(..., T_q)`，dtype 都与 `q` 相同。`block_size` 小于 1 时抛出 `ValueError`。
#
# 有一个可见测试给出的序列有 24,576 个键：光是它的分数就要占 2.25 GiB，超过了一个评分进程可以分配的上限（2 GiB）。还有一个隐藏测试在另一种长度、宽度和块大小下做同样的事。只有一次只保留一块分数的答案才能通过它们。

# %% tags=["solution"] grade_id="tiled_attention"
def tiled_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int, causal: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T / sqrt(d_k)) v, one block of keys at a time, with the log-sum-exp of each row."""
    ### BEGIN SOLUTION
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    T_q, T_k = q.shape[-2], k.shape[-2]
    if causal and T_q != T_k:
        raise ValueError(f"causal attention needs as many queries as keys, got {T_q} and {T_k}")
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = q.new_full((*q.shape[:-1], 1), float("-inf"))  # (..., T_q, 1) the largest score so far
    total = q.new_zeros((*q.shape[:-1], 1))  # (..., T_q, 1) sum of exp(s - m)
    acc = q.new_zeros((*q.shape[:-1], v.shape[-1]))  # (..., T_q, d_v) sum of exp(s - m) v
    rows = torch.arange(T_q, device=q.device)[:, None]  # (T_q, 1) each query's position
    for start in range(0, T_k, block_size):
        k_block = k[..., start:start + block_size, :]  # (..., b, d_k)
        v_block = v[..., start:start + block_size, :]  # (..., b, d_v)
        s = q @ k_block.transpose(-2, -1) * scale  # (..., T_q, b)
        if causal:
            cols = torch.arange(start, start + k_block.shape[-2], device=q.device)  # (b,) the keys' positions
            s = s.masked_fill(cols > rows, float("-inf"))
        # Every row meets key 0 in the first block, so m is finite from then on and exp(m - m_new) is defined.
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., T_q, 1)
        p = torch.exp(s - m_new)  # (..., T_q, b)
        rescale = torch.exp(m - m_new)  # (..., T_q, 1): 0 at the first block, where m is -inf
        total = total * rescale + p.sum(dim=-1, keepdim=True)
        acc = acc * rescale + p @ v_block  # (..., T_q, d_v)
        m = m_new
    return acc / total, (m + torch.log(total)).squeeze(-1)  # (..., T_q, d_v), (..., T_q)
    ### END SOLUTION


# %% tags=["test"] grade_id="test_tiled_attention" points=5
from autograder import check

check("hardware.tiled_attention", tiled_attention)
### BEGIN HIDDEN TESTS
check("hardware.tiled_attention", tiled_attention, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 输出与块的大小无关，只有内存与它有关。第 2 章的注意力与你的注意力在舍入误差内一致，对数求和指数与对分数做 `torch.logsumexp` 的结果也是如此：

# %%
torch.manual_seed(0)
q, k, v = torch.randn(3, 200, 16), torch.randn(3, 200, 16), torch.randn(3, 200, 16)
causal = torch.tril(torch.ones(200, 200, dtype=torch.bool))
plain, _ = scaled_dot_product_attention(q, k, v, causal)
for block in (1, 7, 64, 200):
    out, lse = tiled_attention(q, k, v, block, causal=True)
    print(f"block {block:3d}: largest difference from chapter 2's attention {(out - plain).abs().max():.1e}")
scores = (q @ k.transpose(-2, -1) / 4).masked_fill(~causal, float("-inf"))
print(f"log-sum-exp against torch.logsumexp: {(lse - torch.logsumexp(scores, dim=-1)).abs().max():.1e}")

# %% [markdown]
# ## 2. 旋转位置编码
#
# 第 6 章在模型的底部把位置的正弦信号加到词元的嵌入上，只加一次。旋转位置编码（RoPE，Su 等，2021）则在每个注意力层内部，把每个查询和键转过一个与其位置成正比的角度。特征按相邻的两个配成一对 $(x_{2i}, x_{2i+1})$，$i = 0, \dots, d/2 - 1$；位于位置 $m$ 的第 $i$ 对旋转角度 $m\,\theta_i$，其中 $\theta_i = \text{base}^{-2i/d}$（与第 6 章的频率相同）：
#
# $$\begin{pmatrix} x'_{2i} \\ x'_{2i+1} \end{pmatrix} =
#   \begin{pmatrix} \cos m\theta_i & -\sin m\theta_i \\ \sin m\theta_i & \cos m\theta_i \end{pmatrix}
#   \begin{pmatrix} x_{2i} \\ x_{2i+1} \end{pmatrix}.$$
#
# 把一个查询转过 $m\theta$、一个键转过 $n\theta$，它们的点积只会通过两个角度之差 $(m - n)\theta$ 发生变化：分数取决于两个词元相距多远，而不是它们位于何处。测试既检查你的结果的数值，也检查它的这一性质。
#
# 写出 `apply_rope(x, positions, base=10000.0)`：
#
# * `x` 的形状为 `(..., T, d)`，`d` 为偶数（`d` 为奇数时抛出 `ValueError`）；`positions` 是形状为 `(T,)` 的整数张量，给出 `T` 行中每一行的位置（并不总是 `0 .. T-1`：缓存会在靠后的位置添加词元）；
# * 返回旋转后的张量，形状和 dtype 都与 `x` 相同。按公式所写的那样，让相邻的特征配对，即 `(0, 1), (2, 3), ...`：有些库改为把特征 `i` 与特征 `i + d/2` 配对，那是另一种（同样好的）模型，两者的权重不能互相通用；
# * 用 float64 计算角度 $m\,\theta_i$，再把它们的余弦和正弦转成 `x` 的 dtype：在位置 800 处，float32 只能把角度精确到大约 $10^{-4}$，比 float64 输入的精度粗糙得多。

# %% tags=["solution"] grade_id="apply_rope"
def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotate each neighbouring pair of features of x (..., T, d) by position * base^(-2i/d)."""
    ### BEGIN SOLUTION
    d = x.shape[-1]
    if d % 2:
        raise ValueError(f"rotary embedding pairs the features, so d must be even, got {d}")
    # The angles in float64: position x frequency loses digits in float32 at long positions.
    i = torch.arange(d // 2, dtype=torch.float64, device=x.device)  # (d/2,)
    theta = base ** (-2 * i / d)  # (d/2,)
    angles = positions.to(torch.float64)[:, None] * theta  # (T, d/2)
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)  # (T, d/2)
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, d/2) each
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)  # (..., T, d/2, 2)
    return rotated.flatten(-2)  # (..., T, d): pairs back in their places
    ### END SOLUTION


# %% tags=["test"] grade_id="test_apply_rope" points=3
check("hardware.apply_rope", apply_rope)
### BEGIN HIDDEN TESTS
check("hardware.apply_rope", apply_rope, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 同一个查询和同一个键，放在许多不同的位置上：分数只取决于距离。

# %%
torch.manual_seed(1)
query, key = torch.randn(64), torch.randn(64)
positions = torch.arange(40)
q_rot = apply_rope(query.expand(40, 64), positions)  # (40, 64): the query at positions 0..39
k_rot = apply_rope(key.expand(40, 64), positions)
scores = q_rot @ k_rot.T  # (40, 40): query at m against key at n
for distance in (0, 3, 17):
    along = torch.diagonal(scores, offset=-distance)
    print(f"m - n = {distance:2d}: {len(along)} scores between {along.min():.4f} and {along.max():.4f}")

# %% [markdown]
# ## 3. 分组查询注意力
#
# 模型写文本的时候，每一层都保存着目前为止每个词元的键和值（第 7 章的缓存）。有 $h$ 个头、每个头 $d_k$ 维特征时，每个词元在每一层就要 $2 \cdot h \cdot d_k$ 个数；在长上下文下，塞满加速器内存的是缓存，而不是权重。分组查询注意力（Ainslie 等，2023）保留 $h$ 个查询头，但键和值只有 $h_{kv}$ 个头，且 $h_{kv}$ 整除 $h$：查询头 $0 \dots g-1$（其中 $g = h / h_{kv}$）都读取键/值头 0，接下来的 $g$ 个读取头 1，依此类推。$h_{kv} = h$ 就是第 3 章的多头注意力；$h_{kv} = 1$ 就是多查询注意力。缓存缩小为原来的 $1/g$。
#
# 写出 `grouped_query_attention(q, k, v, mask=None)`：
#
# * `q` 的形状为 `(B, h, T_q, d_k)`，`k` 为 `(B, h_kv, T_k, d_k)`，`v` 为 `(B, h_kv, T_k, d_v)`；当 `h` 不是 `h_kv` 的倍数时，抛出 `ValueError`；
# * `mask` 与第 2 章的相同：布尔型，查询可以读取某个键的地方为 `True`，可以广播到 `(B, h, T_q, T_k)`；
# * 返回 `(output, weights)`，形状分别为 `(B, h, T_q, d_v)` 和 `(B, h, T_q, T_k)`。
#
# 一旦各个头对齐了，第 2 章的 `scaled_dot_product_attention` 就能完成注意力的计算。不复制键就把它们对齐，是更好的答案：一个查询头所在的组，只需一次 reshape 就能得到。

# %% tags=["solution"] grade_id="grouped_query_attention"
def grouped_query_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of h query heads over h_kv shared key/value heads, consecutive query heads sharing one."""
    ### BEGIN SOLUTION
    B, h, T_q, d_k = q.shape
    h_kv, T_k = k.shape[1], k.shape[2]
    if h % h_kv:
        raise ValueError(f"{h} query heads cannot share {h_kv} key/value heads evenly")
    g = h // h_kv
    grouped = q.view(B, h_kv, g, T_q, d_k)  # (B, h_kv, g, T_q, d_k): query head j is in group j // g
    if mask is not None:
        mask = torch.broadcast_to(mask, (B, h, T_q, T_k)).reshape(B, h_kv, g, T_q, T_k)
    # k and v gain a group axis of size 1, which broadcasting shares across the group without a copy
    out, weights = scaled_dot_product_attention(grouped, k.unsqueeze(2), v.unsqueeze(2), mask)
    return out.flatten(1, 2), weights.flatten(1, 2)  # (B, h, T_q, d_v), (B, h, T_q, T_k)
    ### END SOLUTION


# %% tags=["test"] grade_id="test_grouped_query_attention" points=3
check("hardware.grouped_query_attention", grouped_query_attention)
### BEGIN HIDDEN TESTS
check("hardware.grouped_query_attention", grouped_query_attention, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. 原地写入的缓存
#
# 第 7 章的缓存靠 `torch.cat` 增长，每一步都要把目前为止的每个键复制一遍：写 $T$ 个词元，大约要复制 $T^2/2$ 个键。推理服务系统会按它们要写的最长序列一次性分配好缓存，再原地填充。这样，缓存的大小在第一个词元之前就已经知道了：
#
# $$\text{bytes} = 2 \times B \times h_{kv} \times T_{\max} \times d_k \times \text{bytes per number}$$
#
# 这是每一层（键和值）的大小，分组的头会把它除以 $g = h / h_{kv}$。
#
# 写出模块 `KVCache(batch, n_kv_heads, max_len, d_head)`：
#
# * 它注册三个缓冲区（用 `register_buffer`，这样 `.to(...)` 会连同模型一起移动和转换它们）：形状为 `(batch, n_kv_heads, max_len, d_head)` 的 `keys` 和 `values`，初始为 float32 的零（`.half()` 会得到一个 float16 缓存）；以及 `length`，一个 0 维的 `torch.long` 张量，初始为 0，表示已经填充了多少个位置；
# * `forward(k, v)` 接收新的键和值，形状都是 `(batch, n_kv_heads, T_new, d_head)`，把它们写到位置 `length .. length + T_new - 1`，推进 `length`，并返回目前为止所有已填充位置的键和值，形状都是 `(batch, n_kv_heads, length, d_head)`；
# * 放不下的新键（超出 `max_len`）要抛出 `ValueError`。

# %% tags=["solution"] grade_id="KVCache"
class KVCache(nn.Module):
    """Keys and values of the positions written so far, in buffers allocated once for max_len positions."""

    def __init__(self, batch: int, n_kv_heads: int, max_len: int, d_head: int):
        super().__init__()
        ### BEGIN SOLUTION
        shape = (batch, n_kv_heads, max_len, d_head)
        self.register_buffer("keys", torch.zeros(shape))
        self.register_buffer("values", torch.zeros(shape))
        self.register_buffer("length", torch.zeros((), dtype=torch.long))
        ### END SOLUTION

    def forward(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ### BEGIN SOLUTION
        start = int(self.length)
        end = start + k.shape[2]
        if end > self.keys.shape[2]:
            raise ValueError(f"the cache holds {self.keys.shape[2]} positions; {start} are filled, {k.shape[2]} more do not fit")
        self.keys[:, :, start:end] = k  # written in place: nothing already cached is copied
        self.values[:, :, start:end] = v
        self.length.fill_(end)
        return self.keys[:, :, :end], self.values[:, :, :end]  # (B, h_kv, length, d_head) each
        ### END SOLUTION


# %% tags=["test"] grade_id="test_KVCache" points=3
check("hardware.KVCache", KVCache)
### BEGIN HIDDEN TESTS
check("hardware.KVCache", KVCache, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 一个第 7 章规模的模型（6 层，8 个头，每个头 64 维特征），以 float16 写 4,096 个词元：

# %%
for h_kv in (8, 2, 1):
    layers = [KVCache(1, h_kv, 4096, 64).half() for _ in range(6)]
    size = sum(c.keys.nbytes + c.values.nbytes for c in layers)
    print(f"{h_kv} key/value heads: {size / 2**20:5.1f} MiB, {size // 4096:,} bytes per token")

# %% [markdown]
# ## 5. 局部注意力
#
# 好几个长上下文模型让大部分层只读取由最近词元组成的一个窗口：窗口为 $w$ 个键时，一层的计算量按 $T \cdot w$ 增长，而不是 $T^2$；而堆叠 $N$ 个这样的层，仍能让信息往回传播 $N(w - 1)$ 个位置。
#
# 写出 `sliding_window_mask(T, window)`：按第 2 章的约定（查询 `i` 可以读取键 `j` 的地方为 `True`），返回形状为 `(T, T)` 的布尔掩码，它表示限制在一个窗口内的因果注意力：查询 `i` 读取 `window` 个键 `i - window + 1, ..., i`（包括它自己；在序列开头附近会少一些）。`window` 必须至少为 1（否则抛出 `ValueError`）；窗口等于或大于 `T` 时，就是普通的因果注意力。

# %% tags=["solution"] grade_id="sliding_window_mask"
def sliding_window_mask(T: int, window: int) -> torch.Tensor:
    """(T, T) bool: query i may read key j when i - window < j <= i."""
    ### BEGIN SOLUTION
    if window < 1:
        raise ValueError(f"a window holds at least one key, got {window}")
    i = torch.arange(T)[:, None]  # (T, 1) queries
    j = torch.arange(T)[None, :]  # (1, T) keys
    return (j <= i) & (j > i - window)  # (T, T)
    ### END SOLUTION


# %% tags=["test"] grade_id="test_sliding_window_mask" points=2
check("hardware.sliding_window_mask", sliding_window_mask)
### BEGIN HIDDEN TESTS
check("hardware.sliding_window_mask", sliding_window_mask, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# 每一行最多读取 `window` 个键，而且都在它的过去：

# %%
print(sliding_window_mask(8, 3).int())
