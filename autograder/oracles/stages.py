"""The intermediate values of a layer or a stack, as :class:`autograder.locate.Stage` lists: a check
compares them with the learner's own to point at the first line whose value goes wrong.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..locate import Stage
from ..messages import N_, tr
from .layers import layer_norm
from .states import State


def post_norm_stages(state: State, x: torch.Tensor, blocks: Sequence[tuple[str, Callable, str]]) -> list[Stage]:
    """The stages of a stack of post-norm sub-layers, for locating a learner's wrong value: for each
    (what the sub-layer is called, its function, its norm's name), its output, the residual sum and the
    norm's output. Every norm's output is also the input of what follows."""
    stages = []
    for label, f, norm in blocks:
        out = f(x)
        total = x + out
        x = layer_norm(state, total, prefix=f"{norm}.")
        stages += [Stage.of(tr("{label}'s output").format(label=label), out),
                   Stage.of(tr("the residual sum x + {label}(x)").format(label=label), total),
                   Stage.of(tr("{norm}'s output, {norm}(x + {label}(x))").format(norm=norm, label=label), x)]
    return stages


#: the name of a stack's last layer's output, by the stack (``owner``), in words
_LAST_LAYER = {"encoder": N_("the output of layers[{i}], the encoder's output"),
               "decoder": N_("the output of layers[{i}], the decoder's output")}
_LAST_OF_A_STACK = N_("the output of layers[{i}], the {owner}'s output")


def stack_stages(x: torch.Tensor, n_layers: int, layer: Callable[[int, torch.Tensor], torch.Tensor],
                 owner: str) -> list[Stage]:
    """The stages of a stack of layers applied in turn (``layer(i, x)``), for locating a learner's
    wrong value: each layer's output, the last one being the ``owner``'s output."""
    stages = []
    for i in range(n_layers):
        with torch.no_grad():
            x = layer(i, x)
        last = tr(_LAST_LAYER.get(owner, _LAST_OF_A_STACK))
        stages.append(Stage.of((last if i == n_layers - 1 else tr("the output of layers[{i}]")).format(i=i, owner=owner),
                               x))
    return stages


def layer_norm_stages(state: State | None, x: torch.Tensor, eps: float, prefix: str = "") -> list[Stage]:
    """The stages of a LayerNorm over the last axis, for locating a learner's wrong value."""
    mean = x.mean(-1, keepdim=True)
    centred = x - mean
    var = centred.pow(2).mean(-1, keepdim=True)
    std = (var + eps).sqrt()
    x_hat = centred / std
    gamma = torch.ones(x.shape[-1], dtype=x.dtype) if state is None else state[f"{prefix}gamma"].to(x.dtype)
    return [
        Stage.of(tr("the mean over the last axis (keepdim=True)"), mean),
        Stage.of(tr("the centred values x - mean"), centred),
        Stage.of(tr("the variance over the last axis, dividing by d_model (keepdim=True)"), var),
        Stage.of("var + eps", var + eps),
        Stage.of(tr("the standard deviation sqrt(var + eps)"), std),
        Stage.of(tr("the normalised values (x - mean) / sqrt(var + eps)"), x_hat),
        Stage.of("gamma * x_hat", gamma * x_hat),
        Stage.of(tr("the output gamma * x_hat + beta"), layer_norm(state, x, prefix=prefix, eps=eps)),
    ]
