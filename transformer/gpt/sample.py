"""Let a trained GPT write Python.

    python -m transformer.gpt sample runs/gpt-cpu                               300 bytes after "def "
    python -m transformer.gpt sample runs/gpt-cpu --prompt "class " --temperature 0.5 --length 500
    python -m transformer.gpt sample runs/gpt-cpu --top-k 5 --seed 3

Each next byte is drawn by chapter 7's ``sample_next`` (temperature, then top-k, then top-p);
temperature 0 is greedy. The same seed gives the same text.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from reference.bert_gpt import sample_next

from ..cli import Parser
from ..loop import TrainingError
from ..parts import EXERCISES, GPT_PARTS, PartsError, learner_parts
from .train import generate, load_trained


def main(argv: Sequence[str] | None = None) -> int:
    parser = Parser(prog="python -m transformer.gpt sample", description=__doc__.split("\n")[0])
    parser.add_argument("run", help="a GPT run folder or checkpoint")
    parser.add_argument("--prompt", default="def ", help='the text to continue (default: "def ")')
    parser.add_argument("--length", type=int, default=300, help="bytes to add (default 300)")
    parser.add_argument("--temperature", type=float, default=0.8, help="0 is greedy (default 0.8)")
    parser.add_argument("--top-k", type=int, default=0, help="draw among the k likeliest bytes only (0: all)")
    parser.add_argument("--top-p", type=float, default=1.0, help="draw within the nucleus of this mass (1: all)")
    parser.add_argument("--seed", type=int, default=0, help="the seed of the draws (default 0)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ... (default auto)")
    args = parser.parse_args(argv)
    try:
        model, config = load_trained(args.run, device=args.device)
        sample = sample_next
        if config.parts == "mine":  # a run trained on your parts draws with your sample_next too
            parts = learner_parts(Path(config.parts_dir or EXERCISES), {}, GPT_PARTS)
            print(parts.listing(), file=sys.stderr)
            sample = parts["sample_next"]
        text = generate(model, args.prompt, args.length, args.temperature, args.top_k, args.top_p, args.seed, sample)
    except (TrainingError, PartsError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(text)
    return 0

