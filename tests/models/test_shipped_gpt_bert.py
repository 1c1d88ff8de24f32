"""The small GPT and BERT the repository ships for chapter 7, and the page that reports them: the
figures beside each checkpoint are what measuring it again gives, they come from the CPU presets,
and the page shows them without writing any by hand."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch

from course.layout import REPO
from transformer import loop
from transformer.bert import syllables
from transformer.bert import train as bert
from transformer.bert.data import masked_lm_scores, predict
from transformer.bert.model import CharVocabulary
from transformer.checkpoint import TRAINING_STATE
from transformer.g2p.data import load as load_cmudict
from transformer.gpt import stdlib_text
from transformer.gpt import train as gpt

PAGE = REPO / "book" / "ch07_bert_gpt.md"
GPT_DIR = REPO / "checkpoints" / "gpt-stdlib-cpu"
PRETRAINED = REPO / "checkpoints" / "bert-pretrain-cpu"
FINETUNED = {task: REPO / "checkpoints" / f"bert-{task}-cpu" for task in syllables.TASKS}
#: the held-out slice measured again (the whole held-out text takes over a minute on 2 cores)
SLICE = 20_000
#: another CPU may sum floats in another order: that moves bits per character in the 5th decimal,
#: and a prediction or two among ~10,000 test words (0.1 point is 10 words)
BPC_TOLERANCE = 1e-3
ACCURACY_TOLERANCE = 1e-3


def read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def experiment():
    return read(PRETRAINED / "experiment.json")


@pytest.fixture(scope="module")
def g2p():
    return load_cmudict(stress=True)


@pytest.mark.parametrize("folder", [GPT_DIR, PRETRAINED, *FINETUNED.values()], ids=lambda p: p.name)
def test_each_shipped_folder_is_small_and_cannot_be_resumed(folder):
    for name in ("checkpoint.pt", "config.json", "metrics.json", "curves.png"):
        assert (folder / name).is_file(), name
    assert (folder / "checkpoint.pt").stat().st_size < 5 << 20, "a few MB, not a resumable run"
    checkpoint = torch.load(folder / "checkpoint.pt", weights_only=False)
    assert not set(TRAINING_STATE) & checkpoint.keys()
    assert checkpoint["config"] == read(folder / "config.json")


def test_they_were_trained_with_the_cpu_presets():
    assert loop.identity(gpt.GPTTrainConfig(**read(GPT_DIR / "config.json"))) == loop.identity(gpt.PRESETS["cpu"])
    pretrain = bert.PretrainConfig(**read(PRETRAINED / "config.json"))
    assert loop.identity(pretrain) == loop.identity(bert.PRETRAIN_PRESETS["cpu"])
    for task, folder in FINETUNED.items():
        saved = bert.FinetuneConfig(**read(folder / "config.json"))
        assert saved.init, "fine-tuned from the pre-trained encoder"
        expected = dataclasses.replace(bert.FINETUNE_PRESETS["cpu"], task=task, labels=0, init=saved.init)
        assert loop.identity(saved) == loop.identity(expected), task


def test_the_gpt_scores_the_recorded_bits_on_a_slice_of_the_held_out_text():
    recorded = read(GPT_DIR / f"heldout-{SLICE}.json")
    assert recorded["measured_characters"] == SLICE
    [row] = [r for r in recorded["rows"] if r["model"].startswith("GPT")]
    data = stdlib_text.load()
    model, config = gpt.load_trained(GPT_DIR, device="cpu")
    measured = gpt.bits_per_character(model, data.train, data.heldout[:SLICE], config.stride)
    assert measured["characters"] == SLICE
    assert measured["bpc"] == pytest.approx(row["bpc"], abs=BPC_TOLERANCE)


def test_the_gpt_beats_bz2_clearly_on_all_the_held_out_text():
    """The CPU preset's bar, on the figures the page shows: at most 1.55 bits per character, below bz2 and the
    5-gram."""
    final = read(GPT_DIR / "metrics.json")["dev"][-1]
    baselines = read(GPT_DIR / "baselines.json")
    assert final["characters"] == baselines["heldout_characters"] == baselines["measured_characters"]
    [ngram] = [r["bpc"] for r in baselines["rows"] if "gram" in r["model"]]
    [bz2] = [r["bpc"] for r in baselines["rows"] if r["model"].startswith("bz2")]
    assert final["bpc"] <= 1.55 < bz2
    assert final["bpc"] < ngram


@pytest.mark.parametrize("task", syllables.TASKS)
def test_each_fine_tuned_bert_scores_its_recorded_test_accuracy(task, experiment, g2p):
    recorded = read(FINETUNED[task] / "results.json")
    [row] = [r for r in experiment["rows"] if r["task"] == task and r["labels"] == recorded["labels"]]
    assert row["pretrained"] == recorded["accuracy"], "the experiment's table holds this very run"
    model, _ = bert.load_finetuned(FINETUNED[task])
    test = syllables.load(task, g2p)["test"]
    assert len(test) == recorded["words"] == row["test_words"], "every test word"
    assert recorded["labels"] == len(syllables.load(task, g2p)["train"]), "all the labels"
    measured = syllables.accuracy(predict(model, test.words, CharVocabulary()), test)
    assert measured == pytest.approx(recorded["accuracy"], abs=ACCURACY_TOLERANCE)


def test_the_pre_trained_encoder_fills_in_the_recorded_share_of_masked_letters(g2p):
    config = bert.PretrainConfig(**read(PRETRAINED / "config.json"))
    final = read(PRETRAINED / "metrics.json")["dev"][-1]
    model = bert.load_pretrained(PRETRAINED)
    # the training task's own measurement: the first eval_words dev words, masks drawn with seed 0
    measured = masked_lm_scores(model, list(g2p.dev.words[: config.eval_words]), CharVocabulary(), seed=0)
    assert measured["masked"] == final["masked"]
    assert measured["accuracy"] == pytest.approx(final["accuracy"], abs=ACCURACY_TOLERANCE)


def test_the_page_reads_its_figures_from_the_shipped_folders(experiment):
    page = PAGE.read_text(encoding="utf-8")
    for name in ("gpt-stdlib-cpu", "baselines.json", "bert-pretrain-cpu", "experiment.json", "generate_with_cache",
                 "sample_next"):
        assert name in page, name
    # the prose, without code cells: figures reach it through glue
    prose = re.sub(r"^```\{code-cell\}.*?^```$", "", page, flags=re.S | re.M)
    shown = [100 * row[key] for row in experiment["rows"] for key in ("pretrained", "scratch")]
    shown += [100 * v for row in experiment["rows"] for v in row["baselines"].values()]
    for value in shown:
        written = f"{value:.1f}"
        assert not re.search(rf"(?<![\d.]){re.escape(written)} ?%", prose), f"{written} % is written by hand"
    bpc = read(GPT_DIR / "metrics.json")["dev"][-1]["bpc"]
    baselines = [r["bpc"] for r in read(GPT_DIR / "baselines.json")["rows"]]
    for value in (bpc, *baselines):
        for digits in (2, 3):
            assert not re.search(rf"(?<![\d.]){re.escape(f'{value:.{digits}f}')}(?!\d)", prose), f"{value} by hand"


def test_the_shipped_berts_are_told_apart_and_cannot_be_exported_again(tmp_path):
    with pytest.raises(loop.TrainingError, match="pre-training run"):
        bert.load_finetuned(PRETRAINED)
    for folder in (PRETRAINED, FINETUNED["stress"]):
        with pytest.raises(loop.TrainingError, match="already an exported model"):
            bert.export(folder, tmp_path / folder.name)
    assert not any(tmp_path.iterdir()), "nothing written"
    with pytest.raises(SystemExit):  # no destination
        bert.export_main([str(PRETRAINED)])
