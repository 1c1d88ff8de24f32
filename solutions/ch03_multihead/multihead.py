# %% [markdown]
# # Chapter 3 exercises: multi-head attention
#
# You will build the attention layer the Transformer actually uses, in three steps:
#
# 1. `split_heads`, which cuts the `d_model` features of every position into `h` heads of `d_k` features;
# 2. `merge_heads`, its inverse, which puts the heads back side by side;
# 3. `MultiHeadAttention`, the layer itself, built on the two.
#
# This notebook fixes the interface that the tests and the later chapters rely on: the functions'
# signatures and shapes, the layer's parameter names, the attributes it keeps and the masks it
# takes. How to compute each result is yours to work out from the chapter's page, *Multi-head
# attention* (`book/ch03_multihead.md`), and from the paper; every section below says where to look.
#
# Each piece has a cell for your code (replace `raise NotImplementedError()`) and a test cell right
# after it. Run the test cell: it prints one line when your code is right and otherwise tells you
# what is wrong and where to look. `MultiHeadAttention` is compared with PyTorch's own
# `torch.nn.MultiheadAttention`, loaded with the same weights, on self-attention, cross-attention,
# masks, padding, both dtypes, with and without bias. Graded work also runs cases you do not see here.
#
# To check the whole notebook from a terminal, in the course's folder:
# `.venv/bin/python -m autograder check exercises/ch03_multihead/multihead.ipynb`.
#
# Do not use `torch.nn.MultiheadAttention`, `torch.nn.functional.multi_head_attention_forward` or
# `torch.nn.functional.scaled_dot_product_attention` in your answers. The attention inside every head
# is the `scaled_dot_product_attention` of chapter 2, imported below.

# %% tags=["export"]
import torch
from torch import nn

from reference.attention import scaled_dot_product_attention

# %% [markdown]
# ## 1. Splitting the features into heads
#
# The paper runs $h$ attentions side by side, each on $d_k = d_{\text{model}} / h$ features
# (with $d_{\text{model}} = 512$ and $h = 8$, every head works with 64). Rather than keep $h$ separate
# small projections, one `nn.Linear(d_model, d_model)` computes all of them at once, and its output is
# then cut into $h$ consecutive blocks of $d_k$ features: features `0 .. d_k-1` belong to head 0,
# the next $d_k$ to head 1, and so on.
#
# The page's section *All heads at once: one matrix per role, then split* explains this layout, and
# its subsection *The transpose you must not forget* shows what can go wrong in cutting it.
#
# Write `split_heads(x, h)`: `x` has shape `(B, T, d_model)`; return shape `(B, h, T, d_k)`, where
# `x_split[b, i, t]` is the block of head `i` at position `t`, that is `x[b, t, i*d_k:(i+1)*d_k]`.
# When `d_model` is not a multiple of `h`, raise `ValueError` with a message that names both numbers.

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
# ## 2. Merging the heads back
#
# After attention every head returns `d_k` features per position. The paper concatenates them,
# $\operatorname{Concat}(\text{head}_1, \dots, \text{head}_h)$, which gives back `h * d_k = d_model`
# features per position, in the same order `split_heads` cut them.
#
# Write `merge_heads(x)`: `(B, h, T, d_k)` to `(B, T, h * d_k)`, the exact inverse of `split_heads`,
# so that `merge_heads(split_heads(x, h))` gives `x` back.

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
# The two functions are inverses, and splitting really cuts the features into consecutive blocks:

# %%
x = torch.arange(2 * 3 * 8, dtype=torch.float32).reshape(2, 3, 8)  # B=2, T=3, d_model=8
heads = split_heads(x, h=2)  # (2, 2, 3, 4)
print("head 0 of position 0:", heads[0, 0, 0].tolist(), "  head 1 of position 0:", heads[0, 1, 0].tolist())
print("round trip exact:", torch.equal(merge_heads(heads), x))

