"""``python -m transformer.vision evaluate RUN [RUN ...]``: each trained model's accuracy on a split, measured now."""
from __future__ import annotations

import sys
from collections.abc import Sequence

from ..cli import Parser
from ..loop import TrainingError
from ..model import count_parameters
from ..parts import PartsError
from . import data
from .train import accuracy, load_trained


def main(argv: Sequence[str] | None = None) -> int:
    parser = Parser(prog="python -m transformer.vision evaluate",
                    description="Measure trained ViTs and CNNs (run folders, shipped checkpoints) on a split of the digits.")
    parser.add_argument("runs", nargs="+", metavar="RUN", help="a run folder, an exported model, or a checkpoint file")
    parser.add_argument("--split", choices=data.SPLITS, default="test", help="the images measured (default: test)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, ... (default: cpu)")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        split = data.load()[args.split]
        for run in args.runs:
            model, config = load_trained(run, args.device)
            measured = accuracy(model, split)
            right = round(measured * len(split))
            print(f"{run}: {config.model}, {count_parameters(model):,} parameters: {args.split} accuracy "
                  f"{100 * measured:.2f} % ({right} of {len(split)} images)")
    except (TrainingError, PartsError, data.DigitsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
