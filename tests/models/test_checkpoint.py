"""Saved models keep loading: every shipped checkpoint through its model's loader, and a run folder
written by the code before the models moved into their packages (run_before_the_move/, the tiny
G2P preset at d_model 16, four steps) both loads and resumes."""
from __future__ import annotations

import dataclasses
import shutil

import pytest
import torch

from course.layout import CHECKPOINTS, REPO
from transformer import checkpoint
from transformer.audio import train as audio
from transformer.bert import train as bert
from transformer.g2p import train as g2p
from transformer.gpt import train as gpt
from transformer.loop import TrainingError, read_checkpoint
from transformer.vision import train as vision

OLD_RUN = REPO / "tests" / "models" / "g2p" / "run_before_the_move"

LOADERS = {
    "g2p-cpu": lambda path: g2p.load_trained(path, device="cpu")[0],
    "gpt-stdlib-cpu": lambda path: gpt.load_trained(path, device="cpu")[0],
    "gpt-rope-cpu": lambda path: gpt.load_trained(path, device="cpu")[0],
    "gpt-sinusoidal-cpu": lambda path: gpt.load_trained(path, device="cpu")[0],
    "gpt-rope-pi-cpu": lambda path: gpt.load_trained(path, device="cpu")[0],
    "gpt-dense-cpu": lambda path: gpt.load_trained(path, device="cpu")[0],
    "gpt-moe-cpu": lambda path: gpt.load_trained(path, device="cpu")[0],
    "gpt-moe-no-balance-cpu": lambda path: gpt.load_trained(path, device="cpu")[0],
    "vit-digits-cpu": lambda path: vision.load_trained(path)[0],
    "cnn-digits-cpu": lambda path: vision.load_trained(path)[0],
    "audio-digits-cpu": lambda path: audio.load_trained(path)[0],
    "bert-pretrain-cpu": bert.load_pretrained,
    "bert-syllables-cpu": lambda path: bert.load_finetuned(path)[0],
    "bert-stress-cpu": lambda path: bert.load_finetuned(path)[0],
}


def test_every_shipped_checkpoint_is_known_here():
    assert sorted(p.parent.name for p in CHECKPOINTS.glob(f"*/{checkpoint.FILE}")) == sorted(LOADERS)


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_a_shipped_checkpoint_loads(name):
    model = LOADERS[name](CHECKPOINTS / name)
    saved = checkpoint.load(CHECKPOINTS / name / checkpoint.FILE)
    assert not checkpoint.resumable(saved), "shipped in the exported form"
    weights = checkpoint.final_weights(saved)
    for key, value in model.state_dict().items():
        assert torch.equal(value, weights[key]), f"{name}: {key} is not the saved weight"


def test_a_run_of_the_earlier_code_loads_and_resumes(tmp_path):
    model, config, _ = g2p.load_trained(OLD_RUN, device="cpu")
    assert config.d_model == 16 and sum(p.numel() for p in model.parameters()) == 6_741
    run = tmp_path / "run"
    shutil.copytree(OLD_RUN, run)
    resumed = g2p.train(dataclasses.replace(config, run_dir=str(run), max_steps=5), resume=True, progress=False)
    assert resumed.step == 5 and [r["step"] for r in resumed.metrics["dev"]][:2] == [2, 4]


def test_a_renamed_setting_is_read_under_its_new_name(tmp_path, monkeypatch):
    saved = checkpoint.load(OLD_RUN / checkpoint.FILE)
    saved[checkpoint.CONFIG]["width"] = saved[checkpoint.CONFIG].pop("d_model")
    torch.save(saved, tmp_path / checkpoint.FILE)
    with pytest.raises(TrainingError, match="not a checkpoint of this training loop"):
        read_checkpoint(tmp_path, g2p.TrainConfig)
    monkeypatch.setitem(checkpoint.RENAMED_SETTINGS, "width", "d_model")
    assert read_checkpoint(tmp_path, g2p.TrainConfig)[1].d_model == 16


def test_what_is_not_a_checkpoint_is_refused(tmp_path):
    (tmp_path / checkpoint.FILE).write_text("not a checkpoint")
    with pytest.raises(TrainingError, match="is not a checkpoint"):
        read_checkpoint(tmp_path, g2p.TrainConfig)
    torch.save({"model": {}}, tmp_path / checkpoint.FILE)
    with pytest.raises(TrainingError, match="not a checkpoint of this training loop"):
        read_checkpoint(tmp_path, g2p.TrainConfig)
    with pytest.raises(TrainingError, match="no checkpoint at"):
        read_checkpoint(tmp_path / "nowhere", g2p.TrainConfig)
