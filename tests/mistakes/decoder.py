"""Wrong answers to chapter 5, as learners write them, and the words that must name each one."""
from __future__ import annotations

import torch
from torch import nn

from reference.decoder import DecoderLayer
from reference.encoder import LayerNorm, PositionwiseFeedForward
from reference.multihead import MultiHeadAttention

from . import Mistake, Spoiled

MASK = "decoder.subsequent_mask"
LAYER = "decoder.DecoderLayer"
STACK = "decoder.Decoder"


SPOILED = Spoiled("subsequent_mask", "key_pos <= query_pos", "key_pos >= query_pos")


# ----------------------------------------------------------------------------------------
# subsequent_mask
# ----------------------------------------------------------------------------------------


def mask_float(size):
    return torch.tril(torch.ones(size, size))  # 1.0 / 0.0, not booleans


def mask_int(size):
    return torch.tril(torch.ones(size, size, dtype=torch.long))


def mask_additive(size):
    # PyTorch's own convention: 0 where allowed, -inf where blocked, added to the scores.
    return torch.triu(torch.full((size, size), float("-inf")), diagonal=1)


def mask_upper(size):
    return torch.triu(torch.ones(size, size, dtype=torch.bool))


def mask_strict(size):
    return torch.tril(torch.ones(size, size, dtype=torch.bool), diagonal=-1)


def mask_blocked_positions(size):
    # True where a query may NOT attend, as nn.MultiheadAttention's boolean masks mean it.
    return torch.triu(torch.ones(size, size, dtype=torch.bool), diagonal=1)


def mask_all_true(size):
    return torch.ones(size, size, dtype=torch.bool)


def mask_batch_axis(size):
    # The Annotated Transformer's shape: a leading axis of 1.
    return torch.tril(torch.ones(1, size, size, dtype=torch.bool))


def mask_no_value_error(size):
    return torch.tril(torch.ones(max(size, 0), max(size, 0), dtype=torch.bool))


def mask_value_error_at_zero(size):
    if size < 1:
        raise ValueError("size must be positive")
    return torch.tril(torch.ones(size, size, dtype=torch.bool))


def mask_assert(size):
    assert size >= 0, "negative size"
    return torch.tril(torch.ones(size, size, dtype=torch.bool))


# ----------------------------------------------------------------------------------------
# DecoderLayer: the submodules are right, the forward goes wrong
# ----------------------------------------------------------------------------------------


class _Layer(nn.Module):
    def __init__(self, d_model: int, h: int, d_ff: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, h, dropout)
        self.cross_attn = MultiHeadAttention(d_model, h, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = LayerNorm(d_model), LayerNorm(d_model), LayerNorm(d_model)
        self.dropout1, self.dropout2, self.dropout3 = nn.Dropout(dropout), nn.Dropout(dropout), nn.Dropout(dropout)

    def sa(self, x, tgt_mask, tgt_pad):
        return self.dropout1(self.self_attn(x, x, x, attn_mask=tgt_mask, key_padding_mask=tgt_pad))

    def ca(self, x, memory, mem_pad):
        return self.dropout2(self.cross_attn(x, memory, memory, key_padding_mask=mem_pad))

    def ff(self, x):
        return self.dropout3(self.feed_forward(x))


class LayerNoTgtMask(_Layer):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        x = self.norm1(x + self.sa(x, None, tgt_key_padding_mask))
        x = self.norm2(x + self.ca(x, memory, memory_key_padding_mask))
        return self.norm3(x + self.ff(x))


class LayerInvertedTgtMask(_Layer):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        flipped = None if tgt_mask is None else ~tgt_mask  # "PyTorch wants True = blocked"
        x = self.norm1(x + self.sa(x, flipped, tgt_key_padding_mask))
        x = self.norm2(x + self.ca(x, memory, memory_key_padding_mask))
        return self.norm3(x + self.ff(x))


class LayerNoTgtPadding(_Layer):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        x = self.norm1(x + self.sa(x, tgt_mask, None))
        x = self.norm2(x + self.ca(x, memory, memory_key_padding_mask))
        return self.norm3(x + self.ff(x))


class LayerNoMemoryPadding(_Layer):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        x = self.norm1(x + self.sa(x, tgt_mask, tgt_key_padding_mask))
        x = self.norm2(x + self.ca(x, memory, None))
        return self.norm3(x + self.ff(x))


class LayerTgtPaddingPositional(_Layer):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        # The fourth positional argument is attn_mask: the padding mask takes tgt_mask's place.
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, tgt_key_padding_mask)))
        x = self.norm2(x + self.ca(x, memory, memory_key_padding_mask))
        return self.norm3(x + self.ff(x))


