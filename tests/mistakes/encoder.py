"""Wrong answers to chapter 4, as learners write them, and the words that must name each one.

Each wrong module keeps the right constructor (the exercise's names) unless the constructor is
the mistake, and gets chapter 3's MultiHeadAttention and, where it is not the part under test,
this chapter's reference LayerNorm and feed-forward network, as the learner's notebook does.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from reference.encoder import Encoder as RightEncoder
from reference.encoder import EncoderLayer as RightLayer
from reference.encoder import LayerNorm as RightNorm
from reference.encoder import PositionwiseFeedForward as RightFFN
from reference.multihead import MultiHeadAttention

from . import Mistake, Spoiled

FFN = "encoder.PositionwiseFeedForward"
NORM = "encoder.LayerNorm"
LAYER = "encoder.EncoderLayer"
ENCODER = "encoder.Encoder"


# Wrong only in training mode: exactly what the judges' dropout masks decide.
SPOILED = Spoiled("EncoderLayer", "self.dropout1(attended)", "attended")


# ----------------------------------------------------------------------------------------
# PositionwiseFeedForward
# ----------------------------------------------------------------------------------------


class FFNNoReLU(RightFFN):
    def forward(self, x):
        return self.w_2(self.dropout(self.w_1(x)))


class FFNReLUOnOutputToo(RightFFN):
    def forward(self, x):
        return torch.relu(self.w_2(self.dropout(torch.relu(self.w_1(x)))))


class FFNReLUOnlyOnOutput(RightFFN):
    def forward(self, x):
        return torch.relu(self.w_2(self.dropout(self.w_1(x))))


class FFNGELU(RightFFN):
    def forward(self, x):
        return self.w_2(self.dropout(F.gelu(self.w_1(x))))


class FFNWithResidual(RightFFN):
    def forward(self, x):
        return x + self.w_2(self.dropout(torch.relu(self.w_1(x))))


class FFNDropoutAtOutput(RightFFN):
    def forward(self, x):
        return self.dropout(self.w_2(torch.relu(self.w_1(x))))


class FFNDropoutOnInput(RightFFN):
    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(self.dropout(x))))


class FFNFunctionalDropout(RightFFN):
    def forward(self, x):
        # F.dropout's training argument defaults to True: it drops in eval mode too.
        return self.w_2(F.dropout(torch.relu(self.w_1(x)), self.dropout.p))


class FFNReturnsHidden(RightFFN):
    def forward(self, x):
        return self.dropout(torch.relu(self.w_1(x)))


class FFNFixedDropout(RightFFN):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__(d_model, d_ff, dropout)
        self.dropout = nn.Dropout(0.1)  # the argument is ignored


class FFNNoBias(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff, bias=False)
        self.w_2 = nn.Linear(d_ff, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.w_2(self.dropout(torch.relu(self.w_1(x))))


# ----------------------------------------------------------------------------------------
# LayerNorm
# ----------------------------------------------------------------------------------------


class NormUnbiased(RightNorm):
    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True)  # unbiased by default
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


class NormEpsOutside(RightNorm):
    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        std = x.std(dim=-1, keepdim=True, unbiased=False)
        return self.gamma * (x - mean) / (std + self.eps) + self.beta


class NormNoEps(RightNorm):
    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        return self.gamma * (x - mean) / torch.sqrt(var) + self.beta


class NormIgnoresEps(RightNorm):
    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        return self.gamma * (x - mean) / torch.sqrt(var + 1e-5) + self.beta


class NormNoSqrt(RightNorm):
    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        return self.gamma * (x - mean) / (var + self.eps) + self.beta


class NormOverPositions(RightNorm):
    def forward(self, x):
        # Over the sequence, as a batch norm of one sequence would.
        mean = x.mean(dim=-2, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-2, keepdim=True)
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


class NormOverDim0(RightNorm):
    def forward(self, x):
        mean = x.mean(dim=0, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=0, keepdim=True)
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


class NormWholeTensor(RightNorm):
    def forward(self, x):
        mean = x.mean()
        var = ((x - mean) ** 2).mean()
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


class NormNoGamma(RightNorm):
    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) + self.beta


class NormNoBeta(RightNorm):
    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps)


class NormSwapped(RightNorm):
    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        return self.beta * (x - mean) / torch.sqrt(var + self.eps) + self.gamma


class NormNaiveVariance(RightNorm):
    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = (x * x).mean(dim=-1, keepdim=True) - mean * mean
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


class NormZeroGamma(RightNorm):
    def __init__(self, d_model, eps=1e-5):
        super().__init__(d_model, eps)
        self.gamma = nn.Parameter(torch.zeros(d_model))


class NormTorchNames(nn.Module):
    """gamma and beta named as nn.LayerNorm names them."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class NormUsesBuiltin(RightNorm):
    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.gamma, self.beta, self.eps)


