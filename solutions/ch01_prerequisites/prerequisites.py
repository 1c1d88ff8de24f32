# %% [markdown]
# # Chapter 1 exercises: prerequisites and motivation
#
# Before the Transformer, a sequence was read by convolutions, which see a window that widens
# layer by layer, or by recurrent networks, which read one position after another. You will write
# one small piece of each, and then the loop that every encoder-decoder uses to produce text:
#
# 1. `receptive_field`: how many input positions one output of a stack of 1-D convolutions can see;
# 2. `rnn_forward`: the forward pass of a tanh RNN, written as the loop over time that it is;
# 3. `greedy_decode`: batched greedy, autoregressive decoding with a small model that is provided.
#
# Each function has a cell for your code (replace `raise NotImplementedError()`) and a test cell
# right after it. Run the test cell: it prints one line when your function is right, and otherwise
# tells you what is wrong and where to look. The tests compare your results with PyTorch
# (`torch.nn.Conv1d`, `torch.nn.RNN`) and with a decoding loop of their own, on several inputs.
# Graded work is also run against more cases than the ones you see here, so aim for a function
# that is right, not one that passes.
#
# To check the whole notebook from a terminal, in the course's folder:
# `.venv/bin/python -m autograder check exercises/ch01_prerequisites/prerequisites.ipynb`.
#
# Do not use `torch.nn.RNN` in your answer to part 2: the point is to see the loop.

# %% tags=["export"]
import math
from collections.abc import Sequence
from typing import Any

import torch

