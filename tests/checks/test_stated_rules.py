"""Every rule the instructions state is held by a visible case, and breaking it gets its own message.

Each check module lists its function's stated rules in ``STATED`` (:class:`autograder.framework.Stated`).
Here every entry's case must be among the visible cases, every graded function must have entries, and
each rule that can be broken on its own is broken: by a mistake of the catalogue in ``tests/mistakes``
(named by the check and the mistake's name) or by an edit of the course's reference solution (written
below). The broken function is run on the entry's cases only, so that the message is proved to come
from that case and not from another one that happens to fail too.
"""
from __future__ import annotations

import copy
import importlib
import itertools
import re
from collections.abc import Callable
from typing import Any

import pytest

from autograder.checks import chapter_checks
from autograder.framework import Check, CheckFailed, Stated, run_check
from harness.calls import remember_cell
from tests.conftest import NOTEBOOKS

CHECKS = {check.check_id: check for nb in NOTEBOOKS for check in chapter_checks(nb).values()}
MISTAKES = {(m.check_id, m.name): m for nb in NOTEBOOKS for m in importlib.import_module(f"tests.mistakes.{nb}").MISTAKES}
_counter = itertools.count()


def stated(check: Check) -> tuple[Stated, ...]:
    module = importlib.import_module(type(check).__module__)
    return getattr(module, "STATED", {}).get(check.function, ())


def fits(case: Any, fragment: str) -> bool:
    return fragment in case.label or fragment in (case.tag or "")


def edited(check_id: str, *edits: tuple[str, str]) -> Any:
    """The reference solution's graded function after replacing, in its module's text, each ``old`` by
    ``new`` (each found exactly once): a learner's code that breaks one rule and keeps the others."""
    notebook, _, function = check_id.partition(".")
    path = importlib.import_module(f"reference.{notebook}").__file__
    with open(path, encoding="utf-8") as f:
        source = f.read()
    for old, new in edits:
        assert source.count(old) == 1, f"reference/{notebook}.py no longer has exactly one {old!r}"
        source = source.replace(old, new)
    filename = f"<cell stated-{next(_counter)}>"  # read as a learner's cell, whose lines the messages quote
    remember_cell(filename, source)
    namespace: dict[str, Any] = {"__name__": f"stated_{notebook}"}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[function]


def using(check_id: str, body: str) -> Callable[[], Any]:
    """A function that hands its work to what the exercise asks the learner to build."""
    def make() -> Any:
        namespace: dict[str, Any] = {"__name__": "stated_using"}
        exec(f"import torch\nimport torch.nn.functional as F\n{body}", namespace)
        return namespace[check_id.partition(".")[2]]
    return make


def editing(check_id: str, *edits: tuple[str, str]) -> Callable[[], Any]:
    return lambda: edited(check_id, *edits)


RF, RNN, GREEDY = "prerequisites.receptive_field", "prerequisites.rnn_forward", "prerequisites.greedy_decode"
SOFTMAX, SDPA, ADDITIVE = "attention.softmax", "attention.scaled_dot_product_attention", "attention.additive_attention"
VARIANCE, SPLIT, MERGE, MHA = ("attention.score_variance", "multihead.split_heads", "multihead.merge_heads",
                               "multihead.MultiHeadAttention")
FFN, NORM, ENC_LAYER, ENC = "encoder.PositionwiseFeedForward", "encoder.LayerNorm", "encoder.EncoderLayer", "encoder.Encoder"
MASK, DEC_LAYER, DEC = "decoder.subsequent_mask", "decoder.DecoderLayer", "decoder.Decoder"
TABLE, EMBED = "positional.sinusoidal_encoding", "positional.PositionalEmbedding"
TRAIN, ENCODE, MLM, LM_LOSS = "bert_gpt.bpe_train", "bert_gpt.bpe_encode", "bert_gpt.mask_tokens", "bert_gpt.causal_lm_loss"
SAMPLE, BLOCK, CACHE = "bert_gpt.sample_next", "bert_gpt.GPTBlock", "bert_gpt.generate_with_cache"
EDIT, SMOOTH, NOAM = "capstone.edit_distance", "capstone.label_smoothed_cross_entropy", "capstone.noam_rate"
BATCHES, BEAM = "capstone.length_batches", "capstone.beam_search"

