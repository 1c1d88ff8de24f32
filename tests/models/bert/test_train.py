"""The small BERT of chapter 7: its labels, baselines, masking, model and the two training tasks (tiny presets)."""
from __future__ import annotations

import dataclasses
import json
import re

import pytest
import torch

from transformer.bert import syllables
from transformer.bert import train as bert
from transformer.bert.__main__ import main as bert_command
from transformer.bert.data import labelled_batch, masked_batch, predict
from transformer.bert.model import BertClassifier, BertConfig, BertForMaskedLM, CharVocabulary
from transformer.g2p.data import dictionary_file
from transformer.g2p.data import load as load_cmudict
from transformer.loop import TrainingError


@pytest.fixture(scope="module")
def g2p():
    return load_cmudict(stress=True)


@pytest.fixture(scope="module")
def pretrained(g2p, tmp_path_factory):
    config = dataclasses.replace(bert.PRETRAIN_PRESETS["tiny"], run_dir=str(tmp_path_factory.mktemp("bert") / "pretrain"))
    bert.pretrain(config, data=g2p, progress=False)
    return config


def tiny_finetune(run_dir, **changes) -> bert.FinetuneConfig:
    return dataclasses.replace(bert.FINETUNE_PRESETS["tiny"], run_dir=str(run_dir), **changes)


# ---------------------------------------------------------------------------------------------
# labels and baselines
# ---------------------------------------------------------------------------------------------


def test_labels_of_hand_checked_words(g2p):
    pronunciations = g2p.lexicon.pronunciations
    assert syllables.syllable_count(pronunciations["cat"][0]) == 1
    assert syllables.syllable_count(pronunciations["banana"][0]) == 3
    assert syllables.primary_stress(pronunciations["banana"][0]) == 2
    assert syllables.primary_stress(pronunciations["table"][0]) == 1
    assert syllables.primary_stress(pronunciations["forget"][0]) == 2
    assert syllables.label("stress", pronunciations["cat"][0]) is None, "one syllable: no choice of stress"
    assert syllables.label("syllables", ("AH0",)) == 1
    assert syllables.primary_stress(("DH", "AH0")) is None, "no vowel with digit 1: no primary stress"
    assert syllables.primary_stress(("EY2", "B", "IY1", "S", "IY1")) == 2, "several primary stresses: the first"


def test_a_pronunciation_without_stress_digits_is_refused():
    with pytest.raises(ValueError, match="stress=True"):
        syllables.syllable_count(("K", "AE", "T"))
    with pytest.raises(ValueError, match="stress=True"):
        syllables.load("syllables", load_cmudict(stress=False))
    with pytest.raises(ValueError, match="unknown task"):
        syllables.label("rhyme", ("K", "AE1", "T"))


def _first_pronunciations_from_the_file() -> dict[str, str]:
    """An independent reading of the dictionary: the first entry of each word, as raw text."""
    first: dict[str, str] = {}
    for line in dictionary_file().read_text(encoding="utf-8").splitlines():
        entry = line.split("#", 1)[0].split(maxsplit=1)
        if len(entry) == 2 and "(" not in entry[0]:
            first.setdefault(entry[0], entry[1])
    return first


def test_labels_agree_with_an_independent_reading_of_the_file(g2p):
    raw = _first_pronunciations_from_the_file()
    splits = syllables.load("syllables", g2p)
    for word, count in list(zip(splits["test"].words, splits["test"].labels))[::7]:
        assert count == len(re.findall(r"\d", raw[word])), word
    stress = syllables.load("stress", g2p)["test"]
    for word, position in list(zip(stress.words, stress.labels))[::7]:
        digits = re.findall(r"\d", raw[word])
        assert position == digits.index("1") + 1, word


def test_baselines_are_the_rules_counted_on_the_held_out_labels(g2p):
    for task, majority in (("syllables", 2), ("stress", 1)):
        splits = syllables.load(task, g2p)
        assert syllables.majority(splits["train"]) == majority
        for split in ("dev", "test"):
            held_out = splits[split]
            found = syllables.baselines(splits, split)
            assert found[f"always {majority}"] == pytest.approx(held_out.labels.count(majority) / len(held_out))
            if task == "syllables":
                right = sum(syllables.vowel_groups(w) == y for w, y in zip(held_out.words, held_out.labels))
                assert found["vowel groups"] == pytest.approx(right / len(held_out))
                assert 0.80 < found["vowel groups"] < 0.90, "the rule should be right about five times in six"


@pytest.mark.parametrize(("word", "groups"), [("cat", 1), ("banana", 3), ("make", 1), ("table", 2), ("queue", 1),
                                              ("rhythm", 1), ("the", 1), ("create", 1)])
