# %% [markdown]
# # Chapter 9 exercises: attention against the hardware
#
# Long-context models still compute the attention of chapter 2. What changed is how: in an order
# that respects the machine's memory. You will write five pieces that every recent model uses:
#
# 1. `tiled_attention`, attention computed one block of keys at a time with a running softmax (the
#    forward pass of FlashAttention), which never holds the whole `T x T` score matrix;
# 2. `apply_rope`, rotary position embedding, which makes a score depend on how far apart two tokens
#    are rather than on where they are;
# 3. `grouped_query_attention`, where several query heads share one head of keys and values;
# 4. `KVCache`, a cache for generation that is allocated once and written in place, sized by the
#    key/value heads rather than the query heads;
# 5. `sliding_window_mask`, the local attention of long-context models: each token reads only the
#    last few before it.
#
# Each piece has a cell for your code (replace `raise NotImplementedError()`) and a test cell right
# after it. Run the test cell: it prints one line when your code is right, and otherwise tells you
# what is wrong and where to look. Graded work is also run against more cases than the ones you see
# here, so aim for code that is right, not code that passes.
#
# To check the whole notebook from a terminal, in the course's folder:
# `.venv/bin/python -m autograder check exercises/ch09_hardware/hardware.ipynb`.
#
# Do not use `torch.nn.functional.scaled_dot_product_attention`, `torch.nn.MultiheadAttention` or
# their relatives in your answers: the point is to build what they do. Chapter 2's
# `scaled_dot_product_attention`, imported below, is yours to use where a part says so.

# %% tags=["export"]
import math

import torch
from torch import nn

from reference.attention import scaled_dot_product_attention

