"""Score G2P runs alone and as an ensemble on dev, greedily (and with beam search): how much of one model's error is its seed's.

    python benchmarks/g2p_ensemble.py runs/sweep/RUN_A runs/sweep/RUN_B
    python benchmarks/g2p_ensemble.py RUN_A RUN_B --beam 4         greedy, then beam 4 (length penalty 0.6)
    python benchmarks/g2p_ensemble.py RUN_A RUN_B --split test     a measurement, not a way to choose settings

The ensemble's next-token distribution is the mean of its members' (log of the mean of their
probabilities), and greedy decoding and the batched beam search read it exactly as they read one model's,
through ``encode`` and ``decode``. Each line gives WER and PER on all the split's words (dev unless
``--split`` says otherwise).
The ensemble costs its members' training together: two runs of ten minutes one after the other are twenty
minutes of training. Trained at once, one thread each, two models share the ten minutes of the two cores
(benchmarks/RESULTS.md, attempts 17 and 36), which is what the CPU preset does (``members=2``); this script
ensembles any runs, trained apart or together.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from transformer.g2p.data import load  # noqa: E402
from transformer.g2p.ensemble import Ensemble  # noqa: E402
from transformer.g2p.evaluate import beam_predict  # noqa: E402
from transformer.g2p.metrics import count_errors  # noqa: E402
from transformer.g2p.train import evaluate, load_trained  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders (or checkpoint files) trained with the same vocabularies")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--split", choices=("dev", "test"), default="dev")
    parser.add_argument("--limit", type=int, default=0, help="score only the first N words (0: all)")
    parser.add_argument("--beam", type=int, default=1, help="also decode with a beam this wide (1: greedy only)")
    parser.add_argument("--alpha", type=float, default=0.6, help="the beam's length penalty (default 0.6)")
    args = parser.parse_args(argv)
    if args.beam < 1:
        parser.error(f"--beam must be at least 1 (1 decodes greedily only), got {args.beam}")
    torch.set_num_threads(args.threads)
    split = getattr(load(), args.split)
    if args.limit:  # the first N words, for the greedy and the beam decodings alike
        split = dataclasses.replace(split, words=split.words[: args.limit], references=split.references[: args.limit])
    models, vocabs = [], None
    for run in args.runs:
        model, config, run_vocabs = load_trained(run, device="cpu")
        if vocabs is not None and (run_vocabs.source, run_vocabs.target) != (vocabs.source, vocabs.target):
            parser.error(f"{run} reads other vocabularies than {args.runs[0]}: they cannot be ensembled")
        models.append(model)
        vocabs = run_vocabs

    def line(name: str, model: torch.nn.Module) -> str:
        measured = evaluate(model, split, vocabs, torch.device("cpu"))
        shown = f"{name}: WER {measured['wer']:.2f} %, PER {measured['per']:.2f} % ({measured['words']} {args.split} words)"
        if args.beam > 1:
            counts = count_errors(beam_predict(model, split.words, vocabs, args.beam, args.alpha), split.references)
            shown += f"; beam {args.beam}, alpha {args.alpha}: WER {counts.wer:.2f} %, PER {counts.per:.2f} %"
        return shown

    for run, model in zip(args.runs, models):
        print(line(run, model), flush=True)
    if len(models) > 1:
        print(line(f"ensemble of {len(models)}", Ensemble(models)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
