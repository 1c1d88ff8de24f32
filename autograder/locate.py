"""Where a learner's values first part from the computation, for a mistake nobody catalogued.

A check lists the stages of its own computation of a case (:class:`Stage`: the scores, the
scaled scores, the weights, ...; each with every value that is right there), and the learner's
process sends back the values its lines made, in order (:class:`harness.observe.Step`). This
module compares the two in the grader's process and says, in the learner's terms, up to which of
their lines the values agree and which line makes the first value after that which is none of
the computation's. It never decides a score; it only shapes the message.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from harness.observe import Step


@dataclass(frozen=True)
class Stage:
    """One step of the course's computation: what it is called, in words a learner knows, and
    every value that is right at that step (float64)."""

    name: str
    values: tuple[torch.Tensor, ...]

    @staticmethod
    def of(name: str, *values: torch.Tensor) -> Stage:
        return Stage(name, tuple(values))


#: whether a learner's value equals a stage's within the check's tolerance
Agree = Callable[[torch.Tensor, torch.Tensor], bool]


def _stage_of(step: Step, stages: Sequence[Stage], inputs: Sequence[torch.Tensor], agree: Agree) -> int | None:
    """The latest stage ``step``'s value agrees with; -1 for one of the inputs; None for neither."""
    value = step.value
    if value is None or value.is_complex():
        return None
    for k in range(len(stages) - 1, -1, -1):
        if any(v.shape == value.shape and agree(value, v) for v in stages[k].values):
            return k
    if any(t.shape == value.shape and t.dtype == value.dtype and agree(value, t) for t in inputs):
        return -1
    return None


def _where(step: Step) -> str:
    return f"line {step.line} of your `{step.function}`" + (f", `{step.source}`" if step.source else "")


#: operators as a learner writes them
_SYMBOLS = {"add": "+", "radd": "+", "sub": "-", "rsub": "-", "mul": "*", "rmul": "*", "truediv": "/", "div": "/",
            "rtruediv": "/", "matmul": "@", "rmatmul": "@", "pow": "**", "rpow": "**", "neg": "unary -",
            "invert": "~", "getitem": "indexing [...]", "iadd": "+=", "isub": "-=", "imul": "*=", "itruediv": "/=",
            "setitem": "[...] ="}


def _maker(step: Step) -> str:
    if step.made_by.startswith("return"):
        return "the value it returns"
    return f"what `{_SYMBOLS.get(step.made_by, step.made_by)}` gives"


def _parting(value: torch.Tensor, expected: torch.Tensor, agree: Agree) -> str:
    """Where two values of one shape part: how many positions, and the first."""
    a, e = value.double(), expected.double()
    close = torch.isclose(a, e, atol=1e-6, rtol=1e-5) | (torch.isnan(a) & torch.isnan(e))
    differing = (~close).nonzero()
    if not len(differing):
        return ""
    index = tuple(int(i) for i in differing[0])
    where = f"first at index {index}" if index else ""
    return (f": they part at {len(differing)} of {a.numel()} positions, {where} "
            f"(you have {a[index].item():.6g}, the computation {e[index].item():.6g})")


def locate(steps: Sequence[Step], stages: Sequence[Stage], inputs: Sequence[torch.Tensor], agree: Agree,
           truncated: bool = False) -> str:
    """The sentence that says where the values first part, or "" when the trace cannot say."""
    if not steps or not stages:
        return ""
    found = [_stage_of(s, stages, inputs, agree) for s in steps]
    furthest = max((k for k in found if k is not None), default=-1)
    final = len(stages) - 1
    last = max(i for i, k in enumerate(found) if k == furthest) if any(k == furthest for k in found) else -1
    if furthest == final:
        step = steps[last]
        return (f"Your {_where(step)} computes {stages[final].name} correctly, but that value is not what your "
                "function returns: look at what happens to it after that line.")
    following = stages[furthest + 1]
    floating = following.values[0].is_floating_point()
    # A mask or an index made on the way (``~mask``) is no candidate for a wrong number.
    culprit = next((i for i in range(last + 1, len(steps)) if found[i] is None and steps[i].value is not None
                    and steps[i].value.is_floating_point() == floating), None)
    head = (f"Up to {_where(steps[last])}, your values agree with the computation ({stages[furthest].name})"
            if last >= 0 else "None of the values your lines make agrees with the computation beyond your inputs")
    if culprit is None:
        returned = next((s for s in reversed(steps) if s.made_by.startswith("return")), None)
        if returned is None or furthest < 0:
            return ""
        return (f"{head}, and your function returns that value: the steps after it, from {following.name} on, "
                "are missing.")
    step = steps[culprit]
    same = last >= 0 and (steps[last].line, steps[last].function) == (step.line, step.function)
    text = f"{head}; the first value after that which does not is {_maker(step)} " + (
        "on the same line" if same else f"on {_where(step)}")
    shapes = {tuple(v.shape) for v in following.values}
    if step.value is not None and tuple(step.value.shape) in shapes:
        expected = next(v for v in following.values if tuple(v.shape) == tuple(step.value.shape))
        text += f". The computation's next step is {following.name}{_parting(step.value, expected, agree)}."
    else:
        text += (f". The computation's next step is {following.name}, of shape "
                 f"{' or '.join(str(s) for s in sorted(shapes))}; that value has shape {step.shape}.")
    if truncated:
        text += " (Only the first part of your function's work was recorded.)"
    return text
