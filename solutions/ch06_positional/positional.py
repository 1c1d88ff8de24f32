# %% [markdown]
# # Chapter 6 exercises: positional encoding
#
# Self-attention treats its input as a set: shuffle the tokens and the outputs are shuffled the
# same way, nothing more. The Transformer gives each token its position by adding a vector that
# depends only on that position. You will build the two pieces that do it:
#
# 1. `sinusoidal_encoding`: the table of sines and cosines of section 3.5 of the paper;
# 2. `PositionalEmbedding`: the layer that turns token ids into vectors, scales them by
#    $\sqrt{d_\text{model}}$, adds the table and applies dropout.
#
# Each answer has a cell for your code (replace `raise NotImplementedError()`) and a test cell
# right after it. Run the test cell: it prints one line when your code is right, and otherwise
# tells you what is wrong and where to look. The tests compare your table with the paper's formula,
# evaluated in float64 for several lengths and widths (odd ones too), and check its properties;
# your layer is loaded with a given embedding matrix and compared with the formula, in eval and in
# training mode. Graded work is also run against more cases than the ones you see here, so aim for
# code that is right, not code that passes.
#
# To check the whole notebook from a terminal, in the course's folder:
# `.venv/bin/python -m autograder check exercises/ch06_positional/positional.ipynb`.

# %% tags=["export"]
import math

import torch
from torch import nn

# %% [markdown]
# ## 1. The sinusoidal table
#
# For a position $pos$ and a pair index $i$, the paper sets
#
# $$PE_{(pos,\,2i)} = \sin\!\left(\frac{pos}{10000^{2i/d_\text{model}}}\right), \qquad
#   PE_{(pos,\,2i+1)} = \cos\!\left(\frac{pos}{10000^{2i/d_\text{model}}}\right).$$
#
# Read it column by column. Column $j$ of the table belongs to the pair $i = \lfloor j / 2 \rfloor$;
# the even column of a pair is a sine, the odd column the cosine **of the same angle**, and the
# exponent uses $2i$, the index of the pair's *even* column, for both. The first pair therefore has
# the divisor $10000^0 = 1$ (column 0 is $\sin(pos)$, column 1 is $\cos(pos)$), and the divisors
# grow geometrically towards 10000 along the row.
#
# Write `sinusoidal_encoding(max_len, d_model)`:
#
# * return a `float32` tensor of shape `(max_len, d_model)` whose row `pos` is the encoding of
#   position `pos`, for `pos = 0, 1, ..., max_len - 1`;
# * even columns hold sines, odd columns cosines, interleaved as in the formula (not all sines
#   first and all cosines after);
# * when `d_model` is odd the last column, number `d_model - 1`, is even: it is a sine whose cosine
#   partner would be column `d_model`, which does not exist. The formula needs no special case, but
#   a vectorised solution must give the cosines one frequency fewer than the sines;
# * raise `ValueError` with a clear message when `max_len < 1` or `d_model < 1`: an empty table is
#   never what the caller meant.
#
# Take care with precision: for long tables the angle `pos / 10000^(2i/d_model)` is a large number,
# and computing it in float32 loses digits. Computing in float64 and converting at the end costs
# nothing here.

