"""Four settings of the training loop that the presets rely on: the cool-down that ends a fixed budget (the
rate of equation 3 scaled to zero over the budget's last fraction, by steps or by seconds, whichever runs
out first), ``precision=auto`` (bf16 only where the hardware computes it natively), weight decay
(AdamW's, decoupled from the gradient), and Adam's fused kernel (the same update in fewer operations)."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from reference.capstone import noam_rate
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
    assert logged[15] == pytest.approx(noam_rate(15, config.d_model, config.warmup, config.lr_factor))
    assert logged[30] == 0.0  # the budget's last step


@pytest.mark.parametrize("native", [True, False])
def test_auto_precision_takes_bf16_only_where_the_cpu_computes_it(monkeypatch, native):
    monkeypatch.setattr(loop.config, "native_bf16", lambda device: native)
    assert LoopConfig(precision="auto").bf16(torch.device("cpu")) is native
    assert LoopConfig(precision="bf16").bf16(torch.device("cpu")) is True  # asked for: taken, even emulated
    assert LoopConfig(precision="fp32").bf16(torch.device("cpu")) is False


def test_the_cpu_probe_answers_without_raising():
    assert isinstance(loop.native_bf16(torch.device("cpu")), bool)
    assert loop.native_bf16(torch.device("meta")) is False


def test_an_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="fp32, bf16 or auto"):
        LoopConfig(precision="fp16")


def _one_step(weight_decay, gradient, fused=False):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = loop.make_optimizer(model, weight_decay, fused=fused)
    for group in optimizer.param_groups:
        group["lr"] = 0.5
    for p in model.parameters():
        p.grad = torch.full_like(p, gradient)
    optimizer.step()
    return before, [p.detach() for p in model.parameters()]


@pytest.mark.parametrize("fused", [False, True])
def test_weight_decay_shrinks_every_weight_apart_from_the_gradient(fused):
    before, decayed = _one_step(0.1, gradient=0.0, fused=fused)
    for old, new in zip(before, decayed):
        torch.testing.assert_close(new, old * (1 - 0.5 * 0.1))  # no gradient: only the decay moves a weight
    _, still = _one_step(0.0, gradient=0.0, fused=fused)
    for old, new in zip(before, still):
        torch.testing.assert_close(new, old)  # the paper's Adam: nothing moves without a gradient
    # With a gradient, the decay adds to Adam's step instead of passing through its normalisation, as an
    # L2 penalty in the loss would: decayed minus plain is -lr * decay * weight.
    _, plain = _one_step(0.0, gradient=0.3, fused=fused)
    _, both = _one_step(0.1, gradient=0.3, fused=fused)
    for old, p, b in zip(before, plain, both):
        torch.testing.assert_close(b - p, -0.5 * 0.1 * old)


def test_a_negative_weight_decay_is_refused():
    with pytest.raises(ValueError, match="weight_decay"):
        dataclasses.replace(LoopConfig(), weight_decay=-0.01)


def test_the_loop_steps_with_the_configured_decay(tmp_path):
    from transformer.g2p import train as T

    config = dataclasses.replace(T.PRESETS["tiny"], run_dir=str(tmp_path / "run"), device="cpu", max_steps=4,
                                 eval_every=4, eval_words=5, checkpoint_every=4, weight_decay=0.1)
    T.train(config, progress=False)
    saved = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)
    assert {group["weight_decay"] for group in saved["optimizer"]["param_groups"]} == {0.1}
    assert T.PRESETS["cpu"].weight_decay > 0 and T.PRESETS["tiny"].weight_decay == 0  # the preset measured with it


def _trajectory(weight_decay, fused, steps=20):
    """The weights of a small model after ``steps`` updates with the same gradients, rates and decay."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3))
    optimizer = loop.make_optimizer(model, weight_decay, fused=fused)
    draws = torch.Generator().manual_seed(1)
    for step in range(1, steps + 1):
        for group in optimizer.param_groups:
            group["lr"] = 1e-2 / step ** 0.5  # the rate changes at every step, as the loop's schedule does
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=draws) * 10 ** torch.randint(-3, 2, (), generator=draws)
        optimizer.step()
    return optimizer, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("weight_decay", [0.0, 0.05])
def test_the_fused_kernel_makes_the_same_updates(weight_decay):
    optimizer, fused = _trajectory(weight_decay, fused=True)
    assert all(group["fused"] for group in optimizer.param_groups)  # the kernel was asked for, not ignored
    _, plain = _trajectory(weight_decay, fused=False)
    moved = max((f - p).abs().max().item() for f, p in zip(fused, plain))
    for f, p in zip(fused, plain):
        torch.testing.assert_close(f, p, rtol=1e-5, atol=1e-6)  # up to rounding
    assert moved < 1e-5
    # the comparison can tell two different updates apart: without the decay the weights end elsewhere
    _, other = _trajectory(0.05 if not weight_decay else 0.0, fused=True)
    assert max((f - o).abs().max().item() for f, o in zip(fused, other)) > 1e-4


def test_the_loop_asks_for_the_fused_kernel_when_configured(tmp_path):
    from transformer.g2p import train as T

    for fused in (False, True):
        run = tmp_path / f"fused-{fused}"
        config = dataclasses.replace(T.PRESETS["tiny"], run_dir=str(run), device="cpu", max_steps=2, eval_every=2,
                                     eval_words=5, checkpoint_every=2, fused_adam=fused)
        T.train(config, progress=False)
        saved = torch.load(run / "checkpoint.pt", weights_only=False)
        assert {bool(group["fused"]) for group in saved["optimizer"]["param_groups"]} == {fused}
    assert T.PRESETS["cpu"].fused_adam and T.PRESETS["cpu"].norm == "fused"  # the preset measured faster with both
