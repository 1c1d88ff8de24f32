"""Small deterministic models that exercises drive and checks rebuild.

They are registered as providers, so a case can name one (``Provided("toy_translator", {...})``)
instead of carrying an object: the learner's side and the grader's side each build their own
copy from the same plain arguments and get the same weights.
"""
from __future__ import annotations

import math

import torch

from .products import ProductCount
from .providers import provider, seeded

#: the logit given to tokens a model must never produce (<bos>, <pad>): far below any real logit,
#: yet finite, so that a softmax or a log-softmax of the logits stays free of NaN
NEVER = -1.0e4


class EncodedAgain(RuntimeError):
    """A :class:`ToyTranslator` that may encode once was asked to encode again in the same call.

    ``facts`` says how many times, as data the grader words in the learner's language (``encoded``); the
    English is what the learner's own process shows.
    """

    def __init__(self, times: int) -> None:
        self.facts = {"encoded": (str(times),)}
        super().__init__(
            f"model.encode was called {times} times in one decoding: the memory does not change from step to step, "
            "so encode the source once, before the loop, and pass that memory to every model.decode (model(src, ys) "
            "encodes too).")


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
        encodes: int | None = None,
    ) -> None:
        super().__init__()
        #: how many times a call may encode its source (the notebook says once), None: any number
        self.encodes, self.encoded = encodes, 0
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
        self.encoded += 1
        if self.encodes is not None and self.encoded > self.encodes:
            raise EncodedAgain(self.encoded)
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


class Recomputed(RuntimeError):
    """A :class:`ToyGPT` was asked to read more positions than a cached decoder ever needs."""


class _Counted(torch.nn.Module):
    """x W^T + b, under a name that :class:`Reads` reports."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, name: str, owner: ToyGPT) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(weight, requires_grad=False)
        self.bias = None if bias is None else torch.nn.Parameter(bias, requires_grad=False)
        self.name = name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, self.weight, self.bias)


class Reads(ProductCount):
    """Counts, for each linear weight of a :class:`ToyGPT`, the positions multiplied by it
    (:class:`harness.products.ProductCount`). The budget is taken when the count starts, so changing the
    model's attributes afterwards changes nothing; a read past it is remembered (``over``), not
    raised, so that no ``except`` of the learner's can swallow it.
    """

    def __init__(self, model: ToyGPT) -> None:
        super().__init__({m.name: m.weight for m in model.modules() if isinstance(m, _Counted)})
        self.budget = model.budget
        #: the first read past the budget: the weight's name, the positions it has read and the budget, as the
        #: strings the grader words in the learner's language (``Raised.details["read"]``); None while within it
        self.over: tuple[str, str, str] | None = None

    @property
    def exceeded(self) -> str | None:
        """:attr:`over` in English, as the learner's own process says it."""
        if self.over is None:
            return None
        return ("the model's `{}` has now read {} positions, more than the {} that the prompt and the generated "
                "tokens hold together: positions already in the cache were computed again").format(*self.over)

    def read(self, name: str, inputs: list[torch.Tensor]) -> None:
        super().read(name, inputs)
        if self.budget is not None and self.rows[name] > self.budget and self.over is None:
            self.over = (name, str(self.rows[name]), str(self.budget))


class _ToyAttention(torch.nn.Module):
    def __init__(self, w_q: _Counted, w_k: _Counted, w_v: _Counted, w_o: _Counted, h: int) -> None:
        super().__init__()
        self.w_q, self.w_k, self.w_v, self.w_o = w_q, w_k, w_v, w_o
        self.h, self.d_k = h, w_q.weight.shape[0] // h


class _ToyFeedForward(torch.nn.Module):
    def __init__(self, w_1: _Counted, w_2: _Counted) -> None:
        super().__init__()
        self.w_1, self.w_2 = w_1, w_2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(torch.relu(self.w_1(x)))


class _ToyBlock(torch.nn.Module):
    def __init__(self, norm1, self_attn: _ToyAttention, norm2, feed_forward: _ToyFeedForward) -> None:
        super().__init__()
        self.norm1, self.self_attn, self.norm2, self.feed_forward = norm1, self_attn, norm2, feed_forward


