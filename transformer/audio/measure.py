"""What a trained speech classifier hears: its predictions on clips, and their accuracy and confusion matrix."""
from __future__ import annotations

import torch

from . import data as spoken
from .model import pad_waves

BATCH = 64  # clips a forward pass: the same batches every time, so a measure repeats to the bit


@torch.no_grad()
def predict(model: torch.nn.Module, clips: spoken.SpokenDigits) -> list[int]:
    """The digit the model hears in each clip, in order."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    heard: list[int] = []
    try:
        for start in range(0, len(clips), BATCH):
            waves, lengths = pad_waves([torch.from_numpy(w) for w in clips.waves[start : start + BATCH]])  # (B, S), (B,)
            heard += model(waves.to(device), lengths.to(device)).argmax(dim=-1).tolist()
    finally:
        model.train(was_training)
    return heard


def measure(model: torch.nn.Module, clips: spoken.SpokenDigits) -> dict[str, object]:
    """Accuracy, by noise level too, the confusion matrix (confusion[said][heard]) and the clips got wrong."""
    if not len(clips):
        raise ValueError("there are no clips to measure")
    heard = predict(model, clips)
    classes = len(spoken.WORDS)
    confusion = [[0] * classes for _ in range(classes)]
    for clip, guess in zip(clips.clips, heard):
        confusion[clip.digit][guess] += 1
    by_snr = {}
    for snr in sorted({c.snr_db for c in clips.clips}, reverse=True):
        chosen = [(c, g) for c, g in zip(clips.clips, heard) if c.snr_db == snr]
        by_snr[f"{snr:g} dB"] = sum(c.digit == g for c, g in chosen) / len(chosen)
    wrong = [{"voice": c.voice, "said": c.word, "heard": spoken.WORDS[g], "snr_db": c.snr_db}
             for c, g in zip(clips.clips, heard) if c.digit != g]
    return {"split": clips.clips[0].split, "clips": len(clips), "voices": len(clips.voices),
            "accuracy": sum(c.digit == g for c, g in zip(clips.clips, heard)) / len(clips),
            "accuracy_by_snr": by_snr, "confusion": confusion, "wrong": wrong}


def confusion_table(confusion: list[list[int]]) -> str:
    """The matrix as text: a row per digit said, a column per digit heard."""
    lines = ["said \\ heard " + " ".join(f"{d:>4}" for d in range(len(confusion)))]
    lines += [f"{spoken.WORDS[i]:>12} " + " ".join(f"{n:>4}" for n in row) for i, row in enumerate(confusion)]
    return "\n".join(lines)
