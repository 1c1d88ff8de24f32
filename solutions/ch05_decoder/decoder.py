# %% [markdown]
# # Chapter 5 exercises: the decoder
#
# You will build the Transformer's decoder from the parts of chapters 3 and 4:
#
# 1. `subsequent_mask`: the causal mask that stops a target position from seeing the ones after it;
# 2. `DecoderLayer`: masked self-attention, cross-attention over the encoder's output and the
#    feed-forward network, each wrapped in a residual connection followed by layer normalisation;
# 3. `Decoder`: a stack of `N` such layers, each with its own weights, all reading the same
#    encoder output.
#
# Each part has a cell for your code (replace every `raise NotImplementedError()`) and a test cell
# right after it. Run the test cell: it prints one line when your code is right, and otherwise
# tells you what is wrong and where to look. The tests load fixed weights into your modules by the
# names this notebook gives (`self_attn`, `cross_attn`, `feed_forward`, `norm1`, `norm2`, `norm3`,
# `layers`), so keep those names. They compare your modules with PyTorch's own layers
# (`nn.TransformerDecoderLayer`, `nn.TransformerDecoder`) holding the same weights, and they check
# two promises a decoder makes: a future target token never changes an earlier position's output,
# and padding never changes a real one. Graded work is also run against more cases than the ones
# you see here, so aim for code that is right, not code that passes.
#
# To check the whole notebook from a terminal: `python -m autograder check exercises/ch05_decoder/decoder.ipynb`.
#
# Do not use `nn.TransformerDecoderLayer`, `nn.TransformerDecoder` or `nn.MultiheadAttention` in
# your answers: they are what your code is checked against. `MultiHeadAttention` (chapter 3),
# `LayerNorm` and `PositionwiseFeedForward` (chapter 4) are imported below; use them as they are.

# %% tags=["export"]
import torch
from torch import nn

from reference.encoder import LayerNorm, PositionwiseFeedForward
from reference.multihead import MultiHeadAttention

# %% [markdown]
# ## 1. The subsequent mask
#
# While the decoder learns to predict the target sentence, it reads that same sentence as its
# input. Position $i$ must therefore not see positions $i + 1, i + 2, \dots$: the paper
# (section 3.2.3) masks out "all values in the input of the softmax which correspond to illegal
# connections" by setting their scores to $-\infty$. With the course's convention (a mask is
# True where a query **may** attend), the mask is
#
# $$\operatorname{mask}_{ij} = \begin{cases} \text{True} & j \le i \\ \text{False} & j > i \end{cases}$$
#
# a lower triangle, diagonal included: a position may always look at itself.
#
# Write `subsequent_mask(size)`. It returns a boolean tensor of shape `(size, size)`, with no batch
# axis (a `(T, T)` mask broadcasts against `(B, h, T, T)` scores by itself). An empty sequence is
# fine: `size=0` gives an empty `(0, 0)` mask. A negative size is a caller's mistake: raise
# `ValueError`.

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
# PyTorch builds the same mask in its own convention: `nn.Transformer.generate_square_subsequent_mask`
# returns a float mask that is *added* to the scores, 0 where attention is allowed and $-\infty$
# where it is not. The two say the same thing:

# %%
print(subsequent_mask(4))
print(nn.Transformer.generate_square_subsequent_mask(4))
print("same mask:", torch.equal(subsequent_mask(4), nn.Transformer.generate_square_subsequent_mask(4) == 0))