def test_vowel_groups(word, groups):
    assert syllables.vowel_groups(word) == groups


def test_vowel_groups_refuses_an_empty_word():
    with pytest.raises(ValueError, match="at least one letter"):
        syllables.vowel_groups("")


def test_a_subset_of_labels_is_a_fixed_draw(g2p):
    train = syllables.load("syllables", g2p)["train"]
    a, b, other = train.subset(500, seed=0), train.subset(500, seed=0), train.subset(500, seed=1)
    assert len(a) == 500 and a.words == b.words and a.words != other.words
    assert set(a.words) <= set(train.words)
    label_of = dict(zip(train.words, train.labels))
    assert all(label_of[w] == y for w, y in zip(a.words, a.labels))
    assert train.subset(0) is train
    with pytest.raises(ValueError, match="has"):
        train.subset(len(train) + 1)
    with pytest.raises(ValueError, match="0 \\(all\\) or more"):
        train.subset(-1)


# ---------------------------------------------------------------------------------------------
# masking and the model
# ---------------------------------------------------------------------------------------------


def test_masking_never_touches_cls_sep_or_pad(g2p):
    vocab = CharVocabulary()
    words = list(g2p.train.words[:4000])
    generator = torch.Generator().manual_seed(0)
    letters = chosen = masked = 0
    for start in range(0, len(words), 500):
        clean = vocab.batch(words[start : start + 500], 32)
        inputs, labels = masked_batch(words[start : start + 500], vocab, 32, generator)
        special = clean < len(vocab.special_ids)  # [PAD] [CLS] [SEP] (no word has [MASK] or [UNK])
        assert torch.equal(inputs[special], clean[special]), "a special token was changed"
        assert (labels[special] == -100).all(), "a special token was chosen for prediction"
        picked = labels != -100
        assert torch.equal(labels[picked], clean[picked]), "a label is not the original letter"
        assert (inputs[~picked] == clean[~picked]).all(), "a letter that was not chosen changed"
        letters += int((~special).sum())
        chosen += int(picked.sum())
        masked += int((inputs[picked] == vocab.mask_id).sum())
    # about 30,000 letters: three standard deviations of the chosen share are about 0.6 points
    assert abs(chosen / letters - 0.15) < 0.01, chosen / letters
    assert abs(masked / chosen - 0.8) < 0.03, masked / chosen


def test_vocabulary():
    vocab = CharVocabulary()
    assert vocab.tokens[:5] == ("[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]")
    assert vocab.encode("Cat") == [vocab.cls_id, vocab.ids["c"], vocab.ids["a"], vocab.ids["t"], vocab.sep_id]
    assert vocab.encode("é")[1] == vocab.unk_id
    assert vocab.decode(vocab.encode("o'clock")) == "o'clock"
    with pytest.raises(ValueError, match="positions"):
        vocab.batch(["a" * 40], 32)
    with pytest.raises(ValueError, match="at least one word"):
        vocab.batch([], 32)


def test_model_shapes_ties_and_padding():
    torch.manual_seed(0)
    config = BertConfig(d_model=32, h=2, N=2, d_ff=64, dropout=0.0)
    vocab = CharVocabulary()
    mlm = BertForMaskedLM(config).eval()
    ids = vocab.batch(["cat", "banana"], config.max_len)  # (2, 8)
    assert mlm(ids).shape == (2, 8, len(vocab))
    assert mlm.bert.token_embedding.weight.grad is None
    mlm(ids).sum().backward()  # the tied matrix gets gradient from both ends
    assert mlm.bert.token_embedding.weight.grad is not None
    classifier = BertClassifier(config, classes=5).eval()
    alone = classifier(vocab.batch(["cat"], config.max_len))
    padded = classifier(ids)[:1]  # "cat" padded to banana's length
    torch.testing.assert_close(alone, padded, atol=1e-5, rtol=1e-5, msg="padding changed a word's prediction")
    with pytest.raises(ValueError, match="at least 2 classes"):
        BertClassifier(config, classes=1)
    with pytest.raises(ValueError, match="divisible"):
        BertConfig(d_model=30, h=4)
    with pytest.raises(ValueError, match="longer than"):
        mlm.bert(torch.ones(1, config.max_len + 1, dtype=torch.long))


def test_labels_become_classes_from_zero(g2p):
    train = syllables.load("stress", g2p)["train"]
    ids, targets = labelled_batch(train, [0, 1, 2], CharVocabulary(), 32)
    assert ids.shape[0] == 3 and targets.tolist() == [y - 1 for y in train.labels[:3]]


# ---------------------------------------------------------------------------------------------
# training on the course's loop
# ---------------------------------------------------------------------------------------------


