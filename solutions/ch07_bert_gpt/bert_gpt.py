# %% [markdown]
# # Chapter 7 exercises: BERT and GPT
#
# Two families of models grew out of the Transformer by keeping only half of it. **BERT** keeps
# the encoder: every token sees the whole sentence, left and right, and the model is pre-trained
# by filling in words that were hidden from it. **GPT** keeps the decoder without its
# cross-attention: every token sees only the tokens before it, and the model is pre-trained by
# predicting the next token, which is also how it writes text, one token at a time. Both read
# text cut into **subword tokens** learnt from data.
#
# You will write the pieces around the models that decide what they learn and what they say, then
# GPT's building block and the cache that makes its writing affordable:
#
# 1. `bpe_train`: learn a byte-pair-encoding vocabulary (the merges) from a text;
# 2. `bpe_encode`: cut a new text into tokens with those merges;
# 3. `mask_tokens`: BERT's masked-language-model corruption of a batch, and its labels;
# 4. `causal_lm_loss`: GPT's next-token loss, padding left out;
# 5. `sample_next`: drawing the next token with a temperature, top-k and top-p (nucleus) sampling;
# 6. `GPTBlock`: a pre-norm decoder-only block, built from the course's parts of chapters 3 to 5
#    (`MultiHeadAttention`, `LayerNorm`, `PositionwiseFeedForward`, imported below);
# 7. `generate_with_cache`: greedy generation that keeps every block's keys and values, so that each
#    step reads one new position instead of the whole sequence again.
#
# None of them needs a trained model. Each function has a cell for your code (replace
# `raise NotImplementedError()`) and a test cell right after it. Run the test cell: it prints one
# line when your function is right, and otherwise tells you what is wrong and where to look. The
# tests compare your results with a plain implementation of each definition, with PyTorch
# (`F.cross_entropy`, `nn.TransformerEncoderLayer`), with a model read without a cache, and, for the
# functions that draw at random, with the probabilities the rules give, over many seeded draws.
# Graded work is also run against more cases than the ones you see here, so aim for a function that
# is right, not one that passes.
#
# To check the whole notebook from a terminal, in the course's folder:
# `.venv/bin/python -m autograder check exercises/ch07_bert_gpt/bert_gpt.ipynb`.
#
# **Randomness.** `mask_tokens` and `sample_next` draw at random, and they must draw only from the
# `torch.Generator` they are given (`torch.rand(shape, generator=generator)`,
# `torch.randint(n, shape, generator=generator)`, `torch.multinomial(p, 1, generator=generator)`),
# never from PyTorch's global generator (`torch.rand(shape)` alone). Then the same seed always gives
# the same result, whatever ran before, and the tests can tell.

# %% tags=["export"]
from collections.abc import Sequence

import torch
from torch import nn

from reference.attention import scaled_dot_product_attention
from reference.decoder import subsequent_mask
from reference.encoder import LayerNorm, PositionwiseFeedForward
from reference.multihead import MultiHeadAttention, merge_heads, split_heads

# %% [markdown]
# ## 1. Learning subword tokens: byte-pair encoding
#
# A model reads a fixed vocabulary of tokens. Whole words make a huge vocabulary that still misses
# new words; single characters make sequences long and leave the model to learn spelling.
# **Byte-pair encoding** (BPE, Sennrich et al. 2016, used by GPT-2 on bytes) sits in between: start
# from the smallest units and, again and again, glue together the two neighbours that occur
# together most often. Frequent words end up as one token, rare ones as a few pieces, and nothing
# is ever unknown.
#
# Here the units are **bytes**: the text's UTF-8 encoding, `list(text.encode("utf-8"))`, gives the
# first tokens, ids 0 to 255 (an `é` is two bytes, `0xC3 0xA9`). Each merge makes a new token, and
# the `k`-th merge (counting from 0) gets the id `256 + k`. Write `bpe_train(text, num_merges)`
# returning the merges, a list of pairs of ids `[(a, b), ...]` in the order they were learnt:
#
# 1. Start from the bytes of `text`.
# 2. Count every pair of neighbouring tokens: the pairs `(ids[i], ids[i + 1])` for every position
#    `i`, so in `a a a` the pair `(a, a)` occurs **twice** (positions 0 and 1).
# 3. Take the most frequent pair. When several pairs are equally frequent, take the one whose
#    **first occurrence comes first** in the sequence. (If you count with a `dict`, filled from left
#    to right, `max(counts, key=counts.get)` does exactly that: a dict remembers the order in which
#    its keys were added, and `max` keeps the first of equal maxima.)
# 4. If even that pair occurs only once, stop: merging it would add a token and save nothing.
#    Stop too when fewer than two tokens are left.
# 5. Otherwise replace its occurrences, **from left to right**, by the new id `256 + k`: where
#    the pair is found, write the new id and continue after the pair, so in `a a a` the merge of
#    `(a, a)` gives `aa a`, not `a aa`. Append the pair to the merges, and go back to step 2 until
#    `num_merges` merges are made.
#
# Raise `ValueError`, with a message that names `num_merges`, when it is negative. The test compares your merges with a plain
# implementation of these rules on short texts (ASCII, accented, repetitive) and on a piece of
# Python's own source code, and names the rule that differs when a merge does.
#
# The helpers below are given: `bpe_decode` turns ids back into text, and `bpe_vocabulary` lists
# the bytes each id stands for.

