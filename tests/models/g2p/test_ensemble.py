"""Several models as one: an ensemble decodes with the mean of its members' probabilities, and
``members=2`` trains two at once, one process each, into one run folder that evaluation, export,
pronunciation and --resume read like a single model's. Tiny preset, seconds."""
from __future__ import annotations

import dataclasses
import json
import signal
import sys

import pytest
import torch

from tests.models.interrupted import stopped_run
from transformer import checkpoint, loop
from transformer.g2p import train as T
from transformer.g2p.encoding import Vocabularies, predict
from transformer.g2p.ensemble import Ensemble
from transformer.g2p.evaluate import beam_predict, evaluate_run
from transformer.g2p.export import export
from transformer.g2p.pronounce import pronounce


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
        ensemble = Ensemble([a, b])
        got = ensemble.decode(ensemble.encode(src), ys)
    torch.testing.assert_close(got.exp(), mean)
    assert not torch.allclose(mean, a(src, ys).softmax(-1))  # the members differ: the mean is not one of them


def test_an_ensemble_of_one_decodes_as_its_model_and_an_empty_one_is_refused():
    (model,), vocabs = _models(1)
    words = ["cat", "zebra", "onomatopoeia"]
    assert predict(Ensemble([model]), words, vocabs) == predict(model, words, vocabs)
    with pytest.raises(ValueError, match="at least one"):
        Ensemble([])


def test_the_batched_beam_search_decodes_an_ensemble():
    """The beam search repeats each member's memory for its hypotheses (it once took only one model's named
    tuple and failed on an ensemble's list): a model ensembled with itself decodes as the model alone, and
    two members decode as neither of them."""
    (a, b), vocabs = _models(2)
    words = ["cat", "zebra", "onomatopoeia", "a"]
    alone = beam_predict(a, words, vocabs, beam_size=3, alpha=0.6)
    assert beam_predict(Ensemble([a, a]), words, vocabs, beam_size=3, alpha=0.6) == alone
    both = beam_predict(Ensemble([a, b]), words, vocabs, beam_size=3, alpha=0.6)
    assert len(both) == len(words) and both != alone


def _tiny(run_dir, **overrides):
    settings = {"members": 2, "max_steps": 8, "eval_every": 4, "eval_words": 5, "checkpoint_every": 4, **overrides}
    return dataclasses.replace(T.PRESETS["tiny"], run_dir=str(run_dir), device="cpu", **settings)


def _weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_two_members_train_at_once_as_the_runs_of_their_seeds(tmp_path):
    """Each member is the run its own seed makes alone, and the run folder holds them as one model that
    load_trained, evaluate, pronounce and export read; a member that fails is named."""
    config = _tiny(tmp_path / "run", seed=3)
    result = T.train(config, progress=False)
    assert isinstance(result.model, Ensemble) and len(result.model.members) == 2
    for i, seed in enumerate((3, 4)):
        alone = T.train(dataclasses.replace(config, members=1, seed=seed, run_dir=str(tmp_path / f"alone-{seed}")),
                        progress=False)
        for name, value in _weights(alone.model).items():
            assert torch.equal(result.model.members[i].state_dict()[name], value), f"member {i}: {name}"
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert len(metrics["members"]) == 2 and metrics["dev"][-1]["member_steps"] == [8, 8]
    for name in ("config.json", "curves.png", "attention.png", "checkpoint.pt"):
        assert (tmp_path / "run" / name).is_file(), name
    model, loaded, vocabs = T.load_trained(tmp_path / "run", device="cpu")
    assert isinstance(model, Ensemble) and loaded == config
    for name, value in _weights(result.model).items():
        assert torch.equal(model.state_dict()[name], value), name
    words = ["cat", "zebra"]
    assert pronounce(words, tmp_path / "run") == predict(result.model, words, vocabs)
    scored = evaluate_run(tmp_path / "run", "dev", beam=2, limit=20, device="cpu", worst=0, progress=False)
    assert scored["words"] == 20 and set(scored["decodings"]) == {"greedy", "beam 2, alpha 0.6"}
    shipped = export(tmp_path / "run", tmp_path / "shipped")
    assert not (tmp_path / "shipped" / "member-0").exists()
    assert not checkpoint.resumable(checkpoint.load(shipped))
    assert pronounce(words, tmp_path / "shipped") == pronounce(words, tmp_path / "run")
    with pytest.raises(loop.TrainingError, match="already an exported model"):
        export(tmp_path / "shipped", tmp_path / "again")
    with pytest.raises(loop.TrainingError, match="exported model, not a run"):
        T.train(dataclasses.replace(config, run_dir=str(tmp_path / "shipped")), resume=True, progress=False)
    with pytest.raises(loop.TrainingError, match="already holds a run"):
        T.train(config, progress=False)
    # a member that fails is named, with where its output went; the other goes on
    (tmp_path / "run" / "member-1" / "checkpoint.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(loop.TrainingError, match=r"member-1 stopped with exit code 2 \(its output: .*train.log\)"):
        T.train(dataclasses.replace(config, max_steps=10), resume=True, progress=False)
    assert "is not a checkpoint" in (tmp_path / "run" / "member-1" / "train.log").read_text()
    assert torch.load(tmp_path / "run" / "member-0" / "checkpoint.pt", weights_only=False)["step"] == 10


def test_ctrl_c_stops_every_member_saved_and_resume_finishes_them(tmp_path):
    """The parent passes one stop request on to each member (a second would stop it unsaved): both save,
    and --resume continues both to the end."""
    run = tmp_path / "run"
    command = [sys.executable, "-m", "transformer.g2p", "train", "--preset", "tiny", "--device", "cpu", "--members", "2",
               "--max-steps", "100000", "--eval-every", "100000", "--checkpoint-every", "100000", "--quiet",
               "--run-dir", str(run)]
    returncode, err = stopped_run(command, [run / "member-0", run / "member-1"], signal.SIGINT, timeout=90)
    assert returncode == 130, err
    assert f"--resume {run}" in err
    stopped = [torch.load(run / f"member-{i}" / "checkpoint.pt", weights_only=False)["step"] for i in (0, 1)]
    assert all(0 < step < 100000 for step in stopped), stopped
    with pytest.raises(loop.TrainingError, match="has not finished"):
        T.load_trained(run, device="cpu")  # nothing holds the models as one yet: the message says where they are
    # resumed here rather than by a second command: each process started costs seconds on a busy machine
    config, resume, _ = T.config_from_args(["--resume", str(run), "--max-steps", str(max(stopped) + 3)])
    resumed = T.train(config, resume=resume, progress=False)
    assert resumed.metrics["dev"][-1]["member_steps"] == [max(stopped) + 3] * 2
    assert isinstance(T.load_trained(run, device="cpu")[0], Ensemble)


def test_members_are_refused_under_torchrun_and_below_one(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="members must be at least 1"):
        _tiny(tmp_path, members=0)
    with pytest.raises(loop.TrainingError, match="a task trains one model"):
        T.G2PTask(_tiny(tmp_path))  # the loop trains one model: the members are trained by train(), one each
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(loop.TrainingError, match="use members=1 under torchrun"):
        T.train(_tiny(tmp_path / "ddp"), progress=False)
