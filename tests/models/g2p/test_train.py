"""The training loop: one command, a complete run folder, an exact resume, clear errors. All on
the tiny preset, in seconds."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from course.files import leftovers
from course.layout import REPO
from reference.capstone import noam_rate
from tests.models.interrupted import stopped_run
from transformer import loop
from transformer.g2p import train as T
from transformer.g2p.data import Split, load
from transformer.g2p.encoding import make_batch


@pytest.fixture(scope="module")
def g2p():
    return load()


def tiny(run_dir: Path, **overrides) -> T.TrainConfig:
    return dataclasses.replace(T.PRESETS["tiny"], run_dir=str(run_dir), device="cpu", **overrides)


def _parameters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_a_tiny_run_learns_and_fills_its_folder(tmp_path, g2p):
    result = T.train(tiny(tmp_path / "run"), data=g2p, progress=False)
    folder = result.run_dir
    for name in ("config.json", "metrics.json", "curves.png", "attention.png", "checkpoint.pt"):
        assert (folder / name).is_file(), name
    assert not leftovers(folder), "a partial file was left behind"
    metrics = json.loads((folder / "metrics.json").read_text())
    losses = [r["loss"] for r in metrics["train"]]
    assert losses[-1] < losses[0], "the loss went down"
    assert all(r["tokens_per_s"] > 0 and r["tflops_per_s"] > 0 and r["lr"] > 0 for r in metrics["train"])
    assert [r["step"] for r in metrics["dev"]] == [15, 30]
    assert all(0 <= r["wer"] <= 100 and r["per"] >= 0 for r in metrics["dev"])
    assert json.loads((folder / "config.json").read_text())["d_model"] == 32
    assert result.step == 30


@pytest.mark.parametrize(("average_last", "fused_adam"), [(0, False), (3, False), (3, True)])
def test_resumed_equals_uninterrupted(tmp_path, g2p, average_last, fused_adam):
    # Dropout on, so that the random state must be carried across the interruption too; with
    # averaging, the snapshots taken before it too; with the fused kernel, its saved state.
    settings = {"dropout": 0.1, "average_last": average_last, "average_every": 4, "fused_adam": fused_adam}
    straight = T.train(tiny(tmp_path / "straight", **settings), data=g2p, progress=False)
    T.train(tiny(tmp_path / "halves", max_steps=17, **settings), data=g2p, progress=False)  # stops mid-epoch
    resumed = T.train(tiny(tmp_path / "halves", **settings), resume=True, data=g2p, progress=False)
    assert resumed.step == straight.step == 30
    a, b = _parameters(straight.model), _parameters(resumed.model)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), f"{name} differs after resuming"
    measured = ("wer", "per", "words")
    assert [resumed.metrics["dev"][-1][k] for k in measured] == [straight.metrics["dev"][-1][k] for k in measured]


def test_averaging_keeps_the_mean_of_the_last_snapshots(tmp_path, g2p):
    """The paper's checkpoint averaging: with snapshots every 15 steps and 2 of them averaged, a
    30-step run ends with the mean of its weights at steps 15 and 30."""
    at_15 = T.train(tiny(tmp_path / "fifteen", max_steps=15), data=g2p, progress=False).model
    run = T.train(tiny(tmp_path / "run", average_last=2, average_every=15), data=g2p, progress=False)
    checkpoint = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)
    final, averaged = checkpoint["model"], checkpoint["averaged"]
    assert len(checkpoint["snapshots"]) == 2
    changed = 0
    for name, value in _parameters(at_15).items():
        assert torch.allclose(averaged[name], (value + final[name]) / 2, atol=1e-6), name
        changed += not torch.equal(averaged[name], final[name])
    assert changed, "the averaged weights are not the final ones"
    for name, value in _parameters(run.model).items():  # what the run returns and measures is the average
        assert torch.equal(value, averaged[name]), name
    assert run.metrics["dev"][-1]["averaged"] == 2
    loaded, _, _ = T.load_trained(tmp_path / "run", device="cpu")
    for name, value in _parameters(loaded).items():
        assert torch.equal(value, averaged[name]), name


def test_averaging_counts_the_final_weights_as_one_snapshot():
    snapshots = [{"w": torch.tensor([float(i)]), "n": torch.tensor([i])} for i in range(4)]
    mean = loop.average_weights(snapshots[-3:])
    assert mean["w"].item() == 2.0 and mean["n"].item() == 3  # integer buffers come from the last one


def test_the_same_seed_gives_the_same_run(tmp_path, g2p):
    one = T.train(tiny(tmp_path / "one", max_steps=8, eval_every=8, eval_words=5), data=g2p, progress=False)
    two = T.train(tiny(tmp_path / "two", max_steps=8, eval_every=8, eval_words=5), data=g2p, progress=False)
    for name, value in _parameters(one.model).items():
        assert torch.equal(value, _parameters(two.model)[name])


def test_the_recipe_is_the_papers():
    config = T.PRESETS["cpu"]
    model_config = config.model_config(70)
    assert model_config.share_embeddings
    peak = noam_rate(config.warmup, config.d_model, config.warmup, config.lr_factor)
    assert peak == pytest.approx(config.peak_lr)
    assert config.label_smoothing == 0.1


def test_a_batch_is_what_the_encoding_makes(tmp_path, g2p):
    """The loop cuts its batches from the training split encoded once; they must be exactly the tensors and
    counts that encoding.make_batch makes row by row, for the loop's batches and for any set of examples."""
    task = T.G2PTask(tiny(tmp_path / "unused", train_words=0), g2p)
    task.prepare()
    generator = torch.Generator().manual_seed(0)
    chosen = [torch.randint(len(task.examples), (n,), generator=generator).tolist() for n in (1, 7, 300)]
    # words with more phonemes than letters ("x"), where the target is the longer side
    longer_targets = [i for i, (s, t) in enumerate(zip(task.examples.sources, task.examples.targets)) if len(t) > len(s)]
    assert longer_targets
    for indices in [*task.epoch_batches(0)[:5], *chosen, [len(task.examples) - 1, 0], longer_targets[:50]]:
        batch = task.make_batch(indices, torch.device("cpu"))
        expected = make_batch(task.examples, indices, task.vocabs)
        for got, want in zip((*batch.inputs, batch.targets), expected):
            assert got.dtype == want.dtype and torch.equal(got, want)
        pad = task.vocabs.target.pad_id
        assert batch.count == int((expected[2] != pad).sum())
        assert batch.tokens == batch.count + int((expected[0] != task.vocabs.source.pad_id).sum())


