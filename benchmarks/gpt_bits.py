"""Bits per character on the standard library's held-out files: the GPT beside compressors and an n-gram.

    python benchmarks/gpt_bits.py                          the baselines (a few minutes on 2 cores)
    python benchmarks/gpt_bits.py --run runs/gpt-cpu       and a trained GPT, on the same text
    python benchmarks/gpt_bits.py --skip xz --order 3      a quicker rehearsal
    python benchmarks/gpt_bits.py --json checkpoints/gpt-stdlib-cpu/baselines.json   the figures chapter 7 shows
    python benchmarks/gpt_bits.py --run checkpoints/gpt-stdlib-cpu --chars 20000 \
        --json checkpoints/gpt-stdlib-cpu/heldout-20000.json     the slice its test measures again

Everything is measured on the text of :mod:`transformer.gpt.stdlib_text` (this interpreter's
standard library, tests excluded, the hash-of-path split), held-out text read after the training
text; the definitions are in :mod:`text_baselines` and :mod:`transformer.gpt.train`. Every
figure printed was measured in this run; copy them, with the machine line, into
benchmarks/RESULTS.md.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from capstone import hardware  # noqa: E402
from text_baselines import COMPRESSORS, KneserNey, compressor_bits  # noqa: E402

from transformer.gpt import stdlib_text  # noqa: E402
from transformer.gpt.train import bits_per_character, load_trained  # noqa: E402
from transformer.loop import TrainingError, save_json  # noqa: E402
from transformer.model import count_parameters  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", action="append", default=[], help="a GPT run folder or checkpoint (repeatable)")
    parser.add_argument("--order", type=int, default=5, help="the n-gram's order (default 5)")
    parser.add_argument("--skip", action="append", default=[], choices=[*COMPRESSORS, "ngram"], help="leave one out")
    parser.add_argument("--stride", type=int, default=0, help="the GPT's scoring stride (default: its run's)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--chars", type=int, default=0, help="measure only the first N held-out characters (0: all)")
    parser.add_argument("--json", default="", help="also write the figures to this file (the page reads it)")
    args = parser.parse_args(argv)
    if args.chars < 0:
        parser.error(f"--chars must be 0 (all) or more, got {args.chars}")

    data = stdlib_text.load()
    summary = data.summary()
    print(hardware())
    print(f"load average {os.getloadavg()[0]:.1f}; Python {summary['python']}: {summary['train_files']} training files "
          f"({summary['train_characters']:,} characters), {summary['heldout_files']} held out "
          f"({summary['heldout_characters']:,} characters)")
    heldout = data.heldout[: args.chars or None]
    if len(heldout) < len(data.heldout):
        print(f"measured on the first {len(heldout):,} held-out characters only")
    rows: list[tuple[str, float, float]] = []
    for name in COMPRESSORS:
        if name not in args.skip:
            started = time.perf_counter()
            rows.append((f"{name}, primed with the training text", compressor_bits(name, data.train, heldout),
                         time.perf_counter() - started))
            print(f"  {rows[-1][0]}: {rows[-1][1]:.3f} ({rows[-1][2]:.0f} s)", flush=True)
    if "ngram" not in args.skip:
        started = time.perf_counter()
        model = KneserNey(data.train, args.order)
        rows.append((f"character {args.order}-gram, interpolated Kneser-Ney", model.bits(data.train, heldout),
                     time.perf_counter() - started))
        print(f"  {rows[-1][0]}: {rows[-1][1]:.3f} ({rows[-1][2]:.0f} s)", flush=True)
        del model
    for run in args.run:
        try:
            gpt, config = load_trained(run, device=args.device)
        except TrainingError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        started = time.perf_counter()
        device = next(gpt.parameters()).device
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=config.bf16(device)):
            measured = bits_per_character(gpt, data.train, heldout, args.stride or config.stride, device)
        rows.append((f"GPT {run} ({count_parameters(gpt):,} parameters, {config.max_steps} steps)", measured["bpc"],
                     time.perf_counter() - started))
        print(f"  {rows[-1][0]}: {rows[-1][1]:.3f} ({rows[-1][2]:.0f} s)", flush=True)
    print("\n| model | bits per character | seconds |\n|---|---:|---:|")
    for name, bits, seconds in rows:
        print(f"| {name} | {bits:.3f} | {seconds:.0f} |")
    if args.json:
        save_json(Path(args.json), {"hardware": hardware(), "load_average": os.getloadavg()[0], **summary,
                                    "measured_characters": len(heldout),
                                    "rows": [{"model": n, "bpc": b, "seconds": s} for n, b, s in rows]})
        print(f"written: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
