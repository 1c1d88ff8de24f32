# %% [markdown]
# # Chapter 4 exercises: the encoder
#
# You will build the Transformer's encoder from the parts chapter 4 explains, bottom up:
#
# 1. `PositionwiseFeedForward`: the feed-forward network applied to every position on its own;
# 2. `LayerNorm`: layer normalisation, written with basic tensor operations;
# 3. `EncoderLayer`: multi-head self-attention and the feed-forward network, each wrapped in a
#    residual connection followed by layer normalisation (the paper's post-norm layer);
# 4. `Encoder`: a stack of `N` such layers, each with its own weights.
#
# Each class has a cell for your code (replace every `raise NotImplementedError()`) and a test cell
# right after it. Run the test cell: it prints one line when your class is right, and otherwise
# tells you what is wrong and where to look. The tests load fixed weights into your module by the
# names this notebook gives (`w_1`, `w_2`, `gamma`, `beta`, `self_attn`, `feed_forward`, `norm1`,
# `norm2`, `layers`), so keep those names. They compare your modules with PyTorch's own layers
# (`nn.LayerNorm`, `nn.TransformerEncoderLayer`, `nn.TransformerEncoder`) holding the same weights.
# Graded work is also run against more cases than the ones you see here, so aim for a module that
# is right, not one that passes.
#
# To check the whole notebook from a terminal: `python -m autograder check exercises/ch04_encoder/encoder.ipynb`.
#
# Do not use `nn.LayerNorm`, `torch.nn.functional.layer_norm`, `nn.TransformerEncoderLayer` or
# `nn.TransformerEncoder` in your answers: they are what your code is checked against.
# `MultiHeadAttention` is chapter 3's, imported below; use it as it is.

# %% tags=["export"]
import torch
from torch import nn

from reference.multihead import MultiHeadAttention

# %% [markdown]
# ## 1. The position-wise feed-forward network
#
# $$\operatorname{FFN}(x) = \max(0,\; x W_1 + b_1)\, W_2 + b_2$$
#
# Two linear maps with a ReLU between them, $d_\text{model} \to d_\text{ff} \to d_\text{model}$
# (512 → 2048 → 512 in the paper). "Position-wise" means the same network, with the same
# weights, is applied to the vector of every position on its own; positions never mix here.
# `nn.Linear` acts on the last axis and treats all leading axes as a batch, which is exactly
# that.
#
# Write `PositionwiseFeedForward(d_model, d_ff, dropout=0.1)` with the submodules
#
# * `w_1`: an `nn.Linear` from `d_model` to `d_ff` features (it holds $W_1$ and $b_1$),
# * `w_2`: an `nn.Linear` from `d_ff` back to `d_model` features (it holds $W_2$ and $b_2$),
# * `dropout`: an `nn.Dropout` with probability `dropout`, applied to the hidden activations right
#   after the ReLU, as PyTorch's `nn.TransformerEncoderLayer` does;
#
# and a `forward(x)` that maps `(..., d_model)` to `(..., d_model)`. No residual connection here:
# that belongs to the encoder layer.

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
# "The same for every position": feed one sequence, then each of its positions alone, and compare.

# %%
torch.manual_seed(0)
ffn = PositionwiseFeedForward(d_model=8, d_ff=32).eval()
x = torch.randn(5, 8)  # (T, d_model)
whole = ffn(x)  # (T, d_model)
one_by_one = torch.stack([ffn(x[t]) for t in range(5)])  # (T, d_model)
print("whole sequence == position by position:", torch.allclose(whole, one_by_one, atol=1e-6))

# %% [markdown]
# ## 2. Layer normalisation
#
# For the vector $x \in \mathbb{R}^{d_\text{model}}$ of **one position**,
#
# $$\mu = \frac{1}{d_\text{model}} \sum_{i=1}^{d_\text{model}} x_i, \qquad
# \sigma^2 = \frac{1}{d_\text{model}} \sum_{i=1}^{d_\text{model}} (x_i - \mu)^2, \qquad
# \operatorname{LayerNorm}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta .$$
#
# * The mean and the variance run over the **last axis** only (the features of one position), so
#   every position of every sequence is normalised on its own.
# * $\sigma^2$ divides by $d_\text{model}$, not $d_\text{model} - 1$ (the *biased* variance, as
#   `nn.LayerNorm` uses), and $\epsilon$ sits **inside** the square root.
# * $\gamma$ (initialised to ones) and $\beta$ (initialised to zeros) are learnable vectors of
#   shape `(d_model,)`, applied feature by feature.
# * Compute the variance from $x - \mu$, not as $E[x^2] - E[x]^2$: when the features sit far from
#   zero (say near 1000), the two large terms cancel and float32 loses almost every digit.
#
# Write `LayerNorm(d_model, eps=1e-5)` with the parameters `self.gamma` and `self.beta`
# (`nn.Parameter`s) and the attribute `self.eps`. Its `forward(x)` keeps the shape `(..., d_model)`.

