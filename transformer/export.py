"""Turn a finished run into a small folder that can be shipped and loaded anywhere.

    python -m transformer.export runs/cpu checkpoints/g2p-cpu

The folder holds ``checkpoint.pt`` with only what decoding needs (the configuration, the
vocabularies and the weights the run ended with: the averaged ones when it averaged), beside
the run's ``config.json``, ``metrics.json`` and pictures. Without the optimizer's state and the
averaging snapshots it is a third of the run's checkpoint; it cannot be resumed.
``python -m transformer.evaluate`` on the folder then adds the test split's figures.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from .cli import Parser
from .loop import export_run
from .train import TrainConfig, TrainingError, load_trained

COPIED = ("config.json", "metrics.json", "curves.png", "attention.png")


def export(run: str | Path, destination: str | Path) -> Path:
    """Write the shippable form of ``run`` (a run folder) into ``destination``; return the checkpoint's path."""
    load_trained(run, device="cpu")  # refuses a checkpoint this code cannot load before anything is written
    return export_run(run, destination, TrainConfig, COPIED)


def main(argv: Sequence[str] | None = None) -> int:
    parser = Parser(prog="python -m transformer.export", description=__doc__.split("\n")[0])
    parser.add_argument("run", help="a run folder")
    parser.add_argument("destination", help="the folder to write (created when missing)")
    args = parser.parse_args(argv)
    try:
        path = export(args.run, args.destination)
    except TrainingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{path}: {path.stat().st_size / 2**20:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
