"""What every check is made of.

A check never calls the learner's function and judges the result in one breath. It has two
halves that only exchange plain data:

* ``cases(hidden)`` lists the calls to make: inputs built from a fixed seed, as tensors,
  numbers, strings and :class:`Provided` objects;
* ``judge(case, result)`` (and ``judge_all``) look at what came back and either accept it or
  raise :class:`CheckFailed` with a message that tells the learner what is wrong and where
  to look.

In a notebook both halves run in one process (:func:`run_check`). The grader runs the calls in
a sandbox and the judging in its own process, so nothing the learner's code does can touch the
verdict. The oracle is always PyTorch or closed-form mathematics, never the course's solutions.
"""
from __future__ import annotations

import contextlib
import copy
import importlib
import linecache
import math
import os
import re
import sys
import traceback
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch


class CheckFailed(AssertionError):
    """A learner-facing verdict: the message says what is wrong and where to look.

    In a notebook IPython shows it through :meth:`_render_traceback_`: the message and the
    learner's own frames, without the grader's. Elsewhere it is an ordinary exception.
    """

    #: the frames of the learner's code where the learner's exception was raised, formatted
    learner_frames: tuple[str, ...] = ()

    def _render_traceback_(self) -> list[str]:
        lines = [f"{type(self).__name__}: {self}"]
        if self.learner_frames:
            lines += ["", "Where it happened in your code (most recent call last):", *self.learner_frames]
        return lines


@dataclass(frozen=True)
class Provided:
    """An object the grader builds on the learner's side from a name and plain arguments.

    Used for things a function under test needs that are not plain data, such as the small
    model a greedy decoder drives. Only factories registered in :data:`PROVIDERS` exist.
    """

    name: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)


PROVIDERS: dict[str, Callable[..., Any]] = {}


def provider(name: str):
    """Register a factory for :class:`Provided` objects."""

    def register(factory):
        PROVIDERS[name] = factory
        return factory

    return register


@dataclass(frozen=True)
class Case:
    """One call of the learner's function."""

    label: str
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    #: a judge-only marker for cases that test something particular ("large", "pair-a", ...)
    tag: str = ""
    #: for a class under test (an nn.Module): its constructor's keyword arguments; the case then
    #: builds ``cls(**init)``, loads ``state`` (its parameters, by the exercise's names) and calls
    #: ``method`` with ``args``/``kwargs``
    init: Mapping[str, Any] | None = None
    state: Mapping[str, torch.Tensor] | None = None
    method: str = "forward"
    #: attributes of the module to report after the call (e.g. "attn_weights")
    collect: tuple[str, ...] = ()
    #: call the module in training mode (dropout active); otherwise eval mode
    train: bool = False


@dataclass(frozen=True)
class Raised:
    """The learner's function raised instead of returning."""

    type: str
    message: str
    #: where it happened, as a phrase for the learner: their own line, and the course's function
    #: it raised inside when it did ("raised inside the course's `X`, called from your `f`, ...")
    where: str = ""
    #: the qualified name of the function that raised (e.g. "LayerNorm.forward")
    origin: str = ""
    #: the learner's frames, formatted for a notebook; they stay in the learner's process
    frames: tuple[str, ...] = field(default=(), compare=False)
    #: what a judge may need as data rather than words: for a StateMismatch, the parameter names
    #: ``missing``, ``unexpected`` and the ``shared`` (alias, original) pairs
    details: Mapping[str, tuple] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class Opaque:
    """A returned value that is not plain data (a custom object, a function, ...)."""

    type: str


def materialize(value: Any) -> Any:
    """Build the learner-side arguments of a case: fresh copies, provided objects built."""
    if isinstance(value, Provided):
        if value.name not in PROVIDERS:
            importlib.import_module("autograder.toys")  # registers the course's providers (a worker may not have yet)
        if value.name not in PROVIDERS:
            raise KeyError(f"no provider named {value.name!r}")
        return PROVIDERS[value.name](**value.kwargs)
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, tuple):
        return tuple(materialize(v) for v in value)
    if isinstance(value, list):
        return [materialize(v) for v in value]
    if isinstance(value, dict):
        return {k: materialize(v) for k, v in value.items()}
    return copy.deepcopy(value)