# %% tags=["solution"] grade_id="LayerNorm"
class LayerNorm(nn.Module):
    """gamma * (x - mean) / sqrt(var + eps) + beta over the last axis, biased variance.

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
# After normalisation (with the initial $\gamma = 1$, $\beta = 0$) every position has mean 0 and
# a biased variance just under 1; the unbiased variance is $d_\text{model} / (d_\text{model} - 1)$
# times larger.

# %%
torch.manual_seed(0)
y = LayerNorm(8)(3.0 * torch.randn(2, 4, 8) + 5.0)  # (B, T, d_model)
print("means:", y.mean(dim=-1).abs().max().item())
print("biased variances:", y.var(dim=-1, unbiased=False).flatten()[:4])
print("unbiased variances:", y.var(dim=-1).flatten()[:4])

# %% [markdown]
# ## 3. The encoder layer
#
# Each encoder layer has two sub-layers. The paper wraps each one in a residual connection and
# normalises the sum (section 3.1, with dropout on the sub-layer's output from section 5.4):
#
# $$x \leftarrow \operatorname{LayerNorm}\big(x + \operatorname{Dropout}(\operatorname{Sublayer}(x))\big).$$
#
# The first sub-layer is multi-head **self**-attention (queries, keys and values all come from
# `x`), the second is the feed-forward network:
#
# $$x \leftarrow \operatorname{LayerNorm}_1\big(x + \operatorname{Dropout}_1(\operatorname{MultiHead}(x, x, x))\big), \qquad
# x \leftarrow \operatorname{LayerNorm}_2\big(x + \operatorname{Dropout}_2(\operatorname{FFN}(x))\big).$$
#
# Write `EncoderLayer(d_model, h, d_ff, dropout=0.1)` with the submodules
#
# * `self_attn`: chapter 3's `MultiHeadAttention`, built with `d_model`, `h` and `dropout`,
# * `feed_forward`: your `PositionwiseFeedForward`, built with `d_model`, `d_ff` and `dropout`,
# * `norm1`, `norm2`: two separate instances of your `LayerNorm` of width `d_model`,
# * `dropout1`, `dropout2`: two `nn.Dropout` modules with probability `dropout`;
#
# and `forward(x, key_padding_mask=None)`, where `x` is `(B, T, d_model)` and `key_padding_mask`,
# when given, is a boolean `(B, T)` tensor that is **True where a position is padding**. Pass it
# to the self-attention (`self.self_attn(x, x, x, key_padding_mask=key_padding_mask)`), so that no
# position attends to padding. The output has the shape of `x`.

# %% tags=["solution"] grade_id="EncoderLayer"
class EncoderLayer(nn.Module):
    """One post-norm encoder layer: self-attention, then the FFN, each as LayerNorm(x + Dropout(sublayer(x))).

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
# Padding cannot leak into real positions: put garbage where the mask says "padding" and the
# outputs of the real positions do not move.

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
# ## 4. The encoder: a stack of N layers
#
# The encoder is $N$ encoder layers applied one after the other ($N = 6$ in the paper). They all
# have the same shapes, but each has **its own** weights: build $N$ separate `EncoderLayer`
# objects. (The list `[layer] * N` would hold one object $N$ times, so all "layers" would share
# one set of weights.) The paper's post-norm stack ends with the last layer's own `norm2`: add no
# extra normalisation at the end.
#
# Write `Encoder(d_model, h, d_ff, N, dropout=0.1)` with
# `self.layers = nn.ModuleList(...)` holding the `N` layers, and `forward(x, key_padding_mask=None)`
# that passes `x` through the layers in order, giving every layer the same `key_padding_mask`.

# %% tags=["solution"] grade_id="Encoder"
class Encoder(nn.Module):
    """N encoder layers with separate weights, applied in order; no final normalisation.

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
# The paper's base encoder: six layers of $d_\text{model} = 512$, $h = 8$, $d_\text{ff} = 2048$.
# Count its parameters, and see that a batch keeps its shape all the way through.

# %%
base = Encoder(d_model=512, h=8, d_ff=2048, N=6).eval()
per_layer = sum(p.numel() for p in base.layers[0].parameters())
print(f"parameters per layer: {per_layer:,}; whole encoder: {sum(p.numel() for p in base.parameters()):,}")
with torch.no_grad():
    tokens = torch.randn(2, 10, 512)  # (B, T, d_model): embeddings plus positions, in chapter 8
    print("output shape:", tuple(base(tokens).shape))
