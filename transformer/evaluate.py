"""Measure a trained run on the test split, greedily and with beam search.

    python -m transformer.evaluate runs/cpu                  test split, greedy and beam 4
    python -m transformer.evaluate runs/cpu --split dev --beam 8 --alpha 0.6 --limit 2000

Prints WER and PER (see ``transformer.metrics``: a prediction is right when it equals any of
the word's reference pronunciations), the words with the most phoneme errors, and writes
``evaluation-<split>.json`` and ``attention-<split>.png`` (the cross-attention of a few words:
a trained model's alignment of letters to phonemes) into the run folder.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
from tqdm import tqdm

from . import data as g2p_data
from .decoding import batched_beam_search
from .g2p import Vocabularies, pad, predict
from .metrics import closest_reference, count_errors
from .train import TrainingError, draw_attention, load_trained

MAX_LEN = 32  # longer than any pronunciation in the dictionary (20 phonemes)


@torch.no_grad()
def beam_predict(model, words: Sequence[str], vocabs: Vocabularies, beam_size: int, alpha: float,
                 batch_size: int = 128, progress: bool = False) -> list[list[str]]:
    device = next(model.parameters()).device
    order = sorted(range(len(words)), key=lambda i: len(words[i]))
    out: list[list[str]] = [[] for _ in words]
    starts = range(0, len(order), batch_size)
    for start in tqdm(starts, desc=f"beam {beam_size}", unit="batch", disable=not progress):
        chunk = order[start : start + batch_size]
        src = pad([vocabs.source.encode(words[i], eos=True) for i in chunk], vocabs.source.pad_id).to(device)
        tokens, _ = batched_beam_search(model, src, beam_size, MAX_LEN, vocabs.target.bos_id,
                                        vocabs.target.eos_id, vocabs.target.pad_id, alpha)
        for i, row in zip(chunk, tokens):
            out[i] = vocabs.target.decode(row)
    return out


def evaluate_run(run: str | Path, split: str = "test", beam: int = 4, alpha: float = 0.6, limit: int = 0,
                 device: str = "auto", worst: int = 10, progress: bool = True) -> dict:
    """Decode a split with a trained run and return (and print) its error rates."""
    model, config, vocabs = load_trained(run, device)
    chosen = g2p_data.load(stress=config.stress).split(split)
    if not len(chosen):
        raise TrainingError(f"the {split} split is empty")
    words = list(chosen.words[:limit] if limit else chosen.words)
    references = list(chosen.references[: len(words)])
    decodings = {"greedy": predict(model, words, vocabs, next(model.parameters()).device, max_len=MAX_LEN)}
    if beam > 1:
        decodings[f"beam {beam}, alpha {alpha}"] = beam_predict(model, words, vocabs, beam, alpha, progress=progress)
    results: dict = {"split": split, "words": len(words), "stress": config.stress, "decodings": {}}
    print(f"{split} split, {len(words):,} words{' (stress kept)' if config.stress else ''}")
    print(f"{'decoding':24s} {'WER':>7s} {'PER':>7s}" + ("   (without stress: WER, PER)" if config.stress else ""))
    for name, predictions in decodings.items():
        counts = count_errors(predictions, references)
        row = {"wer": counts.wer, "per": counts.per}
        line = f"{name:24s} {counts.wer:6.2f}% {counts.per:6.2f}%"
        if config.stress:
            loose = count_errors(predictions, references, ignore_stress=True)
            row |= {"wer_without_stress": loose.wer, "per_without_stress": loose.per}
            line += f"   {loose.wer:6.2f}% {loose.per:6.2f}%"
        results["decodings"][name] = row
        print(line)
    scored = []
    for word, prediction, refs in zip(words, decodings["greedy"], references):
        distance, closest = closest_reference(prediction, refs)
        scored.append((distance, word, prediction, closest))
    scored.sort(key=lambda item: (-item[0], item[1]))
    if worst:
        print(f"\nthe {worst} words with the most phoneme errors (greedy):")
        for distance, word, prediction, closest in scored[:worst]:
            print(f"  {word:20s} {' '.join(prediction):40s} reference {' '.join(closest)}  ({distance} edits)")
    results["worst"] = [{"word": w, "predicted": " ".join(p), "reference": " ".join(c), "edits": d}
                        for d, w, p, c in scored[:worst]]
    folder = Path(run) if Path(run).is_dir() else Path(run).parent
    (folder / f"evaluation-{split}.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    draw_attention(model, words[:4], vocabs, next(model.parameters()).device, folder / f"attention-{split}.png")
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m transformer.evaluate", description=__doc__.split("\n")[0])
    parser.add_argument("run", help="a run folder (or its checkpoint.pt)")
    parser.add_argument("--split", choices=g2p_data.SPLITS, default="test")
    parser.add_argument("--beam", type=int, default=4, help="beam size; 1 decodes greedily only (default 4)")
    parser.add_argument("--alpha", type=float, default=0.6, help="length penalty of the beam (default 0.6, the paper's)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N words of the split")
    parser.add_argument("--worst", type=int, default=10, help="how many of the worst errors to show")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.beam < 1:
        parser.error("--beam must be at least 1")
    try:
        evaluate_run(args.run, args.split, args.beam, args.alpha, args.limit, args.device, args.worst, not args.quiet)
    except TrainingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
