"""Chapter 9's GPT: rotary or sinusoidal positions, grouped heads, a cache per block, longer contexts."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from transformer.gpt.model import GPTConfig
from transformer.gpt.variants import VariantGPT, build_gpt, generate_cached

SMALL = dict(vocab_size=50, d_model=16, h=4, N=2, d_ff=32, block_size=12)


def _model(**changes) -> VariantGPT:
    torch.manual_seed(0)
    model = build_gpt(GPTConfig(**{**SMALL, **changes}))
    assert isinstance(model, VariantGPT)
    return model.eval()


@pytest.mark.parametrize("positions, kv_heads", [("rope", 2), ("sinusoidal", 1), ("learned", 2), ("rope", 4)])
def test_writing_through_the_caches_gives_what_reading_everything_again_gives(positions, kv_heads):
    model = _model(positions=positions, kv_heads=kv_heads)
    prompt = torch.randint(0, 50, (3, 4))
    written = generate_cached(model, prompt, 8)
    ids = prompt
    for _ in range(8):
        ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(written, ids[:, 4:])


def test_no_position_reads_a_later_one():
    model = _model(positions="rope", kv_heads=2)
    ids = torch.randint(0, 50, (2, 10))
    changed = ids.clone()
    changed[:, 7:] = (changed[:, 7:] + 1) % 50
    assert torch.allclose(model(ids)[:, :7], model(changed)[:, :7], atol=1e-6)
    assert not torch.allclose(model(ids)[:, 7:], model(changed)[:, 7:])


def test_the_fused_path_computes_the_same_function():
    course, fused = _model(positions="rope", kv_heads=2), _model(positions="rope", kv_heads=2, attention="fused")
    fused.load_state_dict(course.state_dict())
    ids = torch.randint(0, 50, (2, 9))
    assert torch.allclose(course(ids), fused(ids), atol=1e-5)


def test_rotary_and_sinusoidal_models_read_past_their_training_length_and_interpolation_changes_only_rope():
    ids = torch.randint(0, 50, (1, 4 * SMALL["block_size"]))
    rope, sinusoidal = _model(positions="rope"), _model(positions="sinusoidal")
    assert rope(ids).shape == sinusoidal(ids).shape == (1, 48, 50)
    before = rope(ids)
    rope.set_position_scale(4)
    assert not torch.allclose(before, rope(ids))
    rope.set_position_scale(1)
    assert torch.equal(before, rope(ids))
    with pytest.raises(ValueError, match="block_size"):
        _model(positions="learned", kv_heads=2)(ids)


def test_the_learners_parts_are_the_ones_the_model_calls():
    from reference.hardware import apply_rope, grouped_query_attention

    calls = []

    def counted_rope(x, positions, base=10000.0):
        calls.append("rope")
        return apply_rope(x, positions, base)

    def counted_attention(q, k, v, mask=None):
        calls.append("attention")
        return grouped_query_attention(q, k, v, mask)

    model = build_gpt(GPTConfig(**SMALL, positions="rope", kv_heads=2),
                      {"apply_rope": counted_rope, "grouped_query_attention": counted_attention})
    model(torch.randint(0, 50, (1, 5)))
    assert calls.count("rope") == 2 * SMALL["N"] and calls.count("attention") == SMALL["N"]


def test_a_configuration_that_cannot_group_the_heads_is_refused():
    with pytest.raises(ValueError, match="kv_heads must divide h=4"):
        GPTConfig(**SMALL, kv_heads=3)
    with pytest.raises(ValueError, match="positions must be one of"):
        GPTConfig(**SMALL, positions="alibi")
    assert not GPTConfig(**SMALL, kv_heads=4).chapter_9  # h key/value heads and learned positions: chapter 7's


def test_a_trained_rope_model_is_read_at_longer_contexts(tmp_path):
    from transformer.gpt import lengths
    from transformer.gpt.__main__ import main

    run = tmp_path / "run"
    assert main(["train", "--preset", "tiny", "--positions", "rope", "--max-steps", "4", "--run-dir", str(run),
                 "--quiet"]) == 0
    assert main(["lengths", str(run), "--chars", "300"]) == 0
    found = json.loads((run / lengths.FILE).read_text())
    readings = [(row["factor"], row["positions"]) for row in found["rows"]]
    assert readings == [(1, "as trained"), (2, "as trained"), (2, "interpolated"), (4, "as trained"),
                        (4, "interpolated")]
    assert found["check"]["characters"] == lengths.CHECK_CHARS
    assert all(0 < row["bpc"] < 10 for row in found["rows"])


def test_a_rope_model_stretched_by_interpolation_starts_from_the_trained_weights(tmp_path):
    from transformer.gpt import lengths
    from transformer.gpt.__main__ import main
    from transformer.gpt.train import load_trained

    first, stretched = tmp_path / "first", tmp_path / "stretched"
    assert main(["train", "--preset", "tiny", "--positions", "rope", "--max-steps", "3", "--run-dir", str(first),
                 "--quiet"]) == 0
    assert main(["train", "--preset", "tiny", "--positions", "rope", "--max-steps", "2", "--block-size", "64",
                 "--position-scale", "2", "--init", str(first), "--run-dir", str(stretched), "--quiet"]) == 0
    model, config = load_trained(stretched, device="cpu")
    assert all(block.self_attn.position_scale == 2.0 for block in model.blocks)
    rows = lengths.lengths(stretched, 200)["rows"]
    # read at 1, 2 and 4 times the 32 bytes it was first trained on, with the positions it was stretched to
    assert [(row["window"], row["positions"]) for row in rows] == [(32, "as trained"), (64, "as trained"),
                                                                   (128, "as trained")]
    with pytest.raises(ValueError, match="1 unless positions is rope"):
        dataclasses.replace(config, positions="sinusoidal")