def to_plain(value: Any, depth: int = 0) -> Any:
    """Reduce a returned value to plain data: what a judge may look at.

    Tensors become detached CPU tensors of the base class (a subclass cannot bring its own
    comparison methods); anything that is not data becomes :class:`Opaque`.
    """
    if depth > 8:
        return Opaque("deeply nested value")
    if isinstance(value, torch.Tensor):
        plain = value.detach().to("cpu")
        if type(plain) is not torch.Tensor:
            plain = plain.as_subclass(torch.Tensor)
        return plain.clone()
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) in (tuple, list):
        return type(value)(to_plain(v, depth + 1) for v in value)
    if type(value) is dict:
        return {str(k): to_plain(v, depth + 1) for k, v in value.items()}
    try:
        import numpy as np

        if type(value) is np.ndarray:
            return torch.from_numpy(value.copy())
        if isinstance(value, np.generic):
            return value.item()
    except ImportError:  # pragma: no cover
        pass
    return Opaque(type(value).__name__)


@dataclass(frozen=True)
class ModuleResult:
    """What a call of a module returned, with the attributes the case asked to collect."""

    output: Any
    attributes: Mapping[str, Any]


def _call_module(cls: Callable, case: Case, args: tuple, kwargs: dict) -> Any:
    module = cls(**materialize(dict(case.init)))
    if case.state is not None:
        # A module is built in float32; a case whose weights are float64 runs it in float64.
        dtypes = {v.dtype for v in case.state.values() if v.is_floating_point()}
        if len(dtypes) == 1 and dtypes != {torch.float32} and hasattr(module, "to"):
            module = module.to(dtypes.pop())
        # Parameters only: buffers (a positional-encoding table, say) are the learner's to compute.
        own = dict(module.named_parameters()) if hasattr(module, "named_parameters") else {}
        missing = sorted(set(case.state) - set(own))
        unexpected = sorted(set(own) - set(case.state))
        if missing or unexpected:
            raise StateMismatch(missing, unexpected, shared=shared_names(module))
        for name, value in case.state.items():
            if tuple(own[name].shape) != tuple(value.shape):
                raise StateMismatch([], [], f"{name} has shape {tuple(own[name].shape)}, expected {tuple(value.shape)}")
        module.load_state_dict({k: v.clone() for k, v in case.state.items()}, strict=False)
    module.train(case.train)
    torch.manual_seed(0)  # dropout draws the same masks every time the case runs
    output = getattr(module, case.method)(*args, **kwargs)
    return ModuleResult(to_plain(output), {a: to_plain(getattr(module, a, None)) for a in case.collect})


def shared_names(module: Any) -> list[tuple[str, str]]:
    """(alias, original) for each submodule or parameter reachable under a second name.

    PyTorch lists a shared parameter once, under its first name, so ``cross_attn = self_attn``
    looks like a module without cross_attn's parameters. Only the outermost alias is given:
    cross_attn, not also cross_attn.w_q.
    """
    if not hasattr(module, "named_modules"):
        return []
    first: dict[int, str] = {}
    pairs: list[tuple[str, str]] = []
    for name, obj in [*module.named_modules(remove_duplicate=False), *module.named_parameters(remove_duplicate=False)]:
        original = first.setdefault(id(obj), name)
        if original != name and not any(name.startswith(f"{alias}.") for alias, _ in pairs):
            pairs.append((name, original))
    return pairs


class StateMismatch(Exception):
    """The learner's module does not have the parameters the exercise names.

    ``shared`` lists (alias, original) pairs: one module or parameter under two names, whose
    parameters PyTorch therefore reports only once; names under an alias are not called missing.
    """

    def __init__(self, missing, unexpected, detail: str = "", shared=()):
        self.missing, self.unexpected, self.shared = missing, unexpected, list(shared)
        aliases = [alias for alias, _ in self.shared]
        really_missing = [n for n in missing if not any(n == a or n.startswith(f"{a}.") for a in aliases)]
        parts = [
            f"{alias} and {original} are one and the same object, so they share their weights (PyTorch lists them "
            f"once, under {original}): give {alias} weights of its own by creating a new object for it instead of "
            f"reusing {original}"
            for alias, original in self.shared[:3]
            if any(n == alias or n.startswith(f"{alias}.") for n in missing)
        ]
        if really_missing:
            parts.append("it has no parameter named " + ", ".join(really_missing[:6]))
        if unexpected:
            parts.append("it has parameters the exercise does not ask for: " + ", ".join(unexpected[:6]))
        if detail:
            parts.append(detail)
        tail = (
            ". Use exactly the submodule names and shapes the exercise gives."
            if (really_missing or unexpected or detail)
            else "."
        )
        super().__init__("; ".join(parts) + tail)


