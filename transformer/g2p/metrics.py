"""Word and phoneme error rates, as the grapheme-to-phoneme literature defines them.

A word may have several right pronunciations. A prediction is compared with the **closest** of
them (the smallest edit distance; among equally close ones, the one listed first):

* WER, the word error rate: the percentage of words whose prediction equals none of the references;
* PER, the phoneme error rate: the edit distances to the closest references, summed over all
  words, divided by the summed lengths of those same closest references, each counted once.

Dividing by twice the reference length, as one published G2P codebase does, halves the PER;
figures computed that way do not compare with these.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from reference.capstone import edit_distance

from .data import strip_stress

Phonemes = Sequence[str]


@dataclass(frozen=True)
class ErrorCounts:
    """What WER and PER are made of; counts of two sets of words add up."""

    words: int = 0
    wrong_words: int = 0
    edits: int = 0  # edit distance to the closest reference, summed over the words
    reference_length: int = 0  # length of that closest reference, summed over the words

    def __add__(self, other: ErrorCounts) -> ErrorCounts:
        return ErrorCounts(self.words + other.words, self.wrong_words + other.wrong_words,
                           self.edits + other.edits, self.reference_length + other.reference_length)

    @property
    def wer(self) -> float:
        """Word error rate, in percent."""
        if not self.words:
            raise ValueError("no words were scored: the word error rate is undefined")
        return 100.0 * self.wrong_words / self.words

    @property
    def per(self) -> float:
        """Phoneme error rate, in percent."""
        if not self.reference_length:
            raise ValueError("the closest references hold no phoneme: the phoneme error rate is undefined")
        return 100.0 * self.edits / self.reference_length


def closest_reference(prediction: Phonemes, references: Sequence[Phonemes],
                      distance: Callable[[list, list], int] | None = None) -> tuple[int, Phonemes]:
    """(edit distance, reference) for the reference nearest to the prediction; ties go to the first listed.
    ``distance`` is chapter 8's edit_distance unless another (the learner's) is given."""
    if not references:
        raise ValueError("a word needs at least one reference pronunciation")
    measure = distance or edit_distance
    best = None
    for reference in references:
        distance_ = measure(list(prediction), list(reference))
        if best is None or distance_ < best[0]:
            best = (distance_, reference)
    assert best is not None
    return best


def count_errors(
    predictions: Sequence[Phonemes], references: Sequence[Sequence[Phonemes]], ignore_stress: bool = False,
    distance: Callable[[list, list], int] | None = None,
) -> ErrorCounts:
    """Error counts of a list of predictions, each against its word's list of references.

    ``ignore_stress`` removes stress digits from both sides first, so that a model that writes
    stress can be scored with and without it.
    """
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} words")
    counts = ErrorCounts()
    for prediction, refs in zip(predictions, references):
        if ignore_stress:
            prediction = [strip_stress(p) for p in prediction]
            refs = [[strip_stress(p) for p in r] for r in refs]
        edits, closest = closest_reference(prediction, refs, distance)
        counts += ErrorCounts(1, int(edits > 0), edits, len(closest))
    return counts
