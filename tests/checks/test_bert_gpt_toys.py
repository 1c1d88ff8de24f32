"""Chapter 7's toy GPT, which generate_with_cache is judged against, is itself held to PyTorch."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from autograder import oracles
from autograder.toys import ToyGPT


def _torch_block(block, d_model: int, h: int, d_ff: int) -> nn.TransformerEncoderLayer:
    """nn.TransformerEncoderLayer(norm_first=True) holding one toy block's weights."""
    attn, ffn = block.self_attn, block.feed_forward
    state = {f"self_attn.{n}.{p}": getattr(getattr(attn, n), p) for n in ("w_q", "w_k", "w_v", "w_o") for p in ("weight", "bias")}
    state |= {f"feed_forward.{n}.{p}": getattr(getattr(ffn, n), p) for n in ("w_1", "w_2") for p in ("weight", "bias")}
    for n in ("norm1", "norm2"):
        state |= {f"{n}.gamma": getattr(block, n).weight, f"{n}.beta": getattr(block, n).bias}
    return oracles.torch_encoder_layer({k: v.detach() for k, v in state.items()}, d_model, h, d_ff, norm_first=True)


@pytest.mark.parametrize("N, d_model, h, d_ff", [(2, 16, 4, 32), (3, 24, 3, 20)])
def test_the_toy_gpt_is_a_stack_of_pytorch_pre_norm_layers(N, d_model, h, d_ff):
    model = ToyGPT(vocab_size=13, d_model=d_model, h=h, d_ff=d_ff, N=N, seed=N)
    ids = torch.randint(13, (3, 9), generator=torch.Generator().manual_seed(0))
    causal = oracles.torch_attn_mask(oracles.causal_mask(9), h)
    with torch.no_grad():
        x = model.embed(ids) + model.pos_embed(torch.arange(9))
        for block in model.blocks:
            x = _torch_block(block, d_model, h, d_ff)(x, src_mask=causal)
        expected = model.norm(x) @ model.embed.weight.T  # the final LayerNorm, then the tied output layer
        torch.testing.assert_close(model(ids), expected, rtol=1e-9, atol=1e-10)


def test_the_budget_refuses_a_decoder_that_reads_again():
    model = ToyGPT(budget=2 * 6)
    ids = torch.zeros(2, 5, dtype=torch.long)
    with model.watch() as reads:
        model(ids)  # 10 positions per layer: within the budget
        assert reads.exceeded is None
        model.budget = None  # the count took its budget when it started: this changes nothing
        torch.nn.functional.linear(model.embed(ids), model.blocks[0].self_attn.w_q.weight)  # past the layer: counted
    assert "computed again" in reads.exceeded and "blocks[0].self_attn.w_q" in reads.exceeded
    assert ToyGPT(budget=None).watch() is None