# ----------------------------------------------------------------------------------------
# EncoderLayer
# ----------------------------------------------------------------------------------------


class LayerPreNorm(RightLayer):
    def forward(self, x, key_padding_mask=None):
        y = self.norm1(x)
        x = x + self.dropout1(self.self_attn(y, y, y, key_padding_mask=key_padding_mask))
        return x + self.dropout2(self.feed_forward(self.norm2(x)))


class LayerResidualAfterNorm(RightLayer):
    def forward(self, x, key_padding_mask=None):
        x = self.norm1(self.dropout1(self.self_attn(x, x, x, key_padding_mask=key_padding_mask))) + x
        return self.norm2(self.dropout2(self.feed_forward(x))) + x


class LayerNoResidual(RightLayer):
    def forward(self, x, key_padding_mask=None):
        x = self.norm1(self.dropout1(self.self_attn(x, x, x, key_padding_mask=key_padding_mask)))
        return self.norm2(self.dropout2(self.feed_forward(x)))


class LayerNoMask(RightLayer):
    def forward(self, x, key_padding_mask=None):
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x)))
        return self.norm2(x + self.dropout2(self.feed_forward(x)))


class LayerMaskPositional(RightLayer):
    def forward(self, x, key_padding_mask=None):
        # MultiHeadAttention's fourth positional argument is attn_mask, not key_padding_mask.
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, key_padding_mask)))
        return self.norm2(x + self.dropout2(self.feed_forward(x)))


class LayerMaskInverted(RightLayer):
    def forward(self, x, key_padding_mask=None):
        keep = None if key_padding_mask is None else ~key_padding_mask  # "the mask says which keys to keep"
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, key_padding_mask=keep)))
        return self.norm2(x + self.dropout2(self.feed_forward(x)))


class LayerNormsSwapped(RightLayer):
    def forward(self, x, key_padding_mask=None):
        x = self.norm2(x + self.dropout1(self.self_attn(x, x, x, key_padding_mask=key_padding_mask)))
        return self.norm1(x + self.dropout2(self.feed_forward(x)))


class LayerFFNFirst(RightLayer):
    def forward(self, x, key_padding_mask=None):
        x = self.norm1(x + self.dropout1(self.feed_forward(x)))
        return self.norm2(x + self.dropout2(self.self_attn(x, x, x, key_padding_mask=key_padding_mask)))


class LayerSecondResidualFromInput(RightLayer):
    def forward(self, x, key_padding_mask=None):
        y = self.norm1(x + self.dropout1(self.self_attn(x, x, x, key_padding_mask=key_padding_mask)))
        return self.norm2(x + self.dropout2(self.feed_forward(y)))


class LayerDropoutNeverUsed(RightLayer):
    def forward(self, x, key_padding_mask=None):
        # dropout1 and dropout2 are built in __init__ but never called
        x = self.norm1(x + self.self_attn(x, x, x, key_padding_mask=key_padding_mask))
        return self.norm2(x + self.feed_forward(x))


class LayerDropoutOnResidualSum(RightLayer):
    def forward(self, x, key_padding_mask=None):
        x = self.norm1(self.dropout1(x + self.self_attn(x, x, x, key_padding_mask=key_padding_mask)))
        return self.norm2(self.dropout2(x + self.feed_forward(x)))


class LayerDropoutAfterNorm(RightLayer):
    def forward(self, x, key_padding_mask=None):
        x = self.dropout1(self.norm1(x + self.self_attn(x, x, x, key_padding_mask=key_padding_mask)))
        return self.dropout2(self.norm2(x + self.feed_forward(x)))


class LayerOnlyFirstDropout(RightLayer):
    def forward(self, x, key_padding_mask=None):
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, key_padding_mask=key_padding_mask)))
        return self.norm2(x + self.feed_forward(x))


