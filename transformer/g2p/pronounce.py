"""Pronounce English words with a trained model: one line per word, the word then its phonemes.

    python -m transformer.g2p pronounce transformer attention
    python -m transformer.g2p pronounce --checkpoint runs/cpu --beam 4 supercalifragilistic

By default the checkpoint the course ships (``checkpoints/g2p-cpu``) is used.
"""
from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path

from course.layout import CHECKPOINTS

from ..cli import Parser
from .encoding import predict
from .evaluate import MAX_LEN, beam_predict
from .train import TrainingError, load_trained

SHIPPED = CHECKPOINTS / "g2p-cpu"
WORD = re.compile(r"[a-z']+")


def word_problem(word: str) -> str | None:
    """Why the model cannot read ``word``, or None: it reads the letters a-z and the apostrophe only."""
    lowered = word.lower()
    if WORD.fullmatch(lowered):
        return None if re.search("[a-z]", lowered) else f"{word!r} has no letter: a word needs at least one of a-z"
    others = sorted({c for c in lowered if not re.fullmatch("[a-z']", c)})
    return (f"{word!r} has {', '.join(map(repr, others))}: the model reads the 26 letters a-z (English spelling, "
            "no accents, digits or other signs) and the apostrophe")


def pronounce(words: Sequence[str], checkpoint: str | Path = SHIPPED, beam: int = 1, alpha: float = 0.6,
              device: str = "auto") -> list[list[str]]:
    """Phonemes for each word (lower-cased; the letters a-z and apostrophes only)."""
    if beam < 1:
        raise ValueError(f"the beam size must be at least 1 (1 decodes greedily), got {beam}")
    cleaned = [w.lower() for w in words]
    problems = [why for why in map(word_problem, words) if why]
    if problems:
        raise ValueError("cannot pronounce " + "; ".join(problems))
    if not Path(checkpoint).exists():
        raise TrainingError(
            f"no checkpoint at {checkpoint}: train one (python -m transformer.g2p train --preset cpu) and pass "
            "--checkpoint runs/cpu"
        )
    model, config, vocabs = load_trained(checkpoint, device)
    longest = config.model_config(len(vocabs.source), len(vocabs.target)).max_len - 1  # the last place is <eos>'s
    too_long = [w for w in cleaned if len(w) > longest]
    if too_long:
        raise ValueError(f"{too_long[0]!r} has {len(too_long[0])} letters; this model reads words of at most {longest}")
    if beam > 1:
        return beam_predict(model, cleaned, vocabs, beam, alpha)
    return predict(model, cleaned, vocabs, next(model.parameters()).device, max_len=MAX_LEN)


def main(argv: Sequence[str] | None = None) -> int:
    parser = Parser(prog="python -m transformer.g2p pronounce", description=__doc__.split("\n")[0])
    parser.add_argument("words", nargs="+", metavar="WORD", help="English words: the letters a-z and apostrophes")
    parser.add_argument("--checkpoint", default=str(SHIPPED), help="a run folder or checkpoint file (default: the shipped one)")
    parser.add_argument("--beam", type=int, default=1, help="beam size (default 1: greedy)")
    parser.add_argument("--alpha", type=float, default=0.6, help="length penalty of the beam (default 0.6)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ... (default auto)")
    args = parser.parse_args(argv)
    if args.beam < 1:
        parser.error(f"--beam must be at least 1 (1 decodes greedily), got {args.beam}")
    try:
        phonemes = pronounce(args.words, args.checkpoint, args.beam, args.alpha, args.device)
    except (TrainingError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for word, pronunciation in zip(args.words, phonemes):
        print(word, *pronunciation)
    return 0