#: (check id, rule) -> how a learner breaks it: the name of a mistake in tests/mistakes, or what makes a
#: function that breaks it (an edit of the reference solution, or one that calls what it should build)
BROKEN: dict[tuple[str, str], str | Callable[[], Any]] = {
    (RF, "the receptive field is returned as an int"): "returns a float",
    (RF, "with no layer at all, r = 1"): editing(RF, ("field, jump = 1, 1", "field, jump = int(bool(kernel_sizes)), 1")),
    (RF, "missing strides or dilations mean 1 for every layer"):
        editing(RF, ("strides = [1] * n_layers if", "strides = [0] * n_layers if")),
    (RF, "the product runs over the strides of the layers below only"): "multiplies by the layer's own stride too",
    (RF, "each layer adds (k - 1) d steps"): "ignores the dilations",
    (RF, "lengths that differ raise ValueError"): "no validation at all",
    (RF, "a kernel size, stride or dilation below 1 raises ValueError"): "no validation at all",
    (RF, "a description that makes no sense fails with ValueError, not an assert"): "validates with assert",
    (RNN, "outputs holds h_1 .. h_T, not h_0"): "outputs are h_0..h_{T-1}",
    (RNN, "h_T is the last state"): "returns the first state as h_T",
    (RNN, "outputs has shape (B, T, d_h)"): "states stacked along dim 0",
    (RNN, "x[:, t] is the input at step t"): "x[t] instead of x[:, t]",
    (RNN, "W_hh multiplies the previous state on the right, as (d_h, d_h)"): "W_hh transposed",
    (RNN, "h_t depends on the inputs up to step t only"): "runs backwards in time",
    (GREEDY, "model.encode(src) is called once"): "encodes the source at every step",
    (GREEDY, "the next token comes from the last position"): "first position's logits",
    (GREEDY, "every row starts with bos_id in column 0"): "drops BOS",
    (GREEDY, "at most max_len tokens follow bos_id"): "one token too many",
    (GREEDY, "after its eos_id a row holds pad_id, whatever the model says"): "no padding after EOS",
    (GREEDY, "the padding is pad_id, not a fixed id"): "pads with 0 instead of pad_id",
    (GREEDY, "decoding stops as soon as every row has produced eos_id"): "does not stop early",
    (GREEDY, "decoding goes on while any row has not ended"): "stops when the first row ends",
    (GREEDY, "the result is a LongTensor"): "returns float token ids",
    (SOFTMAX, "entries near 1000 do not overflow: subtract the maximum"): "no max subtraction",
    (SOFTMAX, "the maximum is taken per slice"): "one maximum for the whole tensor",
    (SOFTMAX, "the softmax runs along `dim`"): "ignores the dim argument",
    (SOFTMAX, "entries equal to -inf get zero probability"):
        editing(SOFTMAX, ("shifted = x - x.amax(", "x = x.clamp(min=-3.0)\n    shifted = x - x.amax(")),
    (SOFTMAX, "torch.softmax is not used"): using(SOFTMAX, "def softmax(x, dim=-1):\n    return torch.softmax(x, dim)"),
    (SDPA, "the scores are divided by sqrt(d_k)"): "no 1/sqrt(d_k)",
    (SDPA, "the softmax runs over the keys"): "softmax over the queries",
    (SDPA, "a mask is True where a query may attend"): "inverted mask",
    (SDPA, "masked scores become -inf before the softmax"): "mask applied after the softmax",
    (SDPA, "masked scores become -inf, not a large negative number"): "-1e9 instead of -inf",
    (SDPA, "a query whose keys are all masked gets zero weights and a zero output"): "NaN for a fully masked query",
    (SDPA, "q may have no batch dimension"): editing(SDPA, ("q @ k.transpose(-2, -1) /", "q @ k.transpose(1, 2) /")),
    (SDPA, "any number of batch dimensions: transpose the last two axes only"): "k.T on a batched tensor",
    (SDPA, "F.scaled_dot_product_attention is not used"): using(
        SDPA, "def scaled_dot_product_attention(q, k, v, mask=None):\n"
              "    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), None"),
    (ADDITIVE, "there is no 1/sqrt(d_k) scale"): "1/sqrt(d_k) scale added",
    (ADDITIVE, "the score is w_v . tanh(q W_q + k W_k)"): "tanh after projecting with w_v",
    (ADDITIVE, "every (query, key) pair is scored: (..., T_q, 1, d_a) against (..., 1, T_k, d_a)"):
        "unsqueeze axes swapped",
    (ADDITIVE, "q may have no batch dimension"): editing(ADDITIVE, ("(k @ W_k).unsqueeze(-3)", "(k @ W_k).unsqueeze(1)")),
    (ADDITIVE, "a mask is True where a query may attend"): "inverted mask",
    (ADDITIVE, "masked scores become -inf before the softmax"): "mask applied after the softmax",
    (ADDITIVE, "a query whose keys are all masked gets zero weights and a zero output"): "NaN for a fully masked query",
    (VARIANCE, "the sample variance divides by n - 1"): "biased variance",
    (VARIANCE, "scaled=True divides the scores by sqrt(d_k)"): "never scales",
    (VARIANCE, "the scores are the n row-wise products q_i . k_i"): "variance of the whole matrix q @ k.T",
    (VARIANCE, "the result is a Python float"): "returns a 0-dimensional tensor",
    (SPLIT, "head i takes features i*d_k .. (i+1)*d_k - 1 at every position"):
        "reshaped straight to (B, h, T, d_k) without the transpose",
    (SPLIT, "the blocks are consecutive, not every h-th feature"): "each head takes every h-th feature",
    (SPLIT, "d_model not a multiple of h raises ValueError"): "no ValueError: the reshape fails instead",
    (SPLIT, "that ValueError names both numbers"): "ValueError whose message names neither number",
    (MERGE, "merging is the exact inverse of split_heads"): "features of the heads interleaved",
    (MERGE, "the head axis goes back behind the positions"): "reshaped without moving the heads back",
    (MERGE, "the heads are concatenated, not summed"): "heads summed",
    (MHA, "bias=False leaves the biases out"): editing(
        MHA, ("self.w_o = nn.Linear(d_model, d_model, bias=bias)", "self.w_o = nn.Linear(d_model, d_model)")),
    (MHA, "the layer keeps h and d_k"): "self.num_heads and self.head_dim instead of self.h and self.d_k",
    (MHA, "attn_weights is stored detached from the graph"):
        editing(MHA, ("self.attn_weights = weights.detach()", "self.attn_weights = weights")),
    (MHA, "attn_weights holds every head's weights"): "attn_weights averaged over the heads",
    (MHA, "attn_weights is taken before dropout"): "attn_weights stored after dropout",
    (MHA, "in training mode dropout acts on the attention weights"): "dropout on the output instead of the weights",
    (MHA, "in eval mode dropout does nothing"): "functional dropout left on in eval mode",
    (MHA, "d_model not a multiple of h raises ValueError in the constructor"): "no ValueError in __init__",
    (MHA, "that ValueError names both numbers"): editing(
        MHA, ('raise ValueError(f"d_model={d_model} must be divisible by the number of heads h={h}")',
              'raise ValueError("the heads do not divide the width")')),
    (MHA, "attn_mask is True where a query may attend"): "attn_mask inverted",
    (MHA, "attn_mask may be (B, T_q, T_k), one per sequence"): "3-D attn_mask without a head axis",
    (MHA, "key_padding_mask is True where a key is padding"): "key_padding_mask inverted",
    (MHA, "padded keys never change the output"): "key_padding_mask ignored",
    (MHA, "key and value are separate tensors"): "value projected with w_k",
    (MHA, "a query that may attend to no key gets zero weights and a zero output, not NaN"): editing(
        MHA, ("context, weights = scaled_dot_product_attention(q, k, v, mask)",
              "scores = (q @ k.transpose(-2, -1) / self.d_k ** 0.5).masked_fill(~mask, float('-inf'))\n"
              "        weights = scores.exp() / scores.exp().sum(-1, keepdim=True)\n"
              "        context = weights @ v")),
}


