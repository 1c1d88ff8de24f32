"""The one checkpoint format: what a run's ``checkpoint.pt`` holds, how it is written and read.

A checkpoint is a plain dictionary saved with ``torch.save``; nothing in it is pickled from the
course's own modules (the configuration is the dataclass's fields as a dict, vocabularies are lists
of strings), so a file keeps loading when modules move. Its keys are the names below and
whatever the task adds (:meth:`transformer.loop.Task.checkpoint_extra`: vocabularies, a summary
of the data). An exported checkpoint (:func:`slim`) keeps what decoding needs and leaves out
:data:`TRAINING_STATE`, so it cannot be resumed.

Files written by earlier versions of the course are read through :func:`upgrade`, the one place
that knows how their keys or settings differ from today's.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from course.files import atomic_write

#: a run folder's checkpoint file
FILE = "checkpoint.pt"

CONFIG = "config"  # the run's configuration: dataclasses.asdict of its config class
MODEL = "model"  # the state dict the run trained
AVERAGED = "averaged"  # the averaged weights the run ended with, or None
STEP = "step"
ELAPSED = "elapsed"  # seconds trained
# what a checkpoint holds only to continue training
OPTIMIZER = "optimizer"
SNAPSHOTS = "snapshots"  # the weights averaging will use
RNG = "rng"
CUDA_RNG = "cuda_rng"
EPOCH = "epoch"
POSITION = "position"  # batches of the epoch already trained on
METRICS = "metrics"

#: what an exported checkpoint leaves out
TRAINING_STATE = (OPTIMIZER, SNAPSHOTS, RNG, CUDA_RNG, EPOCH, POSITION, METRICS)

#: settings renamed since checkpoints were first shipped: old name -> new name (none so far; a
#: rename adds its line here, and every older file still loads)
RENAMED_SETTINGS: dict[str, str] = {}


class CheckpointError(RuntimeError):
    """A file that is not a checkpoint of this course, or not of the expected kind."""


def file_of(path: str | Path) -> Path:
    """The checkpoint file of a run folder, or the path itself when it names a file."""
    path = Path(path)
    return path / FILE if path.is_dir() else path


def upgrade(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint written by earlier code, in today's format (its settings under today's names)."""
    config = checkpoint.get(CONFIG)
    if isinstance(config, dict) and RENAMED_SETTINGS.keys() & config.keys():
        checkpoint[CONFIG] = {RENAMED_SETTINGS.get(k, k): v for k, v in config.items()}
    return checkpoint


def load(file: Path) -> dict[str, Any]:
    """The checkpoint in ``file``, upgraded to today's format, with clear errors."""
    if not file.is_file():
        raise CheckpointError(f"no checkpoint at {file}")
    try:
        checkpoint = torch.load(file, map_location="cpu", weights_only=False)
    except Exception as exc:  # torch.load raises several kinds for a file that is not one of its own
        raise CheckpointError(f"{file} is not a checkpoint: {type(exc).__name__}: {exc}") from None
    if not isinstance(checkpoint, dict) or CONFIG not in checkpoint:
        raise CheckpointError(f"{file} is not a checkpoint of this training loop (it has no {CONFIG!r})")
    return upgrade(checkpoint)


def write(file: Path, checkpoint: dict[str, Any]) -> None:
    atomic_write(file, lambda p: torch.save(checkpoint, p))


def resumable(checkpoint: dict[str, Any]) -> bool:
    return OPTIMIZER in checkpoint


def final_weights(checkpoint: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The weights a run ended with: the averaged ones when it averaged."""
    averaged = checkpoint.get(AVERAGED)
    return averaged if averaged is not None else checkpoint[MODEL]


def slim(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The exported form: the final weights, the configuration and the task's extras, nothing to resume."""
    kept = {k: v for k, v in checkpoint.items() if k not in TRAINING_STATE}
    kept.update({MODEL: final_weights(checkpoint), AVERAGED: None})
    return kept
