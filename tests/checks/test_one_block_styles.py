"""Chapter 10's checks give full marks to right answers written in other styles than the course's solutions.

The experts have the most ways to be right: the Switch Transformer's own layout (a dispatch tensor that
puts each expert's tokens into a buffer of C rows, and the experts' weights stacked into one batched
product), tokens sorted by expert and split, or the gates renormalised after a softmax over every expert.
The product count follows a stack of the experts' weights, so the batched layout is counted per expert.
"""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from autograder.checks import get
from autograder.framework import run_check
from reference.encoder import PositionwiseFeedForward
from reference.one_block import load_balancing_loss


def router_renormalised(logits, k):
    if not 0 < k <= logits.shape[-1]:
        raise ValueError(f"k must be between 1 and the number of experts, got {k}")
    probs = torch.softmax(logits, dim=-1)
    experts = torch.argsort(-logits, dim=-1, stable=True)[..., :k]  # ascending in -logit: equal ones by index
    chosen = probs.gather(-1, experts)
    return chosen / chosen.sum(dim=-1, keepdim=True), experts


def router_by_hand(logits, k):
    E = logits.shape[-1]
    if k < 1 or k > E:
        raise ValueError(f"k = {k} is not between 1 and {E}")
    flat = logits.reshape(-1, E)
    rows = [sorted(range(E), key=lambda e, r=r: (-float(flat[r, e]), e))[:k] for r in range(len(flat))]
    experts = torch.tensor(rows, dtype=torch.long, device=logits.device).reshape(*logits.shape[:-1], k)
    chosen = logits.gather(-1, experts)
    exps = torch.exp(chosen - chosen.amax(dim=-1, keepdim=True))
    return exps / exps.sum(dim=-1, keepdim=True), experts


def balance_one_hot(router_probs, expert_index, n_experts):
    choices = nn.functional.one_hot(expert_index, n_experts).to(router_probs.dtype)  # (..., k, E)
    f = choices.reshape(-1, n_experts).mean(dim=0)  # each of the N k choices counts once
    P = router_probs.reshape(-1, n_experts).mean(dim=0)
    return n_experts * torch.dot(f, P)


def balance_swapped_names(router_probs, expert_index, n_experts):
    # f and P named the other way round: the product, and so the loss and its gradient, is the same
    f = router_probs.reshape(-1, n_experts).mean(0)
    counts = router_probs.new_zeros(n_experts).scatter_add_(
        0, expert_index.flatten(), router_probs.new_ones(expert_index.numel()))
    return n_experts * (f * counts / expert_index.numel()).sum()


class _Experts(nn.Module):
    def __init__(self, d_model, d_ff, n_experts, k, capacity_factor=None):
        super().__init__()
        self.router = nn.Linear(d_model, n_experts, bias=False)
        self.experts = nn.ModuleList(PositionwiseFeedForward(d_model, d_ff, dropout=0.0) for _ in range(n_experts))
        self.n_experts, self.k, self.capacity_factor = n_experts, k, capacity_factor

    def route(self, tokens):
        if not 1 <= self.k <= self.n_experts:
            raise ValueError(f"k = {self.k} is more than the {self.n_experts} experts")
        logits = self.router(tokens)
        experts = torch.sort(logits, dim=-1, descending=True, stable=True).indices[:, :self.k]
        gates = torch.softmax(logits.gather(-1, experts), dim=-1)
        return gates, experts, load_balancing_loss(torch.softmax(logits, -1), experts, self.n_experts)

    def capacity(self, N):
        return N * self.k if self.capacity_factor is None else math.ceil(self.capacity_factor * N * self.k / self.n_experts)


class MoESwitchDispatch(_Experts):
    """Switch's layout: a (N, E, C) dispatch tensor, buffers of C rows, the experts' weights stacked."""

    def forward(self, x):
        tokens = x.reshape(-1, x.shape[-1])
        N = len(tokens)
        gates, experts, balance = self.route(tokens)
        chosen = nn.functional.one_hot(experts, self.n_experts).to(tokens.dtype).sum(1)  # (N, E)
        # without a capacity, the buffers are as long as the busiest expert's queue
        C = int(chosen.sum(0).max()) if self.capacity_factor is None else self.capacity(N)
        rank = torch.cumsum(chosen, dim=0) * chosen - 1  # each token's place in its expert's queue
        kept = chosen * (rank < C)
        dispatch = nn.functional.one_hot(rank.clamp(0, C - 1).long(), C).to(tokens.dtype) * kept[..., None]  # (N, E, C)
        weight = torch.zeros_like(chosen).scatter(1, experts, gates) * kept  # (N, E) each kept expert's gate
        buffers = torch.einsum("nec,nd->ecd", dispatch, tokens)  # (E, C, d)
        w_1 = torch.stack([e.w_1.weight for e in self.experts])  # (E, d_ff, d)
        b_1 = torch.stack([e.w_1.bias for e in self.experts])
        w_2 = torch.stack([e.w_2.weight for e in self.experts])
        b_2 = torch.stack([e.w_2.bias for e in self.experts])
        hidden = torch.relu(torch.bmm(buffers, w_1.transpose(1, 2)) + b_1[:, None])  # (E, C, d_ff)
        out = torch.bmm(hidden, w_2.transpose(1, 2)) + b_2[:, None]  # (E, C, d)
        y = torch.einsum("nec,ecd->nd", dispatch * weight[..., None], out)
        return y.reshape(x.shape), balance


