"""``python -m transformer.vision train|evaluate|export``: chapter 10's vision Transformer on 8 x 8 digits."""
from __future__ import annotations

import sys
from collections.abc import Sequence

from ..cli import EXPORT_SUMMARY, Command, dispatch
from . import evaluate, train

COMMANDS = {
    "train": Command(train.main, "train the ViT, then the CNN baseline with the same settings (--model picks one)"),
    "evaluate": Command(evaluate.main, "measure trained models' accuracy on a split of the digits"),
    "export": Command(train.export_main, EXPORT_SUMMARY),
}


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch("python -m transformer.vision", "Chapter 10's vision Transformer, and a CNN beside it, on the "
                    "8 x 8 handwritten digits.", COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
