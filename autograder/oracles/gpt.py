"""GPT's functional twins: a pre-norm block (held to ``nn.TransformerEncoderLayer(norm_first=True)``) and
greedy generation from the toy GPT, without a cache (the oracle) and with one (its mistakes).
"""
from __future__ import annotations

import math

import torch

from .. import toys
from .dropout import Dropout, drop
from .layers import feed_forward, layer_norm, multi_head_attention, split_heads
from .masks import causal_mask
from .states import State


def gpt_block(
    state: State,
    x: torch.Tensor,
    *,
    h: int,
    dropout: Dropout | None = None,
    inner_dropout: Dropout | None | str = "same",
    mask: str = "causal",  # "causal" | "none" | "inverted"
    wiring: tuple[str, str] = ("pre", "pre"),
    norms: tuple[str, str] = ("norm1", "norm2"),
    order: tuple[str, str] = ("attn", "ffn"),
) -> torch.Tensor:
    """A pre-norm GPT block as a function, in the dtype of x; the keywords reproduce learners' mistakes.

    ``wiring`` per sub-layer: "pre" x + f(LN(x)) (right); "post" LN(x + f(x)), the paper's;
    "no-residual" f(LN(x)); "normed-residual" LN(x) + f(LN(x)), the residual taken after the norm;
    "inner" x + LN(f(x)); "dropped-sum" dropout(x + f(LN(x))). ``dropout`` draws the residual dropout's masks and,
    unless told otherwise,
    those of the attention weights and the FFN's hidden layer, in the order the course's modules
    draw them.
    """
    inner = dropout if inner_dropout == "same" else inner_dropout
    T = x.shape[1]
    allow = {"causal": causal_mask(T), "none": None, "inverted": ~causal_mask(T)}[mask]

    def attn(z: torch.Tensor) -> torch.Tensor:
        return multi_head_attention(state, z, z, z, h=h, prefix="self_attn.", attn_mask=allow, dropout=inner)[0]

    def ffn(z: torch.Tensor) -> torch.Tensor:
        return feed_forward(state, z, prefix="feed_forward.", dropout=inner)

    blocks = {"attn": attn, "ffn": ffn}
    for block, norm, wire in zip(order, norms, wiring):
        f = blocks[block]

        def n(z: torch.Tensor, norm: str = norm) -> torch.Tensor:
            return layer_norm(state, z, prefix=f"{norm}.")

        if wire == "pre":
            x = x + drop(dropout, f(n(x)))
        elif wire == "post":
            x = n(x + drop(dropout, f(x)))
        elif wire == "no-residual":
            x = drop(dropout, f(n(x)))
        elif wire == "normed-residual":
            x = n(x)
            x = x + drop(dropout, f(x))
        elif wire == "inner":
            x = x + n(drop(dropout, f(x)))
        elif wire == "dropped-sum":
            x = drop(dropout, x + f(n(x)))
    return x



def generate_plain(model: toys.ToyGPT, prompt: torch.Tensor, steps: int):
    """Greedy decoding without a cache: the whole sequence read again at every step (the oracle).

    Returns (tokens (B, steps), logits (B, steps, V), the keys and values of every block for the
    T0 + steps - 1 positions read)."""
    ids, logits = prompt, []
    with torch.no_grad():
        for _ in range(steps):
            step = model(ids)[:, -1]  # (B, V)
            logits.append(step)
            ids = torch.cat([ids, step.argmax(dim=-1, keepdim=True)], dim=1)
    return ids[:, prompt.shape[1]:], torch.stack(logits, dim=1), list(model.kv)


def generate_cached(model: toys.ToyGPT, prompt: torch.Tensor, steps: int, *, prompt_mask: bool = True,
                    positions: str = "right", extend: bool = True, final_norm: bool = True, feed_last: bool = False):
    """A cached greedy decoder written here, in float64; the keywords reproduce learners' mistakes.

    ``positions`` "restart": every step's positions count from 0, so a new token sits at position 0;
    ``extend`` False: the new position attends to its own key and value only, the cache never grows;
    ``prompt_mask`` False: the prompt is read without a causal mask; ``final_norm`` False: the final
    LayerNorm is skipped; ``feed_last``: the last token is read too, one step for nothing.
    """
    cache: list[tuple[torch.Tensor, torch.Tensor]] = []
    new, start, tokens, logits = prompt, 0, [], []
    B = prompt.shape[0]
    with torch.no_grad():
        for step in range(steps + int(feed_last)):
            T_new = new.shape[1]
            first = 0 if positions == "restart" else start
            x = model.embed(new) + model.pos_embed(torch.arange(first, first + T_new))  # (B, T_new, d_model)
            for i, block in enumerate(model.blocks):
                attn = block.self_attn
                a = block.norm1(x)
                q, k, v = (split_heads(y, attn.h)  # (B, h, T_new, d_k)
                           for y in (attn.w_q(a), attn.w_k(a), attn.w_v(a)))
                if i < len(cache):
                    if extend:
                        k, v = torch.cat([cache[i][0], k], dim=2), torch.cat([cache[i][1], v], dim=2)
                    cache[i] = (k, v)
                else:
                    cache.append((k, v))
                T_k = k.shape[2]
                allow = torch.arange(T_k)[None, :] <= torch.arange(T_k - T_new, T_k)[:, None]  # (T_new, T_k)
                if not prompt_mask:
                    allow = torch.ones_like(allow)
                scores = (q @ k.transpose(-2, -1) / math.sqrt(attn.d_k)).masked_fill(~allow, float("-inf"))
                context = torch.softmax(scores, dim=-1) @ v  # (B, h, T_new, d_k)
                x = x + attn.w_o(context.transpose(1, 2).reshape(B, T_new, -1))
                x = x + block.feed_forward(block.norm2(x))
            last = x[:, -1]  # (B, d_model)
            step_logits = model.head(model.norm(last) if final_norm else last)  # (B, V)
            if step < steps:
                tokens.append(step_logits.argmax(dim=-1))
                logits.append(step_logits)
            start += T_new
            new = tokens[-1].unsqueeze(1)
    return torch.stack(tokens, dim=1), torch.stack(logits, dim=1), cache