# %% [markdown]
# ## 1. Tiled attention
#
# Chapter 2's attention builds the scores $S = QK^\top/\sqrt{d_k}$ of every query against every key:
# $T_q \times T_k$ numbers, per head. At $T = 32{,}768$ tokens that is a billion numbers, 4 GiB in
# float32, for one head of one layer. The output needs none of them once it is made: each query's
# row of weights is used once, for one weighted sum of the values. So compute that sum one block of
# keys at a time, and keep, per query row $i$, only three running quantities:
#
# * $m_i$, the largest score seen so far;
# * $\ell_i$, the sum of $e^{s_{ij} - m_i}$ over the keys seen so far;
# * $a_i$, the sum of $e^{s_{ij} - m_i}\, v_j$ over the keys seen so far (a vector of $d_v$ numbers).
#
# A new block $B$ of keys brings its scores $s_{ij}$, $j \in B$. The maximum may grow, to
# $m_i' = \max(m_i, \max_{j \in B} s_{ij})$, and everything summed so far was measured against the old
# maximum, so it is rescaled by $e^{m_i - m_i'}$ before the block's own terms are added:
#
# $$\ell_i' = e^{m_i - m_i'}\,\ell_i + \sum_{j \in B} e^{s_{ij} - m_i'}, \qquad
#   a_i' = e^{m_i - m_i'}\,a_i + \sum_{j \in B} e^{s_{ij} - m_i'}\, v_j .$$
#
# After the last block, $a_i / \ell_i$ is exactly row $i$ of $\operatorname{softmax}(S)\,V$, and
# $m_i + \log \ell_i$ is the log-sum-exp of row $i$ of the scores, $\log \sum_j e^{s_{ij}}$. Return
# it too: it is all the backward pass needs to recompute any weight, $e^{s_{ij} - \mathrm{lse}_i}$,
# without ever storing the matrix.
#
# Write `tiled_attention(q, k, v, block_size, causal=False)`:
#
# * `q` has shape `(..., T_q, d_k)`, `k` `(..., T_k, d_k)`, `v` `(..., T_k, d_v)`, with any number of
#   batch dimensions; the keys come in blocks of `block_size` (the last block may be shorter);
# * with `causal=True` (where `T_q == T_k`; otherwise raise `ValueError`), query `i` may read the keys
#   at positions `j <= i` only. Positions are counted in the whole sequence, not within a block;
# * return `(output, lse)`: `output` of shape `(..., T_q, d_v)` and `lse` of shape `(..., T_q)`, in
#   the dtype of `q`. A `block_size` below 1 raises `ValueError`.
#
# One of the visible tests gives a sequence of 24,576 keys: its scores alone would take 2.25 GiB, more
# than a graded process may allocate (2 GiB). A hidden test does the same at another length, width and
# block size. Only an answer that keeps one block of scores at a time passes them.

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
# The output does not depend on the block size, only the memory does. Chapter 2's attention and yours
# agree to rounding, and so do the log-sum-exp and `torch.logsumexp` of the scores:

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
# ## 2. Rotary position embedding
#
# Chapter 6 added a position's sinusoid to its token's embedding, once, at the bottom of the model.
# Rotary position embedding (RoPE, Su et al., 2021) instead turns each query and key by an angle
# proportional to its position, inside every attention layer. The features are taken in neighbouring
# pairs $(x_{2i}, x_{2i+1})$, $i = 0, \dots, d/2 - 1$, and pair $i$ at position $m$ is rotated by the
# angle $m\,\theta_i$, with $\theta_i = \text{base}^{-2i/d}$ (the same frequencies as chapter 6):
#
# $$\begin{pmatrix} x'_{2i} \\ x'_{2i+1} \end{pmatrix} =
#   \begin{pmatrix} \cos m\theta_i & -\sin m\theta_i \\ \sin m\theta_i & \cos m\theta_i \end{pmatrix}
#   \begin{pmatrix} x_{2i} \\ x_{2i+1} \end{pmatrix}.$$
#
# Rotating a query by $m\theta$ and a key by $n\theta$ changes their dot product only through the
# difference of the angles, $(m - n)\theta$: the score depends on how far apart the two tokens are,
# not on where they sit. The test checks that property of your result as well as its values.
#
# Write `apply_rope(x, positions, base=10000.0)`:
#
# * `x` has shape `(..., T, d)` with `d` even (an odd `d` raises `ValueError`); `positions` is an
#   integer tensor of shape `(T,)`, the position of each of the `T` rows (not always `0 .. T-1`: a
#   cache adds tokens at later positions);
# * return the rotated tensor, of the shape and dtype of `x`. Pair neighbours, `(0, 1), (2, 3), ...`,
#   as the formula says: some libraries pair feature `i` with feature `i + d/2` instead, which is a
#   different (equally good) model whose weights do not carry over;
# * compute the angles $m\,\theta_i$ in float64 and give their cosines and sines the dtype of `x`:
#   at position 800, float32 keeps the angle to about $10^{-4}$, far coarser than float64 inputs.

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
# The same query and key, placed at many positions: the score depends on the distance alone.

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
# ## 3. Grouped-query attention
#
# While a model writes, every layer keeps the keys and values of every token so far (chapter 7's
# cache). With $h$ heads of $d_k$ features, that is $2 \cdot h \cdot d_k$ numbers per token per layer,
# and at long contexts the cache, not the weights, fills the accelerator's memory. Grouped-query
# attention (Ainslie et al., 2023) keeps $h$ query heads but only $h_{kv}$ heads of keys and values,
# $h_{kv}$ dividing $h$: query heads $0 \dots g-1$ (with $g = h / h_{kv}$) all read key/value head 0,
# the next $g$ read head 1, and so on. $h_{kv} = h$ is chapter 3's multi-head attention; $h_{kv} = 1$
# is multi-query attention. The cache shrinks by the factor $g$.
#
# Write `grouped_query_attention(q, k, v, mask=None)`:
#
# * `q` has shape `(B, h, T_q, d_k)`, `k` `(B, h_kv, T_k, d_k)` and `v` `(B, h_kv, T_k, d_v)`; when `h`
#   is not a multiple of `h_kv`, raise `ValueError`;
# * `mask` is as in chapter 2: boolean, `True` where a query may read a key, broadcasting to
#   `(B, h, T_q, T_k)`;
# * return `(output, weights)` of shapes `(B, h, T_q, d_v)` and `(B, h, T_q, T_k)`.
#
# Chapter 2's `scaled_dot_product_attention` does the attention once the heads line up. Lining them up
# without copying the keys is the better answer: a query head's group is a reshape away.

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
# ## 4. A cache written in place
#
# Chapter 7's cache grew by `torch.cat`, which copies every key so far at every step: writing $T$
# tokens copies about $T^2/2$ keys. Serving systems allocate the cache once, for the longest sequence
# they will write, and fill it in place. Its size is then known before the first token:
#
# $$\text{bytes} = 2 \times B \times h_{kv} \times T_{\max} \times d_k \times \text{bytes per number}$$
#
# per layer (keys and values), which grouped heads divide by $g = h / h_{kv}$.
#
# Write the module `KVCache(batch, n_kv_heads, max_len, d_head)`:
#
# * it registers three buffers (`register_buffer`, so that `.to(...)` moves and converts them with the
#   model): `keys` and `values` of shape `(batch, n_kv_heads, max_len, d_head)`, float32 zeros to start
#   with (`.half()` makes a float16 cache), and `length`, a 0-dimensional `torch.long` tensor, 0 to start
#   with: how many positions are filled;
# * `forward(k, v)` takes the new keys and values, `(batch, n_kv_heads, T_new, d_head)` each, writes
#   them at positions `length .. length + T_new - 1`, advances `length`, and returns the keys and values
#   of every position filled so far, `(batch, n_kv_heads, length, d_head)` each;
# * new keys that would not fit (past `max_len`) raise `ValueError`.

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
# A chapter 7-sized model (6 layers, 8 heads of 64 features) writing 4,096 tokens, in float16:

# %%
for h_kv in (8, 2, 1):
    layers = [KVCache(1, h_kv, 4096, 64).half() for _ in range(6)]
    size = sum(c.keys.nbytes + c.values.nbytes for c in layers)
    print(f"{h_kv} key/value heads: {size / 2**20:5.1f} MiB, {size // 4096:,} bytes per token")

# %% [markdown]
# ## 5. Local attention
#
# Several long-context models let most layers read only a window of recent tokens: with a window of
# $w$ keys, a layer's cost grows like $T \cdot w$ instead of $T^2$, and stacking $N$ such layers still
# lets information travel $N(w - 1)$ positions back.
#
# Write `sliding_window_mask(T, window)`: the `(T, T)` boolean mask, in chapter 2's convention (`True`
# where query `i` may read key `j`), of causal attention restricted to a window: query `i` reads the
# `window` keys `i - window + 1, ..., i` (itself included; fewer near the start). `window` must be at
# least 1 (else `ValueError`); a window of `T` or more is plain causal attention.

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
# Each row reads at most `window` keys, all in its past:

# %%
print(sliding_window_mask(8, 3).int())
