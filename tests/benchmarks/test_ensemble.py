"""benchmarks/g2p_ensemble.py: an ensemble decodes with the mean of its members' probabilities."""
from __future__ import annotations

import dataclasses
import sys

import pytest
import torch

from course.layout import REPO
from transformer.g2p import train as T
from transformer.g2p.encoding import Vocabularies, predict
from transformer.g2p.evaluate import beam_predict

sys.path.insert(0, str(REPO / "benchmarks"))
import g2p_ensemble  # noqa: E402  (benchmarks/g2p_ensemble.py)


def _models(count):
    config = dataclasses.replace(T.PRESETS["tiny"], device="cpu")
    vocabs = Vocabularies.make(config.share_embeddings, config.stress)
    models = []
    for seed in range(count):
        torch.manual_seed(seed)
        models.append(T.build_model(config, vocabs).eval())
    return models, vocabs


def test_the_ensemble_reads_the_mean_of_its_members_probabilities():
    (a, b), vocabs = _models(2)
    src = torch.tensor([vocabs.source.encode("cat", eos=True), vocabs.source.encode("dog", eos=True)])
    ys = torch.tensor([[vocabs.target.bos_id, 5, 7], [vocabs.target.bos_id, 9, 4]])
    with torch.no_grad():
        mean = (a(src, ys).softmax(-1) + b(src, ys).softmax(-1)) / 2
        ensemble = g2p_ensemble.Ensemble([a, b])
        got = ensemble.decode(ensemble.encode(src), ys)
    torch.testing.assert_close(got.exp(), mean)
    assert not torch.allclose(mean, a(src, ys).softmax(-1))  # the members differ: the mean is not one of them


def test_an_ensemble_of_one_decodes_as_its_model_and_an_empty_one_is_refused():
    (model,), vocabs = _models(1)
    words = ["cat", "zebra", "onomatopoeia"]
    assert predict(g2p_ensemble.Ensemble([model]), words, vocabs) == predict(model, words, vocabs)
    with pytest.raises(ValueError, match="at least one"):
        g2p_ensemble.Ensemble([])


def test_the_batched_beam_search_decodes_an_ensemble():
    """The beam search repeats each member's memory for its hypotheses (it once took only one model's named
    tuple and failed on an ensemble's list): a model ensembled with itself decodes as the model alone, and
    two members decode as neither of them."""
    (a, b), vocabs = _models(2)
    words = ["cat", "zebra", "onomatopoeia", "a"]
    alone = beam_predict(a, words, vocabs, beam_size=3, alpha=0.6)
    assert beam_predict(g2p_ensemble.Ensemble([a, a]), words, vocabs, beam_size=3, alpha=0.6) == alone
    both = beam_predict(g2p_ensemble.Ensemble([a, b]), words, vocabs, beam_size=3, alpha=0.6)
    assert len(both) == len(words) and both != alone