def test_bf16_autocast_runs(tmp_path, g2p):
    result = T.train(tiny(tmp_path / "bf16", precision="bf16", max_steps=4, eval_every=4, eval_words=5), data=g2p,
                     progress=False)
    assert all(torch.isfinite(p).all() for p in result.model.parameters())


def test_the_gpu_preset_runs_a_few_steps_on_the_cpu(tmp_path, g2p):
    """Its settings (bf16, averaging, buckets, the fused attention) work together; the model and the batch are
    cut down (bf16's backward pass is slow on a CPU: three steps of the preset's own model took 80 s), and it is
    not compiled (tests/models/g2p/test_compile.py compiles)."""
    config = dataclasses.replace(T.PRESETS["gpu"], device="cpu", run_dir=str(tmp_path / "gpu"), train_words=300,
                                 d_model=32, d_ff=64, N=1, max_tokens=2048, max_steps=3, eval_every=3, eval_words=10,
                                 checkpoint_every=3, average_every=1, time_limit=0.0, compile=False)
    result = T.train(config, data=g2p, progress=False)
    assert result.step == 3 and result.metrics["dev"][-1]["averaged"] == 3
    assert all(torch.isfinite(p).all() for p in result.model.parameters())


def test_clear_errors(tmp_path, g2p):
    with pytest.raises(loop.TrainingError, match="nothing to resume"):
        T.train(tiny(tmp_path / "none"), resume=True, data=g2p, progress=False)
    T.train(tiny(tmp_path / "run", max_steps=3, eval_every=3, eval_words=5), data=g2p, progress=False)
    with pytest.raises(loop.TrainingError, match="already holds a run"):
        T.train(tiny(tmp_path / "run", max_steps=3), data=g2p, progress=False)
    with pytest.raises(loop.TrainingError, match=r"another configuration \(d_model: 32 there, 64 here"):
        T.train(tiny(tmp_path / "run", d_model=64), resume=True, data=g2p, progress=False)
    empty = dataclasses.replace(g2p, train=Split("train", (), ()))
    with pytest.raises(loop.TrainingError, match="training split is empty"):
        T.train(tiny(tmp_path / "empty"), data=empty, progress=False)
    if not torch.cuda.is_available():
        with pytest.raises(loop.TrainingError, match="has no CUDA GPU"):
            loop.choose_device("cuda")
    with pytest.raises(loop.TrainingError, match="not a device"):
        loop.choose_device("abacus")
    with pytest.raises(ValueError, match="not divisible"):
        tiny(tmp_path, d_model=30, h=4)