def test_pretraining_runs_and_resumes_exactly(g2p, pretrained, tmp_path):
    saved = torch.load(f"{pretrained.run_dir}/checkpoint.pt", weights_only=False)
    assert saved["step"] == pretrained.max_steps
    half = dataclasses.replace(pretrained, run_dir=str(tmp_path / "half"), max_steps=pretrained.max_steps // 2)
    bert.pretrain(half, data=g2p, progress=False)
    bert.pretrain(dataclasses.replace(half, max_steps=pretrained.max_steps), resume=True, data=g2p, progress=False)
    resumed = torch.load(tmp_path / "half" / "checkpoint.pt", weights_only=False)
    for name, value in saved["model"].items():
        assert torch.equal(value, resumed["model"][name]), f"{name} differs after resuming: the masks were not the same"


def test_finetuning_starts_from_the_pretrained_encoder(g2p, pretrained, tmp_path):
    source = bert.load_pretrained(pretrained.run_dir)
    task = bert.FinetuneTask(tiny_finetune(tmp_path / "a", task="stress", labels=300, init=pretrained.run_dir), g2p)
    task.prepare()
    model = task.build_model()
    for name, value in source.bert.state_dict().items():
        assert torch.equal(value, model.bert.state_dict()[name]), f"{name} was not loaded"
    scratch = bert.FinetuneTask(tiny_finetune(tmp_path / "b", task="stress", labels=300), g2p)
    scratch.prepare()
    assert not torch.equal(scratch.build_model().bert.token_embedding.weight, source.bert.token_embedding.weight)


def test_finetuning_writes_test_accuracy_beside_the_baselines(g2p, pretrained, tmp_path):
    config = tiny_finetune(tmp_path / "run", task="syllables", labels=300, init=pretrained.run_dir)
    result = bert.finetune(config, data=g2p, progress=False)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    test = syllables.load("syllables", g2p)["test"]
    assert results["labels"] == 300 and results["words"] == len(test) and results["split"] == "test"
    assert results["accuracy"] == pytest.approx(syllables.accuracy(predict(result.model, test.words, CharVocabulary()), test))
    assert set(results["baselines"]) == {"always 2", "vowel groups"}


def test_bad_arguments_get_clear_errors(g2p, pretrained, tmp_path):
    with pytest.raises(ValueError, match="task must be one of"):
        tiny_finetune(tmp_path, task="rhyme")
    with pytest.raises(ValueError, match="labels must be 0"):
        tiny_finetune(tmp_path, labels=-5)
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        dataclasses.replace(bert.PRETRAIN_PRESETS["tiny"], batch_size=0)
    with pytest.raises(TrainingError, match="no checkpoint"):
        bert.finetune(tiny_finetune(tmp_path / "x", init=str(tmp_path / "missing")), data=g2p, progress=False)
    with pytest.raises(TrainingError, match="another shape"):
        bert.finetune(tiny_finetune(tmp_path / "y", init=pretrained.run_dir, d_model=64), data=g2p, progress=False)
    with pytest.raises(TrainingError, match="has"):
        bert.finetune(tiny_finetune(tmp_path / "z", labels=10**7), data=g2p, progress=False)
    with pytest.raises(TrainingError, match="do not fill one batch"):
        bert.finetune(tiny_finetune(tmp_path / "w", labels=3), data=g2p, progress=False)


def test_command_line(capsys, tmp_path):
    assert bert_command([]) == 2
    assert "no command given" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bert_command(["finetune", "--preset", "huge"])
    assert bert_command(["finetune", "--preset", "tiny", "--init", str(tmp_path / "none"), "--run-dir",
                         str(tmp_path / "r"), "--quiet"]) == 2
    assert "no checkpoint" in capsys.readouterr().err
    name = bert.run_name(tiny_finetune(tmp_path, task="stress", labels=1000, init="runs/p"), "cpu")
    assert name == "bert-stress-1000-pretrained-cpu"


def test_the_experiment_runs_and_reuses_only_its_own_runs(tmp_path, capsys):
    from benchmarks import bert_finetune

    out = tmp_path / "experiment"
    common = ["--preset", "tiny", "--labels", "200", "--tasks", "stress", "--out", str(out)]
    assert bert_finetune.main(common) == 0
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert [(r["task"], r["labels"]) for r in rows] == [("stress", 200)]
    assert rows[0]["gap"] == pytest.approx(rows[0]["pretrained"] - rows[0]["scratch"])
    assert "| stress | 200 |" in capsys.readouterr().out
    assert bert_finetune.main([*common, "--finetune-steps", "5"]) == 2, "a finished run of other settings was reused"
    assert "fine-tuned for 20 steps, not 5" in capsys.readouterr().err