@provider("toy_gpt")
class ToyGPT(torch.nn.Module):
    """A tiny untrained decoder-only model with the layout of chapter 7's ``GPT``, in float64.

    ``embed`` and ``pos_embed`` (``nn.Embedding``), ``blocks`` (each with ``norm1``, ``self_attn``
    holding ``w_q``, ``w_k``, ``w_v``, ``w_o``, ``h`` and ``d_k``, ``norm2`` and ``feed_forward``),
    a final ``norm`` and a ``head`` tied to ``embed``. ``forward(ids)`` gives the logits (B, T, V)
    of a whole sequence read at once, with PyTorch's own causal attention, and fills ``kv`` with
    every block's keys and values (B, h, T, d_k): that is the oracle a cached decoder is held to.

    With a ``budget``, a call of the learner's that is given the model is watched by :class:`Reads`:
    a decoder that reads each position once through each linear weight stays within prompt length +
    steps per sequence; one that reads the whole sequence again at each step does not.
    """

    def __init__(self, vocab_size: int = 11, d_model: int = 16, h: int = 4, d_ff: int = 32, N: int = 2,
                 max_len: int = 32, seed: int = 0, budget: int | None = None) -> None:
        super().__init__()
        g = seeded(seed)
        self.budget = budget

        def weight(*shape: int, scale: float = 1.0) -> torch.Tensor:
            return torch.randn(*shape, generator=g, dtype=torch.float64) * scale

        def linear(fan_in: int, fan_out: int, name: str, bias: bool = True) -> _Counted:
            return _Counted(weight(fan_out, fan_in, scale=1 / math.sqrt(fan_in)), weight(fan_out, scale=0.1) if bias
                            else None, name, self)

        def norm() -> torch.nn.LayerNorm:
            layer = torch.nn.LayerNorm(d_model, dtype=torch.float64)  # constant initialisation: no random draw
            with torch.no_grad():
                layer.weight.copy_(1 + 0.2 * weight(d_model))
                layer.bias.copy_(0.2 * weight(d_model))
            return layer

        self.embed = torch.nn.Embedding.from_pretrained(weight(vocab_size, d_model), freeze=True)
        self.pos_embed = torch.nn.Embedding.from_pretrained(weight(max_len, d_model, scale=0.5), freeze=True)
        blocks = []
        for i in range(N):
            attn = _ToyAttention(*(linear(d_model, d_model, f"blocks[{i}].self_attn.{n}") for n in ("w_q", "w_k", "w_v", "w_o")),
                                 h=h)
            ffn = _ToyFeedForward(linear(d_model, d_ff, f"blocks[{i}].feed_forward.w_1"),
                                  linear(d_ff, d_model, f"blocks[{i}].feed_forward.w_2"))
            blocks.append(_ToyBlock(norm(), attn, norm(), ffn))
        self.blocks = torch.nn.ModuleList(blocks)
        self.norm = norm()
        self.head = _Counted(self.embed.weight, None, "head", self)  # weight tying: the same tensor as embed's
        self.vocab_size, self.d_model, self.h, self.N, self.max_len = vocab_size, d_model, h, N, max_len
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] = []

    def watch(self) -> Reads | None:
        """What counts this model's reads during one call, or None without a budget."""
        return None if self.budget is None else Reads(self)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, T) -> logits (B, T, V), the whole sequence read at once under a causal mask."""
        B, T = ids.shape
        x = self.embed(ids) + self.pos_embed(torch.arange(T))  # (B, T, d_model)
        self.kv = []
        for block in self.blocks:
            attn = block.self_attn
            a = block.norm1(x)

            q, k, v = (y.reshape(B, T, attn.h, attn.d_k).transpose(1, 2)  # (B, h, T, d_k)
                       for y in (attn.w_q(a), attn.w_k(a), attn.w_v(a)))
            self.kv.append((k, v))
            context = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, h, T, d_k)
            x = x + attn.w_o(context.transpose(1, 2).reshape(B, T, self.d_model))
            x = x + block.feed_forward(block.norm2(x))
        return self.head(self.norm(x))  # (B, T, V)
