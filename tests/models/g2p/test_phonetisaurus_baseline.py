"""The classical baseline's glue (benchmarks/phonetisaurus_g2p.py): what it writes for training, how it
reads what the decoder prints, and, where Phonetisaurus is installed, a small model trained and scored."""
from __future__ import annotations

import importlib.util
import sys

import pytest

from course.layout import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import phonetisaurus_g2p as baseline  # noqa: E402


def test_training_lines_hold_every_pronunciation_of_a_word():
    lines = baseline.lexicon_lines([("either", ("IY", "DH", "ER")), ("either", ("AY", "DH", "ER"))])
    assert lines == ["either\tIY DH ER", "either\tAY DH ER"]


def test_predictions_follow_the_word_order_and_a_missing_word_predicts_nothing():
    printed = "cat\tK AE T\ndog\tD AO G\ndog\tD AA G\n"
    assert baseline.parse_predictions(printed, ["dog", "cat", "gnu"]) == [["D", "AO", "G"], ["K", "AE", "T"], []]


@pytest.mark.skipif(importlib.util.find_spec("phonetisaurus") is None,
                    reason=f"Phonetisaurus is a benchmark dependency: {baseline.INSTALL}")
def test_a_small_model_learns_and_is_scored_with_the_course_metric(tmp_path):
    from transformer.g2p.data import load

    g2p = load()
    r = baseline.measure(g2p.train.pairs[:2000], list(g2p.test.words[:200]), list(g2p.test.references[:200]),
                         tmp_path)
    assert r["training_pronunciations"] == 2000 and r["words"] == 200
    assert r["train_cpu_seconds"] > 0 and r["decode_wall_seconds"] > 0
    # 2,000 pronunciations are a sliver of the data: far from the full model, far from guessing.
    assert 30 < r["wer"] < 90 and r["per"] < 40, (r["wer"], r["per"])
