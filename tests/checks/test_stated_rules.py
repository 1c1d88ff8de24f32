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
#: function that breaks it (an edit of the reference solution, or one that calls what it should build).
#: Left out: the mistakes whose value on their case alone another catalogued mistake gives too (a swap
#: costing 1, WordPiece's longest match, a nucleus that can be empty): the message names them only
#: once the other visible cases rule the look-alike out, which tests/checks/test_checks.py asserts.
BROKEN: dict[tuple[str, str], str | Callable[[], Any]] = {
    (TABLE, "the angles are computed in float64"): "angles computed in float32",
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
    (FFN, "x may have any number of leading axes"):
        editing(FFN, ("hidden = torch.relu(self.w_1(x))", "B, T, _ = x.shape\n        hidden = torch.relu(self.w_1(x))")),
    (FFN, "a ReLU sits between w_1 and w_2"): "no ReLU",
    (FFN, "dropout acts on the hidden activations, after the ReLU"): "dropout on the output of w_2",
    (FFN, "dropout drops with the constructor's probability"): "dropout probability fixed at 0.1",
    (FFN, "in eval mode dropout does nothing"): "F.dropout, active in eval mode",
    (NORM, "gamma starts at ones and beta at zeros"): "gamma initialised to zeros",
    (NORM, "the constructor's eps is used"): "eps argument ignored",
    (NORM, "eps sits inside the square root"): "eps outside the square root",
    (NORM, "the variance is biased, as nn.LayerNorm's"): "unbiased variance",
    (NORM, "it agrees with nn.LayerNorm whatever the offset of the features"): "variance as E[x^2] - E[x]^2",
    (NORM, "each position's d_model features are normalised"): "normalises over the positions",
    (NORM, "the parameters are named gamma and beta"): "parameters named weight and bias",
    (NORM, "F.layer_norm is not used"): "calls F.layer_norm",
    (ENC_LAYER, "post-norm: LayerNorm(x + Sublayer(x))"): "pre-norm instead of post-norm",
    (ENC_LAYER, "whatever sits at a padded position never changes a real one"):
        "padding mask not passed to the self-attention",
    (ENC_LAYER, "key_padding_mask is True where a position is padding"): "padding mask inverted",
    (ENC_LAYER, "the padding mask goes to the attention's key_padding_mask"):
        "padding mask passed positionally, so it lands in attn_mask",
    (ENC_LAYER, "norm1 serves the self-attention and norm2 the feed-forward network"): "norm1 and norm2 swapped",
    (ENC_LAYER, "norm1 and norm2 each have their own gamma and beta"): "norm2 is norm1: one LayerNorm for both sub-layers",
    (ENC_LAYER, "dropout acts on each sub-layer's output, before the residual sum"): "dropout on the residual sum",
    (ENC_LAYER, "dropout1 and dropout2 are submodules"): "no dropout1/dropout2 submodules",
    (ENC_LAYER, "self_attn is built with the layer's dropout"): "self-attention built without dropout",
    (ENC, "each of the N layers has weights of its own"): "the same layer object N times",
    (ENC, "the output is the last layer's, with no final LayerNorm"): "a final LayerNorm module",
    (ENC, "the padding mask reaches every layer"): "padding mask only for the first layer",
    (ENC, "there are N layers"): "N - 1 layers",
    (ENC, "layers is an nn.ModuleList"): "plain Python list of layers",
    (ENC, "each layer is built with the encoder's dropout"): "layers built without the dropout argument",
    (MASK, "the mask is boolean"): "float mask of ones and zeros",
    (MASK, "a query may attend to itself: True where j <= i"): "diagonal masked too (strict lower triangle)",
    (MASK, "True means may attend"): "True marks blocked positions",
    (MASK, "the shape is (size, size), with no batch axis"): "extra batch axis (1, T, T)",
    (MASK, "size=0 gives an empty (0, 0) mask"): "ValueError for an empty sequence",
    (MASK, "a negative size raises ValueError"): "no ValueError for a negative size",
    (DEC_LAYER, "with a causal tgt_mask a target token never changes an earlier position"):
        "tgt_mask not passed to the self-attention",
    (DEC_LAYER, "tgt_mask is True where a position may attend"): "tgt_mask inverted",
    (DEC_LAYER, "target padding never changes a real position"): "target padding ignored",
    (DEC_LAYER, "memory padding never changes a real position"): "memory padding ignored",
    (DEC_LAYER, "no mask at all is allowed"): editing(DEC_LAYER, ("attn_mask=tgt_mask,", "attn_mask=tgt_mask.bool(),")),
    (DEC_LAYER, "the cross-attention's keys and values come from memory"): "K and V from the decoder: cross_attn(x, x, x)",
    (DEC_LAYER, "cross_attn has weights of its own"): "self_attn reused for the cross-attention",
    (DEC_LAYER, "post-norm, as in the paper"): "pre-norm",
    (DEC_LAYER, "norm1, norm2, norm3 serve the sub-layers in order"): "norm1 and norm3 swapped",
    (DEC_LAYER, "dropout acts on each sub-layer's output, before the residual sum"):
        "dropout applied to the residual sum",
    (DEC, "each of the N layers has weights of its own"): "the same layer repeated N times",
    (DEC, "the output is the last layer's, with no final LayerNorm"): "a final LayerNorm",
    (DEC, "every layer reads the same encoder output"): "later layers attend to the previous layer instead of memory",
    (DEC, "tgt_mask reaches every layer"): "tgt_mask not passed on",
    (DEC, "tgt_key_padding_mask reaches every layer"): "target padding not passed on",
    (DEC, "memory_key_padding_mask reaches every layer"): "memory padding not passed on",
    (DEC, "each layer is built with the decoder's dropout"): "layers built without the dropout argument",
    (TABLE, "the table is float32"): "returns float64",
    (TABLE, "sines and cosines are interleaved"): "sines and cosines concatenated",
    (TABLE, "each pair is the sine and cosine of the same angle, with exponent 2i"):
        "exponent j/d_model with the column index j",
    (TABLE, "an odd d_model ends with a sine column"): "crashes on odd d_model",
    (TABLE, "positions run from 0"): "positions start at 1",
    (TABLE, "max_len < 1 or d_model < 1 raises ValueError"): "no validation",
    (EMBED, "the table is a buffer named pe"): "table kept as a plain tensor attribute",
    (EMBED, "pe keeps the shape sinusoidal_encoding gives it"): "table stored as (1, max_len, d_model)",
    (EMBED, "pe is not persistent: state_dict() leaves it out"): "table registered as a persistent buffer",
    (EMBED, "the embedding's weight is the only parameter"): "table as a parameter",
    (EMBED, "the embeddings are multiplied by sqrt(d_model)"): "no sqrt(d_model) scale",
    (EMBED, "dropout acts on the sum"): "dropout before adding",
    (EMBED, "the table is sliced by the sequence length"): "pe[:B] instead of pe[:T]",
    (EMBED, "T > max_len raises ValueError"): "no check of T > max_len",
    (EMBED, "a sequence of exactly max_len tokens fits"): editing(EMBED, ("if T > self.max_len:", "if T >= self.max_len:")),
    (TRAIN, "pairs are counted with overlaps: a a a holds (a, a) twice"): "counts without overlaps",
    (TRAIN, "a tie goes to the pair whose first occurrence comes first"): "ties go to the smallest pair",
    (TRAIN, "training stops when the best pair occurs only once"): "merges pairs that occur once",
    (TRAIN, "training stops when fewer than two tokens are left"):
        editing(TRAIN, ("        if not counts:\n            break\n", "")),
    (TRAIN, "a merge replaces occurrences from left to right"): "replaces from the right",
    (TRAIN, "the first tokens are the text's UTF-8 bytes"): "starts from characters",
    (TRAIN, "the pairs are counted again after every merge"): "counts the pairs once",
    (TRAIN, "a negative num_merges raises ValueError"): "accepts a negative num_merges",
    (ENCODE, "the merges are applied in the order they were learnt"): "merges in reverse order",
    (ENCODE, "pairs are replaced from left to right, never overlapping"): "replaces from the right",
    (ENCODE, "a merge applies everywhere in the sequence"): "first occurrence only",
    (ENCODE, "a text starts as its UTF-8 bytes; a byte no merge covers stays a token"): "starts from characters",
    (ENCODE, "merge k makes the id 256 + k"): "new ids from 257",
    (MLM, "ids is not modified"): "writes into ids",
    (MLM, "a special token is never chosen"): "special tokens can be chosen",
    (MLM, "the rate applies to the ordinary tokens only"): "15% of the padded row",
    (MLM, "one uniform number per chosen position decides 80/10/10"): "a second draw overwrites [MASK]s",
    (MLM, "a random replacement is an ordinary id"): "random tokens from the whole vocabulary",
    (MLM, "a random replacement may by chance be the original token"): "a random replacement is never the original",
    (MLM, "every chosen position gets its original id as label"): "labels only where [MASK] was put",
    (MLM, "the other positions get the label -100"): "label 0 instead of -100",
    (MLM, "everything is drawn from generator"): "global random generator",
    (MLM, "rate=1.0 is valid"): editing(MLM, ("if not 0 < rate <= 1:", "if not 0 < rate < 1:")),
    (MLM, "a rate outside (0, 1] raises ValueError"): "accepts any rate",
    (MLM, "that ValueError names rate"):
        editing(MLM, ('raise ValueError(f"rate must be in (0, 1], got {rate}")', 'raise ValueError("out of range")')),
    (LM_LOSS, "position t predicts ids[:, t + 1]"): "no shift",
    (LM_LOSS, "a padding target is left out of the sum"): "padding counted",
    (LM_LOSS, "a padding target is left out of the count"): "divides by every position",
    (LM_LOSS, "pad_id is the argument, not 0"): editing(LM_LOSS, ("real = targets != pad_id", "real = targets != 0")),
    (LM_LOSS, "a target is kept by its own id, not its input's"): "masks by the input token",
    (LM_LOSS, "every real target of the batch weighs the same"): "mean of per-sequence means",
    (LM_LOSS, "when every target is padding the result is NaN"):
        editing(LM_LOSS, ("return nll[real].sum() / real.sum()", "return nll[real].sum() / real.sum().clamp(min=1)")),
    (LM_LOSS, "the loss is a 0-dimensional tensor, not a Python number"): ".item()",
    (LM_LOSS, "large logits do not give log(0)"): editing(
        LM_LOSS, ("log_probs = torch.log_softmax(predictions, dim=-1)", "log_probs = torch.softmax(predictions, dim=-1).log()")),
    (SAMPLE, "the logits are divided by the temperature"): "multiplies by the temperature",
    (SAMPLE, "temperature 0 is greedy"): "divides by a zero temperature",
    (SAMPLE, "top_k at least the vocabulary size keeps every token"): "top_k above the vocabulary crashes",
    (SAMPLE, "top-k keeps the top_k largest logits, the k-th included"): "top-k drops the k-th token",
    (SAMPLE, "the nucleus is the smallest set reaching top_p"): "nucleus without the crossing token",
    (SAMPLE, "temperature, then top-k, then top-p"): "temperature after the filters",
    (SAMPLE, "top-p reads what top-k kept"): "nucleus before top-k",
    (SAMPLE, "a token id is the vocabulary's, not a sorted position"): "returns sorted positions",
    (SAMPLE, "all randomness comes from generator"): "global random generator",
    (SAMPLE, "the result is a LongTensor of token ids"): editing(
        SAMPLE, ("generator=generator).squeeze(-1)  # (B,)", "generator=generator).squeeze(-1).float()  # (B,)")),
    (SAMPLE, "a negative temperature or top_k, or top_p outside (0, 1], raises ValueError"): "accepts bad arguments",
    (SAMPLE, "that ValueError names the argument"): "a ValueError that names nothing",
    (BLOCK, "pre-norm: x + Sublayer(LayerNorm(x))"): "post-norm, as in chapter 4",
    (BLOCK, "the block makes its own causal mask"): "no causal mask",
    (BLOCK, "the mask is True where a query may attend"): "the causal mask flipped",
    (BLOCK, "norm2 has its own gamma and beta"): "one LayerNorm object for both sub-layers",
    (BLOCK, "dropout acts on each sub-layer's output before it is added"): "dropout on the residual sum",
    (BLOCK, "in eval mode the block is deterministic"): "F.dropout, on in eval mode",
    (BLOCK, "the final LayerNorm belongs to the model, not the block"): "a final LayerNorm in every block",
    (CACHE, "each step reads only the positions not read yet"): "reads the whole sequence at every step",
    (CACHE, "the prompt is read with a causal mask"): "no causal mask over the prompt",
    (CACHE, "the first generated token sits at position T0"): "positions restart at 0",
    (CACHE, "the cache holds the keys and values of every position read"): "the cache never grows",
    (CACHE, "the last token is returned but never read"): "reads the last token too",
    (CACHE, "tokens holds the generated ids only"): "returns the prompt with the tokens",
    (CACHE, "the final LayerNorm comes before the output layer"): "no final LayerNorm",
    (CACHE, "every row of a batch is generated"): "one row only (.item())",
    (CACHE, "each cache entry is (k, v)"): "the cache as (v, k)",
    (CACHE, "the cache keeps the heads apart, (B, h, T, d_k)"): "the cache with the heads merged",
    (CACHE, "steps below 1 raises ValueError"): "accepts steps=0",
    (EDIT, "the distance is an int"): "returns a float",
    (EDIT, "a symbol is a whole element of the sequence"): "joins phonemes into letters",
    (EDIT, "either sequence may be empty"): "borders of the table left at 0",
    (EDIT, "a substitution costs 1"): "a substitution costs 2",
    (EDIT, "the sequences may be tuples"): editing(EDIT, ("previous = list(range(len(b) + 1))",
                                                         "b = b + []\n    previous = list(range(len(b) + 1))")),
    (EDIT, "the symbols may be integer ids"): editing(EDIT, ("previous = list(range(len(b) + 1))",
                                                            "a, b = ' '.join(a).split(), ' '.join(b).split()\n"
                                                            "    previous = list(range(len(b) + 1))")),
    (NOAM, "the rate is a Python float"): "returns a tensor",
    (SMOOTH, "when every target is padding the result is NaN"):
        editing(SMOOTH, ("return loss[real].sum() / real.sum()", "return loss[real].sum() / real.sum().clamp(min=1)")),
    (SMOOTH, "epsilon is spread over all V tokens, the right one included"): "smoothing over the wrong tokens only",
    (SMOOTH, "the right token's term is weighted by 1 - epsilon"): "no (1 - eps) on the right token",
    (SMOOTH, "padding is left out of the sum"): "padding counted",
    (SMOOTH, "padding is left out of the count"): "divides by every position",
    (SMOOTH, "pad_id is the argument, not 0"): editing(SMOOTH, ("real = target != pad_id", "real = target != 0")),
    (SMOOTH, "log p comes from torch.log_softmax"): "log of softmax",
    (SMOOTH, "logits may have any number of leading axes"): editing(
        SMOOTH, ("log_probs = torch.log_softmax(logits, dim=-1)",
                 "B, T, V = logits.shape\n    log_probs = torch.log_softmax(logits, dim=-1)")),
    (SMOOTH, "the loss is a 0-dimensional tensor, not a Python number"): "returns .item()",
    (SMOOTH, "F.cross_entropy is not used"): using(
        SMOOTH, "def label_smoothed_cross_entropy(logits, target, smoothing=0.1, pad_id=0):\n"
                "    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),\n"
                "                           label_smoothing=smoothing, ignore_index=pad_id)"),
    (NOAM, "the rate takes the smaller of the two terms"): "max instead of min",
    (NOAM, "factor scales the whole curve"): "factor ignored",
    (NOAM, "steps are counted from 1"): "step + 1",
    (NOAM, "a step below 1 raises ValueError"): "returns 0 at step 0",
    (NOAM, "a warmup below 1 raises ValueError"): "warmup 0 not refused",
    (BATCHES, "every index appears in exactly one batch"): "drops the last batch",
    (BATCHES, "a batch costs its size times its longest length"): "budget counts real tokens",
    (BATCHES, "no batch costs more than max_tokens"): "budget checked after adding",
    (BATCHES, "an example exactly as long as max_tokens fits"): "refuses an example as long as the budget",
    (BATCHES, "an example longer than max_tokens raises ValueError"):
        editing(BATCHES, ("    if too_long:\n        raise", "    if too_long and False:\n        raise")),
    (BATCHES, "batches hold examples of similar lengths"): "random batches",
    (BATCHES, "batches are filled up to the budget"): "one example per batch",
    (BATCHES, "the order of the batches is shuffled"): "batches in order of length",
    (BATCHES, "examples of equal length are shuffled"): "examples of equal length never shuffled",
    (BATCHES, "the shuffling comes from a generator seeded from seed and epoch"): "global random generator",
    (BATCHES, "another epoch gives another order"): "the same order every epoch",
    (BATCHES, "no lengths give no batches"): editing(BATCHES, ("    too_long = [i", "    max(lengths)\n    too_long = [i")),
    (BEAM, "a score sums log-probabilities"): "sums logits",
    (BEAM, "the beam_size best of all extensions together are kept"): "each hypothesis keeps its own best token",
    (BEAM, "a finished hypothesis leaves the beam"): "finished hypotheses stay in the beam",
    (BEAM, "a finished hypothesis is never extended"): "extends hypotheses after <eos>",
    (BEAM, "a finished hypothesis takes a place only at the step it finishes"):
        "the beam stays smaller once a hypothesis finished",
    (BEAM, "with nothing finished, the best live hypothesis is returned"): "no fallback when nothing finishes",
    (BEAM, "hypotheses are ranked by score / lp(Y)"): "ranks by raw scores",
    (BEAM, "lp(Y) = ((5 + |Y|) / 6) ** alpha"): "|Y| ** alpha",
    (BEAM, "the normalised score is returned"): "returns the raw score",
    (BEAM, "tokens is a LongTensor of shape (L,)"): editing(
        BEAM, ("torch.tensor(tokens, dtype=torch.long), normalised", "torch.tensor(tokens, dtype=torch.float), normalised")),
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
