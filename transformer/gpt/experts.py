"""Chapter 10's GPT: chapter 7's, with every block's feed-forward network replaced by a mixture of experts.

    python -m transformer.gpt experts runs/gpt-moe-cpu                  writes runs/gpt-moe-cpu/experts.json
    python -m transformer.gpt experts RUN RUN ... --chars 4000 --print  several models side by side, nothing written

The blocks are chapter 7's ``GPTBlock`` (the learner's with ``--parts mine``) whose ``feed_forward``
is chapter 10's ``MoEFeedForward``: ``n_experts`` networks of ``d_ff`` hidden units each, every token
sent to ``top_k`` of them by a learned router. Each layer also returns the Switch Transformer's
load-balancing loss of its routing; :class:`MoEGPT` adds the layers' losses up when asked
(``model(ids, True)``), and the training task adds ``balance_weight`` times that sum to the
language-modelling loss. With ``--parts mine`` the layer is the learner's ``MoEFeedForward`` where written,
and it routes with the learner's ``top_k_router`` and ``load_balancing_loss`` where those are written, the
course's where not.

Measuring (``experts``): bits per character on the first ``--chars`` held-out characters, as training
measures them, and, per layer, the share of the routing choices each expert receives over the same
characters, each byte routed once (consecutive windows of ``block_size`` bytes). With ``top_k`` choices
per token the shares of a layer sum to 1; an even router gives each expert ``1 / n_experts``. The file
also gives the parameters, total and active per token, and the same figures on the first
:data:`CHECK_CHARS` characters, which a test measures again.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
from torch import nn

from ..model import count_parameters
from ..parts import course_part
from .model import GPT, GPTConfig

#: the chapter 10 parts the experts are made of, with --parts mine the learner's where written
EXPERT_PARTS = ("top_k_router", "load_balancing_loss", "MoEFeedForward")
FILE = "experts.json"
#: the slice a test measures again
CHECK_CHARS = 4000


def calling(cls: type, names: Mapping[str, Callable]) -> type:
    """A subclass of ``cls`` whose own methods find ``names`` where they would find the module's functions of those
    names: the learner's ``MoEFeedForward`` routes with the parts the run lists (the course's ``top_k_router`` where
    the learner's still raises NotImplementedError), and the course's with the learner's where written."""
    module = vars(sys.modules[cls.__module__])
    if all(module.get(name) is function for name, function in names.items()):
        return cls  # its own module's functions already
    namespace = {**module, **names}
    methods: dict[str, object] = {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
    for name, method in vars(cls).items():
        if isinstance(method, types.FunctionType):
            rebound = types.FunctionType(method.__code__, namespace, method.__name__, method.__defaults__,
                                         method.__closure__)
            rebound.__kwdefaults__ = method.__kwdefaults__
            methods[name] = rebound
    return type(cls.__name__, (cls,), methods)


class ExpertLayer(nn.Module):
    """A block's feed-forward network made of experts. ``moe`` is chapter 10's ``MoEFeedForward``; the layer keeps
    the load-balancing loss of its last call for the model to add up and, while ``counts`` is a tensor, adds the
    routing choices of each call to it."""

    def __init__(self, moe: nn.Module, router: Callable) -> None:
        super().__init__()
        self.moe = moe
        self.top_k_router = router
        self.balance: torch.Tensor | None = None
        self.counts: torch.Tensor | None = None  # (n_experts,) while counting

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, d_model) -> (B, T, d_model)."""
        y, self.balance = self.moe(x)
        if self.counts is not None:
            # the router again, outside the layer's own code: MoEFeedForward returns no routing
            logits = self.moe.router(x.reshape(-1, x.shape[-1]))  # (B T, n_experts)
            _, chosen = self.top_k_router(logits, self.moe.k)  # (B T, k)
            self.counts += torch.bincount(chosen.flatten(), minlength=len(self.counts)).to(self.counts)
        return y


def course_parts() -> dict[str, Callable]:
    return {name: course_part(name) for name in (*EXPERT_PARTS, "GPTBlock")}


class MoEGPT(GPT):
    """Token ids (B, T) -> next-token logits (B, T, vocab_size); ``model(ids, True)`` -> (logits, the sum of the
    layers' load-balancing losses). Chapter 7's GPT whose blocks' ``feed_forward`` are :class:`ExpertLayer` s."""

    def __init__(self, config: GPTConfig, parts: Mapping[str, Callable] | None = None) -> None:
        parts = {**course_parts(), **(parts or {})}
        router = parts["top_k_router"]
        moe = calling(parts["MoEFeedForward"], {n: parts[n] for n in EXPERT_PARTS[:2]})
        capacity = config.capacity_factor or None

        def block(d_model: int, h: int, d_ff: int, dropout: float) -> nn.Module:
            made = parts["GPTBlock"](d_model, h, d_ff, dropout)
            made.feed_forward = ExpertLayer(moe(d_model, d_ff, config.n_experts, config.top_k, capacity), router)
            return made

        super().__init__(config, block)

    def expert_layers(self) -> list[ExpertLayer]:
        return [block.feed_forward for block in self.blocks]

    def forward(self, ids: torch.Tensor, balance: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        logits = super().forward(ids)  # (B, T, vocab_size)
        if not balance:
            return logits
        return logits, torch.stack([layer.balance for layer in self.expert_layers()]).sum()


def parameters(model: nn.Module) -> dict[str, int]:
    """The model's parameters, each shared tensor once, and those one token uses: all but the experts its router
    does not choose (n_experts - top_k per layer). A dense model uses all of them."""
    total = count_parameters(model)
    idle = 0
    if isinstance(model, MoEGPT):
        for layer in model.expert_layers():
            per_expert = count_parameters(layer.moe.experts[0])
            idle += (layer.moe.n_experts - layer.moe.k) * per_expert
    return {"total": total, "active": total - idle}


@torch.no_grad()
def expert_use(model: MoEGPT, text: str) -> list[list[float]]:
    """Per layer, the share of the routing choices each expert receives over ``text``, every byte routed once, in
    consecutive windows of the model's ``block_size`` bytes (the last one shorter)."""
    from .train import _bytes_tensor

    stream = _bytes_tensor(text.encode("utf-8")).long()
    block, device = model.config.block_size, next(model.parameters()).device
    layers = model.expert_layers()
    for layer in layers:
        layer.counts = torch.zeros(model.config.n_experts, dtype=torch.long, device=device)
    was_training = model.training
    model.eval()
    try:
        whole = len(stream) // block * block
        if whole:
            model(stream[:whole].view(-1, block).to(device))  # (windows, block)
        if whole < len(stream):
            model(stream[whole:][None].to(device))  # (1, the rest)
        counts = [layer.counts for layer in layers]
    finally:
        for layer in layers:
            layer.counts = None
        model.train(was_training)
    return [(c / c.sum()).tolist() for c in counts]


def entropy_bits(shares: Sequence[float]) -> float:
    """The entropy of one layer's use, in bits: log2(n_experts) when even, 0 when one expert takes everything."""
    return -sum(p * math.log2(p) for p in shares if p > 0)


def measure(model: nn.Module, config, context: str, heldout: str) -> dict[str, object]:
    """Bits per character of ``heldout`` read after ``context`` and, for a model with experts, each layer's use."""
    from .train import bits_per_character

    found: dict[str, object] = {"characters": len(heldout),
                                "bpc": bits_per_character(model, context, heldout, config.stride)["bpc"]}
    if isinstance(model, MoEGPT):
        use = expert_use(model, heldout)
        found |= {"use": use, "entropy_bits": [entropy_bits(shares) for shares in use],
                  "max_share": max(max(shares) for shares in use)}
    return found


def experts(run: str | Path, chars: int) -> dict[str, object]:
    from .stdlib_text import load
    from .train import load_trained

    model, config = load_trained(run, device="cpu")
    data = load()

    def first(n: int) -> dict[str, object]:
        return measure(model, config, data.train, data.heldout[:n])

    found = {"n_experts": config.n_experts, "top_k": config.top_k, "balance_weight": config.balance_weight,
             "parameters": parameters(model)}
    return {**found, **first(chars), "check": first(CHECK_CHARS)}


def main(argv: Sequence[str] | None = None) -> int:
    from .stdlib_text import StdlibError

    parser = argparse.ArgumentParser(prog="python -m transformer.gpt experts", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders or exported checkpoint folders")
    parser.add_argument("--chars", type=int, default=100_000, help="held-out characters to read (default 100,000)")
    parser.add_argument("--print", action="store_true", help="print the figures and write nothing")
    args = parser.parse_args(argv)
    if args.chars < 1:
        parser.error("--chars must be at least 1")
    for run in args.runs:
        try:
            found = experts(run, args.chars)
        except StdlibError as exc:
            print(f"error: {exc}")
            return 2
        counted = found["parameters"]
        print(f"{run}: {found['bpc']:.3f} bits per character over {found['characters']:,} characters; "
              f"{counted['total']:,} parameters, {counted['active']:,} active per token")
        for i, shares in enumerate(found.get("use", [])):
            print(f"  layer {i}: " + " ".join(f"{s:.3f}" for s in shares)
                  + f"  (entropy {found['entropy_bits'][i]:.2f} of {math.log2(len(shares)):.2f} bits)")
        if not args.print:
            folder = Path(run) if Path(run).is_dir() else Path(run).parent
            (folder / FILE).write_text(json.dumps(found, indent=1) + "\n")
            print(f"wrote {folder / FILE}")
    return 0
