"""Does pre-training help? The small BERT fine-tuned from its pre-trained encoder vs from scratch.

    python benchmarks/bert_finetune.py                          the CPU preset (about 6 + 12 x 1 minutes on one core)
    python benchmarks/bert_finetune.py --preset gpu             on a GPU
    python benchmarks/bert_finetune.py --preset tiny --labels 200 1000   a rehearsal in a minute

1. Pre-train the encoder (masked letters, G2P training spellings) once, in OUT/pretrain. A
   finished run of the same configuration found in OUT is reused, an unfinished one continued;
   one of another configuration is an error (choose another --out).
2. For each task (syllable count, stress position) and each number of labelled training words
   (--labels; 0 means every training word), fine-tune twice with the same seed, the same words
   and the same number of steps: once from the pre-trained encoder, once from random weights.
3. Print, and write to OUT/results.json, the test-split accuracy of each, the gap, and the
   baselines on the same words (majority class, and the vowel-group rule for syllables).

Every figure printed was measured in this run; copy them, with the hardware line, into
benchmarks/RESULTS.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.capstone import hardware  # noqa: E402
from transformer.bert import train as bert  # noqa: E402
from transformer.bert.syllables import TASKS  # noqa: E402
from transformer.g2p.data import G2PData, load  # noqa: E402
from transformer.loop import TrainingError, check_same_run, read_checkpoint, save_json  # noqa: E402


def pretrained_run(config: bert.PretrainConfig, g2p: G2PData) -> float:
    """Seconds spent pre-training now (0 when a finished run was found)."""
    checkpoint = Path(config.run_dir) / "checkpoint.pt"
    started = time.perf_counter()
    if checkpoint.is_file():
        saved, _, _ = read_checkpoint(checkpoint, bert.PretrainConfig)
        check_same_run(saved["config"], config, checkpoint.parent)
        if saved["step"] > config.max_steps:
            raise TrainingError(f"{checkpoint.parent} was pre-trained for {saved['step']} steps, not {config.max_steps}: "
                                "choose another --out")
        if saved["step"] == config.max_steps:
            return 0.0
        bert.pretrain(config, resume=True, data=g2p)
    else:
        bert.pretrain(config, data=g2p)
    return time.perf_counter() - started


def finetuned(config: bert.FinetuneConfig, g2p: G2PData) -> dict:
    """The results.json of a fine-tuning run, trained now unless a finished one is there."""
    results = Path(config.run_dir) / "results.json"
    if results.is_file():  # a finished run: reused only when it is this configuration's
        saved = json.loads((Path(config.run_dir) / "config.json").read_text(encoding="utf-8"))
        check_same_run(saved, config, Path(config.run_dir))
        if saved["max_steps"] != config.max_steps:
            raise TrainingError(f"{config.run_dir} was fine-tuned for {saved['max_steps']} steps, not {config.max_steps}: "
                                "choose another --out")
    else:
        started = time.perf_counter()
        bert.finetune(config, data=g2p)
        answer = json.loads(results.read_text(encoding="utf-8"))
        answer["seconds"] = time.perf_counter() - started
        save_json(results, answer)
    return json.loads(results.read_text(encoding="utf-8"))


def compare(args: argparse.Namespace, pre: bert.PretrainConfig, tune: bert.FinetuneConfig,
            g2p: G2PData) -> list[dict]:
    """One row per task and number of labels: the test accuracy from the pre-trained encoder and from scratch."""
    rows = []
    for task in args.tasks:
        for labels in args.labels:
            pair = {}
            for start in ("pretrained", "scratch"):
                config = dataclasses.replace(tune, task=task, labels=labels, init=pre.run_dir if start == "pretrained" else "",
                                             run_dir=str(Path(args.out) / f"{task}-{labels or 'all'}-{start}"))
                pair[start] = finetuned(config, g2p)
            rows.append({"task": task, "labels": pair["scratch"]["labels"], "test_words": pair["scratch"]["words"],
                         "pretrained": pair["pretrained"]["accuracy"], "scratch": pair["scratch"]["accuracy"],
                         "gap": pair["pretrained"]["accuracy"] - pair["scratch"]["accuracy"],
                         "baselines": pair["scratch"]["baselines"],
                         "seconds": [pair[s].get("seconds") for s in ("pretrained", "scratch")]})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(bert.PRETRAIN_PRESETS), default="cpu")
    parser.add_argument("--labels", type=int, nargs="+", default=[1000, 4000, 0],
                        help="labelled training words per run (0: all); default 1000 4000 0")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--pretrain-steps", type=int, help="override the preset's pre-training steps")
    parser.add_argument("--finetune-steps", type=int, help="override the preset's fine-tuning steps")
    parser.add_argument("--threads", type=int, help="CPU threads (default: the preset's)")
    parser.add_argument("--out", default="runs/bert-experiment", help="where the runs go (default: %(default)s)")
    args = parser.parse_args(argv)
    if any(n < 0 for n in args.labels):
        parser.error("--labels takes 0 (every training word) or positive counts")

    out = Path(args.out)
    common = {"threads": args.threads} if args.threads else {}
    pre = dataclasses.replace(bert.PRETRAIN_PRESETS[args.preset], run_dir=str(out / "pretrain"), **common,
                              **({"max_steps": args.pretrain_steps} if args.pretrain_steps else {}))
    tune = dataclasses.replace(bert.FINETUNE_PRESETS[args.preset], **common,
                               **({"max_steps": args.finetune_steps} if args.finetune_steps else {}))
    torch.set_num_threads(pre.threads)
    print(hardware(), f"load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "")
    g2p = load(stress=True)
    try:
        pretrain_seconds = pretrained_run(pre, g2p)
        rows = compare(args, pre, tune, g2p)
    except TrainingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    print(f"\npre-training: {pre.max_steps} steps ({pretrain_seconds:.0f} s now); fine-tuning: {tune.max_steps} steps each; "
          "test split, first pronunciation of each word\n")
    print("| task | labelled words | from scratch | pre-trained | gap (points) | baselines |")
    print("|---|---:|---:|---:|---:|---|")
    for r in rows:
        shown = ", ".join(f"{k} {100 * v:.1f} %" for k, v in r["baselines"].items())
        print(f"| {r['task']} | {r['labels']:,} | {100 * r['scratch']:.1f} % | {100 * r['pretrained']:.1f} % | "
              f"{100 * r['gap']:+.1f} | {shown} |")
    save_json(out / "results.json", {
        "hardware": hardware(), "preset": args.preset, "pretrain_steps": pre.max_steps,
        "finetune_steps": tune.max_steps, "pretrain_seconds": pretrain_seconds, "rows": rows,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
