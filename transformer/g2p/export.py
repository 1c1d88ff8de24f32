"""Turn a finished run into a small folder that can be shipped and loaded anywhere.

    python -m transformer.g2p export runs/cpu checkpoints/g2p-cpu

The folder holds ``checkpoint.pt`` with only what decoding needs (the configuration, the
vocabularies and the weights the run ended with: the averaged ones when it averaged), beside
the run's ``config.json``, ``metrics.json`` and pictures. Without the optimizer's state and the
averaging snapshots it is a third of the run's checkpoint; it cannot be resumed.
``python -m transformer.g2p evaluate`` on the folder then adds the test split's figures.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from .. import checkpoint
from ..loop import TrainingError, copy_present, export_command, export_run
from .ensemble import member_dir
from .train import TrainConfig, load_trained

COPIED = ("config.json", "metrics.json", "curves.png", "attention.png")


def export(run: str | Path, destination: str | Path) -> Path:
    """Write the shippable form of ``run`` (a run folder) into ``destination``; return the checkpoint's path."""
    _, config, _ = load_trained(run, device="cpu")  # refuses a checkpoint this code cannot load before anything is written
    if config.members > 1:
        return export_ensemble(checkpoint.file_of(run).parent, Path(destination))
    return export_run(run, destination, TrainConfig, COPIED)


def export_ensemble(run: Path, destination: Path) -> Path:
    """An ensemble's run folder already holds its exported form (every member's final weights in one file, see
    :func:`transformer.g2p.train.finish_ensemble`): it is copied without the members' folders."""
    if not member_dir(run, 0).is_dir():
        raise TrainingError(f"{run / checkpoint.FILE} is already an exported model")
    destination.mkdir(parents=True, exist_ok=True)
    copy_present((checkpoint.FILE, *COPIED), run, destination)
    return destination / checkpoint.FILE


def main(argv: Sequence[str] | None = None) -> int:
    return export_command(sys.argv[1:] if argv is None else argv, export, "python -m transformer.g2p export")
