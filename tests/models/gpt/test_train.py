"""The GPT trained on Python's standard library: its data, model, measure, training and sampling,
all on the tiny preset or smaller."""
from __future__ import annotations

import dataclasses
import json
import math
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from course.layout import REPO
from tests.models.interrupted import stopped_run
from transformer.gpt import stdlib_text
from transformer.gpt import train as G
from transformer.gpt.model import GPT, GPTConfig

sys.path.insert(0, str(REPO / "benchmarks"))
from text_baselines import KneserNey, compressor_bits  # noqa: E402


@pytest.fixture(scope="module")
def stdlib():
    return stdlib_text.load()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, stdlib):
    return G.train(tiny(tmp_path_factory.mktemp("gpt") / "run"), data=stdlib, progress=False)


def tiny(run_dir: Path, **overrides) -> G.GPTTrainConfig:
    return dataclasses.replace(G.PRESETS["tiny"], run_dir=str(run_dir), device="cpu", **overrides)


def _cli(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True)


# ---------------------------------------------------------------------------------------------
# the data
# ---------------------------------------------------------------------------------------------


def _fake_stdlib(root: Path) -> None:
    # m35.py is the one whose path hashes into the held-out split
    for name in ("json/decoder.py", "os.py", "m35.py", "test/test_os.py", "lib2to3/tests/data/x.py", "idlelib/idle_test/t.py",
                 "unittest/test/t.py", "site-packages/pkg/m.py", "email/__init__.py", "notes.txt"):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {name}\n", encoding="utf-8")


def test_tests_and_installed_packages_are_left_out(tmp_path):
    _fake_stdlib(tmp_path)
    assert stdlib_text.source_files(tmp_path) == ["email/__init__.py", "json/decoder.py", "m35.py", "os.py"]
    loaded = stdlib_text.load(tmp_path)
    assert loaded.heldout_files == ("m35.py",) and loaded.heldout == "# m35.py\n"
    assert loaded.train == "# email/__init__.py\n# json/decoder.py\n# os.py\n", "files joined in the order of their paths"


def test_the_split_is_a_fixed_rule_on_the_path():
    # The rule itself, computed here by hand: SHA-256 of the relative path, divisible by 20.
    import hashlib

    for relative in ("os.py", "json/decoder.py", "asyncio/tasks.py", "email/_parseaddr.py"):
        expected = int(hashlib.sha256(relative.encode()).hexdigest(), 16) % 20 == 0
        assert stdlib_text.is_held_out(relative) is expected


def test_the_real_split_is_disjoint_complete_and_stable(stdlib):
    train, heldout = set(stdlib.train_files), set(stdlib.heldout_files)
    assert not train & heldout
    assert train | heldout | set(stdlib.skipped) == set(stdlib_text.source_files(Path(stdlib.root)))
    assert all(stdlib_text.is_held_out(f) for f in heldout) and not any(stdlib_text.is_held_out(f) for f in train)
    assert 0.02 < len(heldout) / len(train | heldout) < 0.09, "about one file in 20 is held out"
    assert not any(part in stdlib_text.EXCLUDED_FOLDERS for f in train | heldout for part in f.split("/")[:-1])
    again = stdlib_text.load()
    assert (again.train, again.heldout) == (stdlib.train, stdlib.heldout)
    summary = stdlib.summary()
    assert summary["python"] == ".".join(map(str, sys.version_info[:3]))
    assert summary["train_characters"] == len(stdlib.train) > 20 * summary["heldout_characters"] / 2


def test_a_file_that_is_not_utf8_is_skipped_and_counted(tmp_path):
    _fake_stdlib(tmp_path)
    (tmp_path / "latin.py").write_bytes(b"# caf\xe9\n")
    loaded = stdlib_text.load(tmp_path)
    assert loaded.skipped == ("latin.py",) and "latin.py" not in loaded.train_files + loaded.heldout_files


def test_a_split_with_no_file_is_refused(tmp_path):
    (tmp_path / "only.py").write_text("x = 1\n")
    with pytest.raises(stdlib_text.StdlibError, match="both splits need at least one"):
        stdlib_text.load(tmp_path)
    with pytest.raises(stdlib_text.StdlibError, match="is not a folder"):
        stdlib_text.load(tmp_path / "missing")


