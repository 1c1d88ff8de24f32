"""What runs beside the learner's code: a case's inputs built, the learner's function called, its
result reduced to plain data, and the tripwires that notice a forbidden built-in.

This module, with the rest of :mod:`harness`, is all of the course's code that a sandboxed
learner process holds. It judges nothing and holds no oracle: the checks, their expected values
and the course's references live in :mod:`autograder`, in the grader's own process.

The tripwires watch at the level every alias of a function shares: a torch function mode sees
each call of a torch function (public name, ``torch._C`` binding, ``torch.ops`` entry or Tensor
method alike) and a dispatch mode each ATen operator it runs. Nothing is wrapped, so there is no
original to take from a wrapper. Those modes belong to a thread, so every thread the learner's
code starts (:func:`follow_threads`) runs under them too. They are advisory all the same: code in
the learner's process can reach anything in it, and a process it starts is out of their sight.
What is enforced is the grader's scan of the submission's source (:mod:`autograder.source.shortcuts`),
made in the grader's process before anything runs.
"""
from __future__ import annotations

import _thread
import ast
import contextlib
import copy
import dis
import importlib
import inspect
import linecache
import os
import re
import sys
import textwrap
import threading
import traceback
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from . import call_limit, observe
from .call_limit import CallTimedOut
from .memory_budget import memory_budget
from .observe import Arguments, Observer, Recorder, argument_names, qualname
from .products import ProductCount
from .providers import PROVIDERS, Provided


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
    #: a case larger than the others (a long sequence) may have limits of its own: a time limit for its call
    #: where the grader's is shorter, and the memory its call may allocate beyond what the process holds
    #: (:mod:`harness.memory_budget`); it is called only once the other cases pass
    seconds: float | None = None
    memory_mb: int | None = None
    #: for a module: weights (by parameter name) whose matrix products are counted during the call
    #: (:mod:`harness.products`), to see how the work was split; the counts come back in the result
    counted: tuple[str, ...] = ()

    @property
    def large(self) -> bool:
        return bool(self.seconds or self.memory_mb)


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
    #: ``missing``, ``unexpected`` and the ``shared`` (alias, original) pairs, and where it applies ``made`` (where
    #: the learner's class makes the first unexpected one) and ``shape`` (a parameter of the wrong shape);
    #: otherwise ``where``'s parts (the course's function, the learner's, the line's number, its place and its
    #: text), and what an exception of the course's toys says (``encoded``, ``read``: :mod:`harness.toys`). The
    #: grader words all of them in the learner's language; ``message`` is the learner's process's own English
    details: Mapping[str, tuple] = field(default_factory=dict, compare=False, hash=False)

    def is_stub(self) -> bool:
        """A ``raise NotImplementedError`` of the learner's (or the course's) code: an unwritten function,
        not an operation of torch's that is not implemented for its input (``bincount`` of floats)."""
        return self.type == "NotImplementedError" and "stub" in self.details

    def line_at(self) -> tuple[int, str] | None:
        """The learner's line that raised and its function (``details["at"]``), or None where there is none."""
        line, function = self.details.get("at", ("", ""))
        return (int(line), function) if line.isdigit() else None


@dataclass(frozen=True)
class Opaque:
    """A returned value that is not plain data (a custom object, a function, ...)."""

    type: str


#: what an Opaque value nested too deeply is called (the grader words it in the learner's language)
DEEPLY_NESTED = "deeply nested value"


def materialize(value: Any) -> Any:
    """Build the learner-side arguments of a case: fresh copies, provided objects built."""
    if isinstance(value, Provided):
        if value.name not in PROVIDERS:
            importlib.import_module("harness.toys")  # registers the course's providers (a worker may not have yet)
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
        return Opaque(DEEPLY_NESTED)
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
    #: for each weight of ``Case.counted``: (rows multiplied, rows not all zero, products)
    products: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)