# %% tags=["export"]
def bpe_vocabulary(merges: Sequence[tuple[int, int]]) -> dict[int, bytes]:
    """The bytes each id stands for: ids 0-255 are single bytes, id 256 + k the k-th merge's pair."""
    vocabulary = {i: bytes([i]) for i in range(256)}
    for k, (a, b) in enumerate(merges):
        vocabulary[256 + k] = vocabulary[a] + vocabulary[b]
    return vocabulary


def bpe_decode(ids: Sequence[int], merges: Sequence[tuple[int, int]]) -> str:
    """The text that a sequence of ids stands for (exactly, when the ids come from the same merges)."""
    vocabulary = bpe_vocabulary(merges)
    return b"".join(vocabulary[i] for i in ids).decode("utf-8", errors="replace")


# %% tags=["solution"] grade_id="bpe_train"
def bpe_train(text: str, num_merges: int) -> list[tuple[int, int]]:
    """Up to num_merges byte-pair merges learnt from text, in order; merge k makes the id 256 + k."""
    ### BEGIN SOLUTION
    if num_merges < 0:
        raise ValueError(f"num_merges must be at least 0, got {num_merges}")
    ids = list(text.encode("utf-8"))
    merges: list[tuple[int, int]] = []
    for k in range(num_merges):
        counts: dict[tuple[int, int], int] = {}
        for pair in zip(ids, ids[1:]):  # every neighbouring pair, overlapping ones included
            counts[pair] = counts.get(pair, 0) + 1
        if not counts:
            break
        best = max(counts, key=counts.get)  # ties: the pair seen first, since a dict keeps that order
        if counts[best] < 2:
            break
        new_id, merged, i = 256 + k, [], 0
        while i < len(ids):
            if i + 1 < len(ids) and (ids[i], ids[i + 1]) == best:
                merged.append(new_id)
                i += 2  # continue after the pair: occurrences never overlap
            else:
                merged.append(ids[i])
                i += 1
        ids = merged
        merges.append(best)
    return merges
    ### END SOLUTION


# %% tags=["test"] grade_id="test_bpe_train" points=3
from autograder import check

