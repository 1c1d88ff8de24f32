"""The FLOPs the training loop reports are the ones PyTorch counts."""
from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from transformer import Transformer, TransformerConfig
from transformer.flops import PEAK_BF16, forward_flops, peak_flops


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
    assert PEAK_BF16["H200"] == PEAK_BF16["H100"] == 989e12
