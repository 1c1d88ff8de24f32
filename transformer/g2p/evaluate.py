"""Measure a trained run on the test split, greedily and with beam search.

    python -m transformer.g2p evaluate runs/cpu                  test split, greedy and beam 4
    python -m transformer.g2p evaluate runs/cpu --split dev --beam 8 --alpha 0.6 --limit 2000 --seed 1

Prints WER and PER (see ``transformer.g2p.metrics``: a prediction is right when it equals any of
the word's reference pronunciations), the words with the most phoneme errors, and writes
``evaluation-<split>.json`` and ``attention-<split>.png`` (the cross-attention of a few words:
a trained model's alignment of letters to phonemes) into the run folder. Progress bars count the
words decoded and show the time left; ``--limit N`` scores N words drawn at random (with
``--seed``) from the split, so that they are spread over the alphabet.
"""
from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from tqdm import tqdm

from ..cli import Parser
from ..parts import EXERCISES, G2P_PARTS, NEEDED, PartsError, course_parts, learner_parts
from .data import SPLITS, load
from .decoding import batched_beam_search
from .encoding import Vocabularies, pad, predict
from .metrics import closest_reference, count_errors
from .train import TrainingError, draw_attention, load_trained

MAX_LEN = 32  # longer than any pronunciation in the dictionary (20 phonemes)


@torch.no_grad()
def beam_predict(model, words: Sequence[str], vocabs: Vocabularies, beam_size: int, alpha: float,
                 batch_size: int = 128, progress: bool = False) -> list[list[str]]:
    device = next(model.parameters()).device
    order = sorted(range(len(words)), key=lambda i: len(words[i]))
    out: list[list[str]] = [[] for _ in words]
    bar = tqdm(total=len(words), desc=f"beam {beam_size}", unit="word", disable=not progress)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        src = pad([vocabs.source.encode(words[i], eos=True) for i in chunk], vocabs.source.pad_id).to(device)
        tokens, _ = batched_beam_search(model, src, beam_size, MAX_LEN, vocabs.target.bos_id,
                                        vocabs.target.eos_id, vocabs.target.pad_id, alpha)
        for i, row in zip(chunk, tokens):
            out[i] = vocabs.target.decode(row)
        bar.update(len(chunk))
    bar.close()
    return out


@torch.no_grad()
def learner_beam_predict(model, words: Sequence[str], vocabs: Vocabularies, beam_search, beam_size: int, alpha: float,
                         progress: bool = False) -> list[list[str]]:
    """Pronunciations by the learner's chapter 8 ``beam_search``, which decodes one word at a time."""
    device = next(model.parameters()).device
    out = []
    for word in tqdm(words, desc=f"your beam {beam_size}", unit="word", disable=not progress):
        src = torch.tensor([vocabs.source.encode(word, eos=True)], device=device)  # (1, S)
        tokens, _ = beam_search(model, src, beam_size, MAX_LEN, vocabs.target.bos_id, vocabs.target.eos_id, alpha)
        out.append(vocabs.target.decode(torch.as_tensor(tokens).tolist()))
    return out


def sample_words(count: int, limit: int, seed: int) -> list[int]:
    """``limit`` indices of ``count`` drawn at random with ``seed``, in the split's order (all when 0)."""
    if not limit or limit >= count:
        return list(range(count))
    return sorted(random.Random(seed).sample(range(count), limit))


