"""Chapter 10's vision Transformer and its CNN baseline: the models, the augmentation, the command line on the
tiny preset, and --parts mine."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from reference import encoder as course_encoder
from reference import one_block
from tests.models.test_parts import _complete
from transformer.cli import field_comments
from transformer.loop.cli import _parser
from transformer.vision import data
from transformer.vision import train as V
from transformer.vision.__main__ import COMMANDS
from transformer.vision.__main__ import main as vision
from transformer.vision.model import SmallCNN, VisionTransformer, ViTConfig, class_attention


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The command of the tiny preset: the ViT, then the CNN, in one run folder."""
    folder = tmp_path_factory.mktemp("vision") / "tiny"
    assert vision(["train", "--preset", "tiny", "--run-dir", str(folder), "--quiet", "--device", "cpu"]) == 0
    return folder


def test_the_command_trains_both_models_the_same_way(trained, capsys):
    vit, cnn = (json.loads((trained / m / "config.json").read_text()) for m in ("vit", "cnn"))
    assert (vit["model"], cnn["model"]) == ("vit", "cnn")
    assert {k: v for k, v in vit.items() if k not in ("model", "run_dir")} == \
        {k: v for k, v in cnn.items() if k not in ("model", "run_dir")}, "the same settings but the model"
    for model in ("vit", "cnn"):
        results = json.loads((trained / model / "results.json").read_text())
        assert results["steps"] == V.PRESETS["tiny"].max_steps and results["test_images"] == 355
        metrics = json.loads((trained / model / "metrics.json").read_text())
        assert [r["step"] for r in metrics["dev"]] == [6, 12] and "loss" in metrics["dev"][-1]
    assert vision(["evaluate", str(trained / "vit"), str(trained / "cnn"), "--split", "dev"]) == 0
    out = capsys.readouterr().out
    assert "vit, 2,794 parameters: dev accuracy" in out and "cnn, 1,250 parameters: dev accuracy" in out


def test_export_writes_a_model_that_measures_the_same(trained, tmp_path, capsys):
    assert vision(["export", str(trained / "vit"), str(tmp_path / "vit")]) == 0
    assert {p.name for p in (tmp_path / "vit").iterdir()} == {"checkpoint.pt", "config.json", "metrics.json",
                                                               "curves.png", "results.json"}
    splits = data.load()
    run, _ = V.load_trained(trained / "vit")
    shipped, config = V.load_trained(tmp_path / "vit")
    assert config.model == "vit" and isinstance(shipped, VisionTransformer)
    assert V.accuracy(shipped, splits["test"]) == V.accuracy(run, splits["test"])
    assert vision(["export", str(tmp_path / "vit"), str(tmp_path / "again")]) == 2
    assert "already an exported model" in capsys.readouterr().err


def test_help_at_both_levels_and_every_option_described(capsys):
    assert vision(["--help"]) == 0
    listing = capsys.readouterr().out
    for name, command in COMMANDS.items():
        assert f"  {name}" in listing and command.summary in listing
        with pytest.raises(SystemExit) as exit_:
            vision([name, "--help"])
        assert exit_.value.code == 0
    parser = _parser(V.VisionTrainConfig, V.PRESETS, "prog", "", "cpu")
    assert all((a.help or "").split(" (preset")[0].strip() for a in parser._actions if a.option_strings)
    comments = field_comments(V.VisionTrainConfig)
    assert all(comments.get(f.name) for f in dataclasses.fields(V.VisionTrainConfig))


def test_settings_that_cannot_work_are_refused():
    with pytest.raises(ValueError, match="--parts mine applies to the ViT"):
        dataclasses.replace(V.PRESETS["tiny"], model="cnn", parts="mine")
    with pytest.raises(ValueError, match="model must be one of vit, cnn"):
        dataclasses.replace(V.PRESETS["tiny"], model="mlp")
    with pytest.raises(ValueError, match="patch=3 does not divide"):
        dataclasses.replace(V.PRESETS["tiny"], patch=3)
    with pytest.raises(ValueError, match="shift must be 0"):
        dataclasses.replace(V.PRESETS["tiny"], shift=-1)


