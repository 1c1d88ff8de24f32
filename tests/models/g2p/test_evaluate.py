"""Evaluating a run and pronouncing words with it, on a run of the tiny preset."""
from __future__ import annotations

import dataclasses
import json

import pytest

from transformer import loop
from transformer.g2p import evaluate as E
from transformer.g2p import pronounce as P
from transformer.g2p import train as T
from transformer.g2p.data import PHONEMES, load
from transformer.g2p.encoding import predict
from transformer.g2p.metrics import count_errors


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
    dev = load().dev
    kept = E.sample_words(len(dev), 25, seed=0)
    words, references = [dev.words[i] for i in kept], [dev.references[i] for i in kept]
    counts = count_errors(predict(model, words, vocabs, max_len=E.MAX_LEN), references)
    assert results["decodings"]["greedy"] == {"wer": counts.wer, "per": counts.per}


def test_limit_draws_words_from_the_whole_split_with_a_seed():
    dev = load().dev
    kept = E.sample_words(len(dev), 200, seed=0)
    assert kept == E.sample_words(len(dev), 200, seed=0) != E.sample_words(len(dev), 200, seed=1)
    assert len(set(kept)) == 200 and kept == sorted(kept)
    initials = {dev.words[i][0] for i in kept}
    assert len(initials) > 15, "the first N words of the split all begin with a"
    assert E.sample_words(len(dev), 0, seed=3) == list(range(len(dev)))


def test_evaluate_shows_progress_from_the_start(run, capsys):
    E.evaluate_run(run, split="dev", beam=2, limit=30, device="cpu", worst=0, progress=True)
    captured = capsys.readouterr()
    assert captured.out.startswith("dev split, 30 words, 30 drawn at random (seed 0)")
    assert "the bars show the time left" in captured.out and "beam 2 will take roughly" in captured.out
    assert "greedy: 100%" in captured.err and "beam 2: 100%" in captured.err and "30/30" in captured.err


@pytest.mark.parametrize("beam", ["0", "-2"])
def test_a_beam_below_one_is_refused(run, beam, capsys):
    with pytest.raises(SystemExit) as exited:
        E.main([str(run), "--beam", beam])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --beam must be at least 1 (1 decodes greedily only), got {beam}")
    with pytest.raises(SystemExit):
        P.main(["word", "--beam", beam, "--checkpoint", str(run)])
    assert capsys.readouterr().err.startswith("error: --beam must be at least 1")
    with pytest.raises(loop.TrainingError, match="at least 1"):
        E.evaluate_run(run, beam=int(beam))


def test_pronounce_says_what_is_wrong_with_a_word(run, capsys):
    assert P.main(["café", "--checkpoint", str(run)]) == 2
    err = capsys.readouterr().err
    assert "'café' has 'é'" in err and "the 26 letters a-z" in err
    assert P.main(["'", "--checkpoint", str(run)]) == 2
    assert "has no letter" in capsys.readouterr().err
    assert P.main(["a" * 72, "--checkpoint", str(run)]) == 2
    assert "has 72 letters; this model reads words of at most 63" in capsys.readouterr().err
    assert P.main(["a" * 63, "--checkpoint", str(run), "--device", "cpu"]) == 0  # the longest it takes


def test_an_unknown_option_prints_the_error_first(capsys):
    for main in (E.main, P.main, T.main):
        with pytest.raises(SystemExit):
            main(["--bogus", "x"])
        err = capsys.readouterr().err
        assert err.startswith("error: unrecognized arguments: --bogus"), err
        assert "usage:" not in err and "--help` lists every option" in err


def test_a_per_above_100_percent_is_explained():
    assert "over 100 %: the predictions are longer than the references" in T.dev_line({"wer": 100.0, "per": 406.0})
    assert "over" not in T.dev_line({"wer": 20.0, "per": 5.0})


def test_pronounce_prints_one_line_per_word(run, capsys):
    words = ["Transformer", "attention", "o'clock"]
    assert P.main([*words, "--checkpoint", str(run), "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == words
    for line in lines:
        assert all(p in PHONEMES for p in line.split()[1:])
    assert P.main(["attention", "--checkpoint", str(run), "--device", "cpu", "--beam", "3"]) == 0


def test_clear_errors(run, tmp_path, capsys):
    assert P.main(["naïve", "--checkpoint", str(run)]) == 2
    assert "the model reads the 26 letters a-z" in capsys.readouterr().err
    assert P.main(["word", "--checkpoint", str(tmp_path / "nowhere")]) == 2
    assert "no checkpoint at" in capsys.readouterr().err
    (tmp_path / "bogus.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(loop.TrainingError, match="is not a checkpoint"):
        T.load_trained(tmp_path / "bogus.pt")
    assert E.main([str(tmp_path / "nowhere"), "--quiet"]) == 2