def build_module(cls: Callable, case: Case) -> Any:
    """The learner's module for a case: built from ``case.init``, in the dtype of ``case.state``, holding
    those parameters, in the case's mode, with torch's seed set so that dropout draws the same masks
    every time the case runs."""
    module = cls(**materialize(dict(case.init)))
    if case.state is not None:
        # A module is built in float32; a case whose weights are float64 runs it in float64.
        dtypes = {v.dtype for v in case.state.values() if v.is_floating_point()}
        if len(dtypes) == 1 and dtypes != {torch.float32} and hasattr(module, "to"):
            module = module.to(dtypes.pop())
        # Its parameters, all of them, by the exercise's names; and the buffers the case names (a cache's
        # contents), while those it does not name (a positional-encoding table, say) are the learner's to compute.
        own = dict(module.named_parameters()) if hasattr(module, "named_parameters") else {}
        buffers = dict(module.named_buffers()) if hasattr(module, "named_buffers") else {}
        missing = sorted(set(case.state) - set(own) - set(buffers))
        unexpected = sorted(set(own) - set(case.state))
        if missing or unexpected:
            raise StateMismatch(missing, unexpected, _made_at(type(module), unexpected), shared=shared_names(module))
        for name, value in case.state.items():
            held = own.get(name, buffers.get(name))
            if tuple(held.shape) != tuple(value.shape):
                raise StateMismatch([], [], _made_at(type(module), [name]),
                                    shape=(name, str(tuple(held.shape)), str(tuple(value.shape))))
        module.load_state_dict({k: v.clone() for k, v in case.state.items() if k in own}, strict=False)
        with torch.no_grad():
            for name in case.state.keys() - own.keys():  # a buffer kept out of the state_dict is filled all the same
                buffers[name].copy_(case.state[name])
    module.train(case.train)
    torch.manual_seed(0)
    return module


def _made_at(cls: type, names: Sequence[str]) -> tuple[str, ...]:
    """Where the learner's class makes the submodule or parameter that holds the first of ``names`` (its
    first attribute, ``feed_forward`` of ``feed_forward.w_1.weight``), as the parts the grader words ("feed_forward
    is made on line N of your `C.__init__`, `self.feed_forward = ...`"): the attribute, the line's number, the
    method and the line's text; () when no line of the learner's says so."""
    for name in names:
        attribute = name.split(".")[0]
        assigned = re.compile(rf"\bself\.{re.escape(attribute)}\s*(:[^=]*)?=(?!=)")
        for klass in cls.__mro__:
            if klass.__module__.startswith("torch"):
                break
            for method in vars(klass).values():
                if not isinstance(method, types.FunctionType) or not _is_cell(method.__code__.co_filename):
                    continue
                try:
                    lines, start = inspect.getsourcelines(method)
                except (OSError, TypeError):
                    continue
                for offset, text in enumerate(lines):
                    if assigned.search(text):
                        return attribute, str(start + offset), method.__qualname__, text.strip()[:200]
    return ()


def _call_module(cls: Callable, case: Case, args: tuple, kwargs: dict, observer: Observer | None = None) -> Any:
    module = build_module(cls, case)
    parameters = dict(module.named_parameters()) if case.counted else {}
    counter = ProductCount({name: parameters[name] for name in case.counted if name in parameters})
    with counter if case.counted else contextlib.nullcontext():
        output = _call_method(module, case, args, kwargs, observer)
    return ModuleResult(to_plain(output), {a: to_plain(getattr(module, a, None)) for a in case.collect},
                        counter.counts() if case.counted else {})