def test_a_loss_that_is_no_longer_a_number_stops_the_run_and_keeps_the_last_checkpoint(tmp_path, g2p, monkeypatch):
    """Without the stop, a run whose weights turned NaN trained on for its whole budget and saved them."""
    loss, steps = T.G2PTask.loss, []

    def poisoned(task, output, batch):  # the loss is taken once a step
        steps.append(1)
        value = loss(task, output, batch)
        return value * float("nan") if len(steps) >= 5 else value

    monkeypatch.setattr(T.G2PTask, "loss", poisoned)
    run = tmp_path / "nan"
    with pytest.raises(loop.TrainingError, match=r"became nan at step 5.*checkpoint.pt keeps step 4"):
        T.train(tiny(run, max_steps=20, checkpoint_every=2, eval_every=20), data=g2p, progress=False)
    saved = torch.load(run / "checkpoint.pt", weights_only=False)
    assert saved["step"] == 4 and all(torch.isfinite(w).all() for w in saved["model"].values())
    steps.clear()
    with pytest.raises(loop.TrainingError, match="nothing was saved before it"):
        T.train(tiny(tmp_path / "early", max_steps=20, checkpoint_every=10, eval_every=20), data=g2p, progress=False)


def test_training_from_python_takes_its_thread_count_and_gives_the_callers_back(tmp_path, g2p, monkeypatch):
    """Only the command line set it before, so a run started from Python trained on torch's default count."""
    seen = set()
    monkeypatch.setattr(T.G2PTask, "make_batch", lambda task, indices, device, make=T.G2PTask.make_batch: (
        seen.add(torch.get_num_threads()), make(task, indices, device))[1])
    before = torch.get_num_threads()
    T.train(tiny(tmp_path / "threads", threads=before + 1, max_steps=2, eval_every=2, eval_words=5), data=g2p,
            progress=False)
    assert seen == {before + 1} and torch.get_num_threads() == before


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transformer.g2p", "train", *args], cwd=REPO, capture_output=True, text=True)


def test_command_line(tmp_path):
    unknown_preset = _cli("--preset", "huge")
    assert unknown_preset.returncode == 2 and "invalid choice: 'huge'" in unknown_preset.stderr
    unknown_option = _cli("--preset", "tiny", "--colour", "red")
    assert unknown_option.returncode == 2 and "unrecognized arguments: --colour red" in unknown_option.stderr
    bad_value = _cli("--preset", "tiny", "--d-model", "many")
    assert bad_value.returncode == 2 and "--d-model" in bad_value.stderr
    config, resume, _ = T.config_from_args(["--preset", "tiny", "--max-steps", "7", "--share-embeddings", "false",
                                            "--run-dir", str(tmp_path / "x")])
    assert (config.max_steps, config.share_embeddings, config.d_model, resume) == (7, False, 32, False)
    run = _cli("--preset", "tiny", "--max-steps", "4", "--eval-every", "4", "--eval-words", "5", "--quiet",
               "--run-dir", str(tmp_path / "cli"))
    assert run.returncode == 0, run.stderr
    assert "4 steps" in run.stdout and (tmp_path / "cli" / "checkpoint.pt").is_file()
    again = _cli("--resume", str(tmp_path / "cli"), "--d-model", "64", "--quiet")
    assert again.returncode == 2 and "another configuration" in again.stderr


def test_the_nn_transformer_baseline_has_the_same_size_and_trains(tmp_path, g2p):
    from transformer.g2p.baseline import TorchTransformer
    from transformer.model import Transformer, count_parameters

    config = T.PRESETS["cpu"].model_config(70)
    # nn.Transformer adds one LayerNorm (gamma and beta) after each of its two stacks.
    assert count_parameters(TorchTransformer(config)) == count_parameters(Transformer(config)) + 4 * config.d_model
    result = T.train(tiny(tmp_path / "torch", implementation="torch", max_steps=6, eval_every=6, eval_words=5),
                     data=g2p, progress=False)
    assert isinstance(result.model, TorchTransformer) and result.metrics["dev"]
    with pytest.raises(ValueError, match="implementation=torch"):
        tiny(tmp_path, implementation="torch", attention="fused")


def test_ctrl_c_saves_a_checkpoint_that_resumes_exactly(tmp_path, g2p):
    import signal

    run = tmp_path / "run"
    common = ["--preset", "tiny", "--device", "cpu", "--dropout", "0.1", "--eval-every", "100000",
              "--checkpoint-every", "100000", "--quiet"]
    returncode, err = stopped_run([sys.executable, "-m", "transformer.g2p", "train", *common, "--max-steps", "100000",
                                   "--run-dir", str(run)], run, signal.SIGINT, timeout=60)
    assert returncode == 130, err
    assert "--resume" in err
    stopped = torch.load(run / "checkpoint.pt", weights_only=False)["step"]
    assert 0 < stopped < 100000
    resumed = _cli("--resume", str(run), "--max-steps", str(stopped + 5), "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    straight = T.train(tiny(tmp_path / "straight", dropout=0.1, eval_every=100000, checkpoint_every=100000,
                            max_steps=stopped + 5), data=g2p, progress=False)
    saved = torch.load(run / "checkpoint.pt", weights_only=False)
    assert saved["step"] == straight.step
    for name, value in _parameters(straight.model).items():
        assert torch.equal(saved["model"][name], value), f"{name} differs after Ctrl-C and --resume"