# ---------------------------------------------------------------------------------------------
# the models
# ---------------------------------------------------------------------------------------------


def test_the_vit_is_made_of_the_courses_parts():
    model = V.build_model(V.PRESETS["cpu"], V.VisionTask(V.PRESETS["cpu"]).parts.functions)
    assert type(model.embed) is one_block.PatchEmbedding
    assert type(model.encoder) is course_encoder.Encoder and type(model.norm) is course_encoder.LayerNorm
    assert model.embed.positions.shape == (1, 17, 64), "the class token and 16 patches of 2 x 2 pixels"


def test_the_class_token_is_what_the_head_reads_and_its_attention_covers_the_patches():
    torch.manual_seed(0)
    model = VisionTransformer(ViTConfig(d_model=16, h=2, N=2, d_ff=32, dropout=0.0)).eval()
    images = torch.rand(3, 1, 8, 8)
    attention = class_attention(model, images)
    assert attention.shape == (3, 4, 4)
    self_weight = model.encoder.layers[-1].self_attn.attn_weights[:, :, 0, 0].mean(1)  # (3,)
    torch.testing.assert_close(attention.sum(dim=(1, 2)) + self_weight, torch.ones(3))
    captured = {}
    model.head.register_forward_hook(lambda module, args, out: captured.setdefault("input", args[0]))
    model(images)
    states = model.norm(model.encoder(model.embed(images)))  # (3, 17, 16)
    torch.testing.assert_close(captured["input"], states[:, 0])


def test_the_cnn_has_about_as_many_parameters_as_the_vit():
    config = V.PRESETS["cpu"]
    vit = V.build_model(config)
    cnn = V.build_model(dataclasses.replace(config, model="cnn"))
    assert isinstance(cnn, SmallCNN) and cnn(torch.rand(2, 1, 8, 8)).shape == (2, 10)
    counts = [sum(p.numel() for p in m.parameters()) for m in (vit, cnn)]
    assert counts == [102_666, 99_214], "the numbers the config's comment gives"


def test_a_shift_moves_every_pixel_by_the_same_offset_and_brings_in_zeros():
    images = torch.arange(2 * 64, dtype=torch.float32).reshape(2, 1, 8, 8) + 1
    generator = torch.Generator().manual_seed(3)
    moved = V.shifted(images, 1, generator)
    assert moved.shape == images.shape
    for b in range(2):
        # The offset each image got: where its first pixel landed, or, shifted out, the one that moved into the corner.
        found = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)
                 if torch.equal(moved[b, 0], torch.nn.functional.pad(images[b, 0], (1, 1, 1, 1))[1 - dy : 9 - dy,
                                                                                                   1 - dx : 9 - dx])]
        assert len(found) == 1, b
    assert V.shifted(images, 0, generator).equal(images)


# ---------------------------------------------------------------------------------------------
# --parts mine
# ---------------------------------------------------------------------------------------------


def test_with_parts_mine_the_vit_is_made_of_the_learners_parts(tmp_path, capsys):
    folder = tmp_path / "exercises"
    for notebook in ("attention", "multihead", "encoder", "one_block"):
        _complete(folder, notebook)
    config = dataclasses.replace(V.PRESETS["tiny"], parts="mine", parts_dir=str(folder), run_dir=str(tmp_path / "run"),
                                 max_steps=2, eval_every=2, checkpoint_every=2)
    result = V.train(config, progress=False)
    out = capsys.readouterr().out
    assert "yours: softmax" in out and "PatchEmbedding" in out and "the course's" not in out
    model = result.model
    assert type(model.embed).__name__ == "PatchEmbedding" and type(model.embed).__module__.startswith("_learner_parts_")
    assert type(model.encoder).__module__.startswith("_learner_parts_")
    loaded, _ = V.load_trained(tmp_path / "run")
    assert type(loaded.embed).__module__.startswith("_learner_parts_")