# ---------------------------------------------------------------------------------------------
# the model and its measure
# ---------------------------------------------------------------------------------------------


def _model(attention: str = "course", **overrides) -> GPT:
    torch.manual_seed(0)
    settings = {"block_size": 16, "d_model": 16, "h": 2, "N": 2, "d_ff": 32, "attention": attention, **overrides}
    return GPT(GPTConfig(**settings)).eval()


def test_no_position_sees_the_future_and_the_output_is_tied_to_the_input():
    model = _model()
    ids = torch.randint(256, (2, 12))
    changed = ids.clone()
    changed[:, 7] = (changed[:, 7] + 1) % 256
    a, b = model(ids), model(changed)
    assert torch.equal(a[:, :7], b[:, :7]), "a position's output changed with a later byte"
    assert not torch.allclose(a[:, 7:], b[:, 7:])
    assert model.head.weight is model.embed.weight
    fused = _model("fused")
    torch.testing.assert_close(fused(ids), a, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="longer than max_len=16"):
        model(torch.zeros(1, 17, dtype=torch.long))


def test_bits_per_character_scores_every_byte_once():
    # A model that knows nothing gives every byte 1/256: 8 bits a byte, whatever the stride. The
    # text has two-byte characters, so bits per character is 8 x bytes / characters.
    model = _model()
    torch.nn.init.zeros_(model.embed.weight)
    text = "x = 'caf\u00e9'\n" * 5
    expected = 8 * len(text.encode()) / len(text)
    for stride in (1, 5, 8, 16):
        measured = G.bits_per_character(model, "import os\n" * 3, text, stride)
        assert measured["bpc"] == pytest.approx(expected), stride
        assert measured["bytes"] == len(text.encode()) and measured["characters"] == len(text)


def test_with_stride_one_each_byte_gets_a_full_block_of_context():
    model = _model()
    before, text = "def f(x):\n    return x\n", "class A:\n    pass\n"
    stream = list((before + text).encode())
    first, block = len(before.encode()), model.config.block_size
    nats = 0.0
    for p in range(first, len(stream)):
        logits = model(torch.tensor([stream[p - block : p]]))[0, -1]
        nats -= torch.log_softmax(logits, -1)[stream[p]].item()
    measured = G.bits_per_character(model, before, text, stride=1)
    assert measured["bpc"] == pytest.approx(nats / math.log(2) / len(text), rel=1e-5)


def test_the_measure_refuses_bad_arguments():
    with pytest.raises(ValueError, match="no held-out text"):
        G.bits_per_character(_model(), "abc", "", 4)
    with pytest.raises(ValueError, match="stride must be between 1 and block_size=16"):
        G.bits_per_character(_model(), "abc", "def", 17)


# ---------------------------------------------------------------------------------------------
# training
# ---------------------------------------------------------------------------------------------


def test_an_epoch_cuts_the_text_into_overlapping_windows(stdlib):
    task = G.GPTTask(tiny(""), data=stdlib)
    task.prepare()
    block, size = task.config.block_size, task.config.batch_size
    first, again, second = task.epoch_batches(0), task.epoch_batches(0), task.epoch_batches(1)
    assert first == again and first != second
    assert all(len(b) == size for b in first)
    starts = sorted(s for b in first for s in b)
    assert starts[0] < block and starts[-1] + block <= len(task.train_bytes)
    # Windows overlap by one byte, so that each byte is a target once; the windows of a last,
    # incomplete batch (fewer than batch_size, anywhere in the text) are left out.
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert all(g % (block - 1) == 0 for g in gaps) and min(gaps) == block - 1
    every = range(starts[0], len(task.train_bytes) - block + 1, block - 1)
    assert set(starts) <= set(every) and len(every) - len(starts) < size


