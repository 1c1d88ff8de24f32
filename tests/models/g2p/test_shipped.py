"""The checkpoint the repository ships, and the chapter 8 page that reports it: the figures beside
the checkpoint are what decoding the whole test split with it gives, the page shows those figures
and no others, and the shipped folder is what `transformer.g2p.export` makes of a run."""
from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys

import pytest
import torch

from course.layout import REPO
from transformer import loop
from transformer.g2p import train as T
from transformer.g2p.data import load
from transformer.g2p.encoding import predict
from transformer.g2p.evaluate import MAX_LEN, evaluate_run
from transformer.g2p.export import export
from transformer.g2p.pronounce import SHIPPED

PAGE = REPO / "book" / "ch08_capstone.md"


@pytest.fixture(scope="module")
def recorded():
    return json.loads((SHIPPED / "evaluation-test.json").read_text())


def test_the_shipped_folder_is_small_and_complete():
    for name in ("checkpoint.pt", "config.json", "metrics.json", "evaluation-test.json", "curves.png", "attention.png"):
        assert (SHIPPED / name).is_file(), name
    assert (SHIPPED / "checkpoint.pt").stat().st_size < 8 << 20, "a few MB, not a resumable run"
    checkpoint = torch.load(SHIPPED / "checkpoint.pt", weights_only=False)
    assert "optimizer" not in checkpoint and not checkpoint.get("snapshots")


def test_the_classical_baseline_beside_it_was_scored_on_the_same_words(recorded):
    """The page's comparison: Phonetisaurus measured on the same machine, split and metric
    (benchmarks/phonetisaurus_g2p.py --json)."""
    classical = json.loads((SHIPPED / "phonetisaurus.json").read_text())
    assert classical["words"] == recorded["words"]
    assert classical["training_pronunciations"] == len(load().train.pairs)
    assert 0 < classical["wer"] < 100 and 0 < classical["per"] < 100
    assert classical["train_cpu_seconds"] > 0 and classical["train_wall_seconds"] > 0
    assert "phonetisaurus.json" in PAGE.read_text(encoding="utf-8")


def test_it_was_trained_with_the_cpu_preset():
    saved = json.loads((SHIPPED / "config.json").read_text())
    assert loop.identity(T.TrainConfig(**saved)) == loop.identity(T.PRESETS["cpu"])
    checkpoint = torch.load(SHIPPED / "checkpoint.pt", weights_only=False)
    assert checkpoint["config"] == saved


#: test words decoded again, drawn with evaluate's own --limit/--seed draw. Re-decoding all 11,994
#: (greedy and beam 4) took a minute of the suite's time on an idle machine to prove two things that
#: a sample proves too: that these weights decode to the recorded predictions (the ten worst words,
#: compared word for word, are the hardest cases: the longest outputs, where any change in the
#: weights or the decoding shows first), and that the recorded rates are the model's (500 words give
#: the WER within 4 standard errors, sqrt(0.29 * 0.71 / 500) = 2 points, a bound an error in the
#: recorded figures or a broken decoder falls far outside; PER gets the same bound over words,
#: looser than over its phonemes).
SAMPLE = 500


def _binomial_bound(rate_percent: float, words: int) -> float:
    p = rate_percent / 100
    return 400 * (p * (1 - p) / words) ** 0.5


def test_the_recorded_worst_words_decode_as_recorded(recorded):
    model, _, vocabs = T.load_trained(SHIPPED, device="cpu")
    words = [row["word"] for row in recorded["worst"]]
    assert len(words) == 10
    predicted = [" ".join(p) for p in predict(model, words, vocabs, "cpu", max_len=MAX_LEN)]
    assert predicted == [row["predicted"] for row in recorded["worst"]]


def test_a_sample_of_the_test_split_scores_the_recorded_figures(recorded, tmp_path):
    (tmp_path / "shipped").mkdir()
    (tmp_path / "shipped" / "checkpoint.pt").symlink_to(SHIPPED / "checkpoint.pt")
    measured = evaluate_run(tmp_path / "shipped", "test", beam=1, limit=SAMPLE, seed=0, device="cpu", worst=0,
                            progress=False)
    assert recorded["words"] == len(load().test), "the recorded figures are the whole test split's"
    assert measured["words"] == SAMPLE and recorded["decodings"].keys() == {"greedy", "beam 4, alpha 0.6"}
    for metric in ("wer", "per"):
        full = recorded["decodings"]["greedy"][metric]
        assert measured["decodings"]["greedy"][metric] == pytest.approx(full, abs=_binomial_bound(full, SAMPLE)), metric
    # the target for ten minutes on two CPU cores
    assert recorded["decodings"]["greedy"]["wer"] <= 40 and recorded["decodings"]["greedy"]["per"] <= 12


def test_the_page_reads_its_figures_from_the_shipped_folder(recorded):
    page = PAGE.read_text(encoding="utf-8")
    assert "evaluation-test.json" in page and "SHIPPED" in page
    prose = "\n".join(line for line in page.splitlines() if not line.startswith((" ", "rows", "glue")))
    for figures in recorded["decodings"].values():
        for metric in ("wer", "per"):
            for digits in (1, 2):
                written = f"{figures[metric]:.{digits}f}"
                assert not re.search(rf"(?<![\d.]){re.escape(written)} ?%", prose), f"{written} % is written by hand"


def test_pronounce_uses_the_shipped_checkpoint():
    done = subprocess.run([sys.executable, "-m", "transformer.g2p", "pronounce", "thought", "tokenizer"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["thought", "tokenizer"]
    assert lines[0] == "thought TH AO T"


def test_export_keeps_only_what_decoding_needs(tmp_path):
    config = dataclasses.replace(T.PRESETS["tiny"], run_dir=str(tmp_path / "run"), device="cpu", average_last=2,
                                 average_every=15)
    run = T.train(config, progress=False)
    exported = export(tmp_path / "run", tmp_path / "shipped")
    assert exported.stat().st_size < (tmp_path / "run" / "checkpoint.pt").stat().st_size / 2
    for name in ("config.json", "metrics.json", "curves.png", "attention.png"):
        assert (tmp_path / "shipped" / name).is_file(), name
    model, _, _ = T.load_trained(tmp_path / "shipped", device="cpu")
    for name, value in model.state_dict().items():
        assert torch.equal(value, run.model.state_dict()[name]), name  # the averaged weights
    with pytest.raises(loop.TrainingError, match="exported model, not a run"):
        T.train(dataclasses.replace(config, run_dir=str(tmp_path / "shipped")), resume=True, progress=False)
    with pytest.raises(loop.TrainingError, match="already an exported model"):
        export(tmp_path / "shipped", tmp_path / "again")
