"""The batched beam search used for evaluation gives the exercise's beam search, word for word."""
from __future__ import annotations

import pytest
import torch

from autograder.toys import ToyTranslator
from reference.capstone import beam_search
from reference.prerequisites import greedy_decode
from transformer import Transformer, TransformerConfig
from transformer.g2p.baseline import TorchTransformer
from transformer.g2p.decoding import batched_beam_search


def _sources(g: torch.Generator, lengths, vocab_size: int, pad_id: int = 0, low: int = 3) -> torch.Tensor:
    src = torch.full((len(lengths), max(lengths)), pad_id, dtype=torch.long)  # (B, S), padded at the end
    for b, n in enumerate(lengths):
        src[b, :n] = torch.randint(low, vocab_size, (n,), generator=g)
    return src


def _one_by_one(model, src, beam_size, max_len, alpha):
    out = []
    for row in src:
        # (1, S) with the batch's padding: the toy model's alignment reads padded positions too
        tokens, score = beam_search(model, row.unsqueeze(0), beam_size, max_len, 1, 2, alpha)
        out.append((tokens.tolist(), score))
    return out


MODELS = {
    "toy": lambda: ToyTranslator(vocab_size=9, d=16, seed=0, eos_slope=0.7),
    "transformer": lambda: Transformer(TransformerConfig(
        src_vocab_size=12, tgt_vocab_size=12, d_model=16, h=2, N=1, d_ff=32, dropout=0.0, max_len=64,
    )).double().eval(),
    # PyTorch's layers give NaN for a hypothesis slot that holds only padding
    "nn.Transformer": lambda: TorchTransformer(TransformerConfig(
        src_vocab_size=12, tgt_vocab_size=12, d_model=16, h=2, N=1, d_ff=32, dropout=0.0, max_len=64,
    )).double().eval(),
}


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("beam_size, alpha", [(1, 0.0), (3, 0.0), (4, 0.6), (5, 2.0)])
def test_batched_equals_the_exercise(name, beam_size, alpha):
    torch.manual_seed(0)
    model = MODELS[name]()
    g = torch.Generator().manual_seed(beam_size)
    vocab = 9 if name == "toy" else 12
    src = _sources(g, [3, 1, 5, 2, 4, 6], vocab)
    tokens, scores = batched_beam_search(model, src, beam_size, max_len=8, bos_id=1, eos_id=2, pad_id=0, alpha=alpha)
    expected = _one_by_one(model, src, beam_size, 8, alpha)
    assert tokens == [t for t, _ in expected]
    assert scores == pytest.approx([s for _, s in expected], rel=1e-9, abs=1e-12)


def test_beam_of_one_is_greedy():
    torch.manual_seed(0)
    model = MODELS["transformer"]()
    src = _sources(torch.Generator().manual_seed(1), [4, 2, 6], 12)
    tokens, _ = batched_beam_search(model, src, 1, max_len=8, bos_id=1, eos_id=2, pad_id=0)
    greedy = greedy_decode(model, src, 8, 1, 2, 0).tolist()
    for ours, theirs in zip(tokens, greedy):
        assert ours == theirs[: len(ours)] and all(t == 0 for t in theirs[len(ours):])


def test_bad_beam():
    with pytest.raises(ValueError, match="beam_size"):
        batched_beam_search(MODELS["toy"](), torch.tensor([[3, 4]]), 0, 5, 1, 2, 0)