def test_a_tiny_run_learns_and_fills_its_folder(tiny_run, stdlib):
    folder = tiny_run.run_dir
    for name in ("config.json", "metrics.json", "curves.png", "samples.txt", "checkpoint.pt"):
        assert (folder / name).is_file(), name
    metrics = json.loads((folder / "metrics.json").read_text())
    losses = [r["loss"] for r in metrics["train"]]
    assert losses[-1] < losses[0] - 0.5, f"the loss did not go down: {losses}"
    dev = metrics["dev"]
    assert [r["step"] for r in dev] == [15, 30, 30]
    assert dev[-1]["bpc"] < dev[0]["bpc"] < 8.5
    assert dev[-1]["characters"] == 4000 and dev[-1]["python"] == stdlib.python
    assert dev[-1]["train_files"] == len(stdlib.train_files) and dev[-1]["heldout_characters"] == len(stdlib.heldout)
    assert all(r["tokens_per_s"] > 0 and r["tflops_per_s"] > 0 for r in metrics["train"])
    assert "temperature 0.5" in (folder / "samples.txt").read_text()
    model, config = G.load_trained(folder, device="cpu")
    for name, value in tiny_run.model.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name
    assert config.block_size == 32


def test_an_exported_run_loads_and_cannot_be_resumed(tiny_run, tmp_path, stdlib):
    exported = _cli("transformer.gpt", "export", str(tiny_run.run_dir), str(tmp_path / "shipped"))
    assert exported.returncode == 0, exported.stderr
    saved = torch.load(tmp_path / "shipped" / "checkpoint.pt", weights_only=False)
    assert "optimizer" not in saved and "snapshots" not in saved and saved["data"]["python"]
    assert (tmp_path / "shipped" / "samples.txt").is_file() and (tmp_path / "shipped" / "metrics.json").is_file()
    model, _ = G.load_trained(tmp_path / "shipped", device="cpu")
    for name, value in tiny_run.model.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name
    with pytest.raises(G.TrainingError, match="already an exported model"):
        G.export(tmp_path / "shipped", tmp_path / "again")
    with pytest.raises(G.TrainingError, match="exported model, not a run"):
        G.train(dataclasses.replace(G.load_trained(tmp_path / "shipped", device="cpu")[1],
                                    run_dir=str(tmp_path / "shipped")), resume=True, data=stdlib, progress=False)
    usage = _cli("transformer.gpt", "export", str(tiny_run.run_dir))
    assert usage.returncode == 2 and "required: destination" in usage.stderr


def test_resumed_equals_uninterrupted(tmp_path, stdlib):
    settings = {"dropout": 0.1, "average_last": 2, "average_every": 4}  # the random state and snapshots carried over
    straight = G.train(tiny(tmp_path / "straight", **settings), data=stdlib, progress=False)
    G.train(tiny(tmp_path / "halves", max_steps=13, **settings), data=stdlib, progress=False)
    resumed = G.train(tiny(tmp_path / "halves", **settings), resume=True, data=stdlib, progress=False)
    assert resumed.step == straight.step == 30
    for name, value in straight.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[name], value), f"{name} differs after resuming"
    assert resumed.metrics["dev"][-1]["bpc"] == straight.metrics["dev"][-1]["bpc"]


def test_the_gpu_preset_runs_a_few_steps_on_the_cpu(tmp_path, stdlib):
    """Its settings (bf16 autocast, fused attention, dropout) work together; the model and the batch are cut down
    (bf16's backward pass is slow on a CPU)."""
    config = dataclasses.replace(G.PRESETS["gpu"], device="cpu", run_dir=str(tmp_path / "gpu"), batch_size=2,
                                 d_model=48, h=6, N=2, d_ff=96, max_steps=2, eval_every=2, eval_chars=300,
                                 final_eval_chars=300, checkpoint_every=2, sample_bytes=10)
    result = G.train(config, data=stdlib, progress=False)
    assert result.step == 2 and result.metrics["dev"][-1]["characters"] == 300
    assert all(torch.isfinite(p).all() for p in result.model.parameters())


def test_bad_settings_are_refused(tmp_path, stdlib):
    with pytest.raises(ValueError, match="eval_stride=40 is more than block_size=32"):
        tiny(tmp_path, eval_stride=40)
    with pytest.raises(ValueError, match="train_chars must be 0 or more"):
        tiny(tmp_path, train_chars=-1)
    with pytest.raises(ValueError, match="not divisible"):
        tiny(tmp_path, d_model=30, h=4)
    with pytest.raises(G.TrainingError, match="too few for one batch"):
        G.train(tiny(tmp_path / "small", train_chars=100), data=stdlib, progress=False)
    with pytest.raises(G.TrainingError, match="not a checkpoint of this training loop"):
        G.load_trained(REPO / "checkpoints" / "g2p-cpu", device="cpu")


