"""Arithmetic of a training step, and how much of a device's peak it uses (MFU).

The count is the one of the full-Transformer page ("Where the FLOPs go"): two FLOPs per
multiply-add, products with weight matrices plus attention's scores and weighted sums,
element-wise work left out. A batch is counted at its padded shape, because that is what the
device computes. A training step costs about three forward passes (the backward pass needs one
product for the inputs' gradient and one for the weights').
"""
from __future__ import annotations

import torch

from .model import TransformerConfig

#: dense bf16 matrix throughput from the vendors' data sheets, FLOP/s (no sparsity: half the
#: sheets' starred figures, 1,979 TFLOP/s for the H100 SXM and the H200)
PEAK_BF16 = {
    "H200": 989.5e12,
    "H100": 989.5e12,  # SXM; the PCIe card is lower (756e12), matched below by name
    "H100 PCIe": 756e12,
    "A100": 312e12,
    "L40S": 362e12,
    "A10G": 70e12,
    "RTX 4090": 165e12,
}


def forward_flops(config: TransformerConfig, batch: int, src_len: int, tgt_len: int) -> int:
    """Matrix-product FLOPs of one forward pass over a padded batch (B, T_src) -> (B, T_tgt, V)."""
    d, N, d_ff = config.d_model, config.N, config.d_ff
    per_src = N * (6 * d * d + 2 * d * d_ff)  # encoder layers, and the memory's keys and values in each decoder layer
    per_tgt = N * (6 * d * d + 2 * d * d_ff) + config.tgt_vocab_size * d  # decoder layers, output projection
    weights = 2 * (src_len * per_src + tgt_len * per_tgt)
    attention = 4 * d * N * (src_len ** 2 + tgt_len ** 2 + tgt_len * src_len)
    return batch * (weights + attention)


def training_flops(config: TransformerConfig, batch: int, src_len: int, tgt_len: int) -> int:
    return 3 * forward_flops(config, batch, src_len, tgt_len)


#: variants named like a listed card but with another peak, not in the table: unknown, not guessed
OTHER_PEAKS = ("NVL",)


def peak_flops(device: torch.device) -> float | None:
    """The device's dense bf16 peak from :data:`PEAK_BF16`, or None when it is not listed (a CPU)."""
    if device.type != "cuda":
        return None
    return peak_for_name(torch.cuda.get_device_name(device))


def peak_for_name(name: str) -> float | None:
    """The dense bf16 peak of the card ``torch.cuda.get_device_name`` calls ``name``, or None when unknown."""
    if any(variant in name for variant in OTHER_PEAKS):
        return None
    for key in sorted(PEAK_BF16, key=len, reverse=True):  # "H100 PCIe" before "H100"
        if key in name:
            return PEAK_BF16[key]
    return None