def _call_method(module: Any, case: Case, args: tuple, kwargs: dict, observer: Observer | None) -> Any:
    if observer is None:
        output = getattr(module, case.method)(*args, **kwargs)
    else:
        if observer.recorder is not None:
            observer.recorder.name_modules(module)
            observer.recorder.know([*module.parameters(), *module.buffers()])
        with observer.watching():
            output = getattr(module, case.method)(*args, **kwargs)
        observer.result = output
        observer.attached = [a for a in case.collect
                             if isinstance(getattr(module, a, None), torch.Tensor) and getattr(module, a).requires_grad]
    return output


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
    ``made`` is where the learner's class makes the first unexpected one (:func:`_made_at`'s parts), ``shape``
    a parameter of the wrong shape: (its name, its shape, the shape expected). They travel as data
    (:func:`raised`) and the grader words them in the learner's language; the English here is what the
    learner's own process shows.
    """

    def __init__(self, missing, unexpected, made: Sequence[str] = (), shared=(), shape: Sequence[str] = ()):
        self.missing, self.unexpected, self.shared = missing, unexpected, list(shared)
        self.made, self.shape = tuple(made), tuple(shape)
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
        made_at = "{} is made on line {} of your `{}`, `{}`".format(*self.made) if self.made else ""
        detail = made_at
        if self.shape:
            detail = "{} has shape {}, expected {}".format(*self.shape) + (f" ({made_at})" if made_at else "")
        if detail:
            parts.append(detail)
        tail = (
            ". Use exactly the submodule names and shapes the exercise gives."
            if (really_missing or unexpected or detail)
            else "."
        )
        super().__init__("; ".join(parts) + tail)


def plain_name(name: str) -> str:
    """"Layer_Norm" -> "layernorm": how names are compared, so that every spelling of one matches."""
    return name.replace("_", "").lower()


def watched_names(paths: Sequence[str], ops: Sequence[str] = ()) -> tuple[str, ...]:
    """The name fragments a tripwire watches for: ``ops`` and the last part of each torch path
    ("torch.nn.LayerNorm" -> "layernorm", which ``layer_norm`` and ``native_layer_norm`` contain)."""
    names = [*ops, *(p.rsplit(".", 1)[-1] for p in paths if p.split(".")[0] == "torch")]
    return tuple(dict.fromkeys(plain_name(n) for n in names if n))


def _function_name(func: Any) -> str:
    """How a torch function is named in feedback: torch.softmax, torch.Tensor.softmax, torch.ops.aten._softmax."""
    name = str(getattr(func, "__name__", "") or type(func).__name__)
    module = str(getattr(func, "__module__", "") or "")
    if module.startswith("torch._ops"):
        return f"torch.ops.{module.removeprefix('torch._ops.')}.{name}"
    if str(getattr(func, "__qualname__", "")).startswith(("TensorBase.", "Tensor.")):
        return f"torch.Tensor.{name}"
    return f"{module}.{name}" if module else name


class _Recording:
    """What the tripwires of the call under way watch for, and what they saw: one for the process,
    since a thread started before the call, or by it, reports into the same lists."""

    def __init__(self):
        self.watched: tuple[str, ...] = ()
        self.functions: list[str] = []
        self.operators: list[str] = []


_NOW = _Recording()


class _Functions(TorchFunctionMode):
    """Sees every call of a torch function, whatever name it was reached by."""

    def __init__(self, recording: _Recording):
        super().__init__()
        self.recording = recording

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if any(w in plain_name(str(getattr(func, "__name__", ""))) for w in self.recording.watched):
            self.recording.functions.append(_function_name(func))
        return func(*args, **(kwargs or {}))


class _Operators(TorchDispatchMode):
    """Sees every ATen operator that runs: what all the aliases of a function come down to."""

    def __init__(self, recording: _Recording):
        super().__init__()
        self.recording = recording

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Nothing here is compiled; wrapping the handler for dynamo would import it (seconds) in every process.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        namespace, _, name = func.name().partition("::")  # "aten::_softmax"
        name = name.split(".")[0]  # an overload's name without its variant ("softmax.int")
        if any(w in plain_name(name) for w in self.recording.watched):
            self.recording.operators.append(f"torch.ops.{namespace}.{name}")
        return func(*args, **(kwargs or {}))


def _under_the_tripwires(function: Callable, args: tuple, kwargs: dict) -> Any:
    """Run a new thread's function under the modes, which report into the call under way, if any."""
    with _Functions(_NOW), _Operators(_NOW):
        return function(*args, **kwargs)


def follow_threads() -> Callable[[], None]:
    """From now on, every thread started in this process (threading, concurrent.futures, _thread)
    runs under the tripwires' modes, as the thread that calls the learner's function does: a torch
    mode belongs to one thread. Returns what undoes it. The learner's process does this once, for
    its whole life, before any of the learner's code runs."""
    start = _thread.start_new_thread
    originals = {(module, name): getattr(module, name) for module, name in
                 ((_thread, "start_new_thread"), (_thread, "start_new"), (threading, "_start_new_thread"))
                 if hasattr(module, name)}

    def start_new_thread(function, args, kwargs=None):
        return start(_under_the_tripwires, (function, tuple(args), dict(kwargs or {})))

    for module, name in originals:
        setattr(module, name, start_new_thread)

    def undo() -> None:
        for (module, name), original in originals.items():
            setattr(module, name, original)

    return undo