class LayerAttentionWithoutDropout(RightLayer):
    def __init__(self, d_model, h, d_ff, dropout=0.1):
        super().__init__(d_model, h, d_ff, dropout)
        self.self_attn = MultiHeadAttention(d_model, h)  # its dropout defaults to 0.0


class LayerFixedDropout(RightLayer):
    def __init__(self, d_model, h, d_ff, dropout=0.1):
        super().__init__(d_model, h, d_ff, dropout)
        self.dropout1, self.dropout2 = nn.Dropout(0.1), nn.Dropout(0.1)


class LayerFunctionalDropout(RightLayer):
    def forward(self, x, key_padding_mask=None):
        p = self.dropout1.p  # F.dropout's training argument defaults to True: it drops in eval mode too
        x = self.norm1(x + F.dropout(self.self_attn(x, x, x, key_padding_mask=key_padding_mask), p))
        return self.norm2(x + F.dropout(self.feed_forward(x), p))


class LayerSharedNorm(RightLayer):
    def __init__(self, d_model, h, d_ff, dropout=0.1):
        super().__init__(d_model, h, d_ff, dropout)
        self.norm2 = self.norm1  # one LayerNorm for both sub-layers


class LayerTorchNorms(RightLayer):
    def __init__(self, d_model, h, d_ff, dropout=0.1):
        super().__init__(d_model, h, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)


class LayerOneDropout(nn.Module):
    def __init__(self, d_model, h, d_ff, dropout=0.1):
        super().__init__()
        right = RightLayer(d_model, h, d_ff, dropout)
        self.self_attn, self.feed_forward = right.self_attn, right.feed_forward
        self.norm1, self.norm2 = right.norm1, right.norm2

    def forward(self, x, key_padding_mask=None):
        x = self.norm1(x + self.self_attn(x, x, x, key_padding_mask=key_padding_mask))
        return self.norm2(x + self.feed_forward(x))


class LayerUsesTorchLayer(RightLayer):
    def forward(self, x, key_padding_mask=None):
        d_model = x.shape[-1]
        torch_layer = nn.TransformerEncoderLayer(d_model, self.self_attn.h, self.feed_forward.w_1.out_features,
                                                 dropout=0.0, batch_first=True)
        return torch_layer.eval()(x, src_key_padding_mask=key_padding_mask)


# ----------------------------------------------------------------------------------------
# Encoder
# ----------------------------------------------------------------------------------------


class EncoderSharedLayer(RightEncoder):
    def __init__(self, d_model, h, d_ff, N, dropout=0.1):
        nn.Module.__init__(self)
        layer = RightLayer(d_model, h, d_ff, dropout)
        self.layers = nn.ModuleList([layer] * N)


class EncoderFinalNorm(RightEncoder):
    def __init__(self, d_model, h, d_ff, N, dropout=0.1):
        super().__init__(d_model, h, d_ff, N, dropout)
        self.norm = RightNorm(d_model)

    def forward(self, x, key_padding_mask=None):
        return self.norm(super().forward(x, key_padding_mask))


class EncoderFunctionalFinalNorm(RightEncoder):
    def forward(self, x, key_padding_mask=None):
        x = super().forward(x, key_padding_mask)
        return F.layer_norm(x, x.shape[-1:])


class EncoderNoMask(RightEncoder):
    def forward(self, x, key_padding_mask=None):
        for layer in self.layers:
            x = layer(x)
        return x


class EncoderMaskOnlyFirst(RightEncoder):
    def forward(self, x, key_padding_mask=None):
        for i, layer in enumerate(self.layers):
            x = layer(x, key_padding_mask if i == 0 else None)
        return x


class EncoderNotChained(RightEncoder):
    def forward(self, x, key_padding_mask=None):
        for layer in self.layers:
            out = layer(x, key_padding_mask)
        return out


class EncoderReturnInLoop(RightEncoder):
    def forward(self, x, key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, key_padding_mask)
            return x


class EncoderReversed(RightEncoder):
    def forward(self, x, key_padding_mask=None):
        for layer in reversed(self.layers):
            x = layer(x, key_padding_mask)
        return x


