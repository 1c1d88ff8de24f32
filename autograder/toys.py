"""Small deterministic models that exercises drive and checks rebuild.

They are registered as providers, so a case can name one (``Provided("toy_translator", {...})``)
instead of carrying an object: the learner's side and the grader's side each build their own
copy from the same plain arguments and get the same weights.
"""
from __future__ import annotations

import math

import torch

from .framework import provider, seeded

#: the logit given to tokens a model must never produce (<bos>, <pad>): far below any real logit,
#: yet finite, so that a softmax or a log-softmax of the logits stays free of NaN
NEVER = -1.0e4


@provider("toy_translator")
class ToyTranslator(torch.nn.Module):
    """A tiny untrained encoder-decoder with a predictable sense of when to stop.

    ``encode(src)`` maps source ids ``(B, S)`` to a memory ``(B, S, d)``, zero at padding.
    ``decode(memory, ys)`` maps the decoder input ``(B, T)`` to next-token logits ``(B, T, V)``:
    the logits at position ``t`` are those of the token after ``ys[:, : t + 1]``. They depend on
    the source (through the mean of the memory), on the mean of every earlier token and on the
    latest token, so a decoder that does not feed its own output back goes astray.

    The ``<eos>`` logit grows with the number of tokens generated so far and crosses the others
    after about as many tokens as the source has (padding excluded). Rows with short sources
    therefore finish early, and rows with long ones run past any small ``max_len``. After an
    ``<eos>`` the model goes on proposing ordinary tokens, never ``<eos>`` again, so a decoder
    that forgets to pad finished rows is seen to. Rows never influence each other. All arithmetic
    is float64, so results do not depend on batch size.
    """

    def __init__(
        self,
        vocab_size: int = 16,
        d: int = 16,
        seed: int = 0,
        bos_id: int = 1,
        eos_id: int = 2,
        pad_id: int = 0,
        eos_slope: float = 8.0,
    ) -> None:
        super().__init__()
        if len({bos_id, eos_id, pad_id}) != 3 or not all(0 <= i < vocab_size for i in (bos_id, eos_id, pad_id)):
            raise ValueError("bos_id, eos_id and pad_id must be three different ids below vocab_size")
        g = seeded(seed)

        def weight(*shape: int, scale: float = 1.0) -> torch.Tensor:
            return torch.randn(*shape, generator=g, dtype=torch.float64) * scale

        src_embed = weight(vocab_size, d)
        src_embed[pad_id] = 0.0  # padding carries no content, so the memory is zero there
        self.register_buffer("src_embed", src_embed)  # (V, d)
        self.register_buffer("tgt_embed", weight(vocab_size, d))  # (V, d)
        self.register_buffer("W_mem", weight(d, d, scale=1 / math.sqrt(d)))  # (d, d)
        self.register_buffer("W_hist", weight(d, d, scale=1.5 / math.sqrt(d)))  # (d, d)
        self.register_buffer("W_last", weight(d, d, scale=1.5 / math.sqrt(d)))  # (d, d)
        self.register_buffer("W_ctx", weight(d, d, scale=2.5 / math.sqrt(d)))  # (d, d)
        W_out = weight(d, vocab_size)
        # Columns of one length, so that no token wins merely by having a large weight vector.
        self.register_buffer("W_out", 3.0 * W_out / W_out.norm(dim=0, keepdim=True))  # (d, V)
        self.vocab_size, self.d = vocab_size, d
        self.bos_id, self.eos_id, self.pad_id = bos_id, eos_id, pad_id
        self.eos_slope = eos_slope

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        """Source ids (B, S) -> memory (B, S, d), exactly zero at padding."""
        keep = (src != self.pad_id).unsqueeze(-1)  # (B, S, 1)
        return torch.tanh(self.src_embed[src] @ self.W_mem) * keep  # (B, S, d)

    def decode(self, memory: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        """Memory (B, S, d) and decoder input (B, T) -> next-token logits (B, T, V)."""
        present = memory.abs().sum(-1) > 0  # (B, S): the source positions that are not padding
        src_len = present.sum(-1, keepdim=True)  # (B, 1)
        T, S = ys.shape[1], memory.shape[1]
        count = torch.arange(1, T + 1, dtype=torch.float64)  # (T,) tokens in each prefix
        # A monotonic alignment: the prediction from position t reads source position t (or the last one).
        aligned = memory[:, torch.arange(T).clamp(max=S - 1)]  # (B, T, d)
        emb = self.tgt_embed[ys]  # (B, T, d)
        history = emb.cumsum(1) / count.view(1, T, 1)  # (B, T, d): mean of each prefix
        h = torch.tanh(aligned @ self.W_ctx + history @ self.W_hist + emb @ self.W_last)  # (B, T, d)
        logits = h @ self.W_out  # (B, T, V)
        generated = count - 1  # (T,) tokens produced after <bos> when predicting from position t
        eos = self.eos_slope * (generated.view(1, T) + 1 - src_len)  # (B, T)
        # Once <eos> is in the prefix the model says something else: like a real model, it does not
        # know that nothing after <eos> is read, so a decoder must pad finished rows itself.
        said_eos = (ys == self.eos_id).cumsum(1) > 0  # (B, T)
        logits[..., self.eos_id] = eos.masked_fill(said_eos, NEVER)
        logits[..., self.bos_id] = NEVER
        logits[..., self.pad_id] = NEVER
        return logits

    def forward(self, src: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(src), ys)


@provider("generator")
def generator(seed: int) -> torch.Generator:
    """A private random number generator, seeded: what a case hands a function that draws at random.

    A ``torch.Generator`` is not data that can cross to a sandbox, so a case names its seed and
    each side builds its own; the global generator is never involved.
    """
    return seeded(seed)