class MoESortedSplit(_Experts):
    """Tokens sorted by expert, split into one slice per expert."""

    def forward(self, x):
        tokens = x.reshape(-1, x.shape[-1])
        gates, experts, balance = self.route(tokens)
        C = self.capacity(len(tokens))
        flat_expert = experts.flatten()  # (N k,) token-major
        order = torch.argsort(flat_expert, stable=True)  # by expert, tokens in batch order within each
        counts = torch.bincount(flat_expert, minlength=self.n_experts).tolist()
        y = torch.zeros_like(tokens)
        for e, part in enumerate(torch.split(order, counts)):
            part = part[:C]
            if len(part):
                token = part // self.k
                out = self.experts[e](tokens[token]) * gates.flatten()[part, None]
                y = y.index_add(0, token, out)
        return y.reshape(x.shape), balance


def patchify_unfolds(images, patch):
    B, C, H, W = images.shape
    if H % patch or W % patch:
        raise ValueError(f"{H} x {W} pixels do not cut into patches of {patch}")
    tiles = images.unfold(2, patch, patch).unfold(3, patch, patch)  # (B, C, H/p, W/p, p, p)
    return tiles.permute(0, 2, 3, 1, 4, 5).reshape(B, -1, C * patch * patch)


class EmbeddingByConvolution(nn.Module):
    def __init__(self, in_channels, patch, d_model, n_patches):
        super().__init__()
        self.patch, self.in_channels = patch, in_channels
        self.proj = nn.Linear(in_channels * patch * patch, d_model)
        self.cls_token = nn.Parameter(torch.randn(1, 1, d_model) * 0.02)
        self.positions = nn.Parameter(torch.randn(1, n_patches + 1, d_model) * 0.02)

    def forward(self, images):
        p, d = self.patch, self.proj.out_features
        if images.shape[-1] % p or images.shape[-2] % p:
            raise ValueError("the images do not cut into patches")
        kernel = self.proj.weight.reshape(d, self.in_channels, p, p)
        tokens = nn.functional.conv2d(images, kernel, self.proj.bias, stride=p).flatten(2).transpose(1, 2)
        if tokens.shape[1] + 1 != self.positions.shape[1]:
            raise ValueError(f"{tokens.shape[1]} patches, positions for {self.positions.shape[1] - 1}")
        return torch.cat([self.cls_token.expand(len(images), 1, d), tokens], dim=1) + self.positions


def frames_by_index(wave, frame_length, hop):
    if hop <= 0 or frame_length <= 0 or frame_length > wave.shape[-1]:
        raise ValueError(f"frame_length {frame_length} and hop {hop} do not fit a wave of {wave.shape[-1]} samples")
    n = 1 + (wave.shape[-1] - frame_length) // hop
    starts = torch.arange(n, device=wave.device) * hop
    index = starts[:, None] + torch.arange(frame_length, device=wave.device)  # (n_frames, frame_length)
    n_ = torch.arange(frame_length, dtype=wave.dtype, device=wave.device)
    window = 0.5 - 0.5 * torch.cos(2 * math.pi * n_ / frame_length)
    return wave[..., index] * window


def log_mel_by_filters(frames, sample_rate, n_mels):
    if n_mels <= 0:
        raise ValueError(f"n_mels must be positive, got {n_mels}")
    L = frames.shape[-1]
    spectrum = torch.fft.rfft(frames, dim=-1)
    power = spectrum.real ** 2 + spectrum.imag ** 2  # (..., n_frames, L // 2 + 1)

    def to_hz(m):
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)

    top = 2595.0 * math.log10(1.0 + (sample_rate / 2) / 700.0)
    points = [to_hz(top * i / (n_mels + 1)) for i in range(n_mels + 2)]
    freqs = [f * sample_rate / L for f in range(L // 2 + 1)]
    rows = []
    for m in range(1, n_mels + 1):
        lo, mid, hi = points[m - 1], points[m], points[m + 1]
        rows.append([max(0.0, min((f - lo) / (mid - lo), (hi - f) / (hi - mid))) for f in freqs])
    bank = torch.tensor(rows, dtype=frames.dtype)  # (n_mels, L // 2 + 1)
    return torch.log(torch.einsum("...f,mf->...m", power, bank) + 1e-6)


@pytest.mark.parametrize(("check_id", "fn"), [
    ("one_block.top_k_router", router_renormalised),
    ("one_block.top_k_router", router_by_hand),
    ("one_block.load_balancing_loss", balance_one_hot),
    ("one_block.load_balancing_loss", balance_swapped_names),
    ("one_block.MoEFeedForward", MoESwitchDispatch),
    ("one_block.MoEFeedForward", MoESortedSplit),
    ("one_block.patchify", patchify_unfolds),
    ("one_block.PatchEmbedding", EmbeddingByConvolution),
    ("one_block.frame_signal", frames_by_index),
    ("one_block.log_mel", log_mel_by_filters),
], ids=lambda v: getattr(v, "__name__", v))
def test_correct_code_in_another_style_passes_every_rule(check_id, fn):
    for hidden in (False, True):
        assert run_check(get(check_id), fn, hidden=hidden).startswith("✓")
