"""WER and PER on examples worked out by hand, and the definitions they must not be confused with."""
from __future__ import annotations

import pytest

from transformer.g2p.metrics import ErrorCounts, closest_reference, count_errors


def _p(text: str) -> list[str]:
    return text.split()


# word: prediction, references. Worked by hand: distance to the closest reference, its length.
WORDS = [
    ("cat", "K AE T", ["K AE T"]),  # right: 0 edits, length 3
    ("read", "R EH D", ["R IY D", "R EH D"]),  # right (the second reference): 0, 3
    ("either", "IY TH ER", ["IY DH ER", "AY DH ER"]),  # one substitution: 1, 3
    ("about", "AH B AW", ["AH", "AH B AW T"]),  # closest is the longer reference: 1, 4 (the first is 2 away)
    ("dogs", "D AO G", ["D AA G Z"]),  # a substitution and a deletion: 2, 4
]
PREDICTIONS = [_p(pred) for _, pred, _ in WORDS]
REFERENCES = [[_p(r) for r in refs] for _, _, refs in WORDS]


def test_hand_worked_example():
    counts = count_errors(PREDICTIONS, REFERENCES)
    assert counts == ErrorCounts(words=5, wrong_words=3, edits=4, reference_length=17)
    assert counts.wer == pytest.approx(60.0)
    assert counts.per == pytest.approx(100 * 4 / 17)  # 23.53 %


def test_per_is_not_any_of_the_other_definitions():
    per = count_errors(PREDICTIONS, REFERENCES).per
    assert per != pytest.approx(100 * 4 / 34), "the reference length was counted twice (PER halved)"
    assert per != pytest.approx(100 * 4 / 24), "every reference's length was counted, not only the closest one's"
    assert per != pytest.approx(100 * (0 + 0 + 1 / 3 + 1 / 4 + 2 / 4) / 5), "a mean of per-word rates"
    assert per != pytest.approx(100 * 6 / 14), "the first reference was used, not the closest"


def test_closest_reference_and_its_ties():
    assert closest_reference(_p("AH B AW"), [_p("AH"), _p("AH B AW T")]) == (1, _p("AH B AW T"))
    # Equally close: the reference listed first counts, with its own length.
    assert closest_reference(_p("T AH"), [_p("T AH M"), _p("T")]) == (1, _p("T AH M"))
    with pytest.raises(ValueError, match="at least one reference"):
        closest_reference(_p("T"), [])


def test_empty_prediction_costs_the_whole_reference():
    counts = count_errors([[]], [[_p("HH AH L OW")]])
    assert (counts.wer, counts.per) == (100.0, 100.0)


def test_stress_is_scored_or_ignored():
    predictions = [_p("AH0 B AW1 T"), _p("K AE1 T")]
    references = [[_p("AH1 B AW1 T")], [_p("K AE1 T")]]
    with_stress = count_errors(predictions, references)
    without = count_errors(predictions, references, ignore_stress=True)
    assert (with_stress.wer, with_stress.per) == (50.0, pytest.approx(100 / 7))
    assert (without.wer, without.per) == (0.0, 0.0)


def test_counts_add_up_over_parts():
    whole = count_errors(PREDICTIONS, REFERENCES)
    parts = count_errors(PREDICTIONS[:2], REFERENCES[:2]) + count_errors(PREDICTIONS[2:], REFERENCES[2:])
    assert parts == whole


def test_clear_errors():
    with pytest.raises(ValueError, match="2 predictions for 1 words"):
        count_errors([["A"], ["B"]], [[["A"]]])
    with pytest.raises(ValueError, match="no words"):
        _ = ErrorCounts().wer