# %% tags=["solution"] grade_id="sinusoidal_encoding"
def sinusoidal_encoding(max_len: int, d_model: int) -> torch.Tensor:
    """The sinusoidal positional encoding of the paper, shape (max_len, d_model), float32.

    Column 2i holds sin(pos / 10000^(2i/d_model)) and column 2i + 1 the cos of the same angle;
    for odd d_model the last column is a sin.
    """
    ### BEGIN SOLUTION
    if max_len < 1 or d_model < 1:
        raise ValueError(f"need max_len >= 1 and d_model >= 1, got max_len={max_len}, d_model={d_model}")
    # float64 keeps the angle pos * frequency exact to ~1e-12 even for pos in the thousands.
    position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
    even_columns = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(d_model / 2),) the values 2i
    frequency = torch.pow(10000.0, -even_columns / d_model)  # 1 / 10000^(2i/d_model)
    angle = position * frequency  # (max_len, 1) * (ceil(d_model / 2),) -> (max_len, ceil(d_model / 2))
    table = torch.empty(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    # With odd d_model the last sine has no cosine partner: one frequency fewer for the cosines.
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return table.to(torch.float32)
    ### END SOLUTION


# %% tags=["test"] grade_id="test_sinusoidal_encoding" points=4
from autograder import check

check("positional.sinusoidal_encoding", sinusoidal_encoding)
### BEGIN HIDDEN TESTS
check("positional.sinusoidal_encoding", sinusoidal_encoding, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Look at your table: each column is a wave, fast on the left, slower and slower to the right.

# %%
import matplotlib.pyplot as plt

table = sinusoidal_encoding(100, 64)
fig, ax = plt.subplots(figsize=(6, 3.2))
image = ax.imshow(table, cmap="RdBu", vmin=-1, vmax=1, aspect="auto")
ax.set(xlabel="column (feature) j", ylabel="position pos", title="sinusoidal_encoding(100, 64)")
fig.colorbar(image, ax=ax)
plt.show()

# %% [markdown]
# The property the paper relies on: for a fixed offset $k$, each pair $(\sin, \cos)$ at $pos + k$
# is the pair at $pos$ rotated by the angle $k\,\omega_i$, whatever $pos$ is. Row $k$ of the table
# holds exactly the sines and cosines of those angles, so the rotation can be read off the table:

# %%
k = 5
sin_k, cos_k = table[k, 0::2], table[k, 1::2]  # (32,) each: sin(k w_i), cos(k w_i)
sin_p, cos_p = table[:-k, 0::2], table[:-k, 1::2]  # (95, 32) each: the pairs at pos
rotated_sin = sin_p * cos_k + cos_p * sin_k  # sin(a + b) = sin a cos b + cos a sin b
rotated_cos = cos_p * cos_k - sin_p * sin_k  # cos(a + b) = cos a cos b - sin a sin b
print("largest error of M_k PE(pos) against PE(pos + k):",
      max((rotated_sin - table[k:, 0::2]).abs().max().item(), (rotated_cos - table[k:, 1::2]).abs().max().item()))

# %% [markdown]
# ## 2. Adding the encoding to the embeddings
#
# The encoder and the decoder turn token ids into vectors with an embedding table and add the
# positional encoding. Section 3.4 of the paper multiplies the embeddings by $\sqrt{d_\text{model}}$
# first, and section 5.4 applies dropout to the sum:
#
# $$x_{b,t} = \operatorname{Dropout}\!\left(E[\text{tokens}_{b,t}]\,\sqrt{d_\text{model}} + PE_{t}\right),
#   \qquad t = 0, \dots, T - 1 .$$
#
# The positional encoding is *added* element by element, so the output keeps $d_\text{model}$
# features, and it depends only on the position $t$, so the same row of the table is added to
# every sequence of the batch.
#
# Write the class `PositionalEmbedding(vocab_size, d_model, dropout=0.1, max_len=5000)`.
# The constructor already creates the two submodules, `embedding` and `dropout`; keep their names
# (the tests load weights into `embedding`).
#
# * In `__init__`, build the table with your `sinusoidal_encoding(max_len, d_model)` and register
#   it as a **buffer** named `pe`: `self.register_buffer("pe", table, persistent=False)`. A buffer
#   moves with the module (`.to(device)`), but it is not a parameter, so the optimiser leaves it
#   alone; `persistent=False` keeps it out of `state_dict()`, since it can always be recomputed.
#   The embedding's weight stays the module's only parameter.
# * `forward(tokens)` takes a `LongTensor` of shape `(B, T)` and returns `(B, T, d_model)`:
#   `dropout(embedding(tokens) * sqrt(d_model) + pe[:T])`.
# * A sequence longer than the table cannot be encoded: raise `ValueError`, with a message that
#   gives `T` and `max_len`, when `T > max_len`.

# %% tags=["solution"] grade_id="PositionalEmbedding"
class PositionalEmbedding(nn.Module):
    """Token embeddings scaled by sqrt(d_model), plus the sinusoidal encoding, then dropout."""

    def __init__(self, vocab_size: int, d_model: int, dropout: float = 0.1, max_len: int = 5000) -> None:
        super().__init__()
        self.d_model = d_model
        self.max_len = max_len
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.dropout = nn.Dropout(dropout)
        ### BEGIN SOLUTION
        # Fixed, not learned; recomputed on construction, so it need not be saved either.
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        ### END SOLUTION

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, T) of ids -> (B, T, d_model)."""
        ### BEGIN SOLUTION
        T = tokens.shape[1]
        if T > self.max_len:
            raise ValueError(f"a sequence of {T} tokens is longer than the table's max_len={self.max_len}")
        # The scale lifts the small embedding vectors to the size of the encoding (norm ~ sqrt(d_model)).
        scaled = self.embedding(tokens) * math.sqrt(self.d_model)  # (B, T, d_model)
        with_position = scaled + self.pe[:T]  # (B, T, d_model) + (T, d_model) -> (B, T, d_model)
        return self.dropout(with_position)
        ### END SOLUTION


# %% tags=["test"] grade_id="test_PositionalEmbedding" points=4
check("positional.PositionalEmbedding", PositionalEmbedding)
### BEGIN HIDDEN TESTS
check("positional.PositionalEmbedding", PositionalEmbedding, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# The layer in use: the embedding's weight is the only parameter and the table is a buffer that
# `state_dict()` leaves out. Without the encoding, the same word would get the same vector
# wherever it stands; with it, the two occurrences of token 3 below differ.

# %%
torch.manual_seed(0)
layer = PositionalEmbedding(vocab_size=10, d_model=16).eval()
tokens = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6], [3, 5, 8, 9, 7, 9, 3, 2]])  # (B, T) = (2, 8)
x = layer(tokens)  # (2, 8, 16)
print("output:", tuple(x.shape))
print("parameters:", [name for name, _ in layer.named_parameters()])
print("state_dict keys:", list(layer.state_dict()))
print("token 3 at positions 0 and 6 of the second sequence, same vector?", torch.allclose(x[1, 0], x[1, 6]))