class LayerMemoryPaddingPositional(_Layer):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        x = self.norm1(x + self.sa(x, tgt_mask, tgt_key_padding_mask))
        looked_up = self.cross_attn(x, memory, memory, memory_key_padding_mask)  # lands in attn_mask
        x = self.norm2(x + self.dropout2(looked_up))
        return self.norm3(x + self.ff(x))


class LayerInvertedTgtPadding(_Layer):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        keep = None if tgt_key_padding_mask is None else ~tgt_key_padding_mask
        x = self.norm1(x + self.sa(x, tgt_mask, keep))
        x = self.norm2(x + self.ca(x, memory, memory_key_padding_mask))
        return self.norm3(x + self.ff(x))


class LayerInvertedMemoryPadding(_Layer):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        keep = None if memory_key_padding_mask is None else ~memory_key_padding_mask
        x = self.norm1(x + self.sa(x, tgt_mask, tgt_key_padding_mask))
        x = self.norm2(x + self.ca(x, memory, keep))
        return self.norm3(x + self.ff(x))


class LayerCrossKVFromDecoder(_Layer):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        x = self.norm1(x + self.sa(x, tgt_mask, tgt_key_padding_mask))
        looked_up = self.cross_attn(x, x, x, key_padding_mask=memory_key_padding_mask)
        x = self.norm2(x + self.dropout2(looked_up))
        return self.norm3(x + self.ff(x))


class LayerCrossQueryFromMemory(_Layer):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        x = self.norm1(x + self.sa(x, tgt_mask, tgt_key_padding_mask))
        looked_up = self.cross_attn(memory, x, x, key_padding_mask=memory_key_padding_mask)
        x = self.norm2(x + self.dropout2(looked_up))
        return self.norm3(x + self.ff(x))


class LayerCausalCross(_Layer):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        x = self.norm1(x + self.sa(x, tgt_mask, tgt_key_padding_mask))
        looked_up = self.cross_attn(x, memory, memory, attn_mask=tgt_mask, key_padding_mask=memory_key_padding_mask)
        x = self.norm2(x + self.dropout2(looked_up))
        return self.norm3(x + self.ff(x))


class LayerCrossIsSelf(_Layer):
    def __init__(self, d_model: int, h: int, d_ff: int, dropout: float = 0.1) -> None:
        super().__init__(d_model, h, d_ff, dropout)
        self.cross_attn = self.self_attn  # "the same kind of layer": one object under two names

    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        x = self.norm1(x + self.sa(x, tgt_mask, tgt_key_padding_mask))
        x = self.norm2(x + self.ca(x, memory, memory_key_padding_mask))
        return self.norm3(x + self.ff(x))


class LayerSharedAttention(_Layer):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        x = self.norm1(x + self.sa(x, tgt_mask, tgt_key_padding_mask))
        looked_up = self.self_attn(x, memory, memory, key_padding_mask=memory_key_padding_mask)
        x = self.norm2(x + self.dropout2(looked_up))
        return self.norm3(x + self.ff(x))


class LayerFfnBeforeCross(_Layer):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        x = self.norm1(x + self.sa(x, tgt_mask, tgt_key_padding_mask))
        x = self.norm2(x + self.ff(x))
        return self.norm3(x + self.ca(x, memory, memory_key_padding_mask))


class LayerPreNorm(_Layer):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        x = x + self.sa(self.norm1(x), tgt_mask, tgt_key_padding_mask)
        x = x + self.ca(self.norm2(x), memory, memory_key_padding_mask)
        return x + self.ff(self.norm3(x))


class LayerNormBeforeAdd(_Layer):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        x = x + self.norm1(self.sa(x, tgt_mask, tgt_key_padding_mask))
        x = x + self.norm2(self.ca(x, memory, memory_key_padding_mask))
        return x + self.norm3(self.ff(x))


class LayerNormsSwapped(_Layer):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        x = self.norm3(x + self.sa(x, tgt_mask, tgt_key_padding_mask))
        x = self.norm2(x + self.ca(x, memory, memory_key_padding_mask))
        return self.norm1(x + self.ff(x))


class LayerNoResidual(_Layer):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        x = self.norm1(self.sa(x, tgt_mask, tgt_key_padding_mask))
        x = self.norm2(self.ca(x, memory, memory_key_padding_mask))
        return self.norm3(self.ff(x))


class LayerNoDropout(_Layer):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        x = self.norm1(x + self.self_attn(x, x, x, attn_mask=tgt_mask, key_padding_mask=tgt_key_padding_mask))
        x = self.norm2(x + self.cross_attn(x, memory, memory, key_padding_mask=memory_key_padding_mask))
        return self.norm3(x + self.feed_forward(x))


