"""Wrong answers to chapter 6, as learners write them, and the words that must name each one."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from . import Mistake, Spoiled

TABLE = "positional.sinusoidal_encoding"
LAYER = "positional.PositionalEmbedding"


SPOILED = Spoiled("PositionalEmbedding", ", persistent=False)", ")")


# ----------------------------------------------------------------------------------------
# sinusoidal_encoding: the usual float32 code, one slip at a time
# ----------------------------------------------------------------------------------------


def _check_sizes(max_len, d_model):
    if max_len < 1 or d_model < 1:
        raise ValueError("max_len and d_model must be at least 1")


def _interleave(sines, cosines, d_model):
    pe = torch.zeros(sines.shape[0], d_model)
    pe[:, 0::2] = sines
    pe[:, 1::2] = cosines[:, : d_model // 2]
    return pe


def _in_float32(max_len, d_model):
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    return _interleave(torch.sin(position * div_term), torch.cos(position * div_term), d_model)


def _right(max_len, d_model):
    """The table as the instructions ask: computed in float64, converted at the end."""
    position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2).double() * (-math.log(10000.0) / d_model))
    return _interleave(torch.sin(position * div_term), torch.cos(position * div_term), d_model).float()


def table_in_float32(max_len, d_model):
    """The formula right, the precision note not followed: the angles are float32 throughout."""
    _check_sizes(max_len, d_model)
    return _in_float32(max_len, d_model)


def table_sin_cos_swapped(max_len, d_model):
    _check_sizes(max_len, d_model)
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.cos(position * div_term)
    pe[:, 1::2] = torch.sin(position * div_term[: d_model // 2])
    return pe


def table_column_index_exponent(max_len, d_model):
    _check_sizes(max_len, d_model)
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for j in range(d_model):
            angle = pos / 10000 ** (j / d_model)  # j is the column: the cos column gets its own exponent
            pe[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return pe


def table_pair_index_exponent(max_len, d_model):
    _check_sizes(max_len, d_model)
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    i = torch.arange((d_model + 1) // 2, dtype=torch.float32)  # the pair index
    div_term = 10000 ** (i / d_model)
    return _interleave(torch.sin(position / div_term), torch.cos(position / div_term), d_model)


def table_twice_column_index(max_len, d_model):
    _check_sizes(max_len, d_model)
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(d_model):
            angle = pos / 10000 ** (2 * i / d_model)
            pe[pos, i] = math.sin(angle) if i % 2 == 0 else math.cos(angle)
    return pe


def table_base_1000(max_len, d_model):
    _check_sizes(max_len, d_model)
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(1000.0) / d_model))
    return _interleave(torch.sin(position * div_term), torch.cos(position * div_term), d_model)


def table_exp_without_log(max_len, d_model):
    _check_sizes(max_len, d_model)
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(-torch.arange(0, d_model, 2).float() / d_model)
    return _interleave(torch.sin(position * div_term), torch.cos(position * div_term), d_model)


def table_positions_from_1(max_len, d_model):
    _check_sizes(max_len, d_model)
    position = torch.arange(1, max_len + 1, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    return _interleave(torch.sin(position * div_term), torch.cos(position * div_term), d_model)


def table_concatenated_halves(max_len, d_model):
    _check_sizes(max_len, d_model)
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    angle = position * div_term
    return torch.cat([torch.sin(angle), torch.cos(angle[:, : d_model // 2])], dim=-1)


def table_multiplies(max_len, d_model):
    _check_sizes(max_len, d_model)
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * (math.log(10000.0) / d_model))  # sign lost
    return _interleave(torch.sin(position * div_term), torch.cos(position * div_term), d_model)


def table_crashes_on_odd_width(max_len, d_model):
    _check_sizes(max_len, d_model)
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)  # one column too many when d_model is odd
    return pe


def table_float64(max_len, d_model):
    _check_sizes(max_len, d_model)
    return _right(max_len, d_model).double()


def table_no_validation(max_len, d_model):
    return _right(max(max_len, 0), max(d_model, 0))


def table_returns_angles(max_len, d_model):
    _check_sizes(max_len, d_model)
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    j = torch.arange(d_model)
    return position / 10000 ** ((j - j % 2).float() / d_model)


def table_assert_instead_of_error(max_len, d_model):
    assert max_len >= 1 and d_model >= 1, "bad sizes"
    return _right(max_len, d_model)


# ----------------------------------------------------------------------------------------
# PositionalEmbedding: right table, one slip in the layer
# ----------------------------------------------------------------------------------------


class _Base(nn.Module):
    def __init__(self, vocab_size, d_model, dropout=0.1, max_len=5000):
        super().__init__()
        self.d_model = d_model
        self.max_len = max_len
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", _right(max_len, d_model), persistent=False)

    def _length(self, tokens):
        T = tokens.shape[1]
        if T > self.max_len:
            raise ValueError(f"sequence of length {T} exceeds max_len={self.max_len}")
        return T


class LayerConcatenates(_Base):
    def forward(self, tokens):
        T = self._length(tokens)
        x = self.embedding(tokens) * math.sqrt(self.d_model)
        return self.dropout(torch.cat([x, self.pe[:T].expand(tokens.shape[0], T, self.d_model)], dim=-1))


class LayerNoScale(_Base):
    def forward(self, tokens):
        T = self._length(tokens)
        return self.dropout(self.embedding(tokens) + self.pe[:T])


class LayerScalesTheSum(_Base):
    def forward(self, tokens):
        T = self._length(tokens)
        return self.dropout((self.embedding(tokens) + self.pe[:T]) * math.sqrt(self.d_model))


class LayerScalesTheEncoding(_Base):
    def forward(self, tokens):
        T = self._length(tokens)
        return self.dropout(self.embedding(tokens) + self.pe[:T] * math.sqrt(self.d_model))


class LayerDropoutBeforeAdding(_Base):
    def forward(self, tokens):
        T = self._length(tokens)
        return self.dropout(self.embedding(tokens) * math.sqrt(self.d_model)) + self.pe[:T]


class LayerNoDropout(_Base):
    def forward(self, tokens):
        T = self._length(tokens)
        return self.embedding(tokens) * math.sqrt(self.d_model) + self.pe[:T]


class LayerDropoutAlwaysOn(_Base):
    def __init__(self, vocab_size, d_model, dropout=0.1, max_len=5000):
        super().__init__(vocab_size, d_model, dropout, max_len)
        self.p = dropout

    def forward(self, tokens):
        T = self._length(tokens)
        return F.dropout(self.embedding(tokens) * math.sqrt(self.d_model) + self.pe[:T], self.p, training=True)


class LayerFixedDropout(_Base):
    def __init__(self, vocab_size, d_model, dropout=0.1, max_len=5000):
        super().__init__(vocab_size, d_model, dropout, max_len)
        self.dropout = nn.Dropout(0.1)  # the argument is ignored

    def forward(self, tokens):
        T = self._length(tokens)
        return self.dropout(self.embedding(tokens) * math.sqrt(self.d_model) + self.pe[:T])


class LayerSlicesByBatch(_Base):
    def forward(self, tokens):
        self._length(tokens)
        B = tokens.shape[0]
        return self.dropout(self.embedding(tokens) * math.sqrt(self.d_model) + self.pe[:B])


class LayerNoLengthCheck(_Base):
    def forward(self, tokens):
        T = tokens.shape[1]
        return self.dropout(self.embedding(tokens) * math.sqrt(self.d_model) + self.pe[:T])


class LayerTableAsParameter(_Base):
    def __init__(self, vocab_size, d_model, dropout=0.1, max_len=5000):
        nn.Module.__init__(self)
        self.d_model = d_model
        self.max_len = max_len
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.dropout = nn.Dropout(dropout)
        self.pe = nn.Parameter(_right(max_len, d_model))

    def forward(self, tokens):
        T = self._length(tokens)
        return self.dropout(self.embedding(tokens) * math.sqrt(self.d_model) + self.pe[:T])


class LayerPersistentTable(_Base):
    def __init__(self, vocab_size, d_model, dropout=0.1, max_len=5000):
        super().__init__(vocab_size, d_model, dropout, max_len)
        self.register_buffer("pe", _right(max_len, d_model))  # persistent by default: saved with every checkpoint

    def forward(self, tokens):
        T = self._length(tokens)
        return self.dropout(self.embedding(tokens) * math.sqrt(self.d_model) + self.pe[:T])


class LayerTableAsAttribute(_Base):
    def __init__(self, vocab_size, d_model, dropout=0.1, max_len=5000):
        super().__init__(vocab_size, d_model, dropout, max_len)
        del self.pe
        self.pe = _right(max_len, d_model)  # a plain tensor: .to(device) leaves it behind

    def forward(self, tokens):
        T = self._length(tokens)
        return self.dropout(self.embedding(tokens) * math.sqrt(self.d_model) + self.pe[:T])


class LayerBatchedTable(_Base):
    """The table stored as (1, max_len, d_model) and sliced pe[:, :T]: right numbers, wrong buffer."""

    def __init__(self, vocab_size, d_model, dropout=0.1, max_len=5000):
        super().__init__(vocab_size, d_model, dropout, max_len)
        self.register_buffer("pe", _right(max_len, d_model).unsqueeze(0), persistent=False)

    def forward(self, tokens):
        T = self._length(tokens)
        return self.dropout(self.embedding(tokens) * math.sqrt(self.d_model) + self.pe[:, :T])


class LayerFloat64Table(_Base):
    def __init__(self, vocab_size, d_model, dropout=0.1, max_len=5000):
        super().__init__(vocab_size, d_model, dropout, max_len)
        self.register_buffer("pe", _right(max_len, d_model).double(), persistent=False)

    def forward(self, tokens):
        T = self._length(tokens)
        return self.dropout(self.embedding(tokens) * math.sqrt(self.d_model) + self.pe[:T])


MISTAKES = [
    # sinusoidal_encoding
    Mistake(TABLE, "sin and cos swapped", table_sin_cos_swapped, "sin and cos are swapped", rule="values"),
    Mistake(TABLE, "angles computed in float32", table_in_float32, "right only to float32 precision",
            rule="angles computed in float64"),
    Mistake(TABLE, "exponent j/d_model with the column index j", table_column_index_exponent,
            "odd columns used their own index", rule="values"),
    Mistake(TABLE, "exponent i/d_model with the pair index i", table_pair_index_exponent, "pair index", rule="values"),
    Mistake(TABLE, "exponent 2j/d_model with the column index j", table_twice_column_index, "twice the column index",
            rule="values"),
    Mistake(TABLE, "base 1000", table_base_1000, "the base is 10000, not 1000", rule="values"),
    Mistake(TABLE, "exp without log(10000)", table_exp_without_log, "multiplied by log(10000)", rule="values"),
    Mistake(TABLE, "positions start at 1", table_positions_from_1, "positions start at 1", rule="values"),
    Mistake(TABLE, "sines and cosines concatenated", table_concatenated_halves, "interleaves them", rule="values"),
    Mistake(TABLE, "multiplies pos by the divisor", table_multiplies, "pos was multiplied by 10000^(2i/d_model)", rule="values"),
    Mistake(TABLE, "crashes on odd d_model", table_crashes_on_odd_width, "one more sin column than cos columns",
            rule="raises nothing"),
    Mistake(TABLE, "returns float64", table_float64, "return float32", rule="float32"),
    Mistake(TABLE, "no validation", table_no_validation, "so raise ValueError instead", rule="refusal"),
    Mistake(TABLE, "assert instead of ValueError", table_assert_instead_of_error, "not an assert", rule="refusal"),
    Mistake(TABLE, "returns the angles", table_returns_angles, "not the angles", rule="finite, within [-1, 1]"),
    # PositionalEmbedding
    Mistake(LAYER, "encoding concatenated", LayerConcatenates, "concatenated", rule="shape (B, T, d_model)"),
    Mistake(LAYER, "no sqrt(d_model) scale", LayerNoScale, "not multiplied by sqrt(d_model)", rule="values"),
    Mistake(LAYER, "scales the sum", LayerScalesTheSum, "you scaled the sum", rule="values"),
    Mistake(LAYER, "scales the encoding", LayerScalesTheEncoding, "the encoding was multiplied by sqrt(d_model)", rule="values"),
    Mistake(LAYER, "dropout before adding", LayerDropoutBeforeAdding, "before the encoding was added", rule="values"),
    Mistake(LAYER, "no dropout", LayerNoDropout, "no entry was dropped", rule="values"),
    Mistake(LAYER, "dropout also in eval mode", LayerDropoutAlwaysOn, "dropout is active in eval mode", rule="values"),
    Mistake(LAYER, "dropout probability ignored", LayerFixedDropout, "nn.Dropout(dropout)", rule="values"),
    Mistake(LAYER, "pe[:B] instead of pe[:T]", LayerSlicesByBatch, "slice the table by the sequence length",
            rule="raises nothing"),
    Mistake(LAYER, "no check of T > max_len", LayerNoLengthCheck, "raise ValueError", rule="refusal"),
    Mistake(LAYER, "table as a parameter", LayerTableAsParameter, "register it with self.register_buffer",
            rule="parameters match"),
    Mistake(LAYER, "table stored as (1, max_len, d_model)", LayerBatchedTable,
            "keep the table as sinusoidal_encoding returns it", rule="self.pe is the table"),
    Mistake(LAYER, "table registered as a persistent buffer", LayerPersistentTable, "registered as a persistent buffer",
            rule="the table stored as a non-persistent buffer"),
    Mistake(LAYER, "table kept as a plain tensor attribute", LayerTableAsAttribute, "`pe` is not a buffer",
            rule="raises nothing"),
    Mistake(LAYER, "float64 table", LayerFloat64Table, "the table pe must be float32 too", rule="float32, finite"),
]