def message_on(check: Check, fragment: str, fn: Any) -> str:
    """What ``fn`` is told when the check runs only the visible cases that ``fragment`` names."""
    only = copy.copy(check)
    cases = [c for c in check.cases(False) if fits(c, fragment)]
    only.cases = lambda hidden: cases  # type: ignore[method-assign]
    try:
        run_check(only, fn)
    except CheckFailed as failure:
        return str(failure)
    return ""


ENTRIES = [(check_id, entry) for check_id, check in CHECKS.items() for entry in stated(check)]


def test_every_graded_function_lists_its_stated_rules():
    assert [check_id for check_id, check in CHECKS.items() if not stated(check)] == []


def test_no_module_lists_rules_for_a_function_it_does_not_check():
    for notebook in NOTEBOOKS:
        checks = chapter_checks(notebook).values()
        for module in {type(c).__module__ for c in checks}:
            listed = set(getattr(importlib.import_module(module), "STATED", {}))
            assert listed <= {c.function for c in checks if type(c).__module__ == module}, module


@pytest.mark.parametrize("check_id, entry", ENTRIES, ids=[f"{c}: {e.rule}" for c, e in ENTRIES])
def test_a_visible_case_holds_the_rule(check_id, entry):
    assert any(fits(c, entry.case) for c in CHECKS[check_id].cases(False)), f"no visible case {entry.case!r}"
    assert entry.message.strip(), "a rule without the words its message must use"


def test_every_broken_rule_is_a_stated_one():
    listed = {(check_id, entry.rule) for check_id, entry in ENTRIES}
    assert set(BROKEN) <= listed, set(BROKEN) - listed
    named = [b for b in BROKEN.values() if isinstance(b, str)]
    unknown = [key for key, b in BROKEN.items() if isinstance(b, str) and (key[0], b) not in MISTAKES]
    assert named and not unknown, unknown


BROKEN_ENTRIES = [(c, e) for c, e in ENTRIES if (c, e.rule) in BROKEN]


@pytest.mark.parametrize("check_id, entry", BROKEN_ENTRIES, ids=[f"{c}: {e.rule}" for c, e in BROKEN_ENTRIES])
def test_breaking_the_rule_gets_its_message_on_its_case(check_id, entry):
    way = BROKEN[check_id, entry.rule]
    fn = MISTAKES[check_id, way].fn if isinstance(way, str) else way()
    message = message_on(CHECKS[check_id], entry.case, fn)
    assert message, f"breaking {entry.rule!r} passes the case {entry.case!r}"
    assert re.sub(r"\s+", " ", entry.message) in re.sub(r"\s+", " ", message), message