class Tripwires:
    """Notice calls of the torch functions a graded function must not use, by any of their names.

    ``paths`` are the public names (``torch.softmax``, ``torch.nn.LayerNorm``), ``ops`` further
    fragments of operator names (``softmin``, ``group_norm``). While :meth:`record` is active, a
    torch function mode and a dispatch mode list every call whose name contains one of them;
    nothing is replaced, so nothing holds an original to be taken back.
    """

    def __init__(self, paths: Sequence[str] = (), ops: Sequence[str] = ()):
        self.paths = tuple(dict.fromkeys(paths))
        self.watched = watched_names(self.paths, ops)

    @contextlib.contextmanager
    def record(self):
        used: list[str] = []
        if not self.watched:
            yield used
            return
        _NOW.watched, _NOW.functions, _NOW.operators = self.watched, [], []
        try:
            with _Functions(_NOW), _Operators(_NOW):
                yield used
        finally:
            # The function the learner named, when it was a torch function; else the operator it ran.
            used += list(dict.fromkeys(_NOW.functions or _NOW.operators))
            _NOW.watched = ()


@dataclass(frozen=True)
class UsedForbidden:
    """The learner's code called something the exercise asks them to build themselves."""

    names: tuple[str, ...]


#: packages whose frames are the course's code: an error raised inside them is named as the course's
COURSE_CODE = frozenset({"reference", "autograder", "harness", "transformer"})
#: the handlers through which a torch function or dispatch mode (the course's counters and records) sees each
#: operation: a frame of one belongs to the operation it watches, not to the course's code
_MODE_HANDLERS = frozenset({"__torch_function__", "__torch_dispatch__"})
#: how notebook cells name their code: the grader's worker, classic IPython, ipykernel
_CELL_FILE = re.compile(r"<cell [^>]+>|<ipython-input-[^>]*>|.*[/\\]ipykernel_\d+[/\\][^/\\]+\.py")


def own_code(fn: Callable) -> set:
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


def _guard_of_raise(frame, lineno: int) -> tuple[str, str] | None:
    """When the learner's line ``lineno`` is a ``raise`` statement inside an ``if``: that ``if``'s
    line number and text (the condition that sent a valid case there)."""
    try:
        lines, first = inspect.getsourcelines(frame.f_code)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            for branch in (node.body, node.orelse):
                for statement in branch:
                    if isinstance(statement, ast.Raise) and statement.lineno + first - 1 == lineno:
                        line = node.lineno + first - 1
                        text = linecache.getline(frame.f_code.co_filename, line, frame.f_globals).strip()
                        return (str(line), text[:200]) if text else None
    return None


