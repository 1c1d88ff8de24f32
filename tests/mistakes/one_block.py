"""Wrong answers to chapter 10, as learners write them, and the words that must name each one."""
from __future__ import annotations

import math

import torch
from torch import nn

from reference.encoder import PositionwiseFeedForward
from reference.one_block import load_balancing_loss, top_k_router

from . import Mistake, Spoiled

ROUTER, BALANCE, MOE = "one_block.top_k_router", "one_block.load_balancing_loss", "one_block.MoEFeedForward"
PATCHIFY, EMBED = "one_block.patchify", "one_block.PatchEmbedding"
FRAMES, MEL = "one_block.frame_signal", "one_block.log_mel"

# The wrong submission of the tests that grade a whole class: the gates over all the experts.
SPOILED = Spoiled("top_k_router", "return torch.softmax(chosen, dim=-1), experts",
                  "return torch.softmax(logits, dim=-1).gather(-1, experts), experts")


# ----------------------------------------------------------------------------------------------
# top_k_router
# ----------------------------------------------------------------------------------------------


def _check_k(logits, k):
    if not 1 <= k <= logits.shape[-1]:
        raise ValueError(f"k must be between 1 and {logits.shape[-1]}, got {k}")


def router_topk(logits, k):
    _check_k(logits, k)
    values, experts = torch.topk(logits, k, dim=-1)  # no promise about equal logits
    return torch.softmax(values, dim=-1), experts


def router_not_renormalised(logits, k):
    _check_k(logits, k)
    experts = torch.sort(logits, dim=-1, descending=True, stable=True).indices[..., :k]
    return torch.softmax(logits, dim=-1).gather(-1, experts), experts


def router_ascending(logits, k):
    _check_k(logits, k)
    experts = torch.sort(logits, dim=-1, stable=True).indices[..., :k]
    return torch.softmax(logits.gather(-1, experts), dim=-1), experts


def router_raw_gates(logits, k):
    _check_k(logits, k)
    experts = torch.sort(logits, dim=-1, descending=True, stable=True).indices[..., :k]
    return logits.gather(-1, experts), experts


def router_unsorted(logits, k):
    _check_k(logits, k)
    experts = torch.sort(logits, dim=-1, descending=True, stable=True).indices[..., :k]
    experts = experts.sort(dim=-1).values  # "tidier" in index order
    return torch.softmax(logits.gather(-1, experts), dim=-1), experts


def router_softmax_axis0(logits, k):
    _check_k(logits, k)
    experts = torch.sort(logits, dim=-1, descending=True, stable=True).indices[..., :k]
    return torch.softmax(logits.gather(-1, experts), dim=0), experts


def router_no_check(logits, k):
    experts = torch.sort(logits, dim=-1, descending=True, stable=True).indices[..., :k]
    return torch.softmax(logits.gather(-1, experts), dim=-1), experts


# ----------------------------------------------------------------------------------------------
# load_balancing_loss
# ----------------------------------------------------------------------------------------------


def _f_and_p(router_probs, expert_index, n_experts):
    probs = router_probs.reshape(-1, n_experts)
    chosen = expert_index.reshape(probs.shape[0], -1)
    counts = torch.bincount(chosen.flatten(), minlength=n_experts).to(probs.dtype)
    return probs, chosen, counts


def balance_no_factor(router_probs, expert_index, n_experts):
    probs, chosen, counts = _f_and_p(router_probs, expert_index, n_experts)
    return (counts / chosen.numel() * probs.mean(0)).sum()


def balance_per_token_count(router_probs, expert_index, n_experts):
    probs, chosen, counts = _f_and_p(router_probs, expert_index, n_experts)
    return n_experts * (counts / probs.shape[0] * probs.mean(0)).sum()


def balance_soft_f(router_probs, expert_index, n_experts):
    probs = router_probs.reshape(-1, n_experts)
    f = probs.mean(0)
    return n_experts * (f * probs.mean(0)).sum()