def _resolve(path: str) -> tuple[Any, str]:
    """("torch.nn.functional.softmax") -> (the torch.nn.functional module, "softmax")."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:-1]:
            owner = getattr(owner, name)
        return owner, parts[-1]
    raise ImportError(path)


class Tripwires:
    """Wrap named functions (or layers' forward) so that calls to them can be recorded.

    The grader's worker installs them before any learner code runs, so that even a name the
    learner imported early is the wrapped one; a notebook installs them around each call.
    """

    def __init__(self, paths: Sequence[str]):
        self.paths = tuple(dict.fromkeys(paths))
        self._saved: list[tuple[Any, str, Any]] = []
        self._used: list[str] | None = None

    def install(self) -> Tripwires:
        for path in self.paths:
            try:
                owner, attr = _resolve(path)
                original = getattr(owner, attr)
            except (ImportError, AttributeError):
                continue  # nothing by that name here, so nothing to call either
            if isinstance(original, type):  # a forbidden layer: using it means calling its forward
                owner, attr, original = original, "forward", original.forward
            self._saved.append((owner, attr, original))
            setattr(owner, attr, self._wire(path, original))
        return self

    def _wire(self, path: str, original: Callable) -> Callable:
        def wire(*args, **kwargs):
            if self._used is not None:
                self._used.append(path)
            return original(*args, **kwargs)

        wire.__name__ = getattr(original, "__name__", "wire")
        wire.__doc__ = getattr(original, "__doc__", None)
        return wire

    def uninstall(self) -> None:
        for owner, attr, original in reversed(self._saved):
            setattr(owner, attr, original)
        self._saved.clear()

    @contextlib.contextmanager
    def record(self):
        self._used = used = []
        try:
            yield used
        finally:
            self._used = None


@dataclass(frozen=True)
class UsedForbidden:
    """The learner's code called something the exercise asks them to build themselves."""

    names: tuple[str, ...]


#: packages whose code is the course's own: an error raised inside them is named as the course's
COURSE_PACKAGES = frozenset({"reference", "autograder", "transformer"})
#: how notebook cells name their code: the grader's worker, classic IPython, ipykernel
_CELL_FILE = re.compile(r"<cell [^>]+>|<ipython-input-[^>]*>|.*[/\\]ipykernel_\d+[/\\][^/\\]+\.py")


def _own_code(fn: Callable) -> set:
    """The code objects of the function or class under test (its methods, those of its base classes
    written beside it, and the functions nested in them); not those of a library's base class."""
    if isinstance(fn, type):
        mine = [klass for klass in fn.__mro__ if klass.__module__ == fn.__module__]
        members = [getattr(m, "__func__", m) for klass in mine for m in vars(klass).values()]  # static and class methods
        members += [accessor for m in members if isinstance(m, property) for accessor in (m.fget, m.fset, m.fdel)]
        todo = [m.__code__ for m in members if hasattr(m, "__code__")]
    else:
        todo = [fn.__code__] if hasattr(fn, "__code__") else []
    codes: set = set()
    while todo:
        code = todo.pop()
        if code not in codes:
            codes.add(code)
            todo += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return codes


def remember_cell(filename: str, source: str) -> None:
    """Keep a cell's text where tracebacks look for it, so that its lines can be quoted."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)


def _qualname(frame) -> str:
    return getattr(frame.f_code, "co_qualname", frame.f_code.co_name)


def _is_cell(filename: str) -> bool:
    return _CELL_FILE.fullmatch(filename) is not None


def _cell_label(filename: str) -> str:
    """"Cell In[3]" in IPython, the file's name elsewhere."""
    if _is_cell(filename):
        try:
            shell = sys.modules["IPython"].get_ipython()
            label = shell.compile.format_code_name(filename)
            if label:
                return " ".join(label)
        except Exception:  # not in IPython, or an IPython without this method
            pass
        return "Cell"
    return filename


def raised(exc: BaseException, fn: Callable | None = None) -> Raised:
    """An exception as data: its type, its message and where it happened.

    ``where`` points at the learner's own code (a notebook cell, or the function under test), the
    last of it that ran, with the line shown; when the exception came from inside the course's
    code that the learner called, it names that function too. ``origin`` names the function it
    came from when that is not ``fn`` itself (a helper the learner has not written yet, say).
    """
    own = _own_code(fn) if fn is not None else set()
    own_files = {code.co_filename for code in own}
    frames = []  # (frame, line number, kind): kind is "learner", "course" or "library"
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        module = frame.f_globals.get("__name__", "")
        filename = frame.f_code.co_filename
        if module == __name__:
            continue  # the harness that made the call
        if frame.f_code in own or filename in own_files or _is_cell(filename):
            kind = "learner"
        elif module.split(".")[0] in COURSE_PACKAGES:
            kind = "course"
        else:
            kind = "library"
        frames.append((frame, lineno, kind))
    mine = [i for i, (_, _, kind) in enumerate(frames) if kind == "learner"]
    inside = next((f for f, _, kind in frames[mine[-1] + 1 if mine else 0:] if kind == "course"), None)
    where = ""
    if mine:
        frame, lineno, _ = frames[mine[-1]]
        filename = frame.f_code.co_filename
        line = linecache.getline(filename, lineno, frame.f_globals).strip()
        place = "its cell" if _is_cell(filename) else os.path.basename(filename)
        where = f"your `{_qualname(frame)}`, line {lineno} of {place}" + (f": {line}" if line else "")
        where = f"raised inside the course's `{_qualname(inside)}`, called from {where}" if inside else f"in {where}"
    elif inside is not None:
        where = f"raised inside the course's `{_qualname(inside)}`"
    shown = []
    for i in mine:
        frame, lineno, _ = frames[i]
        line = linecache.getline(frame.f_code.co_filename, lineno, frame.f_globals).strip()
        shown.append(
            f"  {_cell_label(frame.f_code.co_filename)}, line {lineno}, in {_qualname(frame)}" + (f"\n    {line}" if line else "")
        )
    origin = ""
    last = next((f for f, _, kind in reversed(frames) if kind != "library"), None)
    if last is not None and fn is not None and last.f_code not in own:
        origin = _qualname(last)
    details = {}
    if isinstance(exc, StateMismatch):
        details = {"missing": tuple(exc.missing), "unexpected": tuple(exc.unexpected),
                   "shared": tuple((str(a), str(o)) for a, o in exc.shared)}
    return Raised(type(exc).__name__, str(exc)[:2000], where[:500], origin, tuple(shown), details)


def call_learner(fn: Callable, case: Case, wires: Tripwires | None = None, forbidden: Sequence[str] = ()) -> Any:
    """Run one case in this process and return its plain result, a :class:`Raised`, or
    :class:`UsedForbidden` when it called one of ``forbidden`` (recorded by installed ``wires``)."""
    args, kwargs = materialize(case.args), materialize(dict(case.kwargs))
    used: list[str] = []
    try:
        with (wires.record() if wires else contextlib.nullcontext([])) as used:
            if case.init is not None:
                result = _call_module(fn, case, args, kwargs)
            else:
                result = to_plain(fn(*args, **kwargs))
    except Exception as exc:  # the learner's mistake is data for the judge, not a crash
        result = raised(exc, fn)
    hits = [name for name in dict.fromkeys(used) if name in forbidden]
    return UsedForbidden(tuple(hits)) if hits else result


class Check:
    """A graded function's checks. Subclasses define ``cases`` and ``judge``."""

    #: the name of the learner's function, as written in the exercise
    function: ClassVar[str]
    #: what the function is compared with, for the success line
    oracle: ClassVar[str] = "the reference computation"
    #: functions or layers the learner must not call, because the exercise is to build them
    forbidden: ClassVar[tuple[str, ...]] = ()
    #: for cases tagged "invalid", which must raise ValueError: what to tell a learner who raised
    #: another exception instead
    invalid_hint: ClassVar[str] = "raise ValueError with a message that says what is wrong."

    def cases(self, hidden: bool) -> list[Case]:
        raise NotImplementedError

    def judge(self, case: Case, result: Any) -> None:
        """Raise CheckFailed if ``result`` is wrong for ``case``."""
        raise NotImplementedError

    def judge_all(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        """Properties that span several calls (e.g. a masked value changes nothing)."""

    def verdict(self, cases: Sequence[Case], results: Sequence[Any]) -> str:
        """Judge every result; return the success line or raise CheckFailed."""
        for case, result in zip(cases, results):
            try:
                self.reject_non_results(case, result)
            except CheckFailed as failure:
                if isinstance(result, Raised):
                    failure.learner_frames = result.frames
                raise
        for case, result in zip(cases, results):
            self.judge(case, result)
        self.judge_all(cases, results)
        return f"✓ {self.function}: all {len(cases)} cases agree with {self.oracle}"

    def reject_non_results(self, case: Case, result: Any) -> None:
        name = self.function
        if isinstance(result, UsedForbidden):
            raise CheckFailed(
                f"`{name}` calls {', '.join(result.names)}, which this exercise asks you to build yourself; "
                "write it with basic tensor operations instead."
            )
        if isinstance(result, Raised):
            if case.tag == "invalid" and result.type not in ("NotImplementedError", "ValueError"):
                raise CheckFailed(
                    f"`{name}` raised {result.type} ({result.message}) on the case {case.label}; {self.invalid_hint}"
                )
            if case.tag == "invalid" and result.type == "ValueError":
                return  # raising is the right answer to arguments the function must refuse
            if result.type == "NotImplementedError":
                owner = result.origin.split(".")[0]
                if owner and owner != name:
                    raise CheckFailed(
                        f"`{name}` could not run because `{result.origin}` is not implemented yet: it calls "
                        f"`{owner}`, so finish that first (its own test cell comes earlier)."
                    )
                raise CheckFailed(
                    f"`{name}` is not implemented yet: replace `raise NotImplementedError()` with your code."
                )
            if result.type == "StateMismatch":
                raise CheckFailed(f"`{name}`'s parameters do not match the exercise on the case {case.label}: {result.message}")
            raise CheckFailed(
                raised_message(f"`{name}`", case, result)
            )
        if result is None or (isinstance(result, ModuleResult) and result.output is None):
            raise CheckFailed(f"`{name}` returned None on the case {case.label}: did you forget `return`?")



def raised_message(name: str, case: Case, result: Raised) -> str:
    """"`f` raised X on the case ...: message", with the learner's line that raised it."""
    return f"{name} raised {result.type} on the case {case.label}: {result.message}" + (
        f"\n  ({result.where.strip()})" if result.where else ""
    )


def run_check(check: Check, fn: Callable, hidden: bool = False, call_seconds: float | None = None) -> str:
    """Run a check entirely in this process, as the notebooks do, each call under the grader's time limit."""
    from .time_limit import CallTimedOut, call_seconds_default, call_time_limit, endless_loop_message

    if not callable(fn):
        raise CheckFailed(f"expected the function `{check.function}`, got {type(fn).__name__}")
    seconds = call_seconds_default() if call_seconds is None else call_seconds
    cases = check.cases(hidden)
    wires = Tripwires(check.forbidden).install()
    results = []
    try:
        for case in cases:
            try:
                with call_time_limit(seconds):
                    results.append(call_learner(fn, case, wires, check.forbidden))
            except CallTimedOut:
                raise CheckFailed(endless_loop_message(check.function, seconds, case.label)) from None
    finally:
        wires.uninstall()
    return check.verdict(cases, results)


# --------------------------------------------------------------------------------------------
# Helpers for judges: each either passes silently or fails with a message a learner can act on.
# --------------------------------------------------------------------------------------------

TOLERANCES = {
    torch.float64: (1e-9, 1e-7),
    torch.float32: (1e-5, 1e-4),
    torch.float16: (2e-3, 2e-2),
    torch.bfloat16: (1e-2, 4e-2),
}


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(atol, rtol) for comparing a result computed in ``dtype`` with a float64 oracle."""
    return TOLERANCES.get(dtype, TOLERANCES[torch.float32])


def expect_tensor(value: Any, what: str, case: Case) -> torch.Tensor:
    if isinstance(value, Opaque):
        raise CheckFailed(f"{what} on the case {case.label} is a {value.type}, not a torch.Tensor.")
    if not isinstance(value, torch.Tensor):
        raise CheckFailed(f"{what} on the case {case.label} is a {type(value).__name__}, not a torch.Tensor.")
    return value


def expect_tuple(value: Any, length: int, what: str, case: Case, names: str) -> tuple:
    if not isinstance(value, (tuple, list)) or len(value) != length:
        got = f"a {type(value).__name__}" if not isinstance(value, (tuple, list)) else f"{len(value)} values"
        raise CheckFailed(f"{what} should return {length} values ({names}) but returned {got} on the case {case.label}.")
    return tuple(value)


def expect_shape(t: torch.Tensor, shape: Sequence[int], what: str, case: Case, hint: str = "") -> None:
    if tuple(t.shape) != tuple(shape):
        raise CheckFailed(
            f"{what} has shape {tuple(t.shape)} but should have shape {tuple(shape)} on the case {case.label}."
            + (f" {hint}" if hint else "")
        )


def expect_dtype(t: torch.Tensor, dtype: torch.dtype, what: str, case: Case) -> None:
    if t.dtype != dtype:
        raise CheckFailed(
            f"{what} has dtype {t.dtype} but the inputs were {dtype} on the case {case.label}: "
            "keep the input's dtype (avoid creating tensors with a fixed dtype such as torch.tensor(1.0))."
        )


def expect_finite(t: torch.Tensor, what: str, case: Case, hint: str) -> None:
    if not torch.isfinite(t).all():
        bad = (~torch.isfinite(t)).nonzero()[0].tolist()
        value = t[tuple(bad)].item()
        raise CheckFailed(f"{what} contains {value} (first at index {tuple(bad)}) on the case {case.label}. {hint}")


def expect_loss(result: Any, what: str, case: Case, dtype: torch.dtype, mean_of: str, stable_hint: str) -> torch.Tensor:
    """A training loss: a 0-dimensional, finite tensor of ``dtype`` (not a Python number, which
    backward() cannot reach). ``mean_of`` says what it averages; ``stable_hint`` how to avoid log(0)."""
    if isinstance(result, (float, int)) and not isinstance(result, bool):
        raise CheckFailed(
            f"{what} is a Python {type(result).__name__} on the case {case.label}: return the 0-dimensional tensor "
            "itself (no .item()), so that loss.backward() can reach the model."
        )
    loss = expect_tensor(result, what, case)
    if loss.dim() != 0:
        raise CheckFailed(
            f"{what} has shape {tuple(loss.shape)} on the case {case.label}: return one number, {mean_of}, as a "
            "0-dimensional tensor."
        )
    expect_dtype(loss, dtype, what, case)
    expect_finite(loss, what, case, f"log(softmax(x)) underflows to log(0) = -inf for large logits: {stable_hint}")
    return loss


def matches(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype | None = None) -> bool:
    """Whether ``actual`` equals ``expected`` within the tolerance of ``dtype``."""
    if actual.shape != expected.shape:
        return False
    atol, rtol = tolerance(dtype or actual.dtype)
    a, e = actual.double(), expected.double()
    both_nan = torch.isnan(a) & torch.isnan(e)
    return bool((torch.isclose(a, e, atol=atol, rtol=rtol) | both_nan).all())


def where_it_differs(actual: torch.Tensor, expected: torch.Tensor) -> str:
    a, e = actual.double(), expected.double()
    diff = (a - e).abs().nan_to_num(nan=math.inf)
    index = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape)) if diff.dim() else ()
    return (
        f"the largest difference is {diff.max().item():.3g} at index {index}: "
        f"you returned {a[index].item():.6g} where {e[index].item():.6g} was expected"
    )


def expect_close(
    actual: torch.Tensor,
    expected: torch.Tensor,
    what: str,
    case: Case,
    diagnoses: Sequence[tuple[Callable[[], torch.Tensor], str]] = (),
    hint: str = "",
    dtype: torch.dtype | None = None,
) -> None:
    """Fail unless ``actual`` matches the oracle; name the likely mistake when one fits.

    ``diagnoses`` are (what a known mistake would have returned, what to tell the learner)
    pairs, tried in order: a wrong answer that equals one of them is named precisely.
    """
    if matches(actual, expected, dtype):
        return
    for mistaken, message in diagnoses:
        try:
            candidate = mistaken()
        except Exception:  # a diagnosis that does not apply to this case
            continue
        if candidate.shape == actual.shape and matches(actual, candidate, dtype):
            raise CheckFailed(f"{what} is wrong on the case {case.label}: {message}")
    raise CheckFailed(
        f"{what} is wrong on the case {case.label}: {where_it_differs(actual, expected)}."
        + (f" {hint}" if hint else "")
    )


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)