def evaluate_run(run: str | Path, split: str = "test", beam: int = 4, alpha: float = 0.6, limit: int = 0,
                 device: str = "auto", worst: int = 10, progress: bool = True, seed: int = 0) -> dict:
    """Decode a split with a trained run and return (and print) its error rates."""
    if beam < 1:
        raise TrainingError(f"the beam size must be at least 1 (1 decodes greedily only), got {beam}")
    model, config, vocabs = load_trained(run, device)
    parts = course_parts(G2P_PARTS)
    if config.parts == "mine":  # a run trained on your parts is measured with yours too
        parts = learner_parts(Path(config.parts_dir or EXERCISES), NEEDED, G2P_PARTS)
        print(parts.listing())
    chosen = load(stress=config.stress).split(split)
    if not len(chosen):
        raise TrainingError(f"the {split} split is empty")
    kept = sample_words(len(chosen), limit, seed)
    words = [chosen.words[i] for i in kept]
    references = [chosen.references[i] for i in kept]
    sampled = f", {len(words):,} drawn at random (seed {seed}) of {len(chosen):,}" if len(words) < len(chosen) else ""
    print(f"{split} split, {len(words):,} words{sampled}{' (stress kept)' if config.stress else ''}; decoding greedily"
          + (f", then with beam {beam}" if beam > 1 else "") + " (the bars show the time left)", flush=True)
    began = time.perf_counter()
    decodings = {"greedy": predict(model, words, vocabs, next(model.parameters()).device, max_len=MAX_LEN,
                                   progress=progress)}
    if beam > 1:
        if progress:
            # A beam of k costs about k greedy decodings, more for the longer hypotheses it keeps.
            print(f"greedy took {time.perf_counter() - began:.0f} s; beam {beam} will take roughly "
                  f"{beam * (time.perf_counter() - began):.0f} s or more", flush=True)
        if "beam_search" in parts.checks:
            decodings[f"beam {beam}, alpha {alpha}"] = learner_beam_predict(
                model, words, vocabs, parts["beam_search"], beam, alpha, progress=progress)
        else:
            decodings[f"beam {beam}, alpha {alpha}"] = beam_predict(model, words, vocabs, beam, alpha, progress=progress)
    results: dict = {"split": split, "words": len(words), "stress": config.stress, "seed": seed if sampled else None,
                     "decodings": {}}
    print(f"{'decoding':24s} {'WER':>7s} {'PER':>7s}" + ("   (without stress: WER, PER)" if config.stress else ""))
    for name, predictions in decodings.items():
        counts = count_errors(predictions, references, distance=parts["edit_distance"])
        row = {"wer": counts.wer, "per": counts.per}
        line = f"{name:24s} {counts.wer:6.2f}% {counts.per:6.2f}%"
        if config.stress:
            loose = count_errors(predictions, references, ignore_stress=True, distance=parts["edit_distance"])
            row |= {"wer_without_stress": loose.wer, "per_without_stress": loose.per}
            line += f"   {loose.wer:6.2f}% {loose.per:6.2f}%"
        results["decodings"][name] = row
        print(line)
    scored = []
    for word, prediction, refs in zip(words, decodings["greedy"], references):
        distance, closest = closest_reference(prediction, refs, parts["edit_distance"])
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
    parser = Parser(prog="python -m transformer.g2p evaluate", description=__doc__.split("\n")[0])
    parser.add_argument("run", help="a run folder (or its checkpoint.pt)")
    parser.add_argument("--split", choices=SPLITS, default="test", help="the split to score (default test)")
    parser.add_argument("--beam", type=int, default=4, help="beam size; 1 decodes greedily only (default 4)")
    parser.add_argument("--alpha", type=float, default=0.6, help="length penalty of the beam (default 0.6, the paper's)")
    parser.add_argument("--limit", type=int, default=0, metavar="N",
                        help="only N words, drawn at random from the split with --seed (default 0: all)")
    parser.add_argument("--seed", type=int, default=0, help="the draw of --limit (default 0)")
    parser.add_argument("--worst", type=int, default=10, help="how many of the worst errors to show")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ... (default auto)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.beam < 1:
        parser.error(f"--beam must be at least 1 (1 decodes greedily only), got {args.beam}")
    if args.limit < 0:
        parser.error(f"--limit must be 0 (every word) or more, got {args.limit}")
    try:
        evaluate_run(args.run, args.split, args.beam, args.alpha, args.limit, args.device, args.worst, not args.quiet,
                     args.seed)
    except (TrainingError, PartsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0