def balance_summed_p(router_probs, expert_index, n_experts):
    probs, chosen, counts = _f_and_p(router_probs, expert_index, n_experts)
    return n_experts * (counts / chosen.numel() * probs.sum(0)).sum()


def balance_first_choice(router_probs, expert_index, n_experts):
    probs = router_probs.reshape(-1, n_experts)
    top1 = expert_index.reshape(probs.shape[0], -1)[:, 0]
    f = torch.bincount(top1, minlength=n_experts).to(probs.dtype) / len(top1)
    return n_experts * (f * probs.mean(0)).sum()


def balance_token_products(router_probs, expert_index, n_experts):
    probs = router_probs.reshape(-1, n_experts)
    hot = nn.functional.one_hot(expert_index.reshape(probs.shape[0], -1), n_experts).to(probs.dtype).mean(1)
    return n_experts * (hot * probs).sum(-1).mean()


def balance_vector(router_probs, expert_index, n_experts):
    probs, chosen, counts = _f_and_p(router_probs, expert_index, n_experts)
    return n_experts * counts / chosen.numel() * probs.mean(0)  # the sum over experts forgotten


# ----------------------------------------------------------------------------------------------
# MoEFeedForward
# ----------------------------------------------------------------------------------------------


class _MoE(nn.Module):
    def __init__(self, d_model, d_ff, n_experts, k, capacity_factor=None):
        super().__init__()
        self.router = nn.Linear(d_model, n_experts, bias=False)
        self.experts = nn.ModuleList(PositionwiseFeedForward(d_model, d_ff, dropout=0.0) for _ in range(n_experts))
        self.n_experts, self.k, self.capacity_factor = n_experts, k, capacity_factor

    def route(self, x):
        tokens = x.reshape(-1, x.shape[-1])
        logits = self.router(tokens)
        gates, experts = top_k_router(logits, self.k)
        return tokens, logits, gates, experts, load_balancing_loss(torch.softmax(logits, -1), experts, self.n_experts)

    def capacity(self, N):
        if self.capacity_factor is None:
            return N * self.k
        return math.ceil(self.capacity_factor * N * self.k / self.n_experts)


class MoENoGates(_MoE):
    def forward(self, x):
        tokens, _, gates, experts, balance = self.route(x)
        y = torch.zeros_like(tokens)
        for e, expert in enumerate(self.experts):
            token, slot = (experts == e).nonzero(as_tuple=True)
            token = token[:self.capacity(len(tokens))]
            if len(token):
                y.index_add_(0, token, expert(tokens[token]))  # the gates never used
        return y.reshape(x.shape), balance


class MoENoCapacity(_MoE):
    def forward(self, x):
        tokens, _, gates, experts, balance = self.route(x)
        y = torch.zeros_like(tokens)
        for e, expert in enumerate(self.experts):
            token, slot = (experts == e).nonzero(as_tuple=True)
            if len(token):
                y.index_add_(0, token, gates[token, slot, None] * expert(tokens[token]))
        return y.reshape(x.shape), balance


class MoECapacityByIndex(_MoE):
    def forward(self, x):
        tokens, _, gates, experts, balance = self.route(x)
        C = self.capacity(len(tokens))
        y = torch.zeros_like(tokens)
        for e, expert in enumerate(self.experts):
            token, slot = (experts == e).nonzero(as_tuple=True)
            keep = token < C  # the first C tokens of the batch
            token, slot = token[keep], slot[keep]
            if len(token):
                y.index_add_(0, token, gates[token, slot, None] * expert(tokens[token]))
        return y.reshape(x.shape), balance


class MoEKeepsLast(_MoE):
    def forward(self, x):
        tokens, _, gates, experts, balance = self.route(x)
        C = self.capacity(len(tokens))
        y = torch.zeros_like(tokens)
        for e, expert in enumerate(self.experts):
            token, slot = (experts == e).nonzero(as_tuple=True)
            token, slot = token[-C:], slot[-C:]
            if len(token):
                y.index_add_(0, token, gates[token, slot, None] * expert(tokens[token]))
        return y.reshape(x.shape), balance