class EncoderLayersWithoutDropout(RightEncoder):
    def __init__(self, d_model, h, d_ff, N, dropout=0.1):
        nn.Module.__init__(self)
        self.layers = nn.ModuleList(RightLayer(d_model, h, d_ff) for _ in range(N))  # dropout left at 0.1


class EncoderPlainList(RightEncoder):
    def __init__(self, d_model, h, d_ff, N, dropout=0.1):
        nn.Module.__init__(self)
        self.layers = [RightLayer(d_model, h, d_ff, dropout) for _ in range(N)]


class EncoderOneLayerShort(RightEncoder):
    def __init__(self, d_model, h, d_ff, N, dropout=0.1):
        super().__init__(d_model, h, d_ff, N - 1, dropout)


MISTAKES = [
    # PositionwiseFeedForward
    Mistake(FFN, "no ReLU", FFNNoReLU, "the ReLU is missing", rule="values"),
    Mistake(FFN, "ReLU on the output too", FFNReLUOnOutputToo, "a ReLU on the FFN's output too", rule="values"),
    Mistake(FFN, "ReLU only on the output", FFNReLUOnlyOnOutput, "instead of between w_1 and w_2", rule="values"),
    Mistake(FFN, "GELU instead of ReLU", FFNGELU, "this is GELU", rule="values"),
    Mistake(FFN, "residual inside the FFN", FFNWithResidual, "the residual connection belongs to the encoder layer",
            rule="values"),
    Mistake(FFN, "dropout on the output of w_2", FFNDropoutAtOutput, "dropout was applied to the output of w_2", rule="values"),
    Mistake(FFN, "dropout on the input", FFNDropoutOnInput, "dropout was applied to the input x", rule="values"),
    Mistake(FFN, "F.dropout, active in eval mode", FFNFunctionalDropout, "dropout is active in eval mode", rule="values"),
    Mistake(FFN, "returns the hidden layer", FFNReturnsHidden, "the hidden width d_ff", rule="a tensor of x's shape"),
    Mistake(FFN, "dropout probability fixed at 0.1", FFNFixedDropout, "not the constructor's dropout=0.5", rule="values"),
    Mistake(FFN, "linear maps without bias", FFNNoBias, "keep nn.Linear's default bias=True", rule="parameters match"),
    # LayerNorm
    Mistake(NORM, "unbiased variance", NormUnbiased, "unbiased variance", rule="values"),
    Mistake(NORM, "eps outside the square root", NormEpsOutside, "eps is outside the square root", rule="values"),
    Mistake(NORM, "no eps", NormNoEps, "eps is missing", rule="values"),
    Mistake(NORM, "eps argument ignored", NormIgnoresEps, "the eps argument is ignored", rule="values"),
    Mistake(NORM, "divides by the variance", NormNoSqrt, "you divided by the variance", rule="values"),
    Mistake(NORM, "normalises over the positions", NormOverPositions, "you normalised over dim=", rule="values"),
    Mistake(NORM, "normalises over dim 0", NormOverDim0, "you normalised over dim=0", rule="values"),
    Mistake(NORM, "normalises over the whole tensor", NormWholeTensor, "over the whole tensor", rule="values"),
    Mistake(NORM, "gamma ignored", NormNoGamma, "gamma (the scale) is not applied", rule="values"),
    Mistake(NORM, "beta ignored", NormNoBeta, "beta (the shift) is not added", rule="values"),
    Mistake(NORM, "gamma and beta swapped", NormSwapped, "gamma and beta are swapped", rule="values"),
    Mistake(NORM, "variance as E[x^2] - E[x]^2", NormNaiveVariance, "E[x^2] - E[x]^2", rule="values"),
    Mistake(NORM, "gamma initialised to zeros", NormZeroGamma, "gamma must start at ones", rule="values"),
    Mistake(NORM, "parameters named weight and bias", NormTorchNames, "Name the scale `gamma`", rule="parameters match"),
    Mistake(NORM, "calls F.layer_norm", NormUsesBuiltin, "which this exercise asks you to build yourself",
            rule="no forbidden built-in"),
    # EncoderLayer
    Mistake(LAYER, "pre-norm instead of post-norm", LayerPreNorm, "this is the pre-norm layer", rule="values"),
    Mistake(LAYER, "residual added after the norm", LayerResidualAfterNorm, "the residual was added after the normalisation",
            rule="values"),
    Mistake(LAYER, "no residual connection", LayerNoResidual, "there is no residual connection", rule="values"),
    Mistake(LAYER, "padding mask not passed to the self-attention", LayerNoMask, "did not reach the self-attention",
            rule="values"),
    Mistake(LAYER, "padding mask passed positionally, so it lands in attn_mask", LayerMaskPositional,
            "the padding mask reached `attn_mask`", rule="values"),
    Mistake(LAYER, "padding mask inverted", LayerMaskInverted, "key_padding_mask is inverted", rule="values"),
    Mistake(LAYER, "norm1 and norm2 swapped", LayerNormsSwapped, "norm1 and norm2 are swapped", rule="values"),
    Mistake(LAYER, "feed-forward before self-attention", LayerFFNFirst, "the sub-layers are in the wrong order", rule="values"),
    Mistake(LAYER, "second residual from the layer's input", LayerSecondResidualFromInput,
            "the second residual adds the layer's input", rule="values"),
    Mistake(LAYER, "nn.LayerNorm for norm1 and norm2", LayerTorchNorms, "must be your LayerNorm", rule="parameters match"),
    Mistake(LAYER, "norm2 is norm1: one LayerNorm for both sub-layers", LayerSharedNorm,
            "norm2 and norm1 are one and the same object", rule="parameters match"),
    Mistake(LAYER, "no dropout1/dropout2 submodules", LayerOneDropout, "has no submodule dropout1", rule="dropout submodules"),
    Mistake(LAYER, "dropout1/dropout2 built, never called", LayerDropoutNeverUsed, "the residual dropout is missing",
            rule="values"),
    Mistake(LAYER, "dropout on the residual sum", LayerDropoutOnResidualSum, "dropout was applied to the residual sum",
            rule="values"),
    Mistake(LAYER, "dropout after the LayerNorm", LayerDropoutAfterNorm, "dropout was applied after the LayerNorm",
            rule="values"),
    Mistake(LAYER, "dropout2 never applied", LayerOnlyFirstDropout, "dropout2 is never applied", rule="values"),
    Mistake(LAYER, "self-attention built without dropout", LayerAttentionWithoutDropout,
            "the self-attention drops no attention weights", rule="values"),
    Mistake(LAYER, "dropout1/dropout2 with a fixed probability", LayerFixedDropout,
            "dropout1 and dropout2 drop with probability 0.1", rule="values"),
    Mistake(LAYER, "F.dropout, active in eval mode", LayerFunctionalDropout, "dropout is active in eval mode", rule="values"),
    Mistake(LAYER, "calls nn.TransformerEncoderLayer", LayerUsesTorchLayer, "which this exercise asks you to build yourself",
            rule="no forbidden built-in"),
    # Encoder
    Mistake(ENCODER, "the same layer object N times", EncoderSharedLayer, "the same EncoderLayer object was repeated",
            rule="parameters match"),
    Mistake(ENCODER, "a final LayerNorm module", EncoderFinalNorm, "add no final LayerNorm", rule="parameters match"),
    Mistake(ENCODER, "a final functional layer_norm", EncoderFunctionalFinalNorm, "add no final LayerNorm", rule="values"),
    Mistake(ENCODER, "padding mask not passed to the layers", EncoderNoMask, "did not reach the layers", rule="values"),
    Mistake(ENCODER, "padding mask only for the first layer", EncoderMaskOnlyFirst, "reached only the first layer",
            rule="values"),
    Mistake(ENCODER, "every layer applied to the input", EncoderNotChained, "every layer was applied to the encoder's input",
            rule="values"),
    Mistake(ENCODER, "return inside the loop", EncoderReturnInLoop, "only the first layer ran", rule="values"),
    Mistake(ENCODER, "layers in reverse order", EncoderReversed, "reverse order", rule="values"),
    Mistake(ENCODER, "plain Python list of layers", EncoderPlainList, "a plain Python list hides its modules",
            rule="parameters match"),
    Mistake(ENCODER, "layers built without the dropout argument", EncoderLayersWithoutDropout,
            "the layers drop with probability 0.1, not the encoder's dropout=0.3", rule="values"),
    Mistake(ENCODER, "N - 1 layers", EncoderOneLayerShort, "only 2 of the N=3 layers", rule="parameters match"),
]
