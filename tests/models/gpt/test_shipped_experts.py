"""The GPTs chapter 10 ships: the dense model and the same model with experts, trained with the balancing loss and
without it. Each folder is the shippable form of a run of its preset, and the figures of its experts.json (bits per
character, each layer's use of its experts) are what reading the model again gives."""
from __future__ import annotations

import json

import pytest
import torch

from course.layout import CHECKPOINTS
from transformer import loop
from transformer.checkpoint import TRAINING_STATE
from transformer.gpt import expert_use, stdlib_text
from transformer.gpt import train as gpt

PRESETS = ("dense-cpu", "moe-cpu", "moe-no-balance-cpu")
#: another CPU may sum floats in another order: bits per character move in the 5th decimal, and a byte whose two
#: best experts are all but tied may go to another, which moves a share by 1 / 8,000 (4,000 bytes, 2 choices each)
BPC_TOLERANCE, SHARE_TOLERANCE = 1e-3, 1e-3


@pytest.fixture(scope="module")
def stdlib():
    return stdlib_text.load()


def _folder(preset: str):
    return CHECKPOINTS / f"gpt-{preset}"


@pytest.mark.parametrize("preset", PRESETS)
def test_each_folder_is_its_presets_run_small_and_not_resumable(preset):
    folder = _folder(preset)
    saved = json.loads((folder / "config.json").read_text())
    assert loop.identity(gpt.GPTTrainConfig(**saved)) == loop.identity(gpt.PRESETS[preset])
    assert (folder / "checkpoint.pt").stat().st_size < 5 << 20
    checkpoint = torch.load(folder / "checkpoint.pt", weights_only=False)
    assert not set(TRAINING_STATE) & checkpoint.keys()


@pytest.mark.parametrize("preset", PRESETS)
def test_reading_the_model_again_gives_its_recorded_figures(preset, stdlib):
    recorded = json.loads((_folder(preset) / expert_use.FILE).read_text())
    model, config = gpt.load_trained(_folder(preset), device="cpu")
    assert recorded["parameters"] == expert_use.parameters(model)
    check = recorded["check"]
    measured = expert_use.measure(model, config, stdlib.train, stdlib.heldout[: check["characters"]])
    assert measured["bpc"] == pytest.approx(check["bpc"], abs=BPC_TOLERANCE)
    assert ("use" in measured) == bool(config.n_experts)
    for got, want in zip(measured.get("use", []), check.get("use", []), strict=True):
        assert got == pytest.approx(want, abs=SHARE_TOLERANCE)


def test_the_models_are_compared_at_equal_steps_and_active_parameters():
    found = {p: json.loads((_folder(p) / expert_use.FILE).read_text()) for p in PRESETS}
    steps = {p: json.loads((_folder(p) / "metrics.json").read_text())["dev"][-1]["step"] for p in PRESETS}
    assert len(set(steps.values())) == 1 and steps["moe-cpu"] == gpt.PRESETS["moe-cpu"].max_steps
    dense, moe = found["dense-cpu"]["parameters"], found["moe-cpu"]["parameters"]
    assert abs(moe["active"] - dense["active"]) / dense["active"] < 0.01 < moe["total"] / dense["total"] - 1
    assert found["moe-cpu"]["balance_weight"] > 0 == found["moe-no-balance-cpu"]["balance_weight"]
