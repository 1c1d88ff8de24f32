"""Chapter 8's classical baseline: Phonetisaurus, a joint-sequence WFST grapheme-to-phoneme model.

It aligns letters with phonemes, trains an n-gram model over the aligned pairs and decodes with
a weighted finite-state transducer: the strongest non-neural answer to the capstone's task. It is a
benchmark dependency, not something a learner installs::

    .venv/bin/pip install phonetisaurus==0.3.0    # a 12 MB wheel with its binaries (Linux x86-64)

Trained with the package's defaults on the capstone's training words (stress removed, every
reference pronunciation of a word given), decoded one best pronunciation per test word, and scored
with the course's metric (:func:`transformer.g2p.metrics.count_errors`: the closest reference counts).
Its binaries run as child processes, so their CPU time is read from the children's resource usage.

    python benchmarks/phonetisaurus_g2p.py --json checkpoints/g2p-cpu/phonetisaurus.json

trains and scores it on its own and writes the figures that chapter 8's page shows beside the course's
model; ``benchmarks/capstone.py`` measures the same in the same run as the course's model (its step 0).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from machine import cpu_line  # beside this file

INSTALL = "pip install phonetisaurus==0.3.0"


class Unavailable(RuntimeError):
    """Phonetisaurus is not installed here."""


@dataclass(frozen=True)
class Timed:
    wall_seconds: float
    cpu_seconds: float  # user + system time of the child processes


def environment() -> dict[str, str]:
    """PATH and LD_LIBRARY_PATH that reach the binaries the wheel ships."""
    if importlib.util.find_spec("phonetisaurus") is None:
        raise Unavailable(f"Phonetisaurus is not installed: {INSTALL}")
    import phonetisaurus

    return dict(os.environ, **phonetisaurus.guess_environment())


def lexicon_lines(pairs: Iterable[tuple[str, Sequence[str]]]) -> list[str]:
    """One ``word<TAB>PH1 PH2 ...`` line per (word, pronunciation): the training format."""
    return [f"{word}\t{' '.join(phonemes)}" for word, phonemes in pairs]


def parse_predictions(output: str, words: Sequence[str]) -> list[list[str]]:
    """The phonemes predicted for each word, in the order of ``words``; an empty list where the
    decoder gave nothing (it scores as a wrong word, as a model that wrote nothing would)."""
    found: dict[str, list[str]] = {}
    for line in output.splitlines():
        fields = line.split()
        if fields and fields[0] not in found:
            found[fields[0]] = fields[1:]
    return [found.get(word, []) for word in words]


def _run(command: list[str], cwd: Path, stdout=subprocess.PIPE) -> Timed:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=environment(), stdout=stdout, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} failed ({done.returncode}):\n{(done.stdout or '')[-2000:]}\n{done.stderr[-2000:]}")
    return Timed(wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))


def train(pairs: Iterable[tuple[str, Sequence[str]]], folder: Path) -> tuple[Path, Timed]:
    """Train on (word, pronunciation) pairs with the package's default recipe; the model file."""
    folder.mkdir(parents=True, exist_ok=True)
    lexicon = folder / "lexicon.txt"
    lexicon.write_text("\n".join(lexicon_lines(pairs)) + "\n", encoding="utf-8")
    timed = _run(["phonetisaurus-train", "--lexicon", str(lexicon), "--seq2_del"], folder)
    return folder / "train" / "model.fst", timed


def predict(model: Path, words: Sequence[str]) -> tuple[list[list[str]], Timed]:
    """The one best pronunciation of each word."""
    with tempfile.TemporaryDirectory(prefix="phonetisaurus-") as scratch:
        listed, out = Path(scratch) / "words.txt", Path(scratch) / "predicted.txt"
        listed.write_text("\n".join(words) + "\n", encoding="utf-8")
        with out.open("w") as sink:
            timed = _run(["phonetisaurus-apply", "--model", str(model), "--word_list", str(listed), "--nbest", "1"],
                         Path(scratch), stdout=sink)
        return parse_predictions(out.read_text(encoding="utf-8"), words), timed


def measure(train_pairs: Sequence[tuple[str, Sequence[str]]], test_words: Sequence[str],
            test_references: Sequence[Sequence[Sequence[str]]], folder: Path) -> dict:
    """Train on ``train_pairs``, decode ``test_words`` and score them as the course scores its model."""
    from transformer.g2p.metrics import count_errors

    model, training = train(train_pairs, folder)
    predictions, decoding = predict(model, test_words)
    counts = count_errors(predictions, list(test_references))
    return {"model": "Phonetisaurus " + _version(), "training_pronunciations": len(train_pairs),
            "words": counts.words, "wer": counts.wer, "per": counts.per,
            "train_wall_seconds": training.wall_seconds, "train_cpu_seconds": training.cpu_seconds,
            "decode_wall_seconds": decoding.wall_seconds, "decode_cpu_seconds": decoding.cpu_seconds,
            "cpu": cpu_line(), "load_average": os.getloadavg()[0]}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("phonetisaurus")
    except PackageNotFoundError:
        return "(version unknown)"


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from transformer.g2p.data import load

    parser = argparse.ArgumentParser(description="Train Phonetisaurus on the capstone's split and score its test words.")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--test-words", type=int, default=0, help="score only the first N test words (default: all)")
    args = parser.parse_args()
    g2p = load()
    limit = args.test_words or len(g2p.test.words)
    try:
        with tempfile.TemporaryDirectory(prefix="phonetisaurus-train-") as scratch:
            figures = measure(g2p.train.pairs, list(g2p.test.words[:limit]), list(g2p.test.references[:limit]),
                              Path(scratch))
    except Unavailable as missing:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    print(json.dumps(figures, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
