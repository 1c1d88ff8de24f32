"""Evaluating a run and pronouncing words with it, on a run of the tiny preset."""
from __future__ import annotations

import dataclasses
import json

import pytest

from transformer import data as g2p_data
from transformer import evaluate as E
from transformer import pronounce as P
from transformer import train as T
from transformer.g2p import predict
from transformer.metrics import count_errors


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("evaluate") / "run"
    config = dataclasses.replace(T.PRESETS["tiny"], run_dir=str(folder), device="cpu", max_steps=40)
    T.train(config, progress=False)
    return folder


def test_evaluate_reports_both_decodings(run, capsys):
    results = E.evaluate_run(run, split="dev", beam=3, alpha=0.6, limit=25, device="cpu", worst=3, progress=False)
    out = capsys.readouterr().out
    assert "dev split, 25 words" in out and "greedy" in out and "beam 3, alpha 0.6" in out
    assert set(results["decodings"]) == {"greedy", "beam 3, alpha 0.6"}
    assert len(results["worst"]) == 3
    saved = json.loads((run / "evaluation-dev.json").read_text())
    assert saved["decodings"] == results["decodings"]  # floats survive JSON exactly
    assert (run / "attention-dev.png").is_file()
    # The greedy figures are those of the metrics module on the greedy predictions.
    model, _, vocabs = T.load_trained(run, "cpu")
    dev = g2p_data.load().dev
    counts = count_errors(predict(model, list(dev.words[:25]), vocabs, max_len=E.MAX_LEN), list(dev.references[:25]))
    assert results["decodings"]["greedy"] == {"wer": counts.wer, "per": counts.per}


def test_pronounce_prints_one_line_per_word(run, capsys):
    words = ["Transformer", "attention", "o'clock"]
    assert P.main([*words, "--checkpoint", str(run), "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == words
    for line in lines:
        assert all(p in g2p_data.PHONEMES for p in line.split()[1:])
    assert P.main(["attention", "--checkpoint", str(run), "--device", "cpu", "--beam", "3"]) == 0


def test_clear_errors(run, tmp_path, capsys):
    assert P.main(["naïve", "--checkpoint", str(run)]) == 2
    assert "letters and apostrophes only" in capsys.readouterr().err
    assert P.main(["word", "--checkpoint", str(tmp_path / "nowhere")]) == 2
    assert "no checkpoint at" in capsys.readouterr().err
    (tmp_path / "bogus.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(T.TrainingError, match="is not a checkpoint"):
        T.load_trained(tmp_path / "bogus.pt")
    assert E.main([str(tmp_path / "nowhere"), "--quiet"]) == 2
