"""Chapter 10's GPT: chapter 7's, with every block's feed-forward network replaced by a mixture of experts.

The blocks are chapter 7's ``GPTBlock`` (the learner's with ``--parts mine``) whose ``feed_forward``
is chapter 10's ``MoEFeedForward``: ``n_experts`` networks of ``d_ff`` hidden units each, every token
sent to ``top_k`` of them by a learned router. Each layer also returns the Switch Transformer's
load-balancing loss of its routing; :class:`MoEGPT` adds the layers' losses up when asked
(``model(ids, True)``), and the training task adds ``balance_weight`` times that sum to the
language-modelling loss. With ``--parts mine`` the layer is the learner's ``MoEFeedForward`` where written,
and it routes with the learner's ``top_k_router`` and ``load_balancing_loss`` where those are written, the
course's where not. :mod:`transformer.gpt.expert_use` measures a trained one.
"""
from __future__ import annotations

import sys
import types
from collections.abc import Callable, Mapping

import torch
from torch import nn

from ..model import count_parameters
from ..parts import course_part
from .model import GPT, GPTConfig

#: the chapter 10 parts the experts are made of, with --parts mine the learner's where written
EXPERT_PARTS = ("top_k_router", "load_balancing_loss", "MoEFeedForward")


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
