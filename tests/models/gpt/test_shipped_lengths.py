"""The GPTs chapter 9 ships, rotary and sinusoidal positions trained alike and the rotary one stretched: each folder
is the shippable form of a run of its preset, and the figures of its lengths.json are what reading the model again
gives."""
from __future__ import annotations

import json

import pytest
import torch

from course.layout import CHECKPOINTS, REPO
from transformer import loop
from transformer.checkpoint import TRAINING_STATE
from transformer.gpt import lengths, stdlib_text
from transformer.gpt import train as gpt

FOLDERS = {"rope": CHECKPOINTS / "gpt-rope-cpu", "sinusoidal": CHECKPOINTS / "gpt-sinusoidal-cpu",
           "rope-pi": CHECKPOINTS / "gpt-rope-pi-cpu"}
#: another CPU may sum floats in another order: bits per character move in the 5th decimal
BPC_TOLERANCE = 1e-3


@pytest.mark.parametrize("positions", FOLDERS)
def test_each_folder_is_its_presets_run_small_and_not_resumable(positions):
    folder = FOLDERS[positions]
    saved = json.loads((folder / "config.json").read_text())
    assert loop.identity(gpt.GPTTrainConfig(**saved)) == loop.identity(gpt.PRESETS[f"{positions}-cpu"])
    assert (folder / "checkpoint.pt").stat().st_size < 5 << 20
    checkpoint = torch.load(folder / "checkpoint.pt", weights_only=False)
    assert not set(TRAINING_STATE) & checkpoint.keys()


@pytest.mark.parametrize("positions", FOLDERS)
def test_reading_the_model_again_gives_its_recorded_bits(positions):
    folder = FOLDERS[positions]
    recorded = json.loads((folder / lengths.FILE).read_text())
    assert recorded["positions"] == positions.removesuffix("-pi") and recorded["characters"] == 100_000
    model, config = gpt.load_trained(folder, device="cpu")
    data = stdlib_text.load()
    measured = lengths.measure(model, config, data.train, data.heldout[:lengths.CHECK_CHARS])
    check = recorded["check"]["rows"]
    assert [(r["window"], r["positions"]) for r in measured] == [(r["window"], r["positions"]) for r in check]
    for got, want in zip(measured, check):
        assert got["bpc"] == pytest.approx(want["bpc"], abs=BPC_TOLERANCE), (got, want)


def test_the_page_reads_the_figures_from_the_folders():
    page = (REPO / "book" / "ch09_hardware.md").read_text()
    assert "lengths.json" in page and "gpt-rope-cpu" in page and "gpt-sinusoidal-cpu" in page
