"""Two properties of a graded function that its values on the CPU cannot show, probed by calling it
again, in the learner's process, on one visible case:

* **device**: the result lives where the arguments live. The arguments (and a module's parameters
  and buffers) are moved to PyTorch's ``meta`` device, which has shapes but no data: a tensor the
  function makes without ``device=x.device`` stays on the CPU, and the first operation that mixes
  it with an argument raises a device mismatch, as it would on a GPU. Only a mismatch, or a result
  left on the CPU, is a finding: code that needs values (``.item()``, a comparison in Python) cannot
  run on ``meta`` and says nothing either way.
* **gradient**: training can reach what the result was made from. The case is run in float64 with
  its floating arguments (and a module's parameters) requiring gradients; the gradient autograd
  gives along a random direction must equal the change of the function's own result along it
  (a central difference). A result cut off from the graph (``.detach()``, ``.item()``,
  ``torch.no_grad()``, a tensor rebuilt from Python numbers) or a part of it cut off gives a
  finding, with the argument or parameter whose gradient is wrong.

A finding is a short tuple of strings, sent back as plain data; the check's base class turns it
into the learner's message (:meth:`autograder.framework.Check.judge_effects`). Like everything
observed in the learner's process, the probes are advisory: the learner's code can see them run.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from .calls import Case, build_module, materialize, own_code, raised
from .observe import argument_names, named_tensors
from .providers import Provided

#: the probes a check may ask for
PROBES = ("device", "gradient")
#: central differences, each a step relative to the largest input and the agreement asked of it: a gradient is
#: wrong only when both disagree. The small step alone could blame a function that computes in float32
#: inside (its rounding swamps the step), the large one alone a kink (a ReLU's) that falls inside the step.
_DIFFERENCES = ((1e-7, 1e-4), (1e-4, 1e-2))
#: at most this many arguments and parameters are probed one by one to name the one whose gradient is wrong
_MAX_LEAVES = 48


#: the probes call the function again several times: not one that took longer than this once, and not for
#: longer than the budget in all (their own time limit covers them), so that a slow function that is right
#: never looks like an endless loop
SLOWEST_CALL = 0.5
BUDGET = 3.0
#: the time limit of the probes that follow a call, counted from the moment the function returned
#: (``wire.CALLED``): their budget, and the seconds PyTorch takes to import its meta kernels the first time a
#: process uses the meta device
PROBE_SECONDS = BUDGET + 6.0


class _OutOfTime(Exception):
    pass


def probe(fn: Callable, case: Case, names: tuple[str, ...], call_seconds: float = 0.0) -> dict[str, tuple[str, ...]]:
    """The findings of the probes ``names`` on ``case``, whose call took ``call_seconds``: {probe: finding},
    only where there is one."""
    if _provided(case.args) or _provided(tuple(case.kwargs.values())) or call_seconds > SLOWEST_CALL:
        return {}  # a provided object (a toy model) is the course's, not something to move or differentiate
    findings = {}
    deadline = time.monotonic() + BUDGET
    for name in names:
        try:
            finding = _device(fn, case) if name == "device" else _gradient(fn, case, deadline) if name == "gradient" \
                else ()
        except Exception:  # a probe that cannot run on this function, or not in time, says nothing
            finding = ()
        if finding:
            findings[name] = finding
    return findings


def _provided(values: tuple) -> bool:
    return any(isinstance(v, Provided) or isinstance(v, (tuple, list)) and _provided(tuple(v)) for v in values)


def _map(value: Any, f: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        return f(value)
    if isinstance(value, tuple):
        return tuple(_map(v, f) for v in value)
    if isinstance(value, list):
        return [_map(v, f) for v in value]
    if isinstance(value, dict):
        return {k: _map(v, f) for k, v in value.items()}
    return value


# -- device ---------------------------------------------------------------------------------------

#: what PyTorch says when an operation mixes devices; not the `meta` device's "Expected `value` to be on same
#: device" (masked_fill with a 0-dimensional value), which a GPU allows
_MISMATCH = ("is not on the expected device", "Expected all tensors to be on the same device")


#: torch's functions that make a tensor from nothing, on the CPU unless told a device
_FACTORIES = frozenset({"zeros", "ones", "full", "empty", "arange", "range", "linspace", "logspace", "eye", "tensor",
                        "as_tensor", "from_numpy", "rand", "randn", "randint", "randperm", "tril_indices",
                        "triu_indices", "scalar_tensor", "Tensor", "FloatTensor", "LongTensor", "BoolTensor"})


def _makes_tensors(fn: Callable) -> bool:
    """Whether the code that runs when ``fn`` is called (a module's methods other than ``__init__``) names
    one of torch's factories: a result can only leave its arguments' device through one. The first use of
    the meta device costs seconds (PyTorch imports its meta kernels), so code without one is not probed."""
    return any(_FACTORIES & set(code.co_names) for code in own_code(fn) if code.co_name != "__init__")


def _device(fn: Callable, case: Case) -> tuple[str, ...]:
    """("raised", where..., plain attributes...) when an operation mixed a tensor of the CPU with the
    arguments (where: the five parts of ``Raised.details["where"]``, which the grader words, or five empty
    strings; then at most two attributes); ("returned", which value, its device) when the result stayed on the
    CPU; else ()."""
    module = build_module(fn, case) if case.init is not None else None
    if not _makes_tensors(fn) and not _plain_attributes(module):
        return ()
    meta = torch.device("meta")
    args, kwargs = _map(materialize(case.args), lambda t: t.to(meta)), _map(materialize(dict(case.kwargs)), lambda t: t.to(meta))
    left: list[str] = []
    try:
        if module is not None:
            module = module.to(meta)
            left = [f"self.{name}" for name, t in _plain_attributes(module) if t.device != meta]
            out = getattr(module, case.method)(*args, **kwargs)
        else:
            out = fn(*args, **kwargs)
    except Exception as exc:
        if any(m in str(exc) for m in _MISMATCH):
            return ("raised", *(raised(exc, fn).details.get("where") or ("",) * 5), *left[:2])
        return ()
    for path, t in named_tensors(out, "the result"):
        if t.device != meta:
            return ("returned", path, str(t.device))
    return ()


def _plain_attributes(module: Any) -> list[tuple[str, torch.Tensor]]:
    """Tensors a module keeps as ordinary attributes, neither parameters nor buffers: ``.to(device)``
    leaves them where they are."""
    if not hasattr(module, "named_modules"):
        return []
    return [(f"{prefix}.{name}" if prefix else name, value)
            for prefix, m in module.named_modules() for name, value in vars(m).items()
            if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter)]


# -- gradient -------------------------------------------------------------------------------------


def _gradient(fn: Callable, case: Case, deadline: float) -> tuple[str, ...]:
    """("detached", names) when the result does not require a gradient although what it was made from
    does; ("differs", name, autograd's, the difference's) when the gradient along a random direction
    disagrees with the result's own change; else ()."""
    g = torch.Generator().manual_seed(0)
    args, kwargs = materialize(case.args), materialize(dict(case.kwargs))
    named = argument_names(fn, case.method, args, kwargs)
    leaves: list[tuple[str, torch.Tensor]] = []  # (the learner's name, a float64 leaf)

    def leaf(name: str, t: torch.Tensor) -> torch.Tensor:
        if not t.is_floating_point():
            return t
        x = t.detach().double().requires_grad_()
        leaves.append((name, x))
        return x

    given = [_map(value, lambda t, n=name: leaf(n, t)) for name, value in named]
    args, kwargs = tuple(given[:len(args)]), dict(zip(kwargs, given[len(args):]))
    module = None
    if case.init is not None:
        module = build_module(fn, case).double().eval()
        leaves += [(f"self.{n}", p) for n, p in module.named_parameters() if p.requires_grad]
    if not leaves:
        return ()

    def run(shift: float = 0.0, which: list[int] | None = None, directions=()) -> Any:
        """The result with each leaf in ``which`` moved by ``shift`` times its direction (graph kept only at 0)."""
        if time.monotonic() > deadline:
            raise _OutOfTime
        moved = {}
        if shift:
            with torch.no_grad():
                for i in which:
                    moved[i] = leaves[i][1].detach().clone()
                    leaves[i][1].add_(directions[i], alpha=shift)
        try:
            torch.manual_seed(0)
            with torch.enable_grad() if not shift else torch.no_grad():
                # A leaf is never handed over itself: code that writes into its argument is reported apart.
                call_args = _map(args, lambda t: t.clone() if t.requires_grad else t)
                call_kwargs = _map(kwargs, lambda t: t.clone() if t.requires_grad else t)
                target = getattr(module, case.method) if module is not None else fn
                return _first_floating(target(*call_args, **call_kwargs))
        finally:
            with torch.no_grad():
                for i, original in moved.items():
                    leaves[i][1].copy_(original)

    out = run()
    if out is None or out.dtype != torch.float64:
        return ()  # no floating result, or one in another dtype: the dtype rule speaks to that
    if not out.requires_grad:
        return ("detached", *dict.fromkeys(n.split("[")[0] for n, _ in leaves[:8]))
    weights = torch.randn(out.shape, generator=g, dtype=torch.float64)
    grads = torch.autograd.grad((out * weights).sum(), [x for _, x in leaves], allow_unused=True)
    directions = [torch.randn(x.shape, generator=g, dtype=torch.float64) for _, x in leaves]
    scale = max(1.0, max((float(x.detach().abs().max()) for _, x in leaves if x.numel()), default=1.0))

    def disagreement(which: list[int]) -> tuple[float, float] | None:
        autograd = sum(float((grads[i] * directions[i]).sum()) for i in which if grads[i] is not None)
        numeric = 0.0
        for step, agreement in _DIFFERENCES:
            ahead, behind = run(step * scale, which, directions), run(-step * scale, which, directions)
            numeric = float(((ahead - behind) * weights).sum()) / (2 * step * scale)
            if abs(autograd - numeric) <= agreement * max(abs(autograd), abs(numeric), 1e-6):
                return None
        return autograd, numeric

    if disagreement(list(range(len(leaves)))) is None:
        return ()
    try:
        for i in range(min(len(leaves), _MAX_LEAVES)):
            found = disagreement([i])
            if found is not None:
                return ("differs", leaves[i][0], f"{found[0]:.6g}", f"{found[1]:.6g}")
    except _OutOfTime:
        pass  # the gradient is wrong; only which argument's is left unsaid
    return ("differs", "", "", "")


def _first_floating(value: Any) -> torch.Tensor | None:
    """The result a model trains through: the first floating tensor returned (the output before the weights)."""
    return next((t for _, t in named_tensors(value, "the result") if t.is_floating_point()), None)
