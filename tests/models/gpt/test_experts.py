"""Chapter 10's GPT: chapter 7's with a mixture of experts in every block, its balancing loss in training, the
parameters a token uses, the use of each expert, and the learner's parts in it; on the moe-tiny preset or smaller."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from reference.one_block import MoEFeedForward, load_balancing_loss, top_k_router
from transformer.gpt import expert_use, stdlib_text
from transformer.gpt import train as G
from transformer.gpt.expert_use import entropy_bits
from transformer.gpt.expert_use import expert_use as use_of_experts
from transformer.gpt.experts import MoEGPT, calling, parameters
from transformer.gpt.model import GPT, GPTConfig, forward_flops
from transformer.gpt.variants import build_gpt

SMALL = dict(vocab_size=50, d_model=16, h=4, N=2, block_size=12)


def _moe(**changes) -> MoEGPT:
    torch.manual_seed(0)
    model = build_gpt(GPTConfig(**{**SMALL, "d_ff": 8, "n_experts": 4, "top_k": 2, **changes}))
    assert isinstance(model, MoEGPT)
    return model


@pytest.fixture(scope="module")
def stdlib():
    return stdlib_text.load()


def test_a_token_uses_as_many_parameters_as_the_dense_model_give_or_take_the_router():
    moe, dense = _moe(), build_gpt(GPTConfig(**SMALL, d_ff=16))
    assert type(dense) is GPT and parameters(dense)["active"] == parameters(dense)["total"]
    d, E, k, N = 16, 4, 2, 2
    # k experts of d_ff / k hold the dense network's weights; each layer adds the router (d E) and k - 1 output biases
    assert parameters(moe)["active"] - parameters(dense)["active"] == N * (d * E + (k - 1) * d)
    expert = 2 * d * 8 + 8 + d
    assert parameters(moe)["total"] - parameters(moe)["active"] == N * (E - k) * expert
    moe_flops, dense_flops = (forward_flops(m.config, 1, 12) for m in (moe, dense))
    assert moe_flops - dense_flops == 2 * 12 * N * d * E  # the router's product, nothing else


def test_the_model_returns_the_sum_of_its_layers_balancing_losses_and_the_task_weighs_it():
    model = _moe()
    ids = torch.randint(0, 50, (3, 12))
    logits, balance = model(ids, True)
    assert torch.equal(logits, model(ids))
    layers = model.expert_layers()
    assert len(layers) == 2 and all(isinstance(layer.moe, MoEFeedForward) for layer in layers)
    assert balance.item() == pytest.approx(sum(layer.balance.item() for layer in layers))
    assert all(1.0 <= layer.balance.item() <= 4.0 for layer in layers)  # between even routing and one expert
    task = G.GPTTask(dataclasses.replace(G.PRESETS["moe-tiny"], balance_weight=0.5))
    plain = G.GPTTask(dataclasses.replace(G.PRESETS["moe-tiny"], balance_weight=0.0))
    batch = G.Batch(inputs=(ids, True), targets=ids % 50, count=33, tokens=36)
    added = task.loss((logits, balance), batch) - plain.loss((logits, balance), batch)
    assert added.item() == pytest.approx(0.5 * balance.item())
    with pytest.raises(ValueError, match="top_k must be between 1 and n_experts=4"):
        GPTConfig(**SMALL, n_experts=4, top_k=5)
    with pytest.raises(ValueError, match="keep positions=learned"):
        GPTConfig(**SMALL, n_experts=4, positions="rope")


def test_the_parts_given_are_the_ones_the_experts_route_with():
    calls = []

    def counted_router(logits, k):
        calls.append("router")
        return top_k_router(logits, k)

    def counted_balance(router_probs, expert_index, n_experts):
        calls.append("balance")
        return load_balancing_loss(router_probs, expert_index, n_experts)

    model = build_gpt(GPTConfig(**SMALL, d_ff=8, n_experts=4), {"top_k_router": counted_router,
                                                                "load_balancing_loss": counted_balance})
    model(torch.randint(0, 50, (1, 5)))
    assert calls.count("router") == calls.count("balance") == SMALL["N"]
    assert calling(MoEFeedForward, {"top_k_router": top_k_router}) is MoEFeedForward  # nothing to change


def test_the_use_of_the_experts_counts_every_byte_once():
    model = _moe(vocab_size=256)
    text = "def f(x):\n    return x\n" * 3  # 69 bytes: five windows of 12, then 9
    use = use_of_experts(model, text)
    assert len(use) == 2 and all(len(shares) == 4 and sum(shares) == pytest.approx(1.0) for shares in use)
    choices = [share * 2 * len(text) for share in use[0]]  # two per byte
    assert all(abs(c - round(c)) < 1e-4 for c in choices) and round(sum(choices)) == 138
    assert all(layer.counts is None for layer in model.expert_layers())  # counting stops with the measure
    assert entropy_bits([0.25] * 4) == pytest.approx(2.0) and entropy_bits([1.0, 0.0, 0.0, 0.0]) == 0.0


@pytest.fixture(scope="module")
def moe_run(tmp_path_factory, stdlib):
    run = tmp_path_factory.mktemp("moe") / "run"
    config = dataclasses.replace(G.PRESETS["moe-tiny"], run_dir=str(run), device="cpu", max_steps=4, eval_every=4,
                                 eval_chars=500, final_eval_chars=500, sample_bytes=20)
    return G.train(config, data=stdlib, progress=False)


def test_the_moe_preset_trains_with_the_balancing_loss_and_loads_again(moe_run, stdlib):
    assert isinstance(moe_run.model, MoEGPT) and moe_run.step == 4
    model, saved = G.load_trained(moe_run.run_dir, device="cpu")
    assert isinstance(model, MoEGPT) and saved.n_experts == 4 and saved.balance_weight == 0.01
    found = expert_use.measure(model, saved, stdlib.train, stdlib.heldout[:500])
    assert found["bpc"] == pytest.approx(moe_run.metrics["dev"][-1]["bpc"], abs=1e-4)
    assert len(found["use"]) == 1 and 0.25 <= found["max_share"] <= 1.0
    assert G.PRESETS["moe-no-balance-cpu"] == dataclasses.replace(G.PRESETS["moe-cpu"], balance_weight=0.0)
    assert G.PRESETS["moe-cpu"].d_ff * G.PRESETS["moe-cpu"].top_k == G.PRESETS["dense-cpu"].d_ff


def test_the_experts_command_writes_its_figures(moe_run, stdlib, monkeypatch):
    from transformer.gpt.__main__ import main

    monkeypatch.setattr(stdlib_text, "load", lambda: stdlib)
    assert main(["experts", str(moe_run.run_dir), "--chars", "500"]) == 0
    found = json.loads((moe_run.run_dir / expert_use.FILE).read_text())
    assert found["characters"] == 500 and found["check"]["characters"] == expert_use.CHECK_CHARS
    assert found["n_experts"] == 4 and found["parameters"]["active"] < found["parameters"]["total"]
    assert len(found["use"]) == len(found["entropy_bits"]) == 1
