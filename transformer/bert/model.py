"""A small BERT over the letters of a word, built from the course's encoder.

The encoder stack is chapter 4's :class:`reference.encoder.Encoder` (post-norm, as in the paper
and in the original BERT), with chapter 3's multi-head attention inside. Around it, BERT's parts:

* a character vocabulary with BERT's five special tokens: ``[PAD]`` fills a short word's row,
  ``[CLS]`` opens every input (its final state is what a classifier reads), ``[SEP]`` closes it,
  ``[MASK]`` hides a letter during pre-training, ``[UNK]`` stands for a character outside
  ``'a-z``;
* learned position embeddings (BERT's choice; chapter 6's sinusoids would do as well here),
  added to the token embeddings, then a LayerNorm and dropout;
* no segment embeddings: BERT adds them to tell sentence A from sentence B in a pair, and every
  input here is one word, so they would be one constant vector, which the LayerNorm's shift
  already provides;
* a masked-language-model head (a dense layer, GELU, LayerNorm, then the token embedding matrix
  transposed, plus a bias) whose output matrix *is* the input embedding, as BERT ties them;
* a classification head on the final ``[CLS]`` state (BERT's pooler, a dense layer with tanh,
  then dropout and one linear layer to the classes).

:class:`BertEncoder` is the part that pre-training teaches and fine-tuning starts from;
:class:`BertForMaskedLM` and :class:`BertClassifier` each put a head on one.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from reference.encoder import Encoder, LayerNorm

from ..g2p.data import LETTERS
from ..model import ModelShape, positive_integers

PAD, CLS, SEP, MASK, UNK = "[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"
SPECIALS = (PAD, CLS, SEP, MASK, UNK)  # ids 0 to 4


class CharVocabulary:
    """BERT's special tokens (ids 0-4), then the apostrophe and the letters a-z."""

    pad_id, cls_id, sep_id, mask_id, unk_id = range(len(SPECIALS))

    def __init__(self, symbols: Sequence[str] = LETTERS) -> None:
        self.tokens: tuple[str, ...] = (*SPECIALS, *symbols)
        if len(set(self.tokens)) != len(self.tokens):
            raise ValueError("a vocabulary's symbols must be distinct and differ from the special tokens")
        self.ids = {t: i for i, t in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def special_ids(self) -> tuple[int, ...]:
        return tuple(range(len(SPECIALS)))

    def encode(self, word: str) -> list[int]:
        """[CLS] letters [SEP]; a character outside the vocabulary becomes [UNK]."""
        return [self.cls_id, *(self.ids.get(c, self.unk_id) for c in word.lower()), self.sep_id]

    def decode(self, ids: Iterable[int]) -> str:
        """The letters of a row of ids, [UNK] and [MASK] shown as such, the other special tokens dropped."""
        shown = (self.pad_id, self.cls_id, self.sep_id)
        return "".join(self.tokens[int(i)] for i in ids if int(i) not in shown)

    def batch(self, words: Sequence[str], max_len: int) -> torch.Tensor:
        """Words as a (B, T) tensor of ids, padded to the longest; T is at most max_len."""
        if not words:
            raise ValueError("a batch needs at least one word")
        rows = [self.encode(w) for w in words]
        longest = max(len(r) for r in rows)
        if longest > max_len:
            raise ValueError(f"a word of {longest - 2} letters needs {longest} positions; the model has {max_len}")
        ids = torch.full((len(rows), longest), self.pad_id, dtype=torch.long)  # (B, T)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
        return ids


@dataclass(frozen=True)
class BertConfig(ModelShape):
    vocab_size: int = len(SPECIALS) + len(LETTERS)
    d_model: int = 128
    h: int = 4
    N: int = 4
    d_ff: int = 512
    dropout: float = 0.1
    max_len: int = 32  # positions: the longest word of CMUdict has 28 letters, plus [CLS] and [SEP]

    def __post_init__(self) -> None:
        super().__post_init__()
        positive_integers(self, ("max_len",))
        if self.vocab_size <= len(SPECIALS):
            raise ValueError(f"vocab_size={self.vocab_size} leaves no room for symbols after the {len(SPECIALS)} special tokens")


class BertEncoder(nn.Module):
    """Token and position embeddings, LayerNorm, dropout, then the course's encoder stack."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.position_embedding = nn.Embedding(config.max_len, config.d_model)
        self.norm = LayerNorm(config.d_model)
        self.dropout = nn.Dropout(config.dropout)
        self.encoder = Encoder(config.d_model, config.h, config.d_ff, config.N, config.dropout)
        # BERT draws its embeddings from N(0, 0.02^2); the LayerNorm after the sum sets their scale.
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        nn.init.normal_(self.position_embedding.weight, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, T) -> final states (B, T, d_model). Padding is [PAD] (id 0); no key attends to it."""
        T = ids.shape[1]
        if T > self.config.max_len:
            raise ValueError(f"a row of {T} tokens is longer than the model's {self.config.max_len} positions")
        positions = torch.arange(T, device=ids.device)  # (T,)
        x = self.token_embedding(ids) + self.position_embedding(positions)  # (B, T, d_model) + (T, d_model)
        x = self.dropout(self.norm(x))  # (B, T, d_model)
        return self.encoder(x, key_padding_mask=ids == CharVocabulary.pad_id)  # (B, T, d_model)


class BertForMaskedLM(nn.Module):
    """The encoder and the masked-language-model head, whose output matrix is the token embedding."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.bert = BertEncoder(config)
        self.transform = nn.Sequential(nn.Linear(config.d_model, config.d_model), nn.GELU(), LayerNorm(config.d_model))
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, T) -> logits over the vocabulary (B, T, V) at every position."""
        hidden = self.transform(self.bert(ids))  # (B, T, d_model)
        # Tied weights: scoring a token is a dot product with that token's input embedding.
        return hidden @ self.bert.token_embedding.weight.T + self.bias  # (B, T, d_model) @ (d_model, V) -> (B, T, V)


class BertClassifier(nn.Module):
    """The encoder and a classifier that reads the final state of [CLS] (position 0)."""

    def __init__(self, config: BertConfig, classes: int) -> None:
        super().__init__()
        if classes < 2:
            raise ValueError(f"a classifier needs at least 2 classes, got {classes}")
        self.bert = BertEncoder(config)
        self.pooler = nn.Sequential(nn.Linear(config.d_model, config.d_model), nn.Tanh())
        self.dropout = nn.Dropout(config.dropout)
        self.out = nn.Linear(config.d_model, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, T) -> class logits (B, classes)."""
        cls_state = self.bert(ids)[:, 0]  # (B, d_model): [CLS] is always the first token
        return self.out(self.dropout(self.pooler(cls_state)))  # (B, classes)
