"""Chapter 10 checks: one block for everything.

One module per topic: :mod:`.router` (``top_k_router``, ``load_balancing_loss``), :mod:`.experts`
(``MoEFeedForward``), :mod:`.patches` (``patchify``, ``PatchEmbedding``) and :mod:`.audio`
(``frame_signal``, ``log_mel``).

Oracles: a stable sort and a softmax over the chosen logits; the Switch Transformer's formula
counted expert by expert; a dense loop over tokens holding the layer's weights, with the capacity
applied token by token, and the rows each expert's first matrix multiplied, counted at ATen's
matrix products (:mod:`harness.products`); ``F.unfold`` and ``nn.Conv2d`` with stride equal to
its kernel; the frames indexed sample by sample, ``torch.stft`` and ``torch.fft.rfft``, and the
mel filter bank written filter by filter from its formula.
"""
from __future__ import annotations

from .audio import FrameSignalCheck, LogMelCheck
from .experts import MoEFeedForwardCheck
from .patches import PatchEmbeddingCheck, PatchifyCheck
from .router import LoadBalancingLossCheck, TopKRouterCheck

CHECKS = [TopKRouterCheck, LoadBalancingLossCheck, MoEFeedForwardCheck, PatchifyCheck, PatchEmbeddingCheck,
          FrameSignalCheck, LogMelCheck]