# %% [markdown]
# ## 3. Multi-head attention
#
# $$\operatorname{MultiHead}(Q, K, V) = \operatorname{Concat}(\text{head}_1, \dots, \text{head}_h)\, W^O
# \quad\text{where}\quad \text{head}_i = \operatorname{Attention}(Q W_i^Q, K W_i^K, V W_i^V)$$
#
# with $W_i^Q, W_i^K \in \mathbb{R}^{d_{\text{model}} \times d_k}$, $W_i^V \in \mathbb{R}^{d_{\text{model}} \times d_v}$,
# $W^O \in \mathbb{R}^{h d_v \times d_{\text{model}}}$ and, as in the paper, $d_k = d_v = d_{\text{model}} / h$.
#
# Stacked side by side, the $h$ matrices $W_i^Q$ form one $d_{\text{model}} \times d_{\text{model}}$
# matrix $W^Q$ (the page's section *All heads at once*), so a single `nn.Linear(d_model, d_model)`
# holds every head's query projection, head 0's block first. The same holds for $W^K$ and $W^V$.
#
# Write `MultiHeadAttention(d_model, h, dropout=0.0, bias=True)`, an `nn.Module` with
#
# * `w_q`, `w_k`, `w_v`, `w_o`: each an `nn.Linear(d_model, d_model, bias=bias)`, holding $W^Q$,
#   $W^K$, $W^V$ and $W^O$ (`nn.Linear` adds a bias, as PyTorch's layer does; `bias=False` leaves
#   it out). The grader loads its weights by exactly these names.
# * `dropout`: an `nn.Dropout(dropout)`;
# * `h` and `d_k`: the number of heads and the width of each;
# * `attn_weights`: after every call, the attention weights of every head, shape
#   `(B, h, T_q, T_k)`, detached from the graph and taken before dropout, so that you can plot them.
#
# The constructor raises `ValueError` when `d_model` is not a multiple of `h`, with a message that
# names both numbers.
#
# `forward(query, key, value, attn_mask=None, key_padding_mask=None)` accepts `query` of shape
# `(B, T_q, d_model)` and `key` and `value` of shape `(B, T_k, d_model)`, and returns
# `(B, T_q, d_model)`. The attention inside each head is chapter 2's `scaled_dot_product_attention`.
# In training mode the dropout acts on the attention weights, as in PyTorch's layer: a dropped
# weight means that this query ignores that key for this step. In eval mode dropout does nothing.
# This dropout is not in the paper, which applies dropout only to each sub-layer's output and to
# the embeddings; it comes from the authors' tensor2tensor code and from PyTorch, whose layer the
# tests compare yours with.
#
# Masks follow the course's rule:
#
# * `attn_mask`: boolean, `True` where a query **may** attend to a key; shape `(T_q, T_k)`, the
#   same for every sequence, or `(B, T_q, T_k)`, one per sequence;
# * `key_padding_mask`: boolean, shape `(B, T_k)`, `True` where a key **is padding**.
#
# Mind that the two point opposite ways: `True` allows attending in `attn_mask` and forbids it in
# `key_padding_mask`. (PyTorch's `nn.MultiheadAttention` reads both of its boolean masks as
# "`True` = not allowed", so its `attn_mask` is the inverse of the course's.)
#
# A query may attend to a key only where the attention mask allows it **and** the key is not
# padding. A query that may attend to no key at all gets zero weights and a zero output, as in
# chapter 2 (where `nn.MultiheadAttention` would give NaN).

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
# ## Look at your layer
#
# A randomly initialised layer, 4 heads, on one sequence of 6 positions with a causal mask: every
# head has its own weights, and none of them looks at the future.

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
# Several heads cost no more parameters than one: the four projections are $d_{\text{model}} \times d_{\text{model}}$
# whatever $h$ is.

# %%
for h in (1, 2, 4, 8):
    layer = MultiHeadAttention(d_model=64, h=h)
    print(f"h={h}: d_k={layer.d_k:2d}, parameters={sum(p.numel() for p in layer.parameters())}")
