"""Measure a trained speech classifier on one split's voices.

    python -m transformer.audio evaluate runs/audio-cpu                   the test voices
    python -m transformer.audio evaluate checkpoints/audio-digits-cpu --split dev

Prints the accuracy, the accuracy at each noise level, the confusion matrix (a row for each digit said,
a column for each digit heard) and the clips it got wrong; ``--json FILE`` writes the same as JSON.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from ..cli import Parser
from ..loop import TrainingError
from . import data as spoken
from .measure import confusion_table, measure
from .train import load_trained


def main(argv: Sequence[str] | None = None) -> int:
    parser = Parser(prog="python -m transformer.audio evaluate", description="Accuracy and confusion matrix of a "
                    "trained speech classifier on one split's voices, none of which it trained on but train's.")
    parser.add_argument("run", help="a run folder, an exported one (checkpoints/audio-digits-cpu), or a checkpoint.pt")
    parser.add_argument("--split", choices=spoken.SPLITS, default="test", help="whose voices (default: test)")
    parser.add_argument("--json", type=Path, help="also write the measures to this file")
    args = parser.parse_args(argv)
    try:
        model, _ = load_trained(args.run)
        clips = spoken.load().split(args.split)
    except (TrainingError, spoken.DataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    measured = measure(model, clips)
    print(f"{args.split}: {measured['clips']} clips by {measured['voices']} voices, "
          f"{100 * measured['accuracy']:.1f} % right")  # type: ignore[operator]
    print("by noise: " + ", ".join(f"{snr} {100 * a:.1f} %" for snr, a in measured["accuracy_by_snr"].items()))  # type: ignore[attr-defined]
    print(confusion_table(measured["confusion"]))  # type: ignore[arg-type]
    for miss in measured["wrong"]:  # type: ignore[attr-defined]
        print(f"  {miss['voice']} said {miss['said']}, heard {miss['heard']} ({miss['snr_db']:g} dB)")
    if args.json:
        args.json.write_text(json.dumps(measured, indent=1) + "\n", encoding="utf-8")
    return 0
