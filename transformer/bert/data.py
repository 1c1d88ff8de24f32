"""What the small BERT trains on: masked spellings, and words with a label.

Pre-training reads the spellings of the capstone's G2P training words (the dev and test words
are never seen), masked by BERT's rule as chapter 7's exercise :func:`mask_tokens` implements
it: 15 % of the letters are chosen; of those, 80 % become [MASK], 10 % a random letter and 10 %
stay as they are, and the loss is taken at the chosen positions only. [CLS], [SEP] and [PAD]
are never chosen. Each batch's mask comes from a ``torch.Generator`` seeded from torch's global
generator, which the checkpoint saves, so a resumed run masks exactly as an uninterrupted one.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from reference.bert_gpt import mask_tokens

from .model import BertClassifier, BertForMaskedLM, CharVocabulary
from .syllables import Labelled

IGNORE = -100  # the label of a position that is not scored, as torch's cross_entropy expects


def masked_batch(words: Sequence[str], vocab: CharVocabulary, max_len: int,
                 generator: torch.Generator, rate: float = 0.15, masking=mask_tokens) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, labels), each (B, T): the words with BERT's masking (chapter 7's mask_tokens, or the learner's
    ``masking``), and the ids to recover (-100 elsewhere)."""
    ids = vocab.batch(words, max_len)  # (B, T)
    return masking(ids, vocab.mask_id, len(vocab), vocab.special_ids, generator, rate)


def masked_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(sum of the cross-entropy over the chosen positions, how many there are); logits (B, T, V)."""
    chosen = int((labels != IGNORE).sum())
    # A sum, not a mean: a batch in which nothing was chosen then adds 0 instead of 0/0.
    total = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE, reduction="sum")
    return total, chosen


@torch.no_grad()
def masked_lm_scores(model: BertForMaskedLM, words: Sequence[str], vocab: CharVocabulary, seed: int,
                     batch_size: int = 512, device: torch.device | str = "cpu") -> dict[str, float]:
    """Loss and accuracy at the masked positions of held-out words, with masks fixed by ``seed``."""
    was_training = model.training
    model.eval()
    total, right, chosen = 0.0, 0, 0
    generator = torch.Generator().manual_seed(seed)
    for start in range(0, len(words), batch_size):
        inputs, labels = masked_batch(words[start : start + batch_size], vocab, model.bert.config.max_len, generator)
        logits = model(inputs.to(device)).cpu()  # (B, T, V)
        loss, n = masked_lm_loss(logits, labels)
        total += float(loss)
        chosen += n
        scored = labels != IGNORE  # (B, T)
        right += int((logits.argmax(-1)[scored] == labels[scored]).sum())
    model.train(was_training)
    return {"loss": total / max(chosen, 1), "accuracy": right / max(chosen, 1), "masked": chosen}


def labelled_batch(labelled: Labelled, indices: Sequence[int], vocab: CharVocabulary,
                   max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids (B, T), targets (B,)): the words at ``indices`` and their labels as classes from 0."""
    ids = vocab.batch([labelled.words[i] for i in indices], max_len)
    targets = torch.tensor([labelled.labels[i] - 1 for i in indices], dtype=torch.long)  # label 1 is class 0
    return ids, targets


@torch.no_grad()
def predict(model: BertClassifier, words: Sequence[str], vocab: CharVocabulary, batch_size: int = 512,
            device: torch.device | str = "cpu") -> list[int]:
    """The predicted label (from 1) of each word."""
    was_training = model.training
    model.eval()
    out: list[int] = []
    for start in range(0, len(words), batch_size):
        ids = vocab.batch(words[start : start + batch_size], model.bert.config.max_len).to(device)
        out += (model(ids).argmax(-1) + 1).tolist()
    model.train(was_training)
    return out


def copy_encoder(source: nn.Module, target: nn.Module) -> None:
    """Give ``target`` the encoder weights of ``source`` (both hold a ``bert`` BertEncoder)."""
    if source.bert.config != target.bert.config:
        raise ValueError(f"the encoders differ: {source.bert.config} there, {target.bert.config} here")
    target.bert.load_state_dict(source.bert.state_dict())
