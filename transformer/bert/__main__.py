"""``python -m transformer.bert pretrain|finetune|export``: chapter 7's BERT on English spellings."""
from __future__ import annotations

import sys
from collections.abc import Sequence
from functools import partial

from ..cli import EXPORT_SUMMARY, Command, dispatch
from . import train

COMMANDS = {
    "pretrain": Command(partial(train.main, "pretrain"), train.COMMANDS["pretrain"][-1]),
    "finetune": Command(partial(train.main, "finetune"), train.COMMANDS["finetune"][-1]),
    "export": Command(train.export_main, EXPORT_SUMMARY),
}


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch("python -m transformer.bert", "Chapter 7's BERT: pre-trained on spellings, fine-tuned on syllables.",
                    COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
