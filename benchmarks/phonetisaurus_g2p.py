"""Chapter 8's classical baseline: Phonetisaurus, a joint-sequence WFST grapheme-to-phoneme model.

It aligns letters with phonemes, trains an n-gram model over the aligned pairs and decodes with
a weighted finite-state transducer: the strongest non-neural answer to the capstone's task. It is a
benchmark dependency, not something a learner installs::

    .venv/bin/pip install phonetisaurus==0.3.0    # a 12 MB wheel with its binaries (Linux x86-64)

Trained with the package's defaults on the capstone's training words (stress removed, every
reference pronunciation of a word given), decoded one best pronunciation per test word, and scored
with the course's metric (:func:`transformer.g2p.metrics.count_errors`: the closest reference counts).
Its binaries run as child processes, so their CPU time is read from the children's resource usage.
"""
from __future__ import annotations

import importlib.util
import os
import resource
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

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