def _raised_by_statement(exc: BaseException) -> bool:
    """Whether the innermost frame raised ``exc`` with a ``raise`` statement of its own, rather than a call
    on its line raising it (read from the bytecode, since a notebook cell's source may not be at hand)."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return any(ins.offset == tb.tb_lasti and ins.opname == "RAISE_VARARGS" for ins in dis.get_instructions(tb.tb_frame.f_code))


def raised(exc: BaseException, fn: Callable | None = None) -> Raised:
    """An exception as data: its type, its message and where it happened.

    ``where`` points at the learner's own code (a notebook cell, or the function under test), the
    last of it that ran, with the line shown; when the exception came from inside the course's
    code that the learner called, it names that function too. ``origin`` names the function it
    came from when that is not ``fn`` itself (a helper the learner has not written yet, say).
    """
    own = own_code(fn) if fn is not None else set()
    own_files = {code.co_filename for code in own}
    frames = []  # (frame, line number, kind): kind is "learner", "course" or "library"
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        module = frame.f_globals.get("__name__", "")
        filename = frame.f_code.co_filename
        if module in (__name__, observe.__name__, call_limit.__name__):
            continue  # the harness that made the call, the recorder that watched it, the alarm that stopped it
        if frame.f_code in own or filename in own_files or _is_cell(filename):
            kind = "learner"
        elif frame.f_code.co_name in _MODE_HANDLERS:
            kind = "library"  # a mode that watches torch's operations runs inside them: the operation raised
        elif module.split(".")[0] in COURSE_CODE:
            kind = "course"
        else:
            kind = "library"
        frames.append((frame, lineno, kind))
    mine = [i for i, (_, _, kind) in enumerate(frames) if kind == "learner"]
    inside = next((f for f, _, kind in frames[mine[-1] + 1 if mine else 0:] if kind == "course"), None)
    where, parts = "", ()
    if mine:
        frame, lineno, _ = frames[mine[-1]]
        filename = frame.f_code.co_filename
        line = linecache.getline(filename, lineno, frame.f_globals).strip()
        place = "its cell" if _is_cell(filename) else os.path.basename(filename)
        where = f"your `{qualname(frame)}`, line {lineno} of {place}" + (f": {line}" if line else "")
        where = f"raised inside the course's `{qualname(inside)}`, called from {where}" if inside else f"in {where}"
        parts = (qualname(inside) if inside else "", qualname(frame), str(lineno), place, line)
    elif inside is not None:
        where = f"raised inside the course's `{qualname(inside)}`"
        parts = (qualname(inside), "", "", "", "")
    shown = []
    for i in mine:
        frame, lineno, _ = frames[i]
        line = linecache.getline(frame.f_code.co_filename, lineno, frame.f_globals).strip()
        shown.append(
            f"  {_cell_label(frame.f_code.co_filename)}, line {lineno}, in {qualname(frame)}" + (f"\n    {line}" if line else "")
        )
    origin = ""
    last = next((f for f, _, kind in reversed(frames) if kind != "library"), None)
    if last is not None and fn is not None and last.f_code not in own:
        origin = qualname(last)
    details: dict[str, tuple] = {"where": tuple(part[:500] for part in parts)} if parts else {}
    if mine:
        frame, lineno, _ = frames[mine[-1]]
        details["at"] = (str(lineno), qualname(frame)[:200])  # for the lines the grader says the line depends on
        guard = _guard_of_raise(frame, lineno)
        if guard:
            details["guard"] = guard
    if isinstance(exc, NotImplementedError) and frames and frames[-1][2] != "library" and _raised_by_statement(exc):
        frame, lineno, _ = frames[-1]
        details["stub"] = (str(lineno), qualname(frame)[:200])
    if isinstance(exc, StateMismatch):
        details = {"missing": tuple(exc.missing), "unexpected": tuple(exc.unexpected),
                   "shared": tuple((str(a), str(o)) for a, o in exc.shared)}
        details |= {key: parts for key, parts in (("made", exc.made), ("shape", exc.shape)) if parts}
    facts = getattr(exc, "facts", None)  # what an exception of the course's toys says, as data (harness.toys)
    if type(exc).__module__ == "harness.toys" and isinstance(facts, dict):
        details |= facts
    return Raised(type(exc).__name__, str(exc)[:2000], where[:500], origin, tuple(shown), details)


def call_learner(fn: Callable, case: Case, wires: Tripwires | None = None, observer: Observer | None = None) -> Any:
    """Run one case in this process and return its plain result, a :class:`Raised`, or
    :class:`UsedForbidden` when it called what the ``wires`` watch for. An ``observer`` keeps
    what the call did besides (:mod:`harness.observe`)."""
    args, kwargs = materialize(case.args), materialize(dict(case.kwargs))
    if observer is not None:
        observer.arguments = Arguments(argument_names(fn, case.method, args, kwargs), [*case.args, *case.kwargs.values()])
        if observer.trace:
            # A function of plain Python values has its variables recorded line by line; one given tensors
            # has its tensors (a float beside them, a scale say, would only be matched by chance).
            plain = not observe.tensors_in((args, kwargs))
            observer.recorder = Recorder(own_code(fn), _is_cell, python_values=plain)
            observer.recorder.know(observe.tensors_in((args, kwargs)))
        if observer.source and (not observer.trace or inspect.isclass(fn)):
            observer.code = observe.source_of(fn)  # a class's too: what its methods read from self is set there
    used: list[str] = []
    # A provided model that counts what it reads does so from here, before the learner holds it.
    watches = [w for w in (getattr(a, "watch", lambda: None)() for a in (*args, *kwargs.values())
                           if isinstance(a, torch.nn.Module)) if w is not None]
    try:
        with wires.record() if wires else contextlib.nullcontext(used) as used, contextlib.ExitStack() as stack:
            stack.enter_context(memory_budget(case.memory_mb))
            for watch in watches:
                stack.enter_context(watch)
            if case.init is not None:
                result = _call_module(fn, case, args, kwargs, observer)
            elif observer is not None:
                with observer.watching():
                    returned = fn(*args, **kwargs)
                observer.result = returned
                result = to_plain(returned)
            else:
                result = to_plain(fn(*args, **kwargs))
    except (Exception, CallTimedOut) as exc:  # the learner's mistake is data for the judge, not a crash
        if observer is not None and observer.recorder is not None:
            observer.recorder.unwound(exc.__traceback__)
        result = raised(exc, fn)  # a call stopped for its time too: where it was running is worth saying
    over = next((w for w in watches if w.over), None)
    if over is not None:
        result = Raised("Recomputed", over.exceeded, details={"read": over.over})
    return UsedForbidden(tuple(dict.fromkeys(used))) if used else result
