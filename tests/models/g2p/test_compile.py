"""The GPU preset's ways of running, checked on the CPU: batches at a few fixed shapes (which
torch.compile and CUDA graphs reuse), compiled training, and checkpoints of a compiled run."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from torch._dynamo.utils import counters

from transformer import loop
from transformer.g2p import train as T
from transformer.g2p.data import load as load_cmudict
from transformer.g2p.encoding import Vocabularies, bucket_length
from transformer.gpt import train as G
from transformer.loop.run import compiled

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def g2p():
    return load_cmudict()


def tiny(run_dir: Path | str = "unused", **overrides) -> T.TrainConfig:
    return dataclasses.replace(T.PRESETS["tiny"], run_dir=str(run_dir), device="cpu", **overrides)


def prepared(g2p, **overrides) -> T.G2PTask:
    task = T.G2PTask(tiny(**overrides), g2p)
    task.prepare()
    return task


def loss_and_gradients(task: T.G2PTask, model: torch.nn.Module, batch: loop.Batch,
                       forward: torch.nn.Module | None = None):
    """The loss and the gradients of ``model``'s parameters, computed through ``forward`` (the model itself,
    or the model compiled)."""
    model.zero_grad(set_to_none=True)
    loss = task.loss((model if forward is None else forward)(*batch.inputs), batch)
    loss.backward()
    return loss.item(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("attention", ["course", "fused"])
def test_padding_to_buckets_changes_neither_loss_nor_gradients(g2p, attention):
    plain, bucketed = prepared(g2p, attention=attention), prepared(g2p, attention=attention, bucket=8)
    torch.manual_seed(0)
    model = plain.build_model().eval()  # no dropout: the two batches must give the same numbers
    padded_further = 0
    for indices in bucketed.epoch_batches(0)[:6]:
        a, b = plain.make_batch(indices, CPU), bucketed.make_batch(indices, CPU)
        rows, length = b.inputs[0].shape
        assert length % 8 == 0 and rows == bucketed.config.max_tokens // length
        padded_further += b.inputs[1].numel() > a.inputs[1].numel()  # longer, or rows of the empty example
        assert (b.count, b.tokens) == (a.count, a.tokens)  # the same real tokens
        loss_a, grads_a = loss_and_gradients(plain, model, a)
        loss_b, grads_b = loss_and_gradients(bucketed, model, b)
        assert loss_b == pytest.approx(loss_a, rel=1e-5)
        assert grads_a.keys() == grads_b.keys()
        for name in grads_a:
            torch.testing.assert_close(grads_b[name], grads_a[name], rtol=1e-4, atol=1e-6, msg=name)
    assert padded_further >= 3


def test_only_the_bucket_shapes_occur(g2p):
    task = prepared(g2p, bucket=8, train_words=3000, max_tokens=1024)
    shapes = set()
    for indices in task.epoch_batches(0):
        batch = task.make_batch(indices, CPU)
        src, tgt_in = batch.inputs
        assert src.shape == tgt_in.shape == batch.targets.shape
        shapes.add(tuple(src.shape))
    lengths = {bucket_length(n, 8) for n in task.examples.lengths}
    assert shapes == {(1024 // length, length) for length in lengths}
    assert len(shapes) <= 5
    unbucketed = prepared(g2p, train_words=3000, max_tokens=1024)
    plain = {tuple(unbucketed.make_batch(i, CPU).inputs[1].shape) for i in unbucketed.epoch_batches(0)}
    assert len(plain) > 3 * len(shapes)  # what each batch's own padding gives: a new shape every few batches


def test_the_training_split_is_encoded_once_and_kept_on_the_device(g2p):
    task = prepared(g2p, bucket=8)
    first = task.make_batch(task.epoch_batches(0)[0], CPU)
    resident = task.resident[str(CPU)]
    task.make_batch(task.epoch_batches(0)[1], CPU)
    assert task.resident[str(CPU)] is resident  # not encoded again
    assert resident[0].shape[0] == len(task.examples) + 1  # every example and the empty one
    assert first.inputs[0].device == CPU


def test_a_batch_too_large_for_its_bucket_is_a_clear_error(g2p):
    task = prepared(g2p, bucket=8, max_tokens=256)
    with pytest.raises(loop.TrainingError, match="does not fit max_tokens"):
        task.make_batch(list(range(200)), CPU)  # 200 rows of at least 8 tokens: more than 256
    with pytest.raises(loop.TrainingError, match="bucket=64"):
        prepared(g2p, bucket=64, max_tokens=32)
    with pytest.raises(ValueError, match="bucket"):
        tiny(bucket=-1)


def test_gpt_windows_have_one_shape():
    text = "def f(x):\n    return x + 1\n" * 400
    data = G.stdlib_text.StdlibText("3", "/", ("a.py",), ("b.py",), text, text[:500])
    task = G.GPTTask(dataclasses.replace(G.PRESETS["tiny"], device="cpu"), data)
    task.prepare()
    shapes = {tuple(task.make_batch(indices, CPU).inputs[0].shape) for indices in task.epoch_batches(0)}
    assert shapes == {(task.config.batch_size, task.config.block_size)}


def test_the_gpu_presets_model_compiles_without_graph_breaks():
    """A graph break splits the step into pieces that CUDA graphs capture separately, with Python between."""
    preset = T.PRESETS["gpu"]
    config = dataclasses.replace(preset, d_model=32, h=2, N=1, d_ff=64)
    model = T.build_model(config, Vocabularies.make(config.share_embeddings, config.stress))
    src, tgt = torch.randint(3, 40, (4, 16)), torch.randint(3, 40, (4, 16))
    explained = torch._dynamo.explain(model)(src, tgt)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert preset.compile and preset.bucket and preset.attention == "fused"


def test_compiling_bf16_on_the_cpu_through_the_chapters_attention_is_refused(tmp_path, g2p):
    """The compiler's CPU code gives that combination NaN gradients: a fault of torch, which
    benchmarks/compiler_fault.py measures again after a change of torch."""
    with pytest.raises(loop.TrainingError, match="NaN gradients.*--precision fp32, or --attention fused"):
        T.train(tiny(tmp_path / "refused", compile=True, precision="bf16"), data=g2p, progress=False)
    assert not (tmp_path / "refused").exists()  # refused before anything is written
    with pytest.raises(loop.TrainingError, match=r"--precision fp32, or train"):
        T.train(tiny(tmp_path / "mine", compile=True, precision="bf16", parts="mine"), data=g2p, progress=False)
    for allowed in ({"attention": "fused"}, {"precision": "fp32"}, {"compile_backend": "aot_eager"}):
        settings = {"compile": True, "precision": "bf16", **allowed}
        loop.refuse_compiled_bf16_course_attention(T.G2PTask(tiny(tmp_path, **settings)), CPU,
                                                settings["precision"] == "bf16")


def test_compile_settings_are_checked():
    with pytest.raises(ValueError, match="compile_mode"):
        tiny(compile_mode="fast")
    with pytest.raises(ValueError, match="compile_backend"):
        tiny(compile_backend="eager-ish")


def test_cuda_graphs_only_on_cuda_with_a_capturing_mode():
    graphs = tiny(compile=True, compile_mode="reduce-overhead")
    assert loop.uses_cuda_graphs(graphs, torch.device("cuda"))
    assert not loop.uses_cuda_graphs(graphs, CPU)
    assert not loop.uses_cuda_graphs(dataclasses.replace(graphs, compile_mode="default"), torch.device("cuda"))
    assert not loop.uses_cuda_graphs(dataclasses.replace(graphs, compile_backend="aot_eager"), torch.device("cuda"))
    assert not loop.uses_cuda_graphs(dataclasses.replace(graphs, compile=False), torch.device("cuda"))


def compiled_run(tmp_path: Path, g2p, backend: str, steps: int = 6) -> tuple[loop.RunResult, int]:
    counters.clear()
    config = tiny(tmp_path / backend, bucket=8, compile=True, compile_backend=backend, compile_mode="reduce-overhead",
                  attention="fused", max_steps=steps, eval_every=steps, checkpoint_every=steps, eval_words=5)
    result = T.train(config, data=g2p, progress=False)
    return result, counters["stats"]["unique_graphs"]


def test_a_compiled_run_trains_marks_its_steps_and_its_checkpoint_loads(tmp_path, g2p, monkeypatch):
    """With the backend that traces but generates no code, in seconds. The mark of a new step, which CUDA
    graphs need, is forced on here to run that path too (on the CPU it changes nothing)."""
    marks = []
    monkeypatch.setattr(loop.run, "uses_cuda_graphs", lambda config, device: True)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    result, graphs = compiled_run(tmp_path, g2p, "aot_eager")
    assert len(marks) == result.step == 6
    assert 1 <= graphs <= 2  # the first shape, then one graph for every other: no compilation per batch
    saved = torch.load(tmp_path / "aot_eager" / "checkpoint.pt", weights_only=False)
    assert not [k for k in saved["model"] if k.startswith("_orig_mod.")]  # torch.compile's wrapper's prefix
    model, _, _ = T.load_trained(tmp_path / "aot_eager", device="cpu")
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, result.model.state_dict()[name], msg=name)


@pytest.mark.slow
def test_the_real_compiler_computes_the_tiny_models_step(g2p):
    """Inductor, which generates C++ kernels and builds them with gcc: compiled as the loop compiles it, the
    tiny model's training step gives the loss and the gradients of the uncompiled model. Its time is gcc's,
    once per graph, so one batch shape; a compiled run through the loop (steps, the graph count, the
    checkpoint) is the aot_eager test's above, which traces the same graph without generating code."""
    config = tiny(bucket=8, compile=True, compile_backend="inductor", compile_mode="reduce-overhead", attention="fused")
    task = T.G2PTask(config, g2p)
    task.prepare()
    batch = task.make_batch(task.epoch_batches(0)[0], CPU)
    torch.manual_seed(0)
    model = task.build_model().train()  # as a step runs it; the tiny preset has no dropout
    counters.clear()
    eager_loss, eager = loss_and_gradients(task, model, batch)
    compiled_loss, grads = loss_and_gradients(task, model, batch, forward=compiled(model, config))
    assert counters["stats"]["unique_graphs"] == 1  # the whole step compiled, no graph break
    assert compiled_loss == pytest.approx(eager_loss, rel=1e-5)
    assert grads.keys() == eager.keys() and len(eager) == len(list(model.parameters()))
    for name in eager:
        torch.testing.assert_close(grads[name], eager[name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA GPU; this machine has none")
def test_cuda_graphs_capture_every_step(tmp_path, g2p):
    counters.clear()
    config = tiny(tmp_path / "graphs", device="cuda", bucket=8, compile=True, compile_mode="reduce-overhead",
                  attention="fused", precision="bf16", max_steps=20, eval_every=20, checkpoint_every=20, eval_words=5)
    result = T.train(config, data=g2p, progress=False)
    assert counters["inductor"]["cudagraph_skips"] == 0
    assert all(torch.isfinite(p).all() for p in result.model.parameters())
    T.load_trained(tmp_path / "graphs", device="cuda")
