"""The speech classifier chapter 10 ships: the cpu preset's run, exported. Its results.json (accuracy on the test
voices, the confusion matrix) is what the model measures again here."""
from __future__ import annotations

import json

import torch

from course.layout import CHECKPOINTS
from transformer import loop
from transformer.audio import data as spoken
from transformer.audio import train as A
from transformer.audio.measure import measure
from transformer.checkpoint import TRAINING_STATE

FOLDER = CHECKPOINTS / "audio-digits-cpu"
#: another CPU may sum floats in another order; a clip whose two best digits are all but tied may then flip
CLIPS_TOLERANCE = 1


def test_the_folder_is_the_cpu_presets_run_small_and_not_resumable():
    saved = json.loads((FOLDER / "config.json").read_text())
    assert loop.identity(A.AudioTrainConfig(**saved)) == loop.identity(A.PRESETS["cpu"])
    assert (FOLDER / "checkpoint.pt").stat().st_size < 1 << 20
    assert not set(TRAINING_STATE) & torch.load(FOLDER / "checkpoint.pt", weights_only=False).keys()


def test_the_model_hears_the_test_voices_as_recorded():
    recorded = json.loads((FOLDER / "results.json").read_text())
    model, _ = A.load_trained(FOLDER)
    test = spoken.load().split("test")
    measured = measure(model, test)
    assert (measured["clips"], measured["voices"]) == (recorded["clips"], recorded["voices"]) == (200, 20)
    wrong = sum(1 for _ in measured["wrong"])
    assert abs(wrong - len(recorded["wrong"])) <= CLIPS_TOLERANCE
    assert sum(map(sum, recorded["confusion"])) == 200
    assert recorded["accuracy"] >= 0.95  # the chapter's goal, on voices never heard in training