check("bert_gpt.bpe_train", bpe_train)
### BEGIN HIDDEN TESTS
check("bert_gpt.bpe_train", bpe_train, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Trained on a piece of Python's standard library, the first merges glue together what Python
# code repeats most: runs of spaces (indentation, 4 and 8 of them), then frequent letter pairs and
# word endings; later merges make longer pieces, such as a docstring's `"""`.

# %%
import inspect
import textwrap

corpus = inspect.getsource(textwrap)[:12000]
merges = bpe_train(corpus, 120)
vocabulary = bpe_vocabulary(merges)
print("the first 20 merges:", ", ".join(repr(vocabulary[256 + k].decode("utf-8", errors="replace")) for k in range(20)))
print("some later ones:    ", ", ".join(repr(vocabulary[256 + k].decode("utf-8", errors="replace")) for k in range(100, 120)))

# %% [markdown]
# ## 2. Encoding a new text
#
# The merges are the tokenizer. To cut any text into tokens, start again from its bytes and apply
# the merges **one after another, in the order they were learnt**: merge 0 everywhere in the
# sequence (left to right, never overlapping, as in training), then merge 1 everywhere, and so on.
# Applied to the training text itself this retraces training exactly; applied to a new text it
# uses whatever merges fit, and a byte that no merge covers stays a token of its own, so every
# text can be encoded, even one with characters training never saw.
#
# Write `bpe_encode(text, merges)` returning the ids as a list of ints. The order matters: with
# the merges `[(b, c), (a, b)]` the text `abc` becomes `a` + `bc` (the pair `(a, b)` is gone by
# the time its turn comes), whereas taking the longest known piece from the left, as WordPiece
# does, would give `ab` + `c`. The test compares your ids with its own encoder on texts with and
# without the training text's words, checks that `bpe_decode` gives your text back exactly, and
# checks that encoding the training text gives as many tokens as training left.

# %% tags=["solution"] grade_id="bpe_encode"
def bpe_encode(text: str, merges: Sequence[tuple[int, int]]) -> list[int]:
    """The ids of text under the merges, applied in the order they were learnt."""
    ### BEGIN SOLUTION
    ids = list(text.encode("utf-8"))
    for k, (a, b) in enumerate(merges):
        new_id, merged, i = 256 + k, [], 0
        while i < len(ids):
            if i + 1 < len(ids) and ids[i] == a and ids[i + 1] == b:
                merged.append(new_id)
                i += 2
            else:
                merged.append(ids[i])
                i += 1
        ids = merged
    return ids
    ### END SOLUTION


# %% tags=["test"] grade_id="test_bpe_encode" points=2
check("bert_gpt.bpe_encode", bpe_encode)
### BEGIN HIDDEN TESTS
check("bert_gpt.bpe_encode", bpe_encode, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# A line of new code splits into the pieces the corpus made common; the tokens are shown between
# bars. Encoding is lossless: `bpe_decode` gives back exactly the text, and the tokens are far
# fewer than its bytes.

# %%
line = "    def wrap_lines(self, text, width=70):  # naïve wrapping"
ids = bpe_encode(line, merges)
print("|".join(vocabulary[i].decode("utf-8", errors="replace") for i in ids))
print(f"{len(line.encode('utf-8'))} bytes -> {len(ids)} tokens; round trip exact: {bpe_decode(ids, merges) == line}")

# %% [markdown]
# ## 3. BERT: the masked language model
#
# An encoder sees every token of its input, so "predict the next word" would be no task at all:
# the answer is in the input. BERT (Devlin et al. 2019) hides some tokens instead and trains the
# encoder to recover them from both sides. Of the ordinary tokens of a sequence, BERT **chooses
# 15%**; the loss is computed at the chosen positions only. A chosen token is
#
# * replaced by `[MASK]` with probability 0.8,
# * replaced by a **random ordinary token** with probability 0.1,
# * **left unchanged** with probability 0.1.
#
# Why not always `[MASK]`? The token `[MASK]` never occurs when the model is later fine-tuned on
# real sentences. Since any token may secretly be the one to predict (possibly replaced, possibly
# itself), the model has to build a good representation of every position, not only of `[MASK]`.
# Special tokens (`[PAD]`, `[CLS]`, `[SEP]`, `[MASK]`, ...) are never chosen: there is nothing to
# learn from predicting them.
#
# Write `mask_tokens(ids, mask_id, vocab_size, special_ids, generator, rate=0.15)`:
#
# * `ids`: a `LongTensor` of shape `(B, T)`, token ids below `vocab_size`; it must **not be
#   modified** (clone it before writing);
# * `special_ids`: the ids of the special tokens, `mask_id` among them; the **ordinary** ids are
#   all the others in `range(vocab_size)`;
# * choose each position holding an ordinary token independently with probability `rate`
#   (BERT's 0.15); never choose a special token;
# * for each chosen position, draw which of the three things happens (0.8, 0.1, 0.1) with **one**
#   uniform number `u` (`torch.rand` with `generator`): `u < 0.8` puts `[MASK]`, `0.8 <= u < 0.9` a
#   random ordinary id, drawn uniformly from the ordinary ids (it may by chance be the original
#   token), and the rest keep their token; a second draw that overwrites some `[MASK]`s would
#   change the shares;
# * return `(inputs, labels)`, both `LongTensor`s of shape `(B, T)`: `inputs` is `ids` with the
#   replacements made, and `labels` holds the original id at the chosen positions and **-100**
#   everywhere else, the value `F.cross_entropy` ignores by default (`ignore_index=-100`);
# * draw everything from `generator`; raise `ValueError`, with a message that names `rate`, when
#   `rate` is not in (0, 1].
#
# The test masks large batches with seeded generators and checks, with a 5-sigma binomial bound
# (far beyond what chance produces), that about `rate` of the ordinary tokens are chosen and that
# the chosen ones split 80/10/10, with each ordinary id equally likely as a random replacement.
# It checks exactly that special tokens are never chosen nor drawn, that unchosen positions are
# unchanged with label -100, that labels hold the original ids, that the same seed gives the same
# result and another seed another one.

# %% tags=["solution"] grade_id="mask_tokens"
def mask_tokens(
    ids: torch.Tensor,
    mask_id: int,
    vocab_size: int,
    special_ids: Sequence[int],
    generator: torch.Generator,
    rate: float = 0.15,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking of ids (B, T): (inputs, labels), labels -100 where no token was chosen."""
    ### BEGIN SOLUTION
    if not 0 < rate <= 1:
        raise ValueError(f"rate must be in (0, 1], got {rate}")
    special = set(special_ids)
    ordinary = torch.tensor([i for i in range(vocab_size) if i not in special], dtype=ids.dtype)  # (K,)
    is_special = torch.isin(ids, torch.tensor(sorted(special), dtype=ids.dtype))  # (B, T)
    chosen = (torch.rand(ids.shape, generator=generator) < rate) & ~is_special  # (B, T)
    what = torch.rand(ids.shape, generator=generator)  # (B, T): below 0.8 mask, below 0.9 random, else keep
    random_ids = ordinary[torch.randint(len(ordinary), ids.shape, generator=generator)]  # (B, T)
    inputs = ids.clone()
    inputs[chosen & (what < 0.8)] = mask_id
    replace = chosen & (what >= 0.8) & (what < 0.9)
    inputs[replace] = random_ids[replace]
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))  # (B, T)
    return inputs, labels
    ### END SOLUTION


# %% tags=["test"] grade_id="test_mask_tokens" points=3
check("bert_gpt.mask_tokens", mask_tokens)
### BEGIN HIDDEN TESTS
check("bert_gpt.mask_tokens", mask_tokens, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# A pair of sentences as BERT reads them, with the masking rate raised to 0.4 so that more is
# seen: `[CLS]` first, `[SEP]` after each sentence, padding at the end. A dot in the last row
# marks a position without a label.

# %%
words = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "the", "model", "reads", "both", "sides", "of", "a", "word", "to", "fill",
         "in", "gap", "each"]
sentence = "[CLS] the model reads both sides of a word [SEP] each gap to fill in [SEP] [PAD] [PAD]".split()
ids = torch.tensor([[words.index(w) for w in sentence]])
inputs, labels = mask_tokens(ids, mask_id=3, vocab_size=len(words), special_ids=[0, 1, 2, 3],
                             generator=torch.Generator().manual_seed(4), rate=0.4)
width = max(map(len, words)) + 1
print("original:", "".join(w.ljust(width) for w in sentence))
print("input:   ", "".join(words[i].ljust(width) for i in inputs[0].tolist()))
print("label:   ", "".join((words[i] if i != -100 else ".").ljust(width) for i in labels[0].tolist()))

# %% [markdown]
# ## 4. GPT: the next-token loss
#
# A decoder-only model reads a sequence through causal self-attention (chapter 5's mask): the
# output at position $t$ has seen the tokens $x_1, \dots, x_t$ and nothing after. So it can be
# asked, **at every position at once**, for the next token. With logits $z_{b,t} \in \mathbb{R}^V$
# at position $t$ of sequence $b$, the loss is the mean, over every position whose next token is
# real, of the cross-entropy against that next token:
#
# $$\mathcal{L} = -\frac{1}{N} \sum_{(b,t)\,:\, x_{b,t+1} \ne \text{pad}}
#     \log \operatorname{softmax}(z_{b,t})_{x_{b,t+1}},$$
#
# where $N$ is the number of such positions in the whole batch (every real target weighs the same;
# a long sequence counts for more than a short one).
#
# Write `causal_lm_loss(logits, ids, pad_id)`:
#
# * `logits` of shape `(B, T, V)` are the model's outputs for the input `ids` of shape `(B, T)`;
# * position `t` predicts `ids[:, t + 1]`: the logits of positions `0 .. T-2` meet the targets
#   `ids[:, 1:]`, and the logits of the last position have nothing to predict;
# * sequences are padded at the end with `pad_id`: a target equal to `pad_id` is left out of the
#   sum and of the count $N$; when every target is padding, $N = 0$ and the result is NaN (0 / 0),
#   as `F.cross_entropy` gives;
# * return a 0-dimensional tensor in the dtype of `logits`, through which gradients flow.
#
# You may use `F.cross_entropy` (its `ignore_index` argument) or `torch.log_softmax`; the point is
# the shift. The test compares your loss with `F.cross_entropy` on tensors it shifts itself.

# %% tags=["solution"] grade_id="causal_lm_loss"
def causal_lm_loss(logits: torch.Tensor, ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Mean next-token cross-entropy: logits[:, t] (B, T, V) predict ids[:, t + 1]; padding ignored."""
    ### BEGIN SOLUTION
    predictions = logits[:, :-1]  # (B, T-1, V): the last position has no next token
    targets = ids[:, 1:]  # (B, T-1): the token each position must predict
    log_probs = torch.log_softmax(predictions, dim=-1)  # (B, T-1, V)
    nll = -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T-1)
    real = targets != pad_id  # (B, T-1)
    return nll[real].sum() / real.sum()
    ### END SOLUTION


# %% tags=["test"] grade_id="test_causal_lm_loss" points=2
check("bert_gpt.causal_lm_loss", causal_lm_loss)
### BEGIN HIDDEN TESTS
check("bert_gpt.causal_lm_loss", causal_lm_loss, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# A model that knows nothing spreads its probability evenly over the vocabulary; its loss is then
# $\log V$ whatever the text. That is where the training of a language model starts.

# %%
import math

V = 500
uniform = torch.zeros(2, 12, V)
ids = torch.randint(1, V, (2, 12), generator=torch.Generator().manual_seed(0))
ids[1, 8:] = 0  # padding
print(f"loss of uniform logits: {causal_lm_loss(uniform, ids, pad_id=0).item():.4f};  log V = {math.log(V):.4f}")

# %% [markdown]
# ## 5. GPT: choosing the next token
#
# To write, a GPT model computes the logits of the next token, draws one, appends it, and repeats.
# How it draws shapes the text: always the most likely token (greedy decoding) is repetitive;
# drawing from the full distribution now and then picks an absurd token from the long tail. Three
# knobs, applied in this order to each row of logits $z$:
#
# 1. **Temperature** $\tau$: sample from $\operatorname{softmax}(z / \tau)$. Below 1 it sharpens
#    the distribution, above 1 it flattens it; $\tau = 0$ means greedy, `argmax` of the logits.
# 2. **Top-k** (`top_k > 0`): keep only the `top_k` tokens with the largest logits (all of them
#    when `top_k` is at least the vocabulary size; `top_k=0` keeps every token). `top_k=1` is greedy.
# 3. **Top-p**, the nucleus (Holtzman et al. 2020), with `top_p` in (0, 1]: take the probabilities
#    of the tokens still kept, renormalised after steps 1 and 2, sort them from the most likely
#    down, and keep the **smallest** set of most likely tokens whose probabilities add up to at
#    least `top_p`. So a token is kept when the tokens more likely than it hold less than `top_p`
#    together, and the most likely token is always kept. `top_p=1` keeps every token.
#
# Then renormalise over what is kept and draw one token per row. The nucleus adapts where top-k
# cannot: after "the capital of France is", one token holds nearly all the probability and the
# nucleus is that token; after "my favourite food is", it holds many.
#
# Write `sample_next(logits, temperature=1.0, top_k=0, top_p=1.0, generator=None)`: `logits` of
# shape `(B, V)`, returning a `LongTensor` of shape `(B,)`, row `b`'s drawn token. Greedy choices
# (temperature 0, or `top_k=1`) draw nothing. Draw with `torch.multinomial(probs, 1,
# generator=generator)`, so that all randomness comes from `generator`; a token removed by
# top-k or top-p must get probability exactly 0 (set its logit to `-inf` before the softmax, or
# its probability to 0). Raise `ValueError`, with a message that names the argument, for a
# negative temperature, a negative `top_k`, or a `top_p` outside (0, 1].
#
# The test draws many rows from a few distributions and checks that tokens outside the top-k or the
# nucleus are never drawn and that each kept token is drawn as often as its renormalised
# probability says, within a 5-sigma binomial bound; greedy choices must be exact.

# %% tags=["solution"] grade_id="sample_next"
def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One token per row of logits (B, V), shape (B,): temperature, then top-k, then top-p, then a draw."""
    ### BEGIN SOLUTION
    if temperature < 0:
        raise ValueError(f"temperature must be at least 0 (0 is greedy), got {temperature}")
    if top_k < 0:
        raise ValueError(f"top_k must be at least 0 (0 keeps every token), got {top_k}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if temperature == 0 or top_k == 1:
        return logits.argmax(dim=-1)  # (B,)
    scores = logits.double() / temperature  # (B, V)
    if 0 < top_k < scores.shape[-1]:
        kth = scores.topk(top_k, dim=-1).values[:, -1:]  # (B, 1): the k-th largest score of each row
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1:
        probs, order = torch.softmax(scores, dim=-1).sort(dim=-1, descending=True)  # (B, V) each
        ahead = probs.cumsum(dim=-1) - probs  # (B, V): the mass of the tokens more likely than each
        drop_sorted = ahead >= top_p  # the most likely token has 0 ahead of it: always kept
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)  # (B, V), vocabulary order
        scores = scores.masked_fill(drop, float("-inf"))
    probs = torch.softmax(scores, dim=-1)  # (B, V), zero where a token was removed
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)
    ### END SOLUTION


# %% tags=["test"] grade_id="test_sample_next" points=3
check("bert_gpt.sample_next", sample_next)
### BEGIN HIDDEN TESTS
check("bert_gpt.sample_next", sample_next, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# How often each token is drawn, out of 20,000 draws from one row of logits: temperature reshapes
# the whole distribution, top-k and top-p cut its tail.

# %%
import matplotlib.pyplot as plt

row = torch.tensor([[3.0, 2.4, 2.0, 1.2, 1.0, 0.5, 0.1, -0.5, -1.0, -2.0]])
settings = [("temperature 1", {}), ("temperature 0.5", {"temperature": 0.5}), ("temperature 2", {"temperature": 2.0}),
            ("top_k 3", {"top_k": 3}), ("top_p 0.8", {"top_p": 0.8})]
fig, axes = plt.subplots(1, len(settings), figsize=(12, 2.6), sharey=True)
for ax, (title, kwargs) in zip(axes, settings):
    drawn = sample_next(row.expand(20000, -1), generator=torch.Generator().manual_seed(0), **kwargs)
    ax.bar(range(row.shape[1]), torch.bincount(drawn, minlength=row.shape[1]) / 20000)
    ax.set(title=title, xlabel="token")
axes[0].set(ylabel="share of draws")
plt.tight_layout()
plt.show()

# %% [markdown]
# The smallest language model there is, a table of how often each token follows each other one
# (a bigram model) counted over the BPE tokens of the corpus, writes "Python" with `sample_next`.
# Greedy decoding soon loops; sampling wanders, less so with a low temperature and a nucleus.

# %%
tokens = torch.tensor(bpe_encode(corpus, merges))
V = 256 + len(merges)
counts = torch.zeros(V, V)
counts.index_put_((tokens[:-1], tokens[1:]), torch.ones(len(tokens) - 1), accumulate=True)
bigram_logits = torch.log(counts + 1e-3)  # (V, V): row a, the logits of the token after a


def generate(start: str, steps: int, **kwargs) -> str:
    ids = bpe_encode(start, merges)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        ids.append(int(sample_next(bigram_logits[ids[-1]].unsqueeze(0), generator=g, **kwargs)))
    return bpe_decode(ids, merges)


for kwargs in ({"temperature": 0}, {"temperature": 1.0}, {"temperature": 0.7, "top_p": 0.9}):
    print(f"--- {kwargs}\n{generate('def ', 40, **kwargs)}\n")


# %% [markdown]
# ## 6. GPT's block: pre-norm, causal self-attention
#
# A GPT model is a stack of identical blocks, each chapter 5's decoder layer without the
# cross-attention (there is no encoder to look at). Two sub-layers remain: causal multi-head
# self-attention and the position-wise feed-forward network. GPT-2 (Radford et al. 2019) also moved
# the LayerNorm. The paper, and your `EncoderLayer` and `DecoderLayer`, normalise the residual sum
# (**post-norm**); GPT-2 normalises the input of each sub-layer and leaves the residual path
# untouched (**pre-norm**):
#
# $$\text{post-norm (chapter 4):}\quad x \leftarrow \operatorname{LayerNorm}\big(x + \operatorname{Sublayer}(x)\big)
# \qquad\qquad
# \text{pre-norm (GPT-2):}\quad x \leftarrow x + \operatorname{Sublayer}\big(\operatorname{LayerNorm}(x)\big)$$
#
# With pre-norm, the input of the first block reaches the output of the last one through nothing but
# additions, so the gradient does too, however deep the stack; such stacks train without the careful
# warm-up that post-norm needs. The price: the stream that leaves the last block has never been
# normalised, so the model adds one final LayerNorm after the stack (the `GPT` class below does).
#
# Write `GPTBlock(d_model, h, d_ff, dropout=0.1)` with these submodules, in this order of use:
#
# * `norm1`: chapter 4's `LayerNorm(d_model)`, applied to the input of the attention;
# * `self_attn`: chapter 3's `MultiHeadAttention(d_model, h, dropout)`;
# * `dropout1`: `nn.Dropout(dropout)`, on the attention's output before it is added to `x`;
# * `norm2`: a second `LayerNorm(d_model)`, with its own $\gamma$ and $\beta$, for the feed-forward network's input;
# * `feed_forward`: chapter 4's `PositionwiseFeedForward(d_model, d_ff, dropout)`;
# * `dropout2`: `nn.Dropout(dropout)`, on the feed-forward network's output before it is added to `x`.
#
# `forward(x)` takes `x` of shape `(B, T, d_model)` and returns the same shape. The block makes its
# own causal mask (chapter 5's `subsequent_mask(T)`, True where a query may attend): a GPT block is
# always causal, so position $t$'s output depends on positions $0..t$ only. In eval mode
# (`block.eval()`) dropout is off and the block is deterministic.
#
# The test loads fixed weights into your block by these names and compares it with PyTorch's
# `nn.TransformerEncoderLayer(norm_first=True)` holding the same weights, under a causal mask. Chapter
# 4's `LayerNorm` and `nn.LayerNorm` compute the same function (the biased variance, $\epsilon$ inside
# the square root), so the two agree to rounding. The test also changes future tokens and checks that
# no earlier output moves, and replays your block's dropout in training mode. Do not use
# `nn.TransformerEncoderLayer`, `nn.TransformerDecoderLayer` or `nn.MultiheadAttention` in your answer:
# they are what your block is checked against.

# %% tags=["solution"] grade_id="GPTBlock"
class GPTBlock(nn.Module):
    """One GPT block (pre-norm): x + Dropout(Attention(LayerNorm(x))) under a causal mask, then x + Dropout(FFN(LayerNorm(x))).

    Submodules: ``norm1``, ``self_attn``, ``dropout1``, ``norm2``, ``feed_forward``, ``dropout2``.
    """

    def __init__(self, d_model: int, h: int, d_ff: int, dropout: float = 0.1) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        self.norm1 = LayerNorm(d_model)
        self.self_attn = MultiHeadAttention(d_model, h, dropout)
        self.dropout1 = nn.Dropout(dropout)
        # Its own gamma and beta: the feed-forward network's input is not the attention's.
        self.norm2 = LayerNorm(d_model)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.dropout2 = nn.Dropout(dropout)
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, d_model) -> (B, T, d_model); position t sees positions 0..t only."""
        ### BEGIN SOLUTION
        mask = subsequent_mask(x.shape[1]).to(x.device)  # (T, T), True where a query may attend
        normed = self.norm1(x)  # (B, T, d_model)
        # Pre-norm: the sub-layer reads a normalised copy; the residual path carries x itself.
        x = x + self.dropout1(self.self_attn(normed, normed, normed, attn_mask=mask))  # (B, T, d_model)
        return x + self.dropout2(self.feed_forward(self.norm2(x)))  # (B, T, d_model)
        ### END SOLUTION


# %% tags=["test"] grade_id="test_GPTBlock" points=4
check("bert_gpt.GPTBlock", GPTBlock)
### BEGIN HIDDEN TESTS
check("bert_gpt.GPTBlock", GPTBlock, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# The causal promise, measured: change the last two tokens and the first positions' outputs do not
# move at all.

# %%
torch.manual_seed(0)
block = GPTBlock(d_model=16, h=4, d_ff=32).eval()
x = torch.randn(1, 6, 16)  # (B, T, d_model)
x_new = x.clone()
x_new[:, 4:] = torch.randn(1, 2, 16)  # new tokens at positions 4 and 5
with torch.no_grad():
    change = (block(x) - block(x_new)).abs().amax(dim=-1)  # (B, T): the largest change at each position
print("largest change per position:", change[0])

# %% [markdown]
# ## 7. Writing fast: the key/value cache
#
# The whole model is given: token embeddings plus **learned** position embeddings (GPT, like BERT,
# learns a vector per position instead of chapter 6's sinusoids), a stack of your `GPTBlock`s, a
# final LayerNorm, and an output layer whose weight matrix **is** the token embedding's (weight tying,
# as in the paper's section 3.4: one matrix both reads and writes tokens).

# %% tags=["export"]
class GPT(nn.Module):
    """A decoder-only language model: embeddings, N GPTBlocks, a final LayerNorm and a tied output layer.

    Submodules: ``embed`` (vocab_size x d_model), ``pos_embed`` (max_len x d_model), ``dropout``,
    ``blocks`` (N ``GPTBlock``), ``norm`` and ``head`` (d_model -> vocab_size, no bias, its weight
    that of ``embed``).
    """

    def __init__(self, vocab_size: int, d_model: int = 64, h: int = 4, d_ff: int = 256, N: int = 2,
                 max_len: int = 256, dropout: float = 0.1) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos_embed = nn.Embedding(max_len, d_model)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(GPTBlock(d_model, h, d_ff, dropout) for _ in range(N))
        self.norm = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.embed.weight  # weight tying: one (vocab_size, d_model) matrix
        self.max_len = max_len

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, T) -> next-token logits (B, T, vocab_size), reading the whole sequence at once."""
        T = ids.shape[1]
        if T > self.max_len:
            raise ValueError(f"a sequence of {T} tokens is longer than max_len={self.max_len}")
        x = self.dropout(self.embed(ids) + self.pos_embed(torch.arange(T, device=ids.device)))  # (B, T, d_model)
        for block in self.blocks:
            x = block(x)  # (B, T, d_model)
        return self.head(self.norm(x))  # (B, T, vocab_size)


# %% [markdown]
# To write $n$ tokens, the plain way calls `model(ids)` $n$ times on an ever longer sequence and
# keeps only the last position's logits: step $s$ reads all $T_0 + s$ positions again, though all but
# the newest were read, with the same result, the step before. The causal mask is why they never
# change: position $t$ sees nothing after it, so its keys and values at every block are fixed once
# the token at $t$ is known. Keep them, and each step only has to work out the newest position:
#
# * its query, key and value at each block, from that one position;
# * its attention over **all** the keys and values so far: the cached ones, plus its own;
# * the feed-forward network, the final LayerNorm and the output layer, on that one position.
#
# That is the **key/value cache** (KV cache). It turns each step's work from the whole sequence into
# one position, and it is the reason a chat model can answer at reading speed.
#
# Write `generate_with_cache(model, prompt, steps)` for greedy decoding (the most likely token each
# step) with a cache:
#
# * `model` is laid out like `GPT` above: `model.embed`, `model.pos_embed`, `model.blocks` (each
#   with `norm1`, `self_attn`, `norm2`, `feed_forward`), `model.norm` and `model.head`. Use those
#   parts yourself (do not call `model(...)` or a block's `forward`, which read the whole sequence):
#   `block.self_attn.w_q`, `w_k`, `w_v`, `w_o` are its projections and `block.self_attn.h` its
#   number of heads; `split_heads`, `merge_heads` (chapter 3), `scaled_dot_product_attention`
#   (chapter 2) and `subsequent_mask` (chapter 5) are imported. The model is in eval mode: dropout
#   plays no part, and there is no need to call `block.dropout1`.
# * `prompt` is a `LongTensor` of shape `(B, T0)`, every row the same length; the first step reads
#   the whole prompt in one pass (with a causal mask, as in the block: its positions must not see
#   each other's future), and every later step reads the one token the step before produced, at
#   its position in the sequence (the first generated token sits at position `T0`). When
#   `T_new` positions starting at position `start` are read at once, query `t` (at position
#   `start + t`) may see the keys `0 .. start + t`: that mask is the last `T_new` rows of the full
#   causal mask, `subsequent_mask(start + T_new)[start:]`, of shape `(T_new, start + T_new)`.
# * Return `(tokens, logits, cache)`: `tokens` of shape `(B, steps)`, the generated ids; `logits` of
#   shape `(B, steps, V)`, step `s`'s logits, from which token `s` was chosen (argmax over the
#   vocabulary); `cache`, a list with one `(k, v)` pair per block, each of shape
#   `(B, h, T0 + steps - 1, d_k)`: the keys and values of every position read. The last token is
#   returned but never read, so it has no keys yet.
# * Raise `ValueError`, with a message that names `steps`, when `steps` is below 1.
#
# The test compares your logits at every step, your tokens and your cache with the same model read
# without a cache, on batches of one and more rows, and counts the positions each of the model's
# layers reads: reading the whole sequence again at each step is refused, with a message.

# %% tags=["solution"] grade_id="generate_with_cache"
def generate_with_cache(
    model: nn.Module, prompt: torch.Tensor, steps: int
) -> tuple[torch.Tensor, torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """Greedy decoding of steps tokens after prompt (B, T0), each position read once: (tokens, logits, cache)."""
    ### BEGIN SOLUTION
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    cache: list[tuple[torch.Tensor, torch.Tensor]] = []
    new = prompt  # (B, T_new): the positions not read yet, the whole prompt at first
    start = 0  # the position of new[:, 0] in the sequence
    tokens, logits = [], []
    with torch.no_grad():
        for _ in range(steps):
            T_new = new.shape[1]
            x = model.embed(new) + model.pos_embed(torch.arange(start, start + T_new, device=new.device))  # (B, T_new, d_model)
            # New query t sits at position start + t and may see the keys 0 .. start + t.
            mask = subsequent_mask(start + T_new)[start:].to(new.device)  # (T_new, start + T_new)
            for i, block in enumerate(model.blocks):
                attn = block.self_attn
                normed = block.norm1(x)  # (B, T_new, d_model)
                q = split_heads(attn.w_q(normed), attn.h)  # (B, h, T_new, d_k)
                k = split_heads(attn.w_k(normed), attn.h)  # (B, h, T_new, d_k)
                v = split_heads(attn.w_v(normed), attn.h)  # (B, h, T_new, d_k)
                if i < len(cache):
                    k = torch.cat([cache[i][0], k], dim=2)  # (B, h, start + T_new, d_k)
                    v = torch.cat([cache[i][1], v], dim=2)  # (B, h, start + T_new, d_k)
                    cache[i] = (k, v)
                else:
                    cache.append((k, v))
                context, _ = scaled_dot_product_attention(q, k, v, mask)  # (B, h, T_new, d_k)
                x = x + attn.w_o(merge_heads(context))  # (B, T_new, d_model)
                x = x + block.feed_forward(block.norm2(x))  # (B, T_new, d_model)
            step_logits = model.head(model.norm(x[:, -1]))  # (B, V): only the newest position predicts
            next_token = step_logits.argmax(dim=-1)  # (B,)
            tokens.append(next_token)
            logits.append(step_logits)
            start += T_new
            new = next_token.unsqueeze(1)  # (B, 1)
    return torch.stack(tokens, dim=1), torch.stack(logits, dim=1), cache
    ### END SOLUTION


# %% tags=["test"] grade_id="test_generate_with_cache" points=4
check("bert_gpt.generate_with_cache", generate_with_cache)
### BEGIN HIDDEN TESTS
check("bert_gpt.generate_with_cache", generate_with_cache, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# With your cache, an (untrained) `GPT` made of your blocks writes the same tokens as reading the
# whole sequence again at every step, and its logits agree to rounding; the time each way is printed.
# The chapter's page measures the speed-up at several lengths.

# %%
import time


def generate_without_cache(model: nn.Module, prompt: torch.Tensor, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids, all_logits = prompt, []
    with torch.no_grad():
        for _ in range(steps):
            step_logits = model(ids)[:, -1]  # (B, V): the whole sequence read again
            all_logits.append(step_logits)
            ids = torch.cat([ids, step_logits.argmax(dim=-1, keepdim=True)], dim=1)
    return ids[:, prompt.shape[1]:], torch.stack(all_logits, dim=1)


torch.manual_seed(0)
gpt = GPT(vocab_size=100, d_model=64, h=4, d_ff=256, N=4, max_len=256).eval()
prompt = torch.randint(0, 100, (2, 16))
began = time.perf_counter()
plain_tokens, plain_logits = generate_without_cache(gpt, prompt, 120)
plain_time = time.perf_counter() - began
began = time.perf_counter()
cached_tokens, cached_logits, cache = generate_with_cache(gpt, prompt, 120)
cached_time = time.perf_counter() - began
difference = (plain_logits - cached_logits).abs().max().item()
same = torch.equal(plain_tokens, cached_tokens) and difference < 1e-4  # float32 rounding stays far below 1e-4
print("same tokens:", torch.equal(plain_tokens, cached_tokens), f"| largest logit difference: {difference:.1e}")
print("the cache agrees with reading the whole sequence" if same else
      "WRONG: with a cache the logits differ from reading the whole sequence (rounding stays below 1e-4): "
      "your GPTBlock or your generate_with_cache is wrong; their test cells above say which and how")
print("cache of block 0:", tuple(cache[0][0].shape), "= (B, h, T0 + steps - 1, d_k)")
print(f"without a cache {plain_time:.2f} s, with one {cached_time:.2f} s")