def test_command_line_errors():
    unknown = _cli("transformer.gpt", "train", "--preset", "huge")
    assert unknown.returncode == 2 and "invalid choice: 'huge'" in unknown.stderr
    bad = _cli("transformer.gpt", "train", "--preset", "tiny", "--block-size", "long")
    assert bad.returncode == 2 and "--block-size" in bad.stderr
    config, resume, _ = G.config_from_args(["--preset", "tiny", "--max-steps", "7", "--attention", "fused"])
    assert (config.max_steps, config.attention, config.d_model, resume) == (7, "fused", 32, False)
    assert config.run_dir.endswith("runs/gpt-tiny")


def test_sampling_from_the_command_line(tiny_run):
    run = str(tiny_run.run_dir)
    one = _cli("transformer.gpt", "sample", run, "--prompt", "import ", "--length", "40", "--seed", "1", "--device", "cpu")
    assert one.returncode == 0, one.stderr
    assert one.stdout.startswith("import ") and len(one.stdout.encode()) >= len("import ") + 10
    again = _cli("transformer.gpt", "sample", run, "--prompt", "import ", "--length", "40", "--seed", "1", "--device", "cpu")
    assert again.stdout == one.stdout, "the same seed gives the same text"
    greedy = G.generate(tiny_run.model, "def ", 30, temperature=0)
    assert greedy == G.generate(tiny_run.model, "def ", 30, temperature=0, seed=5)
    bad = _cli("transformer.gpt", "sample", run, "--temperature", "-1", "--device", "cpu")
    assert bad.returncode == 2 and "temperature must be at least 0" in bad.stderr
    missing = _cli("transformer.gpt", "sample", str(tiny_run.run_dir / "nowhere"), "--device", "cpu")
    assert missing.returncode == 2 and "no checkpoint" in missing.stderr


def test_sigterm_saves_a_checkpoint_that_resumes(tmp_path):
    run = tmp_path / "run"
    returncode, err = stopped_run(
        [sys.executable, "-m", "transformer.gpt", "train", "--preset", "tiny", "--device", "cpu", "--max-steps", "100000",
         "--eval-every", "100000", "--checkpoint-every", "100000", "--quiet", "--run-dir", str(run)],
        run, signal.SIGTERM, timeout=120,
    )
    assert returncode == 130, err
    stopped = torch.load(run / "checkpoint.pt", weights_only=False)["step"]
    assert 0 < stopped < 100000
    resumed = _cli("transformer.gpt", "train", "--resume", str(run), "--max-steps", str(stopped + 2), "--final-eval-chars",
                   "500", "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    assert torch.load(run / "checkpoint.pt", weights_only=False)["step"] == stopped + 2


# ---------------------------------------------------------------------------------------------
# the baselines
# ---------------------------------------------------------------------------------------------


def test_kneser_ney_is_a_distribution():
    text = "def f(x):\n    return x + 1\n" * 20 + "class A:\n    pass\n"
    model = KneserNey(text, order=4)
    alphabet = sorted(set(text))
    for context in ("    re", "zzz", "", "s A"):
        total = sum(model.probability(context, c) for c in alphabet) + model.probability(context, "\u2603")
        assert total == pytest.approx(1.0), context
    assert model.bits(text, "def f(x):\n") < model.bits(text, "QWERTY!?\n")
    with pytest.raises(ValueError, match="order must be at least 1"):
        KneserNey(text, 0)


def test_a_primed_compressor_pays_little_for_text_it_has_seen():
    import random

    rng = random.Random(0)
    train = "".join(rng.choice("abcdefgh \n") for _ in range(20_000))
    fresh = "".join(rng.choice("abcdefgh \n") for _ in range(2_000))
    for name in ("zlib", "bz2", "xz"):
        seen, unseen = compressor_bits(name, train, train[-2_000:]), compressor_bits(name, train, fresh)
        assert seen < unseen and unseen > 3.0, name  # ten letters drawn at random: log2(10) = 3.3 bits each
    # The two that copy from a dictionary of what came before find the whole repeat there.
    assert compressor_bits("zlib", train, train[-2_000:]) < 1.0 and compressor_bits("xz", train, train[-2_000:]) < 1.0