class LayerDropoutAfterNorm(_Layer):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        attended = self.self_attn(x, x, x, attn_mask=tgt_mask, key_padding_mask=tgt_key_padding_mask)
        x = self.dropout1(self.norm1(x + attended))
        x = self.dropout2(self.norm2(x + self.cross_attn(x, memory, memory, key_padding_mask=memory_key_padding_mask)))
        return self.dropout3(self.norm3(x + self.feed_forward(x)))


class LayerDropoutAfterAdd(_Layer):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        attended = self.self_attn(x, x, x, attn_mask=tgt_mask, key_padding_mask=tgt_key_padding_mask)
        x = self.norm1(self.dropout1(x + attended))
        x = self.norm2(self.dropout2(x + self.cross_attn(x, memory, memory, key_padding_mask=memory_key_padding_mask)))
        return self.norm3(self.dropout3(x + self.feed_forward(x)))


# ----------------------------------------------------------------------------------------
# Decoder
# ----------------------------------------------------------------------------------------


class _Stack(nn.Module):
    def __init__(self, d_model: int, h: int, d_ff: int, N: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(d_model, h, d_ff, dropout) for _ in range(N))


class StackSameLayer(nn.Module):
    def __init__(self, d_model: int, h: int, d_ff: int, N: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.layers = nn.ModuleList([DecoderLayer(d_model, h, d_ff, dropout)] * N)  # one layer, N times

    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, tgt_key_padding_mask, memory_key_padding_mask)
        return x


class StackLayersWithoutDropout(_Stack):
    def __init__(self, d_model: int, h: int, d_ff: int, N: int, dropout: float = 0.1) -> None:
        super().__init__(d_model, h, d_ff, N, dropout)
        self.layers = nn.ModuleList(DecoderLayer(d_model, h, d_ff) for _ in range(N))  # dropout left at 0.1

    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, tgt_key_padding_mask, memory_key_padding_mask)
        return x


class StackFinalNorm(_Stack):
    def __init__(self, d_model: int, h: int, d_ff: int, N: int, dropout: float = 0.1) -> None:
        super().__init__(d_model, h, d_ff, N, dropout)
        self.norm = LayerNorm(d_model)

    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, tgt_key_padding_mask, memory_key_padding_mask)
        return self.norm(x)


class StackNotChained(_Stack):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        for layer in self.layers:
            out = layer(x, memory, tgt_mask, tgt_key_padding_mask, memory_key_padding_mask)
        return out


class StackMemoryIsPreviousOutput(_Stack):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        for i, layer in enumerate(self.layers):
            source = memory if i == 0 else x  # "like the encoder: each layer reads the one below"
            pad = memory_key_padding_mask if i == 0 else tgt_key_padding_mask
            x = layer(x, source, tgt_mask, tgt_key_padding_mask, pad)
        return x


class StackReversed(_Stack):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        for layer in reversed(self.layers):
            x = layer(x, memory, tgt_mask, tgt_key_padding_mask, memory_key_padding_mask)
        return x


class StackNoTgtMask(_Stack):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, memory, tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask)
        return x


class StackNoMemoryPadding(_Stack):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, tgt_key_padding_mask)
        return x


class StackNoTgtPadding(_Stack):
    def forward(self, x, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_key_padding_mask=memory_key_padding_mask)
        return x