# %% [markdown]
# ## 1. The receptive field of a convolution stack
#
# A 1-D convolution with kernel size $k$, stride $s$ and dilation $d$ computes output $t$ from $k$
# inputs spaced $d$ apart:
#
# $$y_t = \sum_{j=0}^{k-1} W_j\, x_{s t + d j} + b .$$
#
# One output therefore depends on a window of $(k - 1)\,d + 1$ consecutive input positions (some of
# them skipped when $d > 1$): that window is the layer's **receptive field**. Stack layers and
# the window widens. Layer $\ell$ adds $(k_\ell - 1)\,d_\ell$ steps to it, but a "step" at that
# depth is not one input position: every stride below layer $\ell$ has spread neighbouring
# positions further apart in the input. For layers $\ell = 1, \dots, L$ applied in order,
#
# $$r = 1 + \sum_{\ell=1}^{L} (k_\ell - 1)\, d_\ell \prod_{i < \ell} s_i .$$
#
# The product runs over the layers *below* $\ell$ only: a layer's own stride decides where its
# outputs sit, not how wide each one looks. With no layer at all ($L = 0$) an output is just its
# input, so $r = 1$.
#
# Write `receptive_field(kernel_sizes, strides=None, dilations=None)`. The three arguments are
# sequences with one entry per layer, first layer first; missing strides or dilations mean 1 for
# every layer. Return the receptive field as an `int`. A description that makes no sense should
# fail loudly: raise `ValueError` with a message saying what is wrong when the lengths differ or
# when any kernel size, stride or dilation is below 1.

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
# How deep must a convolutional encoder be before the first word of a 100-token sentence can
# influence an output that also sees the last one? Compare three designs with kernel size 3:
# plain layers, layers that each halve the resolution (stride 2), and layers whose dilation doubles
# (1, 2, 4, ...). A self-attention layer, for comparison, sees the whole sentence at depth 1.

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
# A plain stack needs 50 layers, one per two tokens. Strides and dilations grow the window
# exponentially (the two curves coincide: for $k = 3$ both give $r = 2^{L+1} - 1$, one by
# shrinking the sequence, the other by spreading the kernel), which is why convolutional
# translation models such as ByteNet used dilations. Still, the path from one word to a distant
# one crosses several layers, and the weights of a convolution depend on relative *position*,
# never on what the words say.
#
# ## 2. A recurrent network, one step at a time
#
# An Elman RNN keeps a state $h_t$ that summarises the sequence so far and updates it once per
# position:
#
# $$h_t = \tanh\left(x_t W_{xh} + h_{t-1} W_{hh} + b_h\right), \qquad t = 1, \dots, T .$$
#
# Here $x_t$ and $h_t$ are row vectors, one per sequence of the batch, which is how PyTorch holds
# them: `x[:, t]` has shape `(B, d_in)`, `W_xh` has shape `(d_in, d_h)`, `W_hh` has shape
# `(d_h, d_h)` and `b_h` has shape `(d_h,)`. (Written with column vectors, as in the chapter, the
# same update reads $W_{xh} x_t + W_{hh} h_{t-1}$ with the matrices transposed; `torch.nn.RNN`
# stores those transposes as `weight_ih_l0` and `weight_hh_l0`.)
#
# Write `rnn_forward(x, h0, W_xh, W_hh, b_h)` for `x` of shape `(B, T, d_in)` and an initial state
# `h0` of shape `(B, d_h)`. Return `(outputs, h_T)`: `outputs` of shape `(B, T, d_h)` holds
# $h_1, \dots, h_T$ (the state after each input, not $h_0$), and `h_T` of shape `(B, d_h)` is the
# last of them. Use a Python loop over $t$: $h_t$ cannot be computed before $h_{t-1}$, and that
# chain of $T$ dependent steps is exactly what the Transformer set out to remove.

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
# Your loop is differentiable, so autograd can tell how much each input still matters at the end.
# By the chain rule, $\partial h_T / \partial x_t$ is a product of one Jacobian
# $\operatorname{diag}(1 - h_j^2)\, W_{hh}^\top$ per step between $t$ and $T$, so its size tends to
# shrink (or grow) geometrically with the distance $T - t$. Below, $W_{hh}$ has random entries of
# standard deviation $g / \sqrt{d_h}$ for three gains $g$.

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
# With a small gain the influence of an input fades by orders of magnitude over a few dozen steps:
# the gradient that would teach the network to use it *vanishes*. With a large gain the network
# becomes chaotic and the gradient *explodes* instead. Gated cells (LSTM, GRU) soften the first
# problem; nothing removes the $T$ serial steps.
#
# ## Why something new was needed
#
# Put together, the two architectures leave five difficulties that the paper's design answers:
#
# | difficulty | convolution | recurrence | self-attention |
# |---|---|---|---|
# | **long-range dependency** | needs many layers | must survive many steps | one step |
# | **relevance by content** | weights depend on relative position | one state for everything | weights computed from the words |
# | **path length** between two positions, which gradients must travel | grows with distance / depth | grows linearly | constant |
# | **receptive field** | widened only by stacking (part 1) | the whole past, through a bottleneck | the whole sequence |
# | **parallel computation** over positions | yes | no: $T$ steps in a row (part 2) | yes |
#
# A long-range dependency is, for instance, a pronoun and the noun it refers to, or a verb moved to the end of a German
# clause. Relevance by content means that how much one word matters to another depends on what the two say, not on how
# far apart they stand.
#
# ## 3. The encoder-decoder at a glance: greedy decoding
#
# The Transformer keeps the encoder-decoder shape of earlier translation models. Take the input
# "Lab4AI is". It is cut into tokens (`Lab`, `4`, `AI`, `is`), each token becomes an integer id and
# then a vector, and the **encoder** turns those vectors into *contextual* representations: one
# vector per token that also carries what the rest of the sentence says about it. That sequence of
# vectors, the `memory`, is computed once.
#
# The **decoder** then writes the output one token at a time. It starts from a special
# beginning-of-sequence token `<bos>`, reads the memory and the tokens written so far, and returns
# a score (a logit) for every token in the vocabulary as the next one. **Greedy decoding** takes the
# highest:
#
# $$y_{t} = \operatorname*{arg\,max}_{v}\; p\left(v \mid y_0, \dots, y_{t-1};\ \text{memory}\right),
# \qquad y_0 = \texttt{<bos>} .$$
#
# The chosen token is appended to the decoder's input for the next step, so each prediction is
# conditioned on the previous ones: the decoding is **autoregressive**. For our example the
# decoder might produce `All`, then, reading `<bos> All`, produce `you`, then `need`, and finally
# the end-of-sequence token `<eos>`.
#
# Write `greedy_decode(model, src, max_len, bos_id, eos_id, pad_id)` for a whole batch of source
# sentences `src` (a `LongTensor` of shape `(B, S)`):
#
# * `model.encode(src)` returns the memory; call it once. `model.decode(memory, ys)` takes the
#   tokens so far, `ys` of shape `(B, t)`, and returns logits of shape `(B, t, V)`: position $i$
#   holds the logits of the token that follows `ys[:, :i + 1]`, so the next token comes from the
#   **last** position.
# * Start every row with `bos_id` in column 0 and generate at most `max_len` tokens after it.
# * Sentences of a batch end at different steps. Once a row has produced `eos_id` (keep that
#   `eos_id` in the output), every later position of that row is `pad_id`, whatever the model says.
# * Stop as soon as every row has produced `eos_id`, so that the result is as short as possible.
#
# Return a `LongTensor` of shape `(B, L)` with $L \le$ `max_len` $+ 1$.

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
# Watch the loop at work on the example. The stand-in "model" below has learnt one sentence pair by
# heart: its logits only look at the latest token (a real decoder reads the whole prefix and the
# memory). Wrapping it shows what your `greedy_decode` feeds the decoder at each step.

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
# And on a batch, with the small untrained model the tests use. Its sentences stop after about as
# many tokens as their source has, so rows finish at different steps (`2` is `<eos>`, `0` is
# `<pad>`), and the 9-token source is cut off by `max_len`.

# %%
from autograder.toys import ToyTranslator

toy = ToyTranslator(vocab_size=16, d=16, seed=0)
src = torch.tensor([
    [5, 9, 0, 0, 0, 0, 0, 0, 0],
    [7, 3, 12, 4, 0, 0, 0, 0, 0],
    [11, 6, 8, 14, 3, 9, 10, 4, 13],
])  # (B=3, S=9), padded with 0
print(greedy_decode(toy, src, max_len=6, bos_id=1, eos_id=2, pad_id=0))
