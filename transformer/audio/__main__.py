"""``python -m transformer.audio train|evaluate|export``: chapter 10's speech classifier on spoken digits."""
from __future__ import annotations

import sys
from collections.abc import Sequence

from ..cli import EXPORT_SUMMARY, Command, dispatch
from . import evaluate, train

COMMANDS = {
    "train": Command(train.main, "train the speech classifier (a preset, any setting overridden; --resume RUN continues)"),
    "evaluate": Command(evaluate.main, "accuracy and confusion matrix of a trained classifier on unheard voices"),
    "export": Command(train.export_main, EXPORT_SUMMARY),
}


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch("python -m transformer.audio", "Chapter 10's speech classifier: the course's encoder over "
                    "log-mel frames of spoken digits.", COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