class MoEPerSequence(_MoE):
    def forward(self, x):
        tokens, _, gates, experts, balance = self.route(x)
        C = self.capacity(x.shape[1])  # the tokens of one sequence
        y = torch.zeros_like(tokens)
        for e, expert in enumerate(self.experts):
            token, slot = (experts == e).nonzero(as_tuple=True)
            token, slot = token[:C], slot[:C]
            if len(token):
                y.index_add_(0, token, gates[token, slot, None] * expert(tokens[token]))
        return y.reshape(x.shape), balance


class MoETokenLoop(_MoE):
    def forward(self, x):
        tokens, _, gates, experts, balance = self.route(x)
        C = self.capacity(len(tokens))
        served = [0] * self.n_experts
        rows = []
        for t in range(len(tokens)):
            out = torch.zeros_like(tokens[t])
            for j in range(self.k):
                e = int(experts[t, j])
                if served[e] < C:
                    served[e] += 1
                    out = out + gates[t, j] * self.experts[e](tokens[t:t + 1])[0]
            rows.append(out)
        return torch.stack(rows).reshape(x.shape), balance


class MoEDense(_MoE):
    def forward(self, x):
        tokens, _, gates, experts, balance = self.route(x)
        C = self.capacity(len(tokens))
        weight = torch.zeros(len(tokens), self.n_experts, dtype=tokens.dtype)
        for e in range(self.n_experts):
            token, slot = (experts == e).nonzero(as_tuple=True)
            weight[token[:C], e] = gates[token[:C], slot[:C]]
        every = torch.stack([expert(tokens) for expert in self.experts], dim=1)  # (N, E, d): all experts, all tokens
        return (weight[..., None] * every).sum(1).reshape(x.shape), balance


class MoEComputesThenDrops(_MoE):
    def forward(self, x):
        tokens, _, gates, experts, balance = self.route(x)
        C = self.capacity(len(tokens))
        y = torch.zeros_like(tokens)
        for e, expert in enumerate(self.experts):
            token, slot = (experts == e).nonzero(as_tuple=True)
            out = gates[token, slot, None] * expert(tokens[token])  # every token sent, then the capacity
            if len(token):
                y.index_add_(0, token[:C], out[:C])
        return y.reshape(x.shape), balance


class MoEPassesThrough(_MoE):
    def forward(self, x):
        tokens, _, gates, experts, balance = self.route(x)
        C = self.capacity(len(tokens))
        y = torch.zeros_like(tokens)
        for e, expert in enumerate(self.experts):
            token, slot = (experts == e).nonzero(as_tuple=True)
            if len(token):
                out = tokens[token].clone()  # dropped ones keep their features
                out[:C] = expert(tokens[token[:C]])
                y.index_add_(0, token, gates[token, slot, None] * out)
        return y.reshape(x.shape), balance


# ----------------------------------------------------------------------------------------------
# patchify and PatchEmbedding
# ----------------------------------------------------------------------------------------------


def _check_patch(images, patch):
    if images.shape[-2] % patch or images.shape[-1] % patch:
        raise ValueError(f"the image does not cut into patches of {patch}")