MISTAKES = [
    # subsequent_mask
    Mistake(MASK, "float mask of ones and zeros", mask_float, "returned a float tensor (torch.float32)", rule="boolean"),
    Mistake(MASK, "integer mask", mask_int, "an integer tensor", rule="boolean"),
    Mistake(MASK, "PyTorch's additive -inf mask", mask_additive, "additive mask", rule="boolean"),
    Mistake(MASK, "upper triangle (transposed)", mask_upper, "upper triangle", rule="True where j <= i"),
    Mistake(MASK, "diagonal masked too (strict lower triangle)", mask_strict, "the diagonal is False", rule="True where j <= i"),
    Mistake(MASK, "True marks blocked positions", mask_blocked_positions, "the mask is inverted", rule="True where j <= i"),
    Mistake(MASK, "all True", mask_all_true, "nothing is hidden", rule="True where j <= i"),
    Mistake(MASK, "extra batch axis (1, T, T)", mask_batch_axis, "extra batch axis", rule="a (size, size) tensor"),
    Mistake(MASK, "no ValueError for a negative size", mask_no_value_error, "raise ValueError", rule="refusal"),
    Mistake(MASK, "ValueError for an empty sequence", mask_value_error_at_zero, "an empty sequence is valid",
            rule="raises nothing"),
    Mistake(MASK, "assert instead of ValueError", mask_assert, "raise ValueError", rule="refusal"),
    # DecoderLayer
    Mistake(LAYER, "tgt_mask not passed to the self-attention", LayerNoTgtMask, "ignored tgt_mask", rule="values"),
    Mistake(LAYER, "tgt_mask inverted", LayerInvertedTgtMask, "tgt_mask was inverted", rule="values"),
    Mistake(LAYER, "target padding ignored", LayerNoTgtPadding, "ignored tgt_key_padding_mask", rule="values"),
    Mistake(LAYER, "memory padding ignored", LayerNoMemoryPadding, "ignored memory_key_padding_mask", rule="values"),
    # Caught first as the tgt_mask it pushes out, on a case without target padding.
    Mistake(LAYER, "self_attn(x, x, x, tgt_key_padding_mask): padding in attn_mask's place", LayerTgtPaddingPositional,
            "ignored tgt_mask", rule="values"),
    Mistake(LAYER, "cross_attn(x, memory, memory, memory_key_padding_mask): padding as attn_mask",
            LayerMemoryPaddingPositional, "the padding mask reached `attn_mask` of the cross-attention", rule="values"),
    Mistake(LAYER, "target padding inverted", LayerInvertedTgtPadding, "tgt_key_padding_mask is inverted", rule="values"),
    Mistake(LAYER, "memory padding inverted", LayerInvertedMemoryPadding, "memory_key_padding_mask is inverted", rule="values"),
    Mistake(LAYER, "K and V from the decoder: cross_attn(x, x, x)", LayerCrossKVFromDecoder,
            "keys and values of the cross-attention came from the decoder", rule="values"),
    Mistake(LAYER, "Q from memory: cross_attn(memory, x, x)", LayerCrossQueryFromMemory,
            "queries of the cross-attention came from memory", rule="values"),
    Mistake(LAYER, "causal mask given to the cross-attention", LayerCausalCross, "given tgt_mask too", rule="values"),
    Mistake(LAYER, "self_attn reused for the cross-attention", LayerSharedAttention, "used self_attn's weights", rule="values"),
    Mistake(LAYER, "cross_attn = self_attn: one module under two names", LayerCrossIsSelf, "the sharing is the fault",
            rule="parameters match"),
    Mistake(LAYER, "FFN before the cross-attention", LayerFfnBeforeCross, "feed-forward network came before", rule="values"),
    Mistake(LAYER, "pre-norm", LayerPreNorm, "pre-norm", rule="values"),
    Mistake(LAYER, "LayerNorm before the residual addition", LayerNormBeforeAdd, "before adding the residual", rule="values"),
    Mistake(LAYER, "norm1 and norm3 swapped", LayerNormsSwapped, "LayerNorms are used in the wrong places", rule="values"),
    Mistake(LAYER, "no residual connections", LayerNoResidual, "residual connections are missing", rule="values"),
    Mistake(LAYER, "dropout1..3 never applied", LayerNoDropout, "the residual dropout is missing", rule="values"),
    Mistake(LAYER, "dropout applied to the residual sum", LayerDropoutAfterAdd, "dropout was applied to the residual sum",
            rule="values"),
    Mistake(LAYER, "dropout applied after the LayerNorm", LayerDropoutAfterNorm, "dropout was applied after the LayerNorm",
            rule="values"),
    # Decoder
    Mistake(STACK, "the same layer repeated N times", StackSameLayer, "the same DecoderLayer object", rule="parameters match"),
    Mistake(STACK, "a final LayerNorm", StackFinalNorm, "no final LayerNorm", rule="parameters match"),
    Mistake(STACK, "layers built without the dropout argument", StackLayersWithoutDropout,
            "the layers drop with probability 0.1, not the decoder's dropout=0.3", rule="values"),
    Mistake(STACK, "every layer applied to the input", StackNotChained, "previous layer's output", rule="values"),
    Mistake(STACK, "later layers attend to the previous layer instead of memory", StackMemoryIsPreviousOutput,
            "did not attend to the encoder's output", rule="values"),
    Mistake(STACK, "layers in reverse order", StackReversed, "reverse order", rule="values"),
    Mistake(STACK, "tgt_mask not passed on", StackNoTgtMask, "tgt_mask did not reach the layers", rule="values"),
    Mistake(STACK, "memory padding not passed on", StackNoMemoryPadding, "memory_key_padding_mask did not reach", rule="values"),
    Mistake(STACK, "target padding not passed on", StackNoTgtPadding, "tgt_key_padding_mask did not reach", rule="values"),
]
