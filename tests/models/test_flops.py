"""The FLOPs the training loop reports are the ones PyTorch counts."""
from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from transformer import Transformer, TransformerConfig
from transformer.flops import PEAK_BF16, forward_flops, peak_flops, peak_for_name


@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("B, S, T", [(1, 7, 5), (3, 12, 20)])
def test_forward_count_matches_flop_counter(share, B, S, T):
    config = TransformerConfig(src_vocab_size=50, tgt_vocab_size=50, d_model=32, h=4, N=2, d_ff=96, dropout=0.0,
                               max_len=64, share_embeddings=share)
    model = Transformer(config).eval()
    src = torch.randint(3, 50, (B, S))
    tgt = torch.randint(3, 50, (B, T))
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(src, tgt)
    assert forward_flops(config, B, S, T) == counter.get_total_flops()


def test_peaks():
    assert peak_flops(torch.device("cpu")) is None
    assert PEAK_BF16["H200"] == PEAK_BF16["H100"] == 989.5e12


@pytest.mark.parametrize("name, peak", [
    ("NVIDIA H200", 989.5e12), ("NVIDIA H100 80GB HBM3", 989.5e12), ("NVIDIA H100 PCIe", 756e12),
    ("NVIDIA A100-SXM4-80GB", 312e12), ("NVIDIA A100 80GB PCIe", 312e12),
    # not in the table, or a variant with a peak of its own: unknown rather than a neighbour's figure
    ("NVIDIA H200 NVL", None), ("NVIDIA H100 NVL", None), ("NVIDIA B200", None), ("Tesla T4", None),
])
def test_peaks_by_device_name(name, peak):
    assert peak_for_name(name) == peak
