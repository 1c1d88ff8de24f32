"""Pronounce English words with a trained model: one line per word, the word then its phonemes.

    python -m transformer.pronounce transformer attention
    python -m transformer.pronounce --checkpoint runs/cpu --beam 4 supercalifragilistic

By default the checkpoint the repository ships (``checkpoints/g2p-cpu``) is used.
"""
from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from .evaluate import MAX_LEN, beam_predict
from .g2p import predict
from .train import TrainingError, load_trained

SHIPPED = Path(__file__).resolve().parent.parent / "checkpoints" / "g2p-cpu"
WORD = re.compile(r"[a-z']+")


def pronounce(words: Sequence[str], checkpoint: str | Path = SHIPPED, beam: int = 1, alpha: float = 0.6,
              device: str = "auto") -> list[list[str]]:
    """Phonemes for each word (lower-cased; letters and apostrophes only)."""
    cleaned = [w.lower() for w in words]
    bad = [w for w in words if not WORD.fullmatch(w.lower())]
    if bad:
        raise ValueError(f"a word is letters and apostrophes only; cannot pronounce {', '.join(map(repr, bad))}")
    if not Path(checkpoint).exists():
        raise TrainingError(
            f"no checkpoint at {checkpoint}: train one (python -m transformer.train --preset cpu) and pass "
            "--checkpoint runs/cpu"
        )
    model, _, vocabs = load_trained(checkpoint, device)
    if beam > 1:
        return beam_predict(model, cleaned, vocabs, beam, alpha)
    return predict(model, cleaned, vocabs, next(model.parameters()).device, max_len=MAX_LEN)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m transformer.pronounce", description=__doc__.split("\n")[0])
    parser.add_argument("words", nargs="+", metavar="WORD")
    parser.add_argument("--checkpoint", default=str(SHIPPED), help="a run folder or checkpoint file (default: the shipped one)")
    parser.add_argument("--beam", type=int, default=1, help="beam size (default 1: greedy)")
    parser.add_argument("--alpha", type=float, default=0.6, help="length penalty of the beam")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args(argv)
    try:
        phonemes = pronounce(args.words, args.checkpoint, args.beam, args.alpha, args.device)
    except (TrainingError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for word, pronunciation in zip(args.words, phonemes):
        print(word, *pronunciation)
    return 0


if __name__ == "__main__":
    sys.exit(main())
