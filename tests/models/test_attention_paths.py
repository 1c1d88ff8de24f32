"""The fused attention path computes what the course's own attention computes, gradients included."""
from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from transformer import Transformer, TransformerConfig
from transformer.attention_paths import FusedMultiHeadAttention, attention_path, use_attention
from transformer.g2p import train as T

CONFIG = TransformerConfig(src_vocab_size=30, tgt_vocab_size=30, d_model=32, h=4, N=2, d_ff=64, dropout=0.0, max_len=64)


def _batch():
    g = torch.Generator().manual_seed(0)
    src = torch.randint(3, 30, (3, 7), generator=g)
    src[1, 5:] = 0  # padding, so that the masks matter
    src[2, 3:] = 0
    tgt = torch.randint(3, 30, (3, 6), generator=g)
    tgt[:, 0] = 1
    tgt[2, 4:] = 0
    return src, tgt


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_same_outputs_and_gradients(dtype, tol):
    torch.manual_seed(0)
    course = Transformer(CONFIG).to(dtype)
    fused = use_attention(copy.deepcopy(course), "fused")
    assert attention_path(course) == "course" and attention_path(fused) == "fused"
    assert sum(isinstance(m, FusedMultiHeadAttention) for m in fused.modules()) == 3 * CONFIG.N
    src, tgt = _batch()
    outputs = []
    for model in (course, fused):
        logits = model(src, tgt)  # (B, T, V)
        real = tgt != 0
        (logits[real] ** 2).mean().backward()
        outputs.append((logits[real].detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (a, grads_a), (b, grads_b) = outputs
    torch.testing.assert_close(b, a, atol=tol, rtol=tol)
    for name in grads_a:
        torch.testing.assert_close(grads_b[name], grads_a[name], atol=tol, rtol=tol, msg=lambda m, name=name: f"{name}: {m}")


def test_switching_back_and_unknown_paths():
    model = use_attention(Transformer(CONFIG), "fused")
    assert attention_path(use_attention(model, "course")) == "course"
    with pytest.raises(ValueError, match="unknown attention path"):
        use_attention(model, "flash")


def test_training_with_the_fused_path(tmp_path):
    config = dataclasses.replace(T.PRESETS["tiny"], run_dir=str(tmp_path / "run"), device="cpu", attention="fused",
                                 max_steps=4, eval_every=4, eval_words=5)
    result = T.train(config, progress=False)
    assert attention_path(result.model) == "fused"
    assert (tmp_path / "run" / "attention.png").is_file()
    with pytest.raises(ValueError, match="attention must be one of"):
        dataclasses.replace(config, attention="flash")
