"""Two settings of the training loop that the presets rely on: the cool-down that ends a fixed budget (the
rate of equation 3 scaled to zero over the budget's last fraction, by steps or by seconds, whichever runs
out first), and ``precision=auto`` (bf16 only where the hardware computes it natively)."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from transformer import loop
from transformer.loop import LoopConfig


def test_no_cooldown_leaves_the_rate_alone():
    config = LoopConfig(max_steps=100)
    assert [config.cooldown_scale(step, 0.0) for step in (1, 50, 100)] == [1.0, 1.0, 1.0]


def test_the_rate_falls_linearly_over_the_last_steps():
    config = LoopConfig(max_steps=100, cooldown=0.4)
    assert config.cooldown_scale(60, 0.0) == 1.0
    assert config.cooldown_scale(80, 0.0) == pytest.approx(0.5)
    assert config.cooldown_scale(100, 0.0) == 0.0


def test_a_time_limit_that_runs_out_first_sets_the_pace():
    config = LoopConfig(max_steps=10_000, time_limit=600.0, cooldown=0.5)
    assert config.cooldown_scale(10, 150.0) == 1.0
    assert config.cooldown_scale(10, 450.0) == pytest.approx(0.5)  # 75 % of the seconds, 0.1 % of the steps
    assert config.cooldown_scale(10, 700.0) == 0.0  # never negative past the end


@pytest.mark.parametrize("bad", [-0.1, 1.5])
def test_a_cooldown_outside_the_budget_is_refused(bad):
    with pytest.raises(ValueError, match="cooldown"):
        dataclasses.replace(LoopConfig(), cooldown=bad)


def test_the_loop_trains_at_the_cooled_rate(tmp_path):
    from transformer.g2p import train as T

    config = dataclasses.replace(T.PRESETS["tiny"], run_dir=str(tmp_path / "run"), device="cpu", max_steps=30,
                                 cooldown=0.5, eval_every=15, eval_words=5)
    logged = {record["step"]: record["lr"] for record in T.train(config, progress=False).metrics["train"]}
    assert logged[15] == pytest.approx(loop.noam_rate(15, config.d_model, config.warmup, config.lr_factor))
    assert logged[30] == 0.0  # the budget's last step


@pytest.mark.parametrize("native", [True, False])
def test_auto_precision_takes_bf16_only_where_the_cpu_computes_it(monkeypatch, native):
    monkeypatch.setattr(loop, "native_bf16", lambda device: native)
    assert LoopConfig(precision="auto").bf16(torch.device("cpu")) is native
    assert LoopConfig(precision="bf16").bf16(torch.device("cpu")) is True  # asked for: taken, even emulated
    assert LoopConfig(precision="fp32").bf16(torch.device("cpu")) is False


def test_the_cpu_probe_answers_without_raising():
    assert isinstance(loop.native_bf16(torch.device("cpu")), bool)
    assert loop.native_bf16(torch.device("meta")) is False


def test_an_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="fp32, bf16 or auto"):
        LoopConfig(precision="fp16")
