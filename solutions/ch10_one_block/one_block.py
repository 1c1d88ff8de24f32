# %% [markdown]
# # Chapter 10 exercises: one block for everything
#
# A mixture-of-experts language model, a vision Transformer and a speech classifier all run the
# block of chapters 3 to 5. What differs is what goes in and, for the experts, which feed-forward
# network each token meets. You will write the seven pieces that make the difference:
#
# 1. `top_k_router`, which picks the experts each token goes to and how much each one counts;
# 2. `load_balancing_loss`, the Switch Transformer's auxiliary loss that keeps the router from
#    sending everything to one expert;
# 3. `MoEFeedForward`, a feed-forward layer made of several experts, each token sent to k of them
#    in one batch per expert, with a capacity per expert;
# 4. `patchify`, which cuts images into square patches laid out as a sequence;
# 5. `PatchEmbedding`, the vision Transformer's input: patches projected to `d_model`, a class token
#    in front, learned positions added;
# 6. `frame_signal`, which cuts a waveform into overlapping windowed frames;
# 7. `log_mel`, the log-mel spectrogram of those frames: a mel filter bank written from its formula.
#
# Each piece has a cell for your code (replace `raise NotImplementedError()`) and a test cell right
# after it. Run the test cell: it prints one line when your code is right, and otherwise tells you
# what is wrong and where to look. Graded work is also run against more cases than the ones you see
# here, so aim for code that is right, not code that passes.
#
# To check the whole notebook from a terminal, in the course's folder:
# `.venv/bin/python -m autograder check exercises/ch10_one_block/one_block.ipynb`.
#
# Do not use `torch.nn.functional.unfold`, `torch.stft` or `torchaudio` in your answers: the point is
# to build what they do. Chapter 4's `PositionwiseFeedForward`, imported below, is each expert.

# %% tags=["export"]
import math

import torch
from torch import nn

from reference.encoder import PositionwiseFeedForward

# %% [markdown]
# ## 1. Routing each token to k experts
#
# A mixture-of-experts layer holds $E$ feed-forward networks, the experts, and a router: one linear
# map from a token's $d_{\text{model}}$ features to $E$ logits, one per expert. Each token goes to the
# $k$ experts with the largest logits (Mixtral uses $k = 2$ of $E = 8$), and their outputs are added,
# each weighted by a gate. The gates are a softmax over the $k$ chosen logits only, so that they sum
# to 1 whatever the other logits are:
#
# $$\mathcal{T} = \operatorname{top}_k(z), \qquad
#   g_e = \frac{e^{z_e}}{\sum_{e' \in \mathcal{T}} e^{z_{e'}}} \quad (e \in \mathcal{T}).$$
#
# Write `top_k_router(logits, k)`:
#
# * `logits` has shape `(..., E)`; return `(gates, experts)`, both of shape `(..., k)`: `experts`
#   (`torch.long`) lists the chosen experts from the largest logit down, and `gates[..., j]` is the
#   gate of `experts[..., j]`, in the dtype of `logits`;
# * where two logits are equal, the expert with the lower index comes first. `torch.topk` does not
#   promise any order among equal values; a stable sort does;
# * `k` outside `1 .. E` raises `ValueError`.

