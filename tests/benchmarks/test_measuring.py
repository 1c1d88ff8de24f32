"""The benchmarks' shared measuring helpers: which CPU, and settings timed in interleaved rounds."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from course.layout import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import capstone  # noqa: E402  (benchmarks/capstone.py)
import machine  # noqa: E402  (benchmarks/machine.py)


def test_the_cpu_is_named_with_its_logical_cpus():
    name, logical = machine.cpu()
    assert name.strip()
    if machine.CPUINFO.is_file():
        assert logical >= 1 and f"({logical} logical CPUs)" in machine.cpu_line()
    assert machine.cpu_line() in capstone.hardware()


class _Fake:
    """A stepper whose speed is given by a list, one value per call."""

    def __init__(self, name, speeds, calls):
        self.name, self.speeds, self.calls = name, iter(speeds), calls

    def run(self, first, steps):
        self.calls.append((self.name, first, steps))
        return next(self.speeds)


def test_settings_are_measured_round_by_round_on_the_same_batches_and_reported_by_their_median():
    calls = []
    steppers = {"a": _Fake("a", [0.0, 5.0, 1.0, 9.0], calls), "b": _Fake("b", [0.0, 2.0, 7.0, 3.0], calls)}
    medians = capstone.throughputs(steppers, steps=10, rounds=3)
    assert medians == {"a": 5.0, "b": 3.0}  # the warm-up call's value is not counted
    assert calls == [("a", 0, 2), ("b", 0, 2), ("a", 2, 10), ("b", 2, 10), ("a", 12, 10), ("b", 12, 10),
                     ("a", 22, 10), ("b", 22, 10)]


def test_another_measure_sees_the_same_rounds():
    seen = []
    steppers = {"a": _Fake("a", [0.0] * 4, []), "b": _Fake("b", [0.0] * 4, [])}
    capstone.throughputs(steppers, steps=4, rounds=2, measure=lambda s, first, steps: seen.append((s.name, first)) or first)
    assert seen == [("a", 2), ("b", 2), ("a", 6), ("b", 6)]


def test_a_stepper_trains_on_the_loops_own_batches_and_counts_their_real_tokens():
    """The benchmarks time the steps the training loop takes: its batching (the encoded split, cut per
    batch), its loss and the model its settings build, here the fused layer norm."""
    import dataclasses

    import torch

    from transformer.fused import norm_path
    from transformer.g2p import train as T
    from transformer.g2p.data import load

    config = dataclasses.replace(T.PRESETS["tiny"], device="cpu", norm="fused")
    stepper = capstone.Stepper(config, torch.device("cpu"), load())
    assert norm_path(stepper.model) == "fused"
    assert stepper.batches == stepper.task.epoch_batches(0)
    before = [p.detach().clone() for p in stepper.model.parameters()]
    assert stepper.run(0, 3) > 0
    assert any(not torch.equal(a, p) for a, p in zip(before, stepper.model.parameters()))
    real = sum(len(stepper.task.examples.sources[i]) + len(stepper.task.examples.targets[i])
               for batch in stepper.batches[:3] for i in batch)
    assert sum(stepper.task.make_batch(b, torch.device("cpu")).tokens for b in stepper.batches[:3]) == real


def test_every_timed_variant_is_a_valid_setting_of_each_preset():
    """Section 3 times each kernel path against both presets; a preset that already takes a fused path must not
    make a variant invalid (nn.Transformer refuses the course's fused paths) or leave a path switched on where
    the variant's name says it is off."""
    from transformer.g2p import train as T

    for preset in ("cpu", "gpu"):
        timed = capstone.variants(T.PRESETS[preset])
        assert len(timed) == len(capstone.VARIANTS)
        paths = {name: (c.attention, c.norm, c.fused_adam) for name, c in timed.items() if c.implementation == "course"}
        assert paths["course model, the chapters' code"] == ("course", "course", False)
        assert len(set(paths.values())) == len(paths), "two variants time the same thing"
    assert dataclasses.replace(T.PRESETS["cpu"], **capstone.NN_TRANSFORMER).implementation == "torch"


def test_a_sweep_attempt_scores_the_folder_it_trained_in(tmp_path, monkeypatch):
    """A run_dir among an attempt's settings is where it trains and what is scored (it once trained in the
    named folder and then scored another, which did not exist)."""
    import json
    import subprocess

    import capstone_sweep

    commands = []

    def fake_run(command, **kwargs):
        commands.append(command)
        if command[3] == "evaluate":  # what evaluate and the training would have written
            run_dir = Path(command[4])
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "evaluation-dev.json").write_text(json.dumps({"decodings": {"greedy": {"wer": 30.0, "per": 7.0}}}))
            (run_dir / "metrics.json").write_text(json.dumps({"train": [{"step": 5, "tokens_per_s": 1.0}]}))
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(capstone_sweep, "SWEEP", tmp_path)
    monkeypatch.setattr(capstone_sweep.subprocess, "run", fake_run)
    named = tmp_path / "member-0"
    record = capstone_sweep.attempt(f"seed=1,run_dir={named}", "tiny")
    train, evaluate = commands
    assert train[train.index("--run-dir") + 1] == str(named) and "--run-dir" not in train[train.index("--seed"):]
    assert evaluate[4] == str(named) and record["steps"] == 5
    capstone_sweep.attempt("seed=2", "tiny")
    assert commands[3][4] == str(tmp_path / "seed-2")
