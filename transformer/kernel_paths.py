"""Switching a model's layers between the course's code and PyTorch's kernel for the same function.

A path is a pair of classes with the same parameters and buffers, the course's and a subclass whose
``forward`` calls PyTorch's kernel; switching changes each layer's class in place, so a model (and a
checkpoint) is the same whichever path computes it. :mod:`transformer.attention_paths` and
:mod:`transformer.norm_paths` are the two the course has.
"""
from __future__ import annotations

from torch import nn

PATHS = ("course", "fused")


def switch(model: nn.Module, path: str, course: type[nn.Module], fused: type[nn.Module], what: str) -> nn.Module:
    """Every layer of ``model`` that is exactly ``course`` or ``fused`` becomes ``path``'s class, in place."""
    if path not in PATHS:
        raise ValueError(f"unknown {what} path {path!r}; choose one of {', '.join(PATHS)}")
    target = fused if path == "fused" else course
    for module in model.modules():
        if type(module) in (course, fused):  # a learner's own class, or a subclass, is left alone
            module.__class__ = target
    return model


def path_of(model: nn.Module, course: type[nn.Module], fused: type[nn.Module]) -> str:
    """"course", "fused", "mixed", or "none" when the model has no such layer."""
    kinds = {type(m) for m in model.modules() if type(m) in (course, fused)}
    if kinds == {fused}:
        return "fused"
    if kinds == {course}:
        return "course"
    return "mixed" if kinds else "none"
