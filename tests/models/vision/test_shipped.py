"""The image classifiers chapter 10 ships: the ViT and the CNN of the cpu preset, trained by one command with the
same settings. Each folder is the shippable form of its run, and its results.json (test accuracy) is what the model
measures again here."""
from __future__ import annotations

import json

import pytest
import torch

from course.layout import CHECKPOINTS
from transformer import loop
from transformer.checkpoint import TRAINING_STATE
from transformer.vision import data
from transformer.vision import train as V
from transformer.vision.model import SmallCNN, VisionTransformer

FOLDERS = {"vit": CHECKPOINTS / "vit-digits-cpu", "cnn": CHECKPOINTS / "cnn-digits-cpu"}
#: another CPU may sum floats in another order; an image whose two best digits are all but tied may then flip
IMAGES_TOLERANCE = 1


def _results(model: str) -> dict:
    return json.loads((FOLDERS[model] / "results.json").read_text())


@pytest.mark.parametrize("model", sorted(FOLDERS))
def test_each_folder_is_the_cpu_presets_run_small_and_not_resumable(model):
    saved = json.loads((FOLDERS[model] / "config.json").read_text())
    preset = V.PRESETS["cpu"]
    expected = loop.identity(V.VisionTrainConfig(**{**loop.identity(preset), "model": model,
                                                     "parts": "reference", "run_dir": saved["run_dir"]}))
    assert loop.identity(V.VisionTrainConfig(**saved)) == expected
    assert (FOLDERS[model] / "checkpoint.pt").stat().st_size < 1 << 20
    assert not set(TRAINING_STATE) & torch.load(FOLDERS[model] / "checkpoint.pt", weights_only=False).keys()


@pytest.mark.parametrize("model", sorted(FOLDERS))
def test_the_model_measures_its_recorded_test_accuracy_again(model):
    shipped, config = V.load_trained(FOLDERS[model])
    assert isinstance(shipped, {"vit": VisionTransformer, "cnn": SmallCNN}[model]) and config.model == model
    recorded = _results(model)
    test = data.load()["test"]
    assert recorded["test_images"] == len(test) and recorded["steps"] == V.PRESETS["cpu"].max_steps
    right = round(V.accuracy(shipped, test) * len(test))
    assert abs(right - round(recorded["test_accuracy"] * len(test))) <= IMAGES_TOLERANCE


def test_the_vit_reaches_the_chapters_goal_beside_a_cnn_of_its_size():
    vit, cnn = _results("vit"), _results("cnn")
    assert vit["test_accuracy"] >= 0.97 and vit["train_seconds"] < 120
    assert abs(vit["parameters"] - cnn["parameters"]) / cnn["parameters"] < 0.05
