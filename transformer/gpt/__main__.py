"""``python -m transformer.gpt train|sample|export|lengths|experts``: chapter 7's GPT (and chapter 9's and 10's) on the
standard library."""
from __future__ import annotations

import sys
from collections.abc import Sequence

from ..cli import EXPORT_SUMMARY, Command, dispatch
from . import expert_use, lengths, sample, train

COMMANDS = {
    "train": Command(train.main, "train a small GPT byte by byte (a preset, any setting overridden; --resume RUN continues)"),
    "sample": Command(sample.main, "let a trained GPT write Python"),
    "export": Command(train.export_main, EXPORT_SUMMARY),
    "lengths": Command(lengths.main, "read a trained GPT at 1, 2 and 4 times its training context (chapter 9)"),
    "experts": Command(expert_use.main, "bits per character and each layer's use of its experts (chapter 10)"),
}


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch("python -m transformer.gpt", "Chapter 7's GPT, trained on the Python standard library's source.",
                    COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
