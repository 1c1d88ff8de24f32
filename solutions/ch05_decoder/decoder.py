# %% [markdown]
# # Chapter 5 exercises: the decoder
#
# You will build the Transformer's decoder from the parts of chapters 3 and 4:
#
# 1. `subsequent_mask`: the causal mask that stops a target position from seeing the ones after it;
# 2. `DecoderLayer`: one layer of the paper's decoder, with masked self-attention, cross-attention
#    over the encoder's output and the feed-forward network;
# 3. `Decoder`: a stack of `N` such layers, each with its own weights, all reading the same
#    encoder output.
#
# This notebook fixes the interface that the tests and the later chapters rely on: each module's
# constructor, the names of its submodules, its shapes and its masks. How each module computes its
# output is yours to work out from the chapter's page, *The decoder* (`book/ch05_decoder.md`), and
# from the paper; every section below says where to look.
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
# To check the whole notebook from a terminal, in the course's folder:
# `.venv/bin/python -m autograder check exercises/ch05_decoder/decoder.ipynb`.
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
# where $i$ is the query's position and $j$ the key's. The page's section *Masked self-attention*
# shows the same mask in PyTorch's additive form.
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
# A decoder layer has three sub-layers: masked multi-head self-attention over the target,
# multi-head cross-attention over the encoder's output (`memory`), and the feed-forward network.
# Each is wrapped as in the encoder, following section 3.1 of the paper,
#
# $$\operatorname{LayerNorm}\big(x + \operatorname{Sublayer}(x)\big),$$
#
# with dropout where section 5.4 of the paper puts it: on each sub-layer's output, before the
# residual sum. (The attention and the feed-forward network also apply dropout inside themselves,
# on the attention weights and after the ReLU; that is not in the paper but follows PyTorch, as
# chapter 4's page explains.) The page takes the sub-layers one by one in
# *Masked self-attention* and *Cross-attention: the target asks, the source answers*, and wraps
# them in *Three sub-layers, each with a residual connection and LayerNorm*.
#
# Write `DecoderLayer(d_model, h, d_ff, dropout=0.1)` with these submodules:
#
# * `self_attn` and `cross_attn`: chapter 3's `MultiHeadAttention`, each built with `d_model`, `h`
#   and `dropout`, each with weights of its own;
# * `feed_forward`: chapter 4's `PositionwiseFeedForward`, built with `d_model`, `d_ff` and `dropout`;
# * `norm1`, `norm2` and `norm3`: chapter 4's `LayerNorm` of width `d_model`, each with its own
#   $\gamma$ and $\beta$;
# * `dropout1`, `dropout2` and `dropout3`: `nn.Dropout(dropout)` modules.
#
# The number in a name is the sub-layer's: `norm1` and `dropout1` serve the self-attention, `norm2`
# and `dropout2` the cross-attention, `norm3` and `dropout3` the feed-forward network.
#
# `forward(x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None)`:
#
# * `x` is the target, `(B, T_tgt, d_model)`, and `memory` the encoder's output,
#   `(B, T_src, d_model)`; the output has the shape of `x`;
# * `tgt_mask`: bool `(T_tgt, T_tgt)` or `(B, T_tgt, T_tgt)`, True where a target position may
#   attend to another target position (usually `subsequent_mask(T_tgt)`);
# * `tgt_key_padding_mask`: bool `(B, T_tgt)`, True where a target position is padding;
# * `memory_key_padding_mask`: bool `(B, T_src)`, True where a source position is padding.
#
# These are the conventions of chapter 3's `MultiHeadAttention` (run `help(MultiHeadAttention)` to
# see its arguments). Your layer must keep the promises that the page's section *The mask's
# promise, measured* describes: with a causal `tgt_mask`, a target token never changes the output at
# an earlier position, and whatever sits at a padded position, of the target or of the memory,
# never changes the output at a real one.

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
# The page's section *A stack of N identical layers* describes the stack, and what each of its
# layers reads.
#
# Write `Decoder(d_model, h, d_ff, N, dropout=0.1)` with one submodule, `layers`: an
# `nn.ModuleList` of `N` decoder layers, each a `DecoderLayer` built with `d_model`, `h`, `d_ff`
# and `dropout`, with weights of its own. Its `forward` takes the arguments of
# `DecoderLayer.forward`, with the same names, shapes and conventions, and the decoder's output is
# the output of its last layer, as in the paper.

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
