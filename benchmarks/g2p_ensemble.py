"""Score G2P runs alone and as an ensemble on dev, greedily: how much of one model's error is its seed's.

    python benchmarks/g2p_ensemble.py runs/sweep/RUN_A runs/sweep/RUN_B
    python benchmarks/g2p_ensemble.py RUN_A RUN_B --split test     a measurement, not a way to choose settings

The ensemble's next-token distribution is the mean of its members' (log of the mean of their
probabilities), and greedy decoding reads it exactly as it reads one model's, through ``encode`` and
``decode``. Each line gives WER and PER on all the split's words (dev unless ``--split`` says otherwise).
The ensemble costs its members' training together: two runs of ten minutes are twenty minutes of
training, which is why the CPU preset is one model (benchmarks/RESULTS.md, attempts 17 and after).
"""
from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from transformer.g2p.data import load  # noqa: E402
from transformer.g2p.train import evaluate, load_trained  # noqa: E402


class Ensemble(torch.nn.Module):
    """Models that read the same vocabularies, decoded as one: the mean of their next-token probabilities."""

    def __init__(self, members: Sequence[torch.nn.Module]) -> None:
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one model")
        self.members = torch.nn.ModuleList(members)

    def encode(self, src: torch.Tensor) -> list:
        return [m.encode(src) for m in self.members]

    def decode(self, memories: list, ys: torch.Tensor) -> torch.Tensor:
        """ys (B, T) -> log of the members' mean probabilities (B, T, V), which greedy decoding reads as logits."""
        log_probs = torch.stack([m.decode(memory, ys).float().log_softmax(-1) for m, memory in zip(self.members, memories)])
        return torch.logsumexp(log_probs, dim=0) - math.log(len(self.members))  # (B, T, V)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders (or checkpoint files) trained with the same vocabularies")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--split", choices=("dev", "test"), default="dev")
    parser.add_argument("--limit", type=int, default=0, help="score only the first N words (0: all)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    split = getattr(load(), args.split)
    models, vocabs = [], None
    for run in args.runs:
        model, config, run_vocabs = load_trained(run, device="cpu")
        if vocabs is not None and (run_vocabs.source, run_vocabs.target) != (vocabs.source, vocabs.target):
            parser.error(f"{run} reads other vocabularies than {args.runs[0]}: they cannot be ensembled")
        models.append(model)
        vocabs = run_vocabs

    def line(name: str, model: torch.nn.Module) -> str:
        measured = evaluate(model, split, vocabs, torch.device("cpu"), args.limit)
        return f"{name}: WER {measured['wer']:.2f} %, PER {measured['per']:.2f} % ({measured['words']} {args.split} words)"

    for run, model in zip(args.runs, models):
        print(line(run, model), flush=True)
    if len(models) > 1:
        print(line(f"ensemble of {len(models)}", Ensemble(models)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
