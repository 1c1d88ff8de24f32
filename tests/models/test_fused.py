"""The fused paths compute what the chapters' code computes, gradients included: PyTorch's attention
kernel for the course's attention, and F.layer_norm for chapter 4's LayerNorm."""
from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from transformer import Transformer, TransformerConfig
from transformer.fused import (
    FusedLayerNorm,
    FusedMultiHeadAttention,
    LayerNorm,
    attention_path,
    norm_path,
    use_attention,
    use_norm,
)
from transformer.g2p import train as T

CONFIG = TransformerConfig(src_vocab_size=30, tgt_vocab_size=30, d_model=32, h=4, N=2, d_ff=64, dropout=0.0, max_len=64)


def _batch():
    g = torch.Generator().manual_seed(0)
    src = torch.randint(3, 30, (3, 7), generator=g)
    src[1, 5:] = 0  # padding, so that the masks matter
    src[2, 3:] = 0
    tgt = torch.randint(3, 30, (3, 6), generator=g)
    tgt[:, 0] = 1
    tgt[2, 4:] = 0
    return src, tgt


#: each path: how to switch a model, how to ask which path it is on, its fused class, and how many of
#: them the model has (attention: self-attention in each layer, cross-attention in each decoder layer;
#: layer norms, post-norm: two in each encoder layer, three in each decoder layer, none after the stacks)
PATHS = {"attention": (use_attention, attention_path, FusedMultiHeadAttention, 3 * CONFIG.N),
         "norm": (use_norm, norm_path, FusedLayerNorm, 5 * CONFIG.N)}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_same_outputs_and_gradients(path, dtype, tol):
    use, which, fused_class, count = PATHS[path]
    torch.manual_seed(0)
    course = Transformer(CONFIG).to(dtype)
    fused = use(copy.deepcopy(course), "fused")
    assert which(course) == "course" and which(fused) == "fused"
    assert sum(isinstance(m, fused_class) for m in fused.modules()) == count
    src, tgt = _batch()
    outputs = []
    for model in (course, fused):
        logits = model(src, tgt)  # (B, T, V)
        real = tgt != 0
        (logits[real] ** 2).mean().backward()
        outputs.append((logits[real].detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (a, grads_a), (b, grads_b) = outputs
    torch.testing.assert_close(b, a, atol=tol, rtol=tol)
    for name in grads_a:
        torch.testing.assert_close(grads_b[name], grads_a[name], atol=tol, rtol=tol, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_one_layer_norm_with_its_own_eps_scale_and_shift(dtype, tol):
    """Away from the initial ones and zeros and from unit inputs, so that gamma, beta and eps all count."""
    torch.manual_seed(0)
    course = LayerNorm(16, eps=1e-3).to(dtype)
    with torch.no_grad():
        course.gamma.uniform_(0.5, 2.0)
        course.beta.normal_()
    fused = use_norm(copy.deepcopy(course), "fused")
    assert type(fused) is FusedLayerNorm
    x = (torch.randn(3, 5, 16, dtype=dtype) * 4 + 3).requires_grad_()
    results = []
    for layer in (course, fused):
        out = layer(x)
        grad_x, = torch.autograd.grad((out * torch.linspace(-1, 1, 16, dtype=dtype)).sum(), x, retain_graph=True)
        (out ** 2).sum().backward()
        results.append((out.detach(), grad_x, layer.gamma.grad.clone(), layer.beta.grad.clone()))
    for got, want in zip(results[1], results[0]):
        torch.testing.assert_close(got, want, atol=tol, rtol=tol)


def test_switching_back_and_unknown_paths():
    model = use_attention(Transformer(CONFIG), "fused")
    assert attention_path(use_attention(model, "course")) == "course"
    with pytest.raises(ValueError, match="unknown attention path"):
        use_attention(model, "flash")


def test_training_with_the_fused_path(tmp_path):
    config = dataclasses.replace(T.PRESETS["tiny"], run_dir=str(tmp_path / "run"), device="cpu", attention="fused",
                                 max_steps=4, eval_every=4, eval_words=5)
    result = T.train(config, progress=False)
    assert attention_path(result.model) == "fused"
    assert (tmp_path / "run" / "attention.png").is_file()
    with pytest.raises(ValueError, match="attention must be one of"):
        dataclasses.replace(config, attention="flash")


def test_the_layer_norm_path_switches_back_and_leaves_a_learners_class_alone():
    model = use_norm(Transformer(CONFIG), "fused")
    assert norm_path(use_norm(model, "course")) == "course"
    with pytest.raises(ValueError, match="unknown layer-norm path"):
        use_norm(model, "apex")

    class MyNorm(LayerNorm):  # a learner's own class is theirs: never replaced
        pass

    mine = use_norm(torch.nn.Sequential(MyNorm(8), LayerNorm(8)), "fused")
    assert type(mine[0]) is MyNorm and type(mine[1]) is FusedLayerNorm
    assert norm_path(torch.nn.Sequential(FusedLayerNorm(8), LayerNorm(8))) == "mixed"
    assert norm_path(torch.nn.Linear(2, 2)) == "none"


def test_training_and_loading_with_the_fused_layer_norm(tmp_path):
    config = dataclasses.replace(T.PRESETS["tiny"], run_dir=str(tmp_path / "run"), device="cpu", norm="fused",
                                 max_steps=4, eval_every=4, eval_words=5)
    result = T.train(config, progress=False)
    assert norm_path(result.model) == "fused"
    model, saved, _ = T.load_trained(tmp_path / "run", device="cpu")
    assert saved.norm == "fused" and norm_path(model) == "fused"
    with pytest.raises(ValueError, match="norm must be one of"):
        dataclasses.replace(config, norm="apex")
    with pytest.raises(ValueError, match="norm=fused replaces the reference LayerNorm"):
        dataclasses.replace(config, parts="mine")
    with pytest.raises(ValueError, match="nn.Transformer"):
        dataclasses.replace(config, implementation="torch")


@pytest.mark.parametrize("keys", [5, 40], ids=["math backend", "flash kernel"])
def test_a_query_that_sees_no_key_gets_zeros_on_both_paths(keys):
    """What the module's docstring says: a zero context (so the output is w_o's bias) and finite gradients,
    whichever CPU backend the fused path takes (at most CPU_MATH_MAX_KEYS keys: the math backend)."""
    from transformer.fused import CPU_MATH_MAX_KEYS, MultiHeadAttention

    assert (keys <= CPU_MATH_MAX_KEYS) == (keys == 5)
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4)
    x = torch.randn(2, keys, 16, requires_grad=True)
    padding = torch.zeros(2, keys, dtype=torch.bool)
    padding[0] = True  # the first sequence is all padding: none of its queries sees a key
    for path in ("course", "fused"):
        use_attention(layer, path)
        x.grad = None
        out = layer(x, x, x, key_padding_mask=padding)  # (2, keys, 16)
        out.sum().backward()
        assert torch.allclose(out[0], layer.w_o.bias.expand(keys, -1)), path
        assert bool(torch.isfinite(x.grad).all()), path
