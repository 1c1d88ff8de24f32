"""Reference implementation: Chapter 1 exercises: prerequisites and motivation

Generated from solutions/ch01_prerequisites/prerequisites.py by `python -m course.tools release`.
Do not edit: change the instructor notebook and regenerate.
"""


import math
from collections.abc import Sequence
from typing import Any

import torch


def receptive_field(
    kernel_sizes: Sequence[int],
    strides: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
) -> int:
    """Input positions seen by one output of a stack of 1-D convolutions applied in order."""
    n_layers = len(kernel_sizes)
    strides = [1] * n_layers if strides is None else list(strides)
    dilations = [1] * n_layers if dilations is None else list(dilations)
    if len(strides) != n_layers or len(dilations) != n_layers:
        raise ValueError(
            f"one stride and one dilation per layer: got {n_layers} kernel sizes, "
            f"{len(strides)} strides and {len(dilations)} dilations"
        )
    for what, values in (("kernel size", kernel_sizes), ("stride", strides), ("dilation", dilations)):
        for layer, value in enumerate(values):
            if value < 1:
                raise ValueError(f"every {what} must be at least 1; layer {layer} has {value}")
    field, jump = 1, 1  # jump: input positions between neighbouring outputs of the layers so far
    for k, s, d in zip(kernel_sizes, strides, dilations):
        field += (k - 1) * d * jump
        jump *= s
    return field


def rnn_forward(
    x: torch.Tensor, h0: torch.Tensor, W_xh: torch.Tensor, W_hh: torch.Tensor, b_h: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """A tanh RNN over x (B, T, d_in) from h0 (B, d_h): the states h_1..h_T and h_T."""
    h = h0
    states = []
    for t in range(x.shape[1]):  # serial: step t cannot start before step t - 1 is done
        h = torch.tanh(x[:, t] @ W_xh + h @ W_hh + b_h)  # (B, d_h)
        states.append(h)
    return torch.stack(states, dim=1), h  # (B, T, d_h), (B, d_h)


def greedy_decode(model: Any, src: torch.Tensor, max_len: int, bos_id: int, eos_id: int, pad_id: int) -> torch.Tensor:
    """Greedy autoregressive decoding of a batch: (B, L) token ids starting with bos_id."""
    memory = model.encode(src)  # computed once, read at every step
    batch = src.shape[0]
    ys = torch.full((batch, 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    finished = torch.zeros(batch, dtype=torch.bool, device=src.device)  # (B,)
    for _ in range(max_len):
        logits = model.decode(memory, ys)  # (B, t, V)
        next_token = logits[:, -1].argmax(dim=-1)  # (B,)
        # A finished row has said all it has to say: pad it, whatever the model proposes.
        next_token = next_token.masked_fill(finished, pad_id)
        ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)  # (B, t + 1)
        finished = finished | (next_token == eos_id)
        if bool(finished.all()):
            break
    return ys
