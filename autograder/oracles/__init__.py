"""The checks' oracle toolkit: PyTorch's own layers holding a course module's weights, and the
same computations as functions, able to make a learner's known mistakes on purpose. Its modules:

=====================  ==========================================================
:mod:`.states`         the weights of a case, drawn from its own generator (``State``)
:mod:`.masks`          padding and causal masks, how attention combines them, PyTorch's convention
:mod:`.dropout`        the masks nn.Dropout draws in the learner's process (``Dropout``)
:mod:`.layers`         chapters 3 to 6's layers as functions of a state, with known mistakes
:mod:`.stages`         a layer's intermediate values, to locate a learner's first wrong one
:mod:`.torch_layers`   PyTorch's own layers holding a state (``torch_*``): the independent oracles
:mod:`.bpe`            chapter 7: byte-pair encoding
:mod:`.sampling`       chapter 7: temperature, top-k and top-p sampling
:mod:`.gpt`            chapter 7: the GPT block and its generation, without and with a cache
=====================  ==========================================================

The names of the first six are importable from this package (``from autograder.oracles import
torch_mha``); chapter 7's from their modules.

The course's modules name their parameters after the paper, and every exercise uses exactly
these names (the checks load weights by them):

=====================  ==========================================================
MultiHeadAttention     w_q, w_k, w_v, w_o                    (nn.Linear(d_model, d_model))
PositionwiseFeedForward w_1 (d_model -> d_ff), w_2 (d_ff -> d_model)
LayerNorm              gamma, beta                           (shape (d_model,))
EncoderLayer           self_attn, feed_forward, norm1, norm2
DecoderLayer           self_attn, cross_attn, feed_forward, norm1, norm2, norm3
Encoder, Decoder       layers.0, layers.1, ...
=====================  ==========================================================

Masks follow one rule throughout the course, written down in :mod:`.masks`: an attention mask is
True where a query *may* attend, a key-padding mask True where a key *is padding*.

Two kinds of oracle live here. PyTorch's layers (``torch_*``) give the expected values: they are
independent of the course. The functions (:func:`multi_head_attention`, :func:`feed_forward`,
:func:`layer_norm`, :func:`sublayer`) compute the same thing in the dtype of their inputs, with
keyword options that reproduce a known mistake, so that a check can name a wrong answer; each
takes the state first, then its tensors, then keyword-only options. The masks of a case come from
:func:`padding_mask` and :func:`causal_mask`, and :func:`allowed` combines them as attention does.

Nothing here touches torch's global random number generator, and nothing is cached: judges run
in several threads at once, and each case must be judged the same way every time. PyTorch's
layers are built on the meta device (no random initialisation) and then given the case's
weights; dropout masks come from :class:`Dropout`, a private generator per case.
"""
from __future__ import annotations

from .dropout import Dropout
from .layers import SCALES, feed_forward, layer_norm, linear, multi_head_attention, split_heads, sublayer
from .masks import allowed, causal_mask, padding_mask, torch_attn_mask
from .stages import layer_norm_stages, post_norm_stages, stack_stages
from .states import (
    State,
    decoder_layer_state,
    double_state,
    encoder_layer_state,
    ffn_state,
    layer_norm_state,
    mha_state,
    stack_state,
)
from .torch_layers import (
    blank,
    torch_decoder,
    torch_decoder_layer,
    torch_encoder,
    torch_encoder_layer,
    torch_feed_forward,
    torch_layer_norm,
    torch_mha,
)

__all__ = [
    "SCALES", "Dropout", "State", "allowed", "blank", "causal_mask", "decoder_layer_state", "double_state",
    "encoder_layer_state", "feed_forward", "ffn_state", "layer_norm", "layer_norm_stages", "layer_norm_state",
    "linear", "mha_state", "multi_head_attention", "padding_mask", "post_norm_stages", "split_heads", "stack_stages",
    "stack_state", "sublayer", "torch_attn_mask", "torch_decoder", "torch_decoder_layer", "torch_encoder",
    "torch_encoder_layer", "torch_feed_forward", "torch_layer_norm", "torch_mha",
]
