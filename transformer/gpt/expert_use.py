"""Bits per character of chapter 10's GPTs and each layer's use of its experts.

    python -m transformer.gpt experts runs/gpt-moe-cpu                  writes runs/gpt-moe-cpu/experts.json
    python -m transformer.gpt experts RUN RUN ... --chars 4000 --print  several models side by side, nothing written

Bits per character on the first ``--chars`` held-out characters, as training measures them, and, per layer,
the share of the routing choices each expert receives over the same characters, each byte routed once
(consecutive windows of ``block_size`` bytes). With ``top_k`` choices per token the shares of a layer sum to
1; an even router gives each expert ``1 / n_experts``. The file also gives the parameters, total and active
per token, and the same figures on the first :data:`CHECK_CHARS` characters, which a test measures again.
A dense model (chapter 7's) gets its bits per character and parameters alone.
"""
from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from .experts import MoEGPT, parameters
from .stdlib_text import StdlibError, load
from .train import _bytes_tensor, bits_per_character, load_trained

FILE = "experts.json"
#: the slice a test measures again
CHECK_CHARS = 4000


@torch.no_grad()
def expert_use(model: MoEGPT, text: str) -> list[list[float]]:
    """Per layer, the share of the routing choices each expert receives over ``text``, every byte routed once, in
    consecutive windows of the model's ``block_size`` bytes (the last one shorter)."""
    stream = _bytes_tensor(text.encode("utf-8")).long()
    block, device = model.config.block_size, next(model.parameters()).device
    layers = model.expert_layers()
    for layer in layers:
        layer.counts = torch.zeros(model.config.n_experts, dtype=torch.long, device=device)
    was_training = model.training
    model.eval()
    try:
        whole = len(stream) // block * block
        if whole:
            model(stream[:whole].view(-1, block).to(device))  # (windows, block)
        if whole < len(stream):
            model(stream[whole:][None].to(device))  # (1, the rest)
        counts = [layer.counts for layer in layers]
    finally:
        for layer in layers:
            layer.counts = None
        model.train(was_training)
    return [(c / c.sum()).tolist() for c in counts]


def entropy_bits(shares: Sequence[float]) -> float:
    """The entropy of one layer's use, in bits: log2(n_experts) when even, 0 when one expert takes everything."""
    return -sum(p * math.log2(p) for p in shares if p > 0)


def measure(model: nn.Module, config, context: str, heldout: str) -> dict[str, object]:
    """Bits per character of ``heldout`` read after ``context`` and, for a model with experts, each layer's use."""
    found: dict[str, object] = {"characters": len(heldout),
                                "bpc": bits_per_character(model, context, heldout, config.stride)["bpc"]}
    if isinstance(model, MoEGPT):
        use = expert_use(model, heldout)
        found |= {"use": use, "entropy_bits": [entropy_bits(shares) for shares in use],
                  "max_share": max(max(shares) for shares in use)}
    return found


def experts(run: str | Path, chars: int) -> dict[str, object]:
    model, config = load_trained(run, device="cpu")
    data = load()

    def first(n: int) -> dict[str, object]:
        return measure(model, config, data.train, data.heldout[:n])

    found = {"n_experts": config.n_experts, "top_k": config.top_k, "balance_weight": config.balance_weight,
             "parameters": parameters(model)}
    return {**found, **first(chars), "check": first(CHECK_CHARS)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m transformer.gpt experts", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders or exported checkpoint folders")
    parser.add_argument("--chars", type=int, default=100_000, help="held-out characters to read (default 100,000)")
    parser.add_argument("--print", action="store_true", help="print the figures and write nothing")
    args = parser.parse_args(argv)
    if args.chars < 1:
        parser.error("--chars must be at least 1")
    for run in args.runs:
        try:
            found = experts(run, args.chars)
        except StdlibError as exc:
            print(f"error: {exc}")
            return 2
        counted = found["parameters"]
        print(f"{run}: {found['bpc']:.3f} bits per character over {found['characters']:,} characters; "
              f"{counted['total']:,} parameters, {counted['active']:,} active per token")
        for i, shares in enumerate(found.get("use", [])):
            print(f"  layer {i}: " + " ".join(f"{s:.3f}" for s in shares)
                  + f"  (entropy {found['entropy_bits'][i]:.2f} of {math.log2(len(shares)):.2f} bits)")
        if not args.print:
            folder = Path(run) if Path(run).is_dir() else Path(run).parent
            (folder / FILE).write_text(json.dumps(found, indent=1) + "\n")
            print(f"wrote {folder / FILE}")
    return 0
