"""How a trained GPT reads contexts longer than it was trained on: chapter 9's measurement.

    python -m transformer.gpt lengths runs/gpt-rope-cpu                 writes runs/gpt-rope-cpu/lengths.json
    python -m transformer.gpt lengths checkpoints/gpt-rope-cpu --chars 4000 --print   measures, writes nothing

Bits per character of the first ``--chars`` held-out characters (100,000 by default), read in
windows of 1, 2 and 4 times the context the model was first trained on (``block_size``, divided by
``position_scale`` for a model stretched by position interpolation), each window advancing by half its
length so that every byte is predicted from at least half a window before it. A model with rotary
positions not yet stretched is read at the longer windows twice: with its positions as they are, and
with them divided by the factor of extension (position interpolation without any further training).
The file also holds the same measurement on the first :data:`CHECK_CHARS` characters, which a test
repeats.
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from .stdlib_text import StdlibError
from .stdlib_text import load as load_text

FACTORS = (1, 2, 4)
FILE = "lengths.json"
#: the slice a test measures again
CHECK_CHARS = 4000


def measure(model, config, context: str, heldout: str) -> list[dict[str, object]]:
    """One row per (window, reading): the window in bytes, its factor, how positions were read, and the bpc."""
    from .train import bits_per_character

    rows = []
    scale = config.position_scale
    first = round(config.block_size / scale)  # the context the model was first trained on
    stretchable = config.positions == "rope" and scale == 1.0
    readings = ["as trained", "interpolated"] if stretchable else ["as trained"]
    for factor in FACTORS:
        window = factor * first
        for reading in readings if factor > 1 else readings[:1]:
            if config.positions == "learned" and window > config.block_size:
                continue  # a learned table has no rows past block_size
            if hasattr(model, "set_position_scale"):
                model.set_position_scale(factor if reading == "interpolated" else scale)
            measured = bits_per_character(model, context, heldout, window // 2, window=window)
            rows.append({"factor": factor, "window": window, "positions": reading, "bpc": measured["bpc"]})
    if hasattr(model, "set_position_scale"):
        model.set_position_scale(scale)
    return rows


def lengths(run: str | Path, chars: int) -> dict[str, object]:
    from .train import load_trained

    model, config = load_trained(run, device="cpu")
    data = load_text()
    return {
        "positions": config.positions, "block_size": config.block_size, "position_scale": config.position_scale,
        "characters": min(chars, len(data.heldout)),
        "rows": measure(model, config, data.train, data.heldout[:chars]),
        "check": {"characters": CHECK_CHARS, "rows": measure(model, config, data.train, data.heldout[:CHECK_CHARS])},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m transformer.gpt lengths", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a run folder or an exported checkpoint folder")
    parser.add_argument("--chars", type=int, default=100_000, help="held-out characters to read (default 100,000)")
    parser.add_argument("--print", action="store_true", help="print the figures and write nothing")
    args = parser.parse_args(argv)
    if args.chars < 1:
        parser.error("--chars must be at least 1")
    try:
        found = lengths(args.run, args.chars)
    except StdlibError as exc:
        print(f"error: {exc}")
        return 2
    for row in found["rows"]:  # type: ignore[union-attr]
        print(f"window {row['window']:5d} bytes ({row['factor']}x), positions {row['positions']:12s}: "
              f"{row['bpc']:.3f} bits per character")
    if not args.print:
        folder = Path(args.run)
        folder = folder if folder.is_dir() else folder.parent
        (folder / FILE).write_text(json.dumps(found, indent=1) + "\n")
        print(f"wrote {folder / FILE}")
    return 0
