"""The full Transformer: built from the chapters' parts, equal to PyTorch's, the paper's size."""
from __future__ import annotations

import ast

import pytest
import torch
from torch import nn

from autograder.oracles import torch_decoder, torch_encoder
from course.layout import REPO
from reference.decoder import Decoder, subsequent_mask
from reference.encoder import Encoder
from reference.positional import PositionalEmbedding
from reference.prerequisites import greedy_decode
from transformer import Transformer, TransformerConfig, count_parameters

SMALL = TransformerConfig(src_vocab_size=40, tgt_vocab_size=40, d_model=32, h=4, N=2, d_ff=64, dropout=0.0)


def _sub_state(model: nn.Module, prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix):]: v for k, v in model.state_dict().items() if k.startswith(prefix)}


@pytest.mark.parametrize("share", [True, False])
def test_matches_nn_transformer_with_copied_weights(share):
    torch.manual_seed(0)
    config = TransformerConfig(**{**SMALL.__dict__, "share_embeddings": share})
    model = Transformer(config).double().eval()
    src = torch.tensor([[5, 7, 9, 11, 3, 0, 0], [4, 4, 8, 2, 6, 1, 9]])  # padded at the end of row 0
    tgt = torch.tensor([[1, 12, 13, 0], [1, 20, 21, 22]])
    d = config.d_model
    reference = nn.Transformer(d, config.h, config.N, config.N, config.d_ff, dropout=0.0, batch_first=True, dtype=torch.float64)
    # The paper's post-norm stacks end with a layer's own LayerNorm; nn.Transformer adds one more
    # after each stack, which the paper does not have.
    reference.encoder = torch_encoder(_sub_state(model, "encoder."), config.N, d, config.h, config.d_ff)
    reference.decoder = torch_decoder(_sub_state(model, "decoder."), config.N, d, config.h, config.d_ff)
    reference.eval()
    with torch.no_grad():
        hidden = reference(
            model.src_embed(src), model.tgt_embed(tgt),
            tgt_mask=~subsequent_mask(tgt.size(1)),  # nn layers mark the forbidden positions
            src_key_padding_mask=src == 0, tgt_key_padding_mask=tgt == 0, memory_key_padding_mask=src == 0,
        )
        expected = model.generator(hidden)
        ours = model(src, tgt)
    rows = tgt != 0  # padded target positions are never read
    torch.testing.assert_close(ours[rows], expected[rows], atol=1e-10, rtol=1e-9)


def test_base_model_has_the_papers_size(capsys):
    model = Transformer()
    n = count_parameters(model)
    with capsys.disabled():
        print(f"\nbase model: {n:,} parameters (paper: 65M)")
    assert abs(n - 65e6) / 65e6 < 0.05
    assert model.generator.weight is model.src_embed.embedding.weight is model.tgt_embed.embedding.weight


def test_forward_and_backward_of_a_small_model_on_cpu():
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(**{**SMALL.__dict__, "dropout": 0.1}))
    src, tgt = torch.randint(1, 40, (4, 9)), torch.randint(1, 40, (4, 6))
    logits = model(src, tgt[:, :-1])  # (B, T - 1, V)
    assert logits.shape == (4, 5, 40)
    loss = nn.functional.cross_entropy(logits.reshape(-1, 40), tgt[:, 1:].reshape(-1))
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, f"{name} received no gradient"


def test_a_future_target_token_never_changes_earlier_logits():
    torch.manual_seed(1)
    model = Transformer(SMALL).eval()
    src, tgt = torch.randint(1, 40, (2, 6)), torch.randint(1, 40, (2, 7))
    changed = tgt.clone()
    changed[:, 4:] = torch.randint(1, 40, (2, 3))
    with torch.no_grad():
        a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, :4], b[:, :4])
    assert not torch.allclose(a[:, 4:], b[:, 4:])


def test_the_chapter_1_greedy_decoder_drives_it():
    torch.manual_seed(2)
    model = Transformer(SMALL).eval()
    with torch.no_grad():
        out = greedy_decode(model, torch.randint(3, 40, (3, 5)), max_len=6, bos_id=1, eos_id=2, pad_id=0)
    assert out.shape[0] == 3 and out.shape[1] <= 7 and (out[:, 0] == 1).all()


@pytest.mark.parametrize(
    "overrides, phrase",
    [
        ({"d_model": 30, "h": 4}, "not divisible by h=4"),
        ({"src_vocab_size": 100, "tgt_vocab_size": 90}, "share_embeddings needs one vocabulary"),
        ({"dropout": 1.0}, "dropout must be in [0, 1)"),
        ({"N": 0}, "N must be a positive integer"),
        ({"pad_id": 40}, "pad_id=40 is not a token"),
    ],
)
def test_an_impossible_config_is_refused_clearly(overrides, phrase):
    with pytest.raises(ValueError, match=phrase.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        TransformerConfig(**{**SMALL.__dict__, **overrides})


def test_it_is_assembled_from_the_chapters_parts_not_copies():
    model = Transformer(SMALL)
    assert type(model.encoder) is Encoder and type(model.decoder) is Decoder
    assert type(model.src_embed) is PositionalEmbedding
    source = REPO / "transformer" / "model.py"
    classes = {n.name for n in ast.walk(ast.parse(source.read_text())) if isinstance(n, ast.ClassDef)}
    assert classes == {"ModelShape", "TransformerConfig", "Memory", "Transformer"}


def test_every_model_and_training_config_is_one_model_shape():
    from transformer.bert.model import BertConfig
    from transformer.bert.train import FinetuneConfig, PretrainConfig
    from transformer.g2p.train import TrainConfig
    from transformer.gpt.model import GPTConfig
    from transformer.gpt.train import GPTTrainConfig
    from transformer.loop import LoopConfig
    from transformer.model import ModelShape

    configs = [TransformerConfig, GPTConfig, BertConfig, LoopConfig, TrainConfig, GPTTrainConfig, PretrainConfig,
               FinetuneConfig]
    assert "d_model" not in LoopConfig.__dict__["__annotations__"], "the loop's d_model is the shape's"
    for config in configs:
        assert issubclass(config, ModelShape), config.__name__
        for bad, message in (({"d_model": 30, "h": 4}, "not divisible by h=4"),
                             ({"dropout": 1.0}, r"dropout must be in \[0, 1\)"), ({"N": 0}, "N must be a positive integer"),
                             ({"d_ff": 1.5}, "d_ff must be a positive integer")):
            with pytest.raises(ValueError, match=message):
                config(**bad)
    assert TrainConfig(d_model=64, h=2, N=3, d_ff=96, dropout=0.2).model_config(70).shape() == {
        "d_model": 64, "h": 2, "N": 3, "d_ff": 96, "dropout": 0.2}
