"""Reference implementation: Chapter 10 exercises: one block for everything

Generated from solutions/ch10_one_block/one_block.py by `python -m course.tools release`.
Do not edit: change the instructor notebook and regenerate.
"""


import math

import torch
from torch import nn

from reference.encoder import PositionwiseFeedForward


def top_k_router(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k experts with the largest logits, largest first, and their gates: a softmax over those k."""
    E = logits.shape[-1]
    if not 1 <= k <= E:
        raise ValueError(f"k must be between 1 and the number of experts {E}, got {k}")
    # A stable sort keeps equal logits in index order, so ties go to the lower expert.
    order = torch.sort(logits, dim=-1, descending=True, stable=True).indices  # (..., E)
    experts = order[..., :k]  # (..., k)
    chosen = logits.gather(-1, experts)  # (..., k)
    return torch.softmax(chosen, dim=-1), experts


def load_balancing_loss(router_probs: torch.Tensor, expert_index: torch.Tensor, n_experts: int) -> torch.Tensor:
    """E * sum_e f_e P_e: the fraction of choices each expert got times the router's mean probability for it."""
    probs = router_probs.reshape(-1, n_experts)  # (N, E)
    chosen = expert_index.reshape(probs.shape[0], -1)  # (N, k)
    counts = torch.bincount(chosen.flatten(), minlength=n_experts)  # (E,) choices per expert
    f = counts.to(probs.dtype) / chosen.numel()  # (E,) sums to 1
    P = probs.mean(dim=0)  # (E,)
    return n_experts * (f * P).sum()


class MoEFeedForward(nn.Module):
    """A mixture of n_experts feed-forward networks, each token sent to k of them by a learned router.

    Submodules ``router`` (d_model -> n_experts, no bias) and ``experts`` (an nn.ModuleList of
    chapter 4's PositionwiseFeedForward); attributes ``n_experts``, ``k``, ``capacity_factor``.
    """

    def __init__(self, d_model: int, d_ff: int, n_experts: int, k: int, capacity_factor: float | None = None) -> None:
        super().__init__()
        self.router = nn.Linear(d_model, n_experts, bias=False)
        self.experts = nn.ModuleList(PositionwiseFeedForward(d_model, d_ff, dropout=0.0) for _ in range(n_experts))
        self.n_experts, self.k, self.capacity_factor = n_experts, k, capacity_factor

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, T, d_model) -> ((B, T, d_model), the load-balancing loss of this call)."""
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


def patchify(images: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, (H/p) (W/p), C p p): the image's p x p patches in reading order, flattened."""
    B, C, H, W = images.shape
    if patch < 1 or H % patch or W % patch:
        raise ValueError(f"an image of {H} x {W} pixels does not cut into patches of {patch} x {patch}")
    rows, cols = H // patch, W // patch
    grid = images.reshape(B, C, rows, patch, cols, patch)  # (B, C, rows, i, cols, j)
    grid = grid.permute(0, 2, 4, 1, 3, 5)  # (B, rows, cols, C, i, j)
    return grid.reshape(B, rows * cols, C * patch * patch)


class PatchEmbedding(nn.Module):
    """A class token, then each p x p patch projected to d_model, with a learned position added to each.

    Submodule ``proj``; parameters ``cls_token`` (1, 1, d_model) and ``positions`` (1, n_patches + 1, d_model).
    """

    def __init__(self, in_channels: int, patch: int, d_model: int, n_patches: int) -> None:
        super().__init__()
        self.patch = patch
        self.proj = nn.Linear(in_channels * patch * patch, d_model)
        self.cls_token = nn.Parameter(torch.randn(1, 1, d_model) * 0.02)
        self.positions = nn.Parameter(torch.randn(1, n_patches + 1, d_model) * 0.02)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, n_patches + 1, d_model)."""
        patches = patchify(images, self.patch)  # (B, N, C p p)
        if patches.shape[1] + 1 != self.positions.shape[1]:
            raise ValueError(f"the images cut into {patches.shape[1]} patches, the embedding has positions for "
                             f"{self.positions.shape[1] - 1}")
        tokens = self.proj(patches)  # (B, N, d_model)
        cls = self.cls_token.expand(images.shape[0], -1, -1)  # (B, 1, d_model)
        return torch.cat([cls, tokens], dim=1) + self.positions  # (B, N + 1, d_model)


def frame_signal(wave: torch.Tensor, frame_length: int, hop: int) -> torch.Tensor:
    """(..., S) -> (..., n_frames, frame_length): every whole frame, one per hop, times a Hann window."""
    S = wave.shape[-1]
    if hop < 1:
        raise ValueError(f"hop must be at least 1 sample, got {hop}")
    if frame_length < 1 or S < frame_length:
        raise ValueError(f"frame_length must be between 1 and the wave's {S} samples, got {frame_length}")
    frames = wave.unfold(-1, frame_length, hop)  # (..., n_frames, frame_length), a view
    window = torch.hann_window(frame_length, dtype=wave.dtype, device=wave.device)  # (frame_length,)
    return frames * window


def log_mel(frames: torch.Tensor, sample_rate: int, n_mels: int) -> torch.Tensor:
    """(..., n_frames, L) windowed frames -> (..., n_frames, n_mels): log of the mel filters' power."""
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