def patchify_channel_last(images, patch):
    _check_patch(images, patch)
    B, C, H, W = images.shape
    grid = images.reshape(B, C, H // patch, patch, W // patch, patch).permute(0, 2, 4, 3, 5, 1)
    return grid.reshape(B, -1, C * patch * patch)


def patchify_reshape_only(images, patch):
    _check_patch(images, patch)
    B, C, H, W = images.shape
    return images.reshape(B, (H // patch) * (W // patch), C * patch * patch)


def patchify_by_columns(images, patch):
    _check_patch(images, patch)
    B, C, H, W = images.shape
    grid = images.reshape(B, C, H // patch, patch, W // patch, patch).permute(0, 4, 2, 1, 3, 5)
    return grid.reshape(B, -1, C * patch * patch)


def patchify_unfold(images, patch):
    _check_patch(images, patch)
    return nn.functional.unfold(images, patch, stride=patch).transpose(1, 2)


def patchify_grid_kept(images, patch):
    _check_patch(images, patch)
    B, C, H, W = images.shape
    grid = images.reshape(B, C, H // patch, patch, W // patch, patch).permute(0, 2, 4, 1, 3, 5)
    return grid.reshape(B, H // patch, W // patch, C * patch * patch)


def patchify_no_check(images, patch):
    B, C, H, W = images.shape
    grid = images[..., :H // patch * patch, :W // patch * patch].reshape(B, C, H // patch, patch, W // patch, patch)
    return grid.permute(0, 2, 4, 1, 3, 5).reshape(B, -1, C * patch * patch)


def _patches(images, patch):
    B, C, H, W = images.shape
    if H % patch or W % patch:
        raise ValueError("the image does not cut into patches")
    grid = images.reshape(B, C, H // patch, patch, W // patch, patch).permute(0, 2, 4, 1, 3, 5)
    return grid.reshape(B, -1, C * patch * patch)


class _Embedding(nn.Module):
    def __init__(self, in_channels, patch, d_model, n_patches):
        super().__init__()
        self.patch = patch
        self.proj = nn.Linear(in_channels * patch * patch, d_model)
        self.cls_token = nn.Parameter(torch.randn(1, 1, d_model) * 0.02)
        self.positions = nn.Parameter(torch.randn(1, n_patches + 1, d_model) * 0.02)

    def tokens(self, images):
        patches = _patches(images, self.patch)
        if patches.shape[1] + 1 != self.positions.shape[1]:
            raise ValueError("wrong number of patches")
        return self.proj(patches), self.cls_token.expand(images.shape[0], -1, -1)


class EmbeddingClassLast(_Embedding):
    def forward(self, images):
        tokens, cls = self.tokens(images)
        return torch.cat([tokens, cls], dim=1) + self.positions


class EmbeddingNoPositions(_Embedding):
    def forward(self, images):
        tokens, cls = self.tokens(images)
        return torch.cat([cls, tokens], dim=1)


class EmbeddingPositionsBeforeClass(_Embedding):
    def forward(self, images):
        tokens, cls = self.tokens(images)
        tokens = tokens + self.positions[:, :-1]  # the patches numbered from 0, before the class token goes in
        return torch.cat([cls, tokens], dim=1)


class EmbeddingPatchesOnly(_Embedding):
    def forward(self, images):
        tokens, _ = self.tokens(images)
        return tokens + self.positions[:, 1:]


class EmbeddingChannelLast(_Embedding):
    def forward(self, images):
        B, C, H, W = images.shape
        p = self.patch
        if (H // p) * (W // p) + 1 != self.positions.shape[1] or H % p or W % p:
            raise ValueError("wrong number of patches")
        flat = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 3, 5, 1).reshape(B, -1, C * p * p)
        cls = self.cls_token.expand(B, -1, -1)
        return torch.cat([cls, self.proj(flat)], dim=1) + self.positions


class EmbeddingNoCheck(_Embedding):
    def forward(self, images):
        patches = _patches(images, self.patch)
        cls = self.cls_token.expand(images.shape[0], -1, -1)
        z = torch.cat([cls, self.proj(patches)], dim=1)
        return z + self.positions[:, :z.shape[1]]


# ----------------------------------------------------------------------------------------------
# frame_signal and log_mel
# ----------------------------------------------------------------------------------------------


def _check_frames(wave, frame_length, hop):
    if hop < 1:
        raise ValueError(f"hop must be at least 1, got {hop}")
    if wave.shape[-1] < frame_length:
        raise ValueError(f"frame_length {frame_length} is longer than the wave")


def frames_no_window(wave, frame_length, hop):
    _check_frames(wave, frame_length, hop)
    return wave.unfold(-1, frame_length, hop).clone()


def frames_symmetric(wave, frame_length, hop):
    _check_frames(wave, frame_length, hop)
    return wave.unfold(-1, frame_length, hop) * torch.hann_window(frame_length, periodic=False, dtype=wave.dtype)


def frames_hamming(wave, frame_length, hop):
    _check_frames(wave, frame_length, hop)
    return wave.unfold(-1, frame_length, hop) * torch.hamming_window(frame_length, dtype=wave.dtype)


def frames_one_short(wave, frame_length, hop):
    _check_frames(wave, frame_length, hop)
    n = (wave.shape[-1] - frame_length) // hop  # the frames after the first, taken for all of them
    window = torch.hann_window(frame_length, dtype=wave.dtype)
    return wave.unfold(-1, frame_length, hop)[..., :n, :] * window


def frames_padded(wave, frame_length, hop):
    _check_frames(wave, frame_length, hop)
    n = math.ceil(wave.shape[-1] / hop)
    padded = nn.functional.pad(wave, (0, n * hop + frame_length - wave.shape[-1]))
    return padded.unfold(-1, frame_length, hop)[..., :n, :] * torch.hann_window(frame_length, dtype=wave.dtype)


def frames_no_check(wave, frame_length, hop):
    return wave.unfold(-1, frame_length, max(hop, 1)) * torch.hann_window(frame_length, dtype=wave.dtype)


def _bank(L, sample_rate, n_mels, *, hertz=False, inverse=None, bins=None, area=False, dtype=torch.float64):
    freqs = torch.arange(L // 2 + 1, dtype=torch.float64) * sample_rate / L if bins is None else bins
    if hertz:
        edges = torch.linspace(0, sample_rate / 2, n_mels + 2, dtype=torch.float64)
    else:
        top = 2595 * math.log10(1 + sample_rate / 2 / 700)
        mels = torch.linspace(0, top, n_mels + 2, dtype=torch.float64)
        edges = 700 * ((inverse or (lambda m: 10 ** (m / 2595)))(mels) - 1)
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    bank = torch.clamp(torch.minimum((freqs - lower) / (centre - lower), (upper - freqs) / (upper - centre)), min=0)
    if area:
        bank = bank * 2 / (upper - lower)
    return bank.to(dtype)


def _check_mels(n_mels):
    if n_mels < 1:
        raise ValueError(f"n_mels must be at least 1, got {n_mels}")


def mel_magnitude(frames, sample_rate, n_mels):
    _check_mels(n_mels)
    magnitude = torch.fft.rfft(frames, dim=-1).abs()
    return torch.log(magnitude @ _bank(frames.shape[-1], sample_rate, n_mels, dtype=frames.dtype).T + 1e-6)


def mel_log10(frames, sample_rate, n_mels):
    _check_mels(n_mels)
    power = torch.fft.rfft(frames, dim=-1).abs() ** 2
    return torch.log10(power @ _bank(frames.shape[-1], sample_rate, n_mels, dtype=frames.dtype).T + 1e-6)


def mel_even_in_hertz(frames, sample_rate, n_mels):
    _check_mels(n_mels)
    power = torch.fft.rfft(frames, dim=-1).abs() ** 2
    return torch.log(power @ _bank(frames.shape[-1], sample_rate, n_mels, hertz=True, dtype=frames.dtype).T + 1e-6)


def mel_exp_inverse(frames, sample_rate, n_mels):
    _check_mels(n_mels)
    power = torch.fft.rfft(frames, dim=-1).abs() ** 2
    bank = _bank(frames.shape[-1], sample_rate, n_mels, inverse=lambda m: torch.exp(m / 2595), dtype=frames.dtype)
    return torch.log(power @ bank.T + 1e-6)


def mel_no_epsilon(frames, sample_rate, n_mels):
    _check_mels(n_mels)
    power = torch.fft.rfft(frames, dim=-1).abs() ** 2
    return torch.log(power @ _bank(frames.shape[-1], sample_rate, n_mels, dtype=frames.dtype).T)


def mel_linspace_bins(frames, sample_rate, n_mels):
    _check_mels(n_mels)
    L = frames.shape[-1]
    power = torch.fft.rfft(frames, dim=-1).abs() ** 2
    bins = torch.linspace(0, sample_rate / 2, L // 2 + 1, dtype=torch.float64)
    return torch.log(power @ _bank(L, sample_rate, n_mels, bins=bins, dtype=frames.dtype).T + 1e-6)


def mel_log_first(frames, sample_rate, n_mels):
    _check_mels(n_mels)
    power = torch.fft.rfft(frames, dim=-1).abs() ** 2
    return torch.log(power + 1e-6) @ _bank(frames.shape[-1], sample_rate, n_mels, dtype=frames.dtype).T


def mel_unit_area(frames, sample_rate, n_mels):
    _check_mels(n_mels)
    power = torch.fft.rfft(frames, dim=-1).abs() ** 2
    return torch.log(power @ _bank(frames.shape[-1], sample_rate, n_mels, area=True, dtype=frames.dtype).T + 1e-6)


def mel_no_check(frames, sample_rate, n_mels):
    power = torch.fft.rfft(frames, dim=-1).abs() ** 2
    return torch.log(power @ _bank(frames.shape[-1], sample_rate, n_mels, dtype=frames.dtype).T + 1e-6)


VALUES = "the gated sum of each token's experts, capacity applied"
BATCHED = "each expert multiplies the tokens it serves, in one batch"
CUT = "the patches in reading order, each channel first"
EMBEDDED = "the class token first, then each patch projected, positions added"
WINDOWED = "each frame times the periodic Hann window"
MELS = "log of the mel filters' power"

MISTAKES = [
    Mistake(ROUTER, "torch.topk and equal logits", router_topk, "lower index",
            rule="the k largest logits, largest first, equal ones by index"),
    Mistake(ROUTER, "gates not renormalised", router_not_renormalised, "not renormalised",
            rule="gates: a softmax over the chosen logits"),
    Mistake(ROUTER, "the smallest logits", router_ascending, "smallest logits",
            rule="the k largest logits, largest first, equal ones by index"),
    Mistake(ROUTER, "the logits as gates", router_raw_gates, "the chosen logits themselves",
            rule="gates: a softmax over the chosen logits"),
    Mistake(ROUTER, "experts in index order", router_unsorted, "in the wrong order",
            rule="the k largest logits, largest first, equal ones by index"),
    Mistake(ROUTER, "softmax across tokens", router_softmax_axis0, "across tokens",
            rule="gates: a softmax over the chosen logits"),
    Mistake(ROUTER, "k unchecked", router_no_check, "raise ValueError", rule="refusal"),
    Mistake(BALANCE, "without the n_experts factor", balance_no_factor, "multiplied by the number of experts",
            rule="n_experts * sum of f_e P_e"),
    Mistake(BALANCE, "choices over N, not N k", balance_per_token_count, "number of choices N * k",
            rule="n_experts * sum of f_e P_e"),
    Mistake(BALANCE, "f from the probabilities", balance_soft_f, "f was taken from the probabilities",
            rule="n_experts * sum of f_e P_e"),
    Mistake(BALANCE, "P summed", balance_summed_p, "not averaged", rule="n_experts * sum of f_e P_e"),
    Mistake(BALANCE, "first choices only", balance_first_choice, "first choice", rule="n_experts * sum of f_e P_e"),
    Mistake(BALANCE, "product per token", balance_token_products, "token by token", rule="n_experts * sum of f_e P_e"),
    Mistake(BALANCE, "one loss per expert", balance_vector, "one number", rule="a 0-dimensional tensor"),
    Mistake(MOE, "outputs not gated", MoENoGates, "without their gates", rule=VALUES),
    Mistake(MOE, "no capacity", MoENoCapacity, "no token was dropped", rule=VALUES),
    Mistake(MOE, "capacity by batch index", MoECapacityByIndex, "counted per expert", rule=VALUES),
    Mistake(MOE, "the last tokens kept", MoEKeepsLast, "the first C kept", rule=VALUES),
    Mistake(MOE, "capacity per sequence", MoEPerSequence, "one sequence's tokens", rule=VALUES),
    Mistake(MOE, "dropped tokens passed through", MoEPassesThrough, "left out", rule=VALUES),
    Mistake(MOE, "a loop over tokens", MoETokenLoop, "once per token", rule=BATCHED),
    Mistake(MOE, "every expert on every token", MoEDense, "every expert ran on every token", rule=BATCHED),
    Mistake(MOE, "computes, then drops", MoEComputesThenDrops, "drop a token before its expert runs", rule=BATCHED),
    Mistake(PATCHIFY, "channel last", patchify_channel_last, "channel last", rule=CUT),
    Mistake(PATCHIFY, "a reshape alone", patchify_reshape_only, "without being cut", rule=CUT),
    Mistake(PATCHIFY, "column by column", patchify_by_columns, "column by column", rule=CUT),
    Mistake(PATCHIFY, "F.unfold", patchify_unfold, "what F.unfold and nn.Unfold run", rule="no forbidden built-in"),
    Mistake(PATCHIFY, "the grid left as two axes", patchify_grid_kept, "left as two axes",
            rule="(B, N, C * patch * patch)"),
    Mistake(PATCHIFY, "ragged image cropped", patchify_no_check, "raise ValueError", rule="refusal"),
    Mistake(EMBED, "class token last", EmbeddingClassLast, "after the patches", rule=EMBEDDED),
    Mistake(EMBED, "no positions", EmbeddingNoPositions, "no position was added", rule=EMBEDDED),
    Mistake(EMBED, "positions before the class token", EmbeddingPositionsBeforeClass, "patches only", rule=EMBEDDED),
    Mistake(EMBED, "no class token", EmbeddingPatchesOnly, "Put the class token in front",
            rule="(B, n_patches + 1, d_model)"),
    Mistake(EMBED, "channel last against the weights", EmbeddingChannelLast, "channel last", rule=EMBEDDED),
    Mistake(EMBED, "patch count unchecked", EmbeddingNoCheck, "raise ValueError", rule="refusal"),
    Mistake(FRAMES, "no window", frames_no_window, "not windowed", rule=WINDOWED),
    Mistake(FRAMES, "the symmetric window", frames_symmetric, "periodic", rule=WINDOWED),
    Mistake(FRAMES, "Hamming's window", frames_hamming, "Hamming", rule=WINDOWED),
    Mistake(FRAMES, "one frame short", frames_one_short, "one frame short", rule="(..., n_frames, frame_length)"),
    Mistake(FRAMES, "padded frames", frames_padded, "past the end", rule="(..., n_frames, frame_length)"),
    Mistake(FRAMES, "hop unchecked", frames_no_check, "raise ValueError", rule="refusal"),
    Mistake(MEL, "magnitude, not power", mel_magnitude, "the power |X|^2", rule=MELS),
    Mistake(MEL, "log10", mel_log10, "natural log", rule=MELS),
    Mistake(MEL, "points even in hertz", mel_even_in_hertz, "evenly in hertz", rule=MELS),
    Mistake(MEL, "exp for the inverse", mel_exp_inverse, "with exp", rule=MELS),
    Mistake(MEL, "no epsilon", mel_no_epsilon, "add 1e-6", rule=MELS),
    Mistake(MEL, "bins by linspace", mel_linspace_bins, "f * sample_rate / L", rule=MELS),
    Mistake(MEL, "log before the filters", mel_log_first, "before the filter bank", rule=MELS),
    Mistake(MEL, "unit-area filters", mel_unit_area, "unit area", rule=MELS),
    Mistake(MEL, "n_mels unchecked", mel_no_check, "raise ValueError", rule="refusal"),
]
