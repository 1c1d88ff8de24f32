"""``python -m transformer.g2p train|evaluate|pronounce|export``: the capstone, English spelling to sound."""
from __future__ import annotations

import sys
from collections.abc import Sequence

from ..cli import EXPORT_SUMMARY, Command, dispatch
from . import evaluate, export, pronounce, train

COMMANDS = {
    "train": Command(train.main, "train the Transformer (a preset, any setting overridden; --resume RUN continues)"),
    "evaluate": Command(evaluate.main, "WER and PER of a run on a split, greedy and with beam search"),
    "pronounce": Command(pronounce.main, "the phonemes of words, with the shipped checkpoint or a run"),
    "export": Command(export.main, EXPORT_SUMMARY),
}


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch("python -m transformer.g2p", "The capstone: English spelling to sound with the course's Transformer.",
                    COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
