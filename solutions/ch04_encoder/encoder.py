# %% [markdown]
# # Chapter 4 exercises: the encoder
#
# You will build the Transformer's encoder from the parts chapter 4 explains, bottom up:
#
# 1. `PositionwiseFeedForward`: the feed-forward network applied to every position on its own;
# 2. `LayerNorm`: layer normalisation, written with basic tensor operations;
# 3. `EncoderLayer`: one layer of the paper's encoder, multi-head self-attention followed by the
#    feed-forward network;
# 4. `Encoder`: a stack of `N` such layers, each with its own weights.
#
# This notebook fixes the interface that the tests and the later chapters rely on: each module's
# constructor, the names of its submodules and parameters, its shapes and its masks. How each
# module computes its output is yours to work out from the chapter's page, *The encoder*
# (`book/ch04_encoder.md`), and from the paper; every section below says where to look.
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
# To check the whole notebook from a terminal, in the course's folder:
# `.venv/bin/python -m autograder check exercises/ch04_encoder/encoder.ipynb`.
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
# Equation (2) of the paper, the subject of the page's section *Sub-layer 2: the position-wise
# feed-forward network*:
#
# $$\operatorname{FFN}(x) = \max(0,\; x W_1 + b_1)\, W_2 + b_2$$
#
# Write `PositionwiseFeedForward(d_model, d_ff, dropout=0.1)` with three submodules:
#
# * `w_1`: an `nn.Linear` from `d_model` to `d_ff` features, holding $W_1$ and $b_1$;
# * `w_2`: an `nn.Linear` from `d_ff` to `d_model` features, holding $W_2$ and $b_2$;
# * `dropout`: an `nn.Dropout(dropout)`. This dropout is not in the paper, which mentions no
#   dropout inside this network; the course follows PyTorch's `nn.TransformerEncoderLayer` (and the
#   authors' tensor2tensor code), which apply one to the hidden activations, right after the ReLU.
#
# `forward(x)` accepts `x` of shape `(..., d_model)`, with any number of leading axes, and returns
# a tensor of the same shape.

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
# The page's section *Layer normalisation* defines the operation,
#
# $$\operatorname{LayerNorm}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta ,$$
#
# and says what $x$, $\mu$, $\sigma^2$, $\epsilon$, $\gamma$ and $\beta$ are; its subsection
# *Computing the variance safely* is about computing them in floating point.
#
# Write `LayerNorm(d_model, eps=1e-5)` with
#
# * `gamma` and `beta`: `nn.Parameter`s of shape `(d_model,)`, the scale $\gamma$ and the shift
#   $\beta$, which start at ones and zeros;
# * `eps`: the constructor's $\epsilon$, kept as an attribute.
#
# `forward(x)` accepts `x` of shape `(..., d_model)` and returns a tensor of the same shape. It
# must agree with `nn.LayerNorm(d_model, eps=eps)` holding the same $\gamma$ and $\beta$, whatever
# the size and the offset of the features.

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
# Section 3.1 of the paper gives the layer two sub-layers, multi-head self-attention first and
# the feed-forward network second, and wraps each of them in a residual connection followed by
# layer normalisation:
#
# $$\operatorname{LayerNorm}\big(x + \operatorname{Sublayer}(x)\big).$$
#
# Section 5.4 of the paper says where dropout goes: on each sub-layer's output, before the
# residual sum. (The dropout that `self_attn` and `feed_forward` apply inside themselves, on the
# attention weights and after the ReLU, is the course's addition, taken from PyTorch; the paper
# does not have it.) On the page, *The wrapper: post-norm, as in the paper* puts these together,
# and *Sub-layer 1: self-attention over the whole sentence* says
# where the self-attention's queries, keys and values come from and what it may look at.
#
# Write `EncoderLayer(d_model, h, d_ff, dropout=0.1)` with these submodules:
#
# * `self_attn`: chapter 3's `MultiHeadAttention`, built with `d_model`, `h` and `dropout`;
# * `feed_forward`: your `PositionwiseFeedForward`, built with `d_model`, `d_ff` and `dropout`;
# * `norm1` and `norm2`: your `LayerNorm` of width `d_model`, each with its own $\gamma$ and $\beta$;
# * `dropout1` and `dropout2`: `nn.Dropout(dropout)` modules.
#
# The number in a name is the sub-layer's: `norm1` and `dropout1` serve the self-attention,
# `norm2` and `dropout2` the feed-forward network.
#
# `forward(x, key_padding_mask=None)` accepts `x` of shape `(B, T, d_model)` and returns a tensor
# of the same shape. `key_padding_mask`, when given, is a boolean `(B, T)` tensor that is **True
# where a position is padding**, the convention of chapter 3's `MultiHeadAttention` (run
# `help(MultiHeadAttention)` to see its arguments). Whatever sits at a padded position must never
# change the output at a real one.

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
# The page's section *The stack: N = 6 layers, each with its own weights* describes the stack.
#
# Write `Encoder(d_model, h, d_ff, N, dropout=0.1)` with one submodule, `layers`: an
# `nn.ModuleList` of `N` encoder layers, each an `EncoderLayer` built with `d_model`, `h`, `d_ff`
# and `dropout`, with weights of its own. `forward(x, key_padding_mask=None)` takes the arguments
# of `EncoderLayer.forward`, with the same shapes and conventions, and the encoder's output is the
# output of its last layer, as in the paper.

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
# The paper's base encoder: six layers of $d_\text{model} = 512$, $h = 8$, $d_\text{ff} = 2048$.
# Count its parameters, and see that a batch keeps its shape all the way through.

# %%
base = Encoder(d_model=512, h=8, d_ff=2048, N=6).eval()
per_layer = sum(p.numel() for p in base.layers[0].parameters())
print(f"parameters per layer: {per_layer:,}; whole encoder: {sum(p.numel() for p in base.parameters()):,}")
with torch.no_grad():
    tokens = torch.randn(2, 10, 512)  # (B, T, d_model): embeddings plus positions, as chapter 6 builds them
    print("output shape:", tuple(base(tokens).shape))
