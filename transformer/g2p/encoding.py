"""Words and pronunciations as tensors: what the training loop, the evaluation and the
pronouncer share.

A word is encoded as its letters followed by ``<eos>`` (the encoder sees where it ends); a
pronunciation as ``<bos>`` + phonemes for the decoder's input and phonemes + ``<eos>`` for the
targets it must predict, one position later (teacher forcing).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from reference.prerequisites import greedy_decode

from .data import Vocabulary, joint_vocabulary, letter_vocabulary, phoneme_vocabulary


@dataclass(frozen=True)
class Vocabularies:
    source: Vocabulary
    target: Vocabulary

    @classmethod
    def make(cls, shared: bool, stress: bool) -> Vocabularies:
        if shared:  # one table, so that the model can tie its embeddings (section 3.4)
            joint = joint_vocabulary(stress)
            return cls(joint, joint)
        return cls(letter_vocabulary(), phoneme_vocabulary(stress))


@dataclass(frozen=True)
class EncodedPairs:
    """Every (word, pronunciation) example as id lists, with the length a batch pads it to."""

    sources: list[list[int]]
    targets: list[list[int]]  # phonemes + <eos>; the decoder's input is <bos> + targets[:-1]

    @property
    def lengths(self) -> list[int]:
        return [max(len(s), len(t)) for s, t in zip(self.sources, self.targets)]

    def __len__(self) -> int:
        return len(self.sources)


def encode_pairs(pairs: Sequence[tuple[str, Sequence[str]]], vocabs: Vocabularies) -> EncodedPairs:
    sources = [vocabs.source.encode(word, eos=True) for word, _ in pairs]
    targets = [vocabs.target.encode(phonemes, eos=True) for _, phonemes in pairs]
    return EncodedPairs(sources, targets)


def pad(rows: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    """Id lists -> (B, longest) LongTensor, padded at the end."""
    out = torch.full((len(rows), max(len(r) for r in rows)), pad_id, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def make_batch(
    data: EncodedPairs, indices: Sequence[int], vocabs: Vocabularies
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(src (B, S), decoder input (B, T), targets (B, T)) for some examples."""
    target = vocabs.target
    src = pad([data.sources[i] for i in indices], vocabs.source.pad_id)  # (B, S)
    tgt_out = pad([data.targets[i] for i in indices], target.pad_id)  # (B, T)
    tgt_in = pad([[target.bos_id] + data.targets[i][:-1] for i in indices], target.pad_id)  # (B, T)
    return src, tgt_in, tgt_out


def bucket_length(length: int, multiple: int) -> int:
    """``length`` rounded up to a multiple of ``multiple``: the few lengths batches are padded to."""
    return -(-length // multiple) * multiple


def resident_examples(data: EncodedPairs, vocabs: Vocabularies, length: int, device: torch.device | str
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every example at once, padded to ``length``, on ``device``: (src, decoder input, targets), each
    (n + 1, length). Row n is an empty example (``<eos>`` in, ``<bos>`` to the decoder, no target), which
    fills a batch up to a fixed number of rows: every query in it has a key to attend to, and the loss
    counts none of its positions."""
    src, tgt_in, tgt_out = make_batch(data, range(len(data)), vocabs)  # (n, longest) each
    empty = (vocabs.source.eos_id, vocabs.target.bos_id, vocabs.target.pad_id)
    rows = []
    for tensor, pad_id, first in zip((src, tgt_in, tgt_out), (vocabs.source.pad_id, vocabs.target.pad_id,
                                                               vocabs.target.pad_id), empty):
        if tensor.shape[1] > length:
            raise ValueError(f"an example has {tensor.shape[1]} tokens, more than the length {length} to pad to")
        full = torch.full((len(data) + 1, length), pad_id, dtype=torch.long)
        full[: len(data), : tensor.shape[1]] = tensor
        full[len(data), 0] = first
        rows.append(full.to(device))  # (n + 1, length)
    return rows[0], rows[1], rows[2]


@torch.no_grad()
def predict(model: torch.nn.Module, words: Sequence[str], vocabs: Vocabularies, device: torch.device | str = "cpu",
            batch_size: int = 256, max_len: int = 32, progress: bool = False) -> list[list[str]]:
    """Greedy pronunciations of words (chapter 1's decoder), in the order given; ``progress`` shows a bar
    counting words, with the time left."""
    from tqdm import tqdm

    was_training = model.training
    model.eval()
    order = sorted(range(len(words)), key=lambda i: len(words[i]))  # similar lengths pad little
    out: list[list[str]] = [[] for _ in words]
    bar = tqdm(total=len(words), desc="greedy", unit="word", disable=not progress)
    try:
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            src = pad([vocabs.source.encode(words[i], eos=True) for i in chunk], vocabs.source.pad_id).to(device)
            ys = greedy_decode(model, src, max_len, vocabs.target.bos_id, vocabs.target.eos_id, vocabs.target.pad_id)
            for i, row in zip(chunk, ys.tolist()):
                out[i] = vocabs.target.decode(row)
            bar.update(len(chunk))
    finally:
        bar.close()
        model.train(was_training)
    return out