# %% [markdown]
# ## 2. The decoder layer
#
# Each decoder layer has three sub-layers, and each is wrapped the way chapter 4 wrapped the
# encoder's two: a residual connection, then layer normalisation of the sum (post-norm, as in the
# paper), with dropout on the sub-layer's output:
#
# $$x \leftarrow \operatorname{LayerNorm}\big(x + \operatorname{Dropout}(\operatorname{Sublayer}(x))\big).$$
#
# With $M$ the encoder's output (`memory`), the three steps are
#
# $$\begin{aligned}
# x &\leftarrow \operatorname{LayerNorm}_1\big(x + \operatorname{Dropout}_1(\operatorname{MultiHead}_\text{self}(x, x, x;\ \text{tgt\_mask}))\big) && \text{masked self-attention}\\
# x &\leftarrow \operatorname{LayerNorm}_2\big(x + \operatorname{Dropout}_2(\operatorname{MultiHead}_\text{cross}(x, M, M))\big) && \text{cross-attention}\\
# x &\leftarrow \operatorname{LayerNorm}_3\big(x + \operatorname{Dropout}_3(\operatorname{FFN}(x))\big) && \text{feed-forward}
# \end{aligned}$$
#
# In the cross-attention the **queries come from the decoder** (`x`) and the **keys and values
# from the encoder** (`memory`): every target position asks which source positions it needs.
# The causal mask belongs to the self-attention only; the whole source is known, so only the
# padding of `memory` is hidden from the cross-attention.
#
# Write `DecoderLayer(d_model, h, d_ff, dropout=0.1)` with the submodules
#
# * `self.self_attn = MultiHeadAttention(d_model, h, dropout)` and
#   `self.cross_attn = MultiHeadAttention(d_model, h, dropout)` (two separate sets of weights),
# * `self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)`,
# * `self.norm1`, `self.norm2`, `self.norm3`: `LayerNorm(d_model)`,
# * `self.dropout1`, `self.dropout2`, `self.dropout3`: `nn.Dropout(dropout)`;
#
# and `forward(x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None)`:
#
# * `x` is `(B, T_tgt, d_model)`, `memory` is `(B, T_src, d_model)`; the output has the shape of `x`;
# * `tgt_mask`: bool `(T_tgt, T_tgt)` or `(B, T_tgt, T_tgt)`, True where a target position may
#   attend (usually `subsequent_mask(T_tgt)`);
# * `tgt_key_padding_mask`: bool `(B, T_tgt)`, True where a target position is padding;
# * `memory_key_padding_mask`: bool `(B, T_src)`, True where a source position is padding.
#
# `MultiHeadAttention` takes `(query, key, value, attn_mask=None, key_padding_mask=None)` with the
# same conventions, so each mask goes straight to the attention that needs it.

# %% tags=["solution"] grade_id="DecoderLayer"
class DecoderLayer(nn.Module):
    """One post-norm decoder layer: masked self-attention, cross-attention, FFN, each as LayerNorm(x + Dropout(sublayer)).

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
# The causal mask at work: change the last two target tokens, and the outputs of the first
# positions do not move at all. Without the mask, every position changes.

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
# ## 3. The decoder: a stack of N layers
#
# The decoder is $N$ decoder layers applied one after the other ($N = 6$ in the paper), each with
# **its own** weights. Every layer's cross-attention reads the **same** `memory`, the output of the
# encoder's last layer; only `x` changes from layer to layer. As in the encoder, the post-norm
# stack ends with the last layer's own `norm3`: add no extra normalisation at the end.
#
# Write `Decoder(d_model, h, d_ff, N, dropout=0.1)` with `self.layers = nn.ModuleList(...)` holding
# `N` separate `DecoderLayer`s (not `[layer] * N`, which holds one layer $N$ times), and
# `forward(x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None)`
# that passes `x` through the layers in order, giving every layer the same `memory` and masks.

# %% tags=["solution"] grade_id="Decoder"
class Decoder(nn.Module):
    """N decoder layers with separate weights, applied in order to the same memory; no final normalisation.

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
# Teacher forcing in one pass. During training the whole (shifted) target sentence goes in at
# once, and thanks to the mask row $t$ of the output is exactly what the decoder computes when it
# is given only the first $t + 1$ tokens, as it is during generation. Check it on a small stack:

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
# The paper's base decoder: six layers of $d_\text{model} = 512$, $h = 8$, $d_\text{ff} = 2048$.
# Each layer has one attention block more than an encoder layer.

# %%
base = Decoder(d_model=512, h=8, d_ff=2048, N=6)
per_layer = sum(p.numel() for p in base.layers[0].parameters())
print(f"parameters per layer: {per_layer:,}; whole decoder: {sum(p.numel() for p in base.parameters()):,}")
