"""The speech classifier: its model, its training on the tiny preset, its commands, and --parts mine."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import tests.models.test_command_help as command_help
from tests.models.test_parts import _complete
from transformer.audio import __main__ as audio_main
from transformer.audio import data as spoken
from transformer.audio import train as A
from transformer.audio.measure import measure
from transformer.audio.model import AudioConfig, SpeechClassifier, pad_waves
from transformer.loop import TrainingError


@pytest.fixture(scope="module")
def digits():
    return spoken.load()


def tiny(run_dir, **overrides) -> A.AudioTrainConfig:
    return dataclasses.replace(A.PRESETS["tiny"], run_dir=str(run_dir), device="cpu", **overrides)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, digits):
    return A.train(tiny(tmp_path_factory.mktemp("audio") / "run"), data=digits, progress=False)


def _model(**overrides) -> SpeechClassifier:
    torch.manual_seed(0)
    return SpeechClassifier(AudioConfig(d_model=16, h=2, N=1, d_ff=32, n_mels=16, **overrides)).eval()


def test_padding_after_a_clip_changes_nothing(digits):
    model = _model()
    short, long = (torch.from_numpy(w) for w in sorted(digits.waves[:10], key=len)[::9])
    alone = model(short[None], torch.tensor([len(short)]))
    waves, lengths = pad_waves([short, long])  # (2, S): short is followed by zeros
    together = model(waves, lengths)
    torch.testing.assert_close(together[:1], alone, atol=1e-5, rtol=1e-4)
    weights = model.encoder.layers[-1].self_attn.attn_weights  # (B, h, 1 + T, 1 + T)
    real = 1 + int(model.config.frames(lengths[:1]))
    assert weights[0, :, 0, real:].abs().max() == 0, "the class token attended to padding"
    with pytest.raises(ValueError, match="longer than the model's max_frames=8"):
        _model(max_frames=8)(waves, lengths)


def test_the_same_clip_louder_is_heard_the_same(digits):
    model = _model()
    wave = torch.from_numpy(digits.waves[0])[None]  # (1, S)
    length = torch.tensor([wave.shape[1]])
    torch.testing.assert_close(model(0.25 * wave, length), model(wave, length), atol=1e-4, rtol=1e-4)


def test_augmenting_changes_speed_and_noise_within_bounds():
    wave = torch.sin(torch.arange(8000) * 0.05)
    config = tiny("", speed_perturb=0.2, noise_db=0.0)
    torch.manual_seed(0)
    heard = [A.augment(wave, config) for _ in range(20)]
    assert all(8000 / 1.2 - 2 <= len(w) <= 8000 / 0.8 for w in heard) and len({len(w) for w in heard}) > 10
    torch.manual_seed(0)
    assert all(torch.equal(a, b) for a, b in zip(heard, [A.augment(wave, config) for _ in range(20)]))
    noisy = A.augment(wave, tiny("", speed_perturb=0.0, noise_db=20.0))
    snr = 10 * torch.log10(wave.pow(2).mean() / (noisy - wave).pow(2).mean())
    assert 18 < snr < 52 and len(noisy) == len(wave)
    with pytest.raises(ValueError, match="speed_perturb must be in"):
        tiny("", speed_perturb=0.5)


def test_a_tiny_run_fills_its_folder_and_measures_the_test_voices(tiny_run, digits):
    folder = tiny_run.run_dir
    for name in ("config.json", "metrics.json", "curves.png", "results.json", "checkpoint.pt"):
        assert (folder / name).is_file(), name
    metrics = json.loads((folder / "metrics.json").read_text())
    assert [r["step"] for r in metrics["dev"]] == [4, 8]
    results = json.loads((folder / "results.json").read_text())
    assert (results["split"], results["clips"], results["voices"]) == ("test", 200, 20)
    assert [sum(row) for row in results["confusion"]] == [20] * 10
    assert results["accuracy"] == sum(results["confusion"][d][d] for d in range(10)) / 200
    model, config = A.load_trained(folder)
    assert config.d_model == 16 and not model.training
    for name, value in tiny_run.model.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name
    assert measure(model, digits.split("test")) == results


def test_the_commands_train_evaluate_and_export(tiny_run, tmp_path, capsys):
    run = tmp_path / "cli"
    assert audio_main.main(["train", "--preset", "tiny", "--run-dir", str(run), "--quiet", "--max-steps", "2",
                            "--eval-every", "2", "--checkpoint-every", "2", "--device", "cpu"]) == 0
    assert "2 steps" in capsys.readouterr().out
    assert audio_main.main(["evaluate", str(tiny_run.run_dir), "--split", "dev", "--json", str(tmp_path / "dev.json")]) == 0
    shown = capsys.readouterr().out
    assert "dev: 100 clips by 10 voices" in shown and "said \\ heard" in shown
    assert json.loads((tmp_path / "dev.json").read_text())["clips"] == 100
    assert audio_main.main(["export", str(tiny_run.run_dir), str(tmp_path / "shipped")]) == 0
    saved = torch.load(tmp_path / "shipped" / "checkpoint.pt", weights_only=False)
    assert "optimizer" not in saved and saved["data"]["test_voices"] == 20
    assert (tmp_path / "shipped" / "results.json").is_file()
    assert audio_main.main(["evaluate", str(tmp_path / "nowhere")]) == 2 and "no checkpoint" in capsys.readouterr().err


def test_the_command_has_help_at_both_levels_and_every_option_says_what_it_does(capsys):
    command_help.test_one_command_shape_with_help_at_both_levels(audio_main, capsys)
    command_help.test_every_option_has_a_description(A.AudioTrainConfig, A.PRESETS)


def test_a_model_too_short_for_the_clips_is_refused_before_training(tmp_path, digits):
    with pytest.raises(TrainingError, match="raise --max-frames"):
        A.train(tiny(tmp_path / "run", max_frames=50), data=digits, progress=False)


def test_parts_mine_hears_with_your_frame_signal_and_log_mel(tmp_path, capsys):
    folder = tmp_path / "exercises"
    for notebook in ("attention", "multihead", "encoder", "positional", "one_block"):
        _complete(folder, notebook)
    task = A.AudioTask(tiny(tmp_path / "run", parts="mine", parts_dir=str(folder)))
    task.use_learner_parts()
    listing = capsys.readouterr().out
    assert "frame_signal, log_mel" in listing and "the course's" not in listing
    model = task.build_model().eval()
    for name in ("frame_signal", "log_mel", "Encoder", "sinusoidal_encoding"):
        assert model.parts[name].__module__.startswith("_learner_parts_"), name
    assert type(model.encoder.layers[0].self_attn).__module__.startswith("_learner_parts_")
    course = SpeechClassifier(model.config).eval()
    course.load_state_dict(model.state_dict())
    waves, lengths = pad_waves([torch.randn(3000), torch.randn(2400)])
    torch.testing.assert_close(model(waves, lengths), course(waves, lengths), atol=1e-5, rtol=1e-4)