# %% tags=["solution"] grade_id="top_k_router"
def top_k_router(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k experts with the largest logits, largest first, and their gates: a softmax over those k."""
    ### BEGIN SOLUTION
    E = logits.shape[-1]
    if not 1 <= k <= E:
        raise ValueError(f"k must be between 1 and the number of experts {E}, got {k}")
    # A stable sort keeps equal logits in index order, so ties go to the lower expert.
    order = torch.sort(logits, dim=-1, descending=True, stable=True).indices  # (..., E)
    experts = order[..., :k]  # (..., k)
    chosen = logits.gather(-1, experts)  # (..., k)
    return torch.softmax(chosen, dim=-1), experts
    ### END SOLUTION


# %% tags=["test"] grade_id="test_top_k_router" points=2
from autograder import check

check("one_block.top_k_router", top_k_router)
### BEGIN HIDDEN TESTS
check("one_block.top_k_router", top_k_router, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. The load-balancing loss
#
# Left alone, a router learns to favour the experts that happen to be good early, they get more
# tokens and improve further, and the others starve. The Switch Transformer (Fedus et al., 2021)
# adds a small loss that is smallest when the tokens spread evenly. Over a batch of $N$ tokens, let
# $f_e$ be the fraction of the router's choices that went to expert $e$ and $P_e$ the router's mean
# probability for $e$ (a softmax over all $E$ logits, averaged over the tokens):
#
# $$\mathcal{L}_{\text{balance}} = E \sum_{e=1}^{E} f_e\, P_e,
#   \qquad f_e = \frac{1}{N k} \sum_{t=1}^{N} \#\{j : \text{expert}_{t,j} = e\},
#   \qquad P_e = \frac{1}{N} \sum_{t=1}^{N} p_{t,e}.$$
#
# With $k$ choices per token, each counts: $f$ sums to 1 over the experts. When routing is uniform,
# every $f_e = P_e = 1/E$ and the loss is exactly 1; when every token goes to one expert that the
# router is sure of, it is $E$. $f$ comes from a choice, which has no gradient; $P$ carries the
# gradient back into the router.
#
# Write `load_balancing_loss(router_probs, expert_index, n_experts)`:
#
# * `router_probs` has shape `(..., E)` (each row sums to 1) and `expert_index` `(..., k)`, the
#   experts chosen for the same tokens (`torch.long`); the leading axes are tokens, however many;
# * return a 0-dimensional tensor in the dtype of `router_probs`, through which gradients reach
#   `router_probs`.

# %% tags=["solution"] grade_id="load_balancing_loss"
def load_balancing_loss(router_probs: torch.Tensor, expert_index: torch.Tensor, n_experts: int) -> torch.Tensor:
    """E * sum_e f_e P_e: the fraction of choices each expert got times the router's mean probability for it."""
    ### BEGIN SOLUTION
    probs = router_probs.reshape(-1, n_experts)  # (N, E)
    chosen = expert_index.reshape(probs.shape[0], -1)  # (N, k)
    counts = torch.bincount(chosen.flatten(), minlength=n_experts)  # (E,) choices per expert
    f = counts.to(probs.dtype) / chosen.numel()  # (E,) sums to 1
    P = probs.mean(dim=0)  # (E,)
    return n_experts * (f * P).sum()
    ### END SOLUTION


# %% tags=["test"] grade_id="test_load_balancing_loss" points=2
check("one_block.load_balancing_loss", load_balancing_loss)
### BEGIN HIDDEN TESTS
check("one_block.load_balancing_loss", load_balancing_loss, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# The two ends of the scale: tokens spread evenly, and every token sent to the expert the router is
# sure of.

# %%
E, N = 4, 8
even = torch.full((N, E), 1 / E)
print("uniform routing:  ", load_balancing_loss(even, torch.arange(N)[:, None] % E, E).item())
sure = torch.nn.functional.one_hot(torch.zeros(N, dtype=torch.long), E).float()
print("one expert for all:", load_balancing_loss(sure, torch.zeros(N, 1, dtype=torch.long), E).item())

# %% [markdown]
# ## 3. A feed-forward layer of experts
#
# The layer replaces chapter 4's feed-forward network inside the block. For each token $x_t$ the
# router gives its experts $\mathcal{T}_t$ and gates $g_{t,e}$, and
#
# $$\operatorname{MoE}(x_t) = \sum_{e \in \mathcal{T}_t} g_{t,e}\, \operatorname{FFN}_e(x_t).$$
#
# Each token pays for $k$ experts, whatever $E$ is: a model with 8 experts and $k = 2$ holds four times
# the feed-forward weights of a dense one and computes twice as much per token. That only holds if
# each expert multiplies exactly the tokens sent to it, gathered into one batch: running every expert
# on every token and zeroing the unchosen outputs costs $E$ experts per token, and a loop over tokens
# gives the processor one row at a time.
#
# Accelerators want fixed shapes, so each expert takes at most
#
# $$C = \left\lceil \text{capacity\_factor} \cdot \frac{N k}{E} \right\rceil$$
#
# tokens per call, $N$ being the number of tokens in the call. The tokens sent to an expert are served
# in the order they come in the batch (flattened: batch row, then position); those past the first $C$
# are dropped by that expert: its term is left out of their sum (the other gates are not changed), and
# the block's residual connection carries them past the layer.
#
# Write the module `MoEFeedForward(d_model, d_ff, n_experts, k, capacity_factor=None)`:
#
# * submodules `router`, an `nn.Linear(d_model, n_experts, bias=False)`, and `experts`, an
#   `nn.ModuleList` of `n_experts` chapter-4 `PositionwiseFeedForward(d_model, d_ff, dropout=0.0)`;
#   attributes `n_experts`, `k` and `capacity_factor` (`None`: no capacity, no token dropped);
# * `forward(x)` takes `x` of shape `(B, T, d_model)` and returns `(y, balance)`: `y` of the shape of
#   `x`, and `balance`, the load-balancing loss of this call's routing (over all `B * T` tokens, the
#   choices counted before any is dropped), for the training loop to add to its loss;
# * route with your `top_k_router` on the router's logits, and take `load_balancing_loss` of the softmax
#   over all `E` logits.

# %% tags=["solution"] grade_id="MoEFeedForward"
class MoEFeedForward(nn.Module):
    """A mixture of n_experts feed-forward networks, each token sent to k of them by a learned router.

    Submodules ``router`` (d_model -> n_experts, no bias) and ``experts`` (an nn.ModuleList of
    chapter 4's PositionwiseFeedForward); attributes ``n_experts``, ``k``, ``capacity_factor``.
    """

    def __init__(self, d_model: int, d_ff: int, n_experts: int, k: int, capacity_factor: float | None = None) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        self.router = nn.Linear(d_model, n_experts, bias=False)
        self.experts = nn.ModuleList(PositionwiseFeedForward(d_model, d_ff, dropout=0.0) for _ in range(n_experts))
        self.n_experts, self.k, self.capacity_factor = n_experts, k, capacity_factor
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, T, d_model) -> ((B, T, d_model), the load-balancing loss of this call)."""
        ### BEGIN SOLUTION
        tokens = x.reshape(-1, x.shape[-1])  # (N, d_model)
        N = tokens.shape[0]
        logits = self.router(tokens)  # (N, E)
        gates, experts = top_k_router(logits, self.k)  # (N, k) each
        balance = load_balancing_loss(torch.softmax(logits, dim=-1), experts, self.n_experts)
        capacity = N * self.k if self.capacity_factor is None else math.ceil(self.capacity_factor * N * self.k / self.n_experts)
        y = torch.zeros_like(tokens)  # (N, d_model)
        for e, expert in enumerate(self.experts):
            token, slot = (experts == e).nonzero(as_tuple=True)  # in token order: nonzero reads row by row
            token, slot = token[:capacity], slot[:capacity]  # the first C tokens sent to e; the rest dropped
            if len(token):
                y.index_add_(0, token, gates[token, slot, None] * expert(tokens[token]))  # (n_e, d_model) added back
        return y.reshape(x.shape), balance
        ### END SOLUTION


# %% tags=["test"] grade_id="test_MoEFeedForward" points=4
check("one_block.MoEFeedForward", MoEFeedForward)
### BEGIN HIDDEN TESTS
check("one_block.MoEFeedForward", MoEFeedForward, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# How many tokens each expert was sent, and how many it dropped, at three capacity factors:

# %%
torch.manual_seed(0)
moe = MoEFeedForward(d_model=16, d_ff=32, n_experts=4, k=2)
x = torch.randn(2, 32, 16)  # (B, T, d_model): 64 tokens, 128 choices, 32 per expert if even
_, chosen = top_k_router(moe.router(x.reshape(-1, 16)), 2)  # (64, 2)
sent = torch.bincount(chosen.flatten(), minlength=4)  # (E,)
for factor in (None, 1.0, 1.25):
    moe.capacity_factor = factor
    y, balance = moe(x)
    C = 128 if factor is None else math.ceil(factor * 128 / 4)
    print(f"capacity factor {factor}: C = {C}, sent {sent.tolist()}, dropped {(sent - C).clamp(min=0).tolist()}, "
          f"balance loss {balance.item():.3f}")

# %% [markdown]
# ## 4. Images as sequences of patches
#
# A vision Transformer (Dosovitskiy et al., 2021) reads an image the way the encoder reads a sentence.
# The image, $C$ channels of $H \times W$ pixels, is cut into square patches of $p \times p$ pixels,
# $N = (H/p)(W/p)$ of them, and each patch, flattened to $C p^2$ numbers, becomes one token.
#
# Write `patchify(images, patch)`:
#
# * `images` has shape `(B, C, H, W)`; `H` and `W` must be multiples of `patch` (otherwise raise
#   `ValueError`);
# * return `(B, N, C * patch * patch)`: the patches in reading order (left to right along the top row
#   of patches, then the next row), each flattened channel first, then pixel row, then pixel column,
#   the order in which `nn.Conv2d` holds a kernel's weights, `weight[d, c, i, j]`.

# %% tags=["solution"] grade_id="patchify"
def patchify(images: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, (H/p) (W/p), C p p): the image's p x p patches in reading order, flattened."""
    ### BEGIN SOLUTION
    B, C, H, W = images.shape
    if patch < 1 or H % patch or W % patch:
        raise ValueError(f"an image of {H} x {W} pixels does not cut into patches of {patch} x {patch}")
    rows, cols = H // patch, W // patch
    grid = images.reshape(B, C, rows, patch, cols, patch)  # (B, C, rows, i, cols, j)
    grid = grid.permute(0, 2, 4, 1, 3, 5)  # (B, rows, cols, C, i, j)
    return grid.reshape(B, rows * cols, C * patch * patch)
    ### END SOLUTION


# %% tags=["test"] grade_id="test_patchify" points=2
check("one_block.patchify", patchify)
### BEGIN HIDDEN TESTS
check("one_block.patchify", patchify, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. The patch embedding
#
# Each flattened patch is projected to $d_{\text{model}}$ features by one linear map $W_E$, shared by
# every patch. In front of the patches goes a learned class token $x_{\text{class}}$, whose output at
# the top of the encoder is what the classifier reads, as BERT's `[CLS]` in chapter 7; and a learned
# position vector is added to every token, class token included (the patches of an image have no
# order a sinusoid would suit better):
#
# $$z_0 = [\,x_{\text{class}};\ x^1_p W_E;\ \dots;\ x^N_p W_E\,] + E_{\text{pos}},$$
#
# with $W_E \in \mathbb{R}^{(C p^2) \times d_{\text{model}}}$ and
# $E_{\text{pos}} \in \mathbb{R}^{(N + 1) \times d_{\text{model}}}$.
#
# Write the module `PatchEmbedding(in_channels, patch, d_model, n_patches)`:
#
# * `proj`, an `nn.Linear(in_channels * patch * patch, d_model)` (with its bias); `cls_token`, an
#   `nn.Parameter` of shape `(1, 1, d_model)`; `positions`, an `nn.Parameter` of shape
#   `(1, n_patches + 1, d_model)`; both parameters start as normal draws with standard deviation 0.02;
#   attribute `patch`;
# * `forward(images)`, with `images` of shape `(B, in_channels, H, W)`, returns `(B, n_patches + 1,
#   d_model)`, the class token first. Images that do not cut into `n_patches` patches raise `ValueError`.
#
# The projection of patches is a convolution whose kernel is the patch and whose stride is the patch:
# the test holds your module against `nn.Conv2d(in_channels, d_model, patch, stride=patch)` with the
# same weights.

# %% tags=["solution"] grade_id="PatchEmbedding"
class PatchEmbedding(nn.Module):
    """A class token, then each p x p patch projected to d_model, with a learned position added to each.

    Submodule ``proj``; parameters ``cls_token`` (1, 1, d_model) and ``positions`` (1, n_patches + 1, d_model).
    """

    def __init__(self, in_channels: int, patch: int, d_model: int, n_patches: int) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        self.patch = patch
        self.proj = nn.Linear(in_channels * patch * patch, d_model)
        self.cls_token = nn.Parameter(torch.randn(1, 1, d_model) * 0.02)
        self.positions = nn.Parameter(torch.randn(1, n_patches + 1, d_model) * 0.02)
        ### END SOLUTION

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, n_patches + 1, d_model)."""
        ### BEGIN SOLUTION
        patches = patchify(images, self.patch)  # (B, N, C p p)
        if patches.shape[1] + 1 != self.positions.shape[1]:
            raise ValueError(f"the images cut into {patches.shape[1]} patches, the embedding has positions for "
                             f"{self.positions.shape[1] - 1}")
        tokens = self.proj(patches)  # (B, N, d_model)
        cls = self.cls_token.expand(images.shape[0], -1, -1)  # (B, 1, d_model)
        return torch.cat([cls, tokens], dim=1) + self.positions  # (B, N + 1, d_model)
        ### END SOLUTION


# %% tags=["test"] grade_id="test_PatchEmbedding" points=3
check("one_block.PatchEmbedding", PatchEmbedding)
### BEGIN HIDDEN TESTS
check("one_block.PatchEmbedding", PatchEmbedding, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# The projection is a convolution with stride equal to its kernel: give `nn.Conv2d` the same weights and
# compare.

# %%
torch.manual_seed(0)
embed = PatchEmbedding(in_channels=3, patch=4, d_model=8, n_patches=4)
images = torch.randn(2, 3, 8, 8)
conv = nn.Conv2d(3, 8, kernel_size=4, stride=4)
conv.weight.data = embed.proj.weight.data.reshape(8, 3, 4, 4)  # (d_model, C, p, p)
conv.bias.data = embed.proj.bias.data
by_conv = conv(images).flatten(2).transpose(1, 2)  # (B, d_model, 2, 2) -> (B, 4, d_model)
mine = embed(images)[:, 1:] - embed.positions[:, 1:]  # the patches' tokens, before their positions
print("patch embedding == strided convolution:", torch.allclose(mine, by_conv, atol=1e-6))

# %% [markdown]
# ## 6. Sound as a sequence of frames
#
# A recording is a waveform, $S$ samples per second of air pressure. Speech changes over tens of
# milliseconds, so a speech model reads it in frames: windows of `frame_length` samples (25 ms, say),
# one every `hop` samples (10 ms), overlapping. Frame $t$ holds the samples $t \cdot \text{hop}, \dots,
# t \cdot \text{hop} + \text{frame\_length} - 1$, multiplied by a Hann window, which brings both ends
# smoothly to zero so that cutting the frame out does not add frequencies of its own:
#
# $$w[n] = \tfrac12 - \tfrac12 \cos\frac{2 \pi n}{L}, \qquad n = 0, \dots, L - 1,
#   \qquad \text{frames}[t, n] = w[n]\; x[t \cdot \text{hop} + n].$$
#
# ($L$ = `frame_length`; this is the "periodic" window, `torch.hann_window(L)`, which you may use.)
#
# Write `frame_signal(wave, frame_length, hop)`:
#
# * `wave` has shape `(..., S)`; return `(..., n_frames, frame_length)` with
#   `n_frames = 1 + (S - frame_length) // hop`: every frame that fits whole, none padded;
# * a wave shorter than one frame, or `frame_length` or `hop` below 1, raises `ValueError`.

# %% tags=["solution"] grade_id="frame_signal"
def frame_signal(wave: torch.Tensor, frame_length: int, hop: int) -> torch.Tensor:
    """(..., S) -> (..., n_frames, frame_length): every whole frame, one per hop, times a Hann window."""
    ### BEGIN SOLUTION
    S = wave.shape[-1]
    if hop < 1:
        raise ValueError(f"hop must be at least 1 sample, got {hop}")
    if frame_length < 1 or S < frame_length:
        raise ValueError(f"frame_length must be between 1 and the wave's {S} samples, got {frame_length}")
    frames = wave.unfold(-1, frame_length, hop)  # (..., n_frames, frame_length), a view
    window = torch.hann_window(frame_length, dtype=wave.dtype, device=wave.device)  # (frame_length,)
    return frames * window
    ### END SOLUTION


# %% tags=["test"] grade_id="test_frame_signal" points=2
check("one_block.frame_signal", frame_signal)
### BEGIN HIDDEN TESTS
check("one_block.frame_signal", frame_signal, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 7. The log-mel spectrogram
#
# Each frame's power spectrum, $|X[f]|^2$ for the $L/2 + 1$ frequencies $f \cdot s / L$ of its real
# Fourier transform (`torch.fft.rfft`; $s$ is the sample rate), says how much of each frequency it
# holds. Hearing resolves low frequencies finely and high ones coarsely, and the mel scale follows it:
#
# $$\operatorname{mel}(f) = 2595 \log_{10}\!\left(1 + \frac{f}{700}\right).$$
#
# Place $M + 2$ points evenly on the mel scale from $\operatorname{mel}(0)$ to $\operatorname{mel}(s/2)$ and
# turn them back into frequencies $f_0 < f_1 < \dots < f_{M+1}$ (in hertz). Filter $m = 1, \dots, M$ is a
# triangle that rises from 0 at $f_{m-1}$ to 1 at $f_m$ and falls back to 0 at $f_{m+1}$, linearly in hertz:
#
# $$H_m(f) = \max\!\left(0,\ \min\!\left(\frac{f - f_{m-1}}{f_m - f_{m-1}},\ \frac{f_{m+1} - f}{f_{m+1} - f_m}\right)\right).$$
#
# The log-mel spectrogram is $\log\!\big(\sum_f H_m(f)\, |X[f]|^2 + 10^{-6}\big)$ for each frame and filter:
# $M$ numbers per frame (40 or 80 in speech models) in place of $L/2 + 1$, on the log scale on which
# loudness is heard. The $10^{-6}$ keeps silence finite.
#
# Write `log_mel(frames, sample_rate, n_mels)`:
#
# * `frames` has shape `(..., n_frames, L)`, already windowed (the result of `frame_signal`);
# * return `(..., n_frames, n_mels)` in the dtype of `frames`: the power spectrum of each frame, times the
#   filter bank above evaluated at the frequencies $f \cdot s / L$, $f = 0, \dots, L/2$, then the log;
# * write the filter bank yourself from the formula (no `torchaudio`); `n_mels` below 1 raises `ValueError`.

# %% tags=["solution"] grade_id="log_mel"
def log_mel(frames: torch.Tensor, sample_rate: int, n_mels: int) -> torch.Tensor:
    """(..., n_frames, L) windowed frames -> (..., n_frames, n_mels): log of the mel filters' power."""
    ### BEGIN SOLUTION
    if n_mels < 1:
        raise ValueError(f"n_mels must be at least 1, got {n_mels}")
    L = frames.shape[-1]
    power = torch.fft.rfft(frames, dim=-1).abs() ** 2  # (..., n_frames, L // 2 + 1)
    # The filter bank in float64, from the formula; then in the dtype of the frames.
    freqs = torch.arange(L // 2 + 1, dtype=torch.float64) * sample_rate / L  # (F,) each bin's frequency
    top = 2595 * math.log10(1 + sample_rate / 2 / 700)
    mels = torch.linspace(0.0, top, n_mels + 2, dtype=torch.float64)  # (M + 2,) even on the mel scale
    edges = 700 * (10 ** (mels / 2595) - 1)  # (M + 2,) back in hertz
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]  # (M, 1) each
    rising = (freqs - lower) / (centre - lower)  # (M, F)
    falling = (upper - freqs) / (upper - centre)  # (M, F)
    bank = torch.clamp(torch.minimum(rising, falling), min=0).to(frames.dtype)  # (M, F)
    return torch.log(power @ bank.T + 1e-6)  # (..., n_frames, M)
    ### END SOLUTION


# %% tags=["test"] grade_id="test_log_mel" points=3
check("one_block.log_mel", log_mel)
### BEGIN HIDDEN TESTS
check("one_block.log_mel", log_mel, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# A rising whistle, one second at 8 kHz, as the model will see it: 98 frames of 40 mel filters. The
# brightest filter climbs as the pitch does.

# %%
sample_rate = 8000
t = torch.arange(sample_rate) / sample_rate
whistle = torch.sin(2 * math.pi * (300 + 1500 * t) * t)  # from 300 Hz up to 3,300 Hz
features = log_mel(frame_signal(whistle, 200, 80), sample_rate, 40)  # (n_frames, n_mels)
print("frames x filters:", tuple(features.shape))
print("brightest filter every 20 frames:", features.argmax(dim=-1)[::20].tolist())
