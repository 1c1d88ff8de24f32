"""What a call of the learner's function did besides returning: the arguments it wrote into, the
arguments its result is a view of, the stored attributes it left attached to the graph, and the
values its lines made, in order (the trace).

All of it is recorded in the learner's process and sent back as plain data; the grader compares
it with its own computation, which never comes here. Nothing recorded decides a score by itself
except what the exercises state as rules (an argument left unchanged, a stored tensor detached),
and those are advisory like every observation made inside the learner's process.

The trace records, for each line of the learner's code that runs:

* every torch function or tensor operator the line calls directly, with its result (a torch
  function mode, so every alias of an operator is seen);
* every submodule the line calls, with its input and its output (a global forward hook);
* every other Python function the line calls (a helper, or the course's version of another graded
  function), with its result, and the value the learner's function returns (a profile function).

It is bounded: at most :data:`MAX_STEPS` values and :data:`MAX_ELEMENTS` numbers in all; past
that it stops recording and says so.
"""
from __future__ import annotations

import contextlib
import dis
import inspect
import linecache
import os
import sys
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

#: bounds of one call's trace
MAX_STEPS = 600
MAX_ELEMENTS = 1_500_000
#: a value larger than this is noted by its shape only
MAX_VALUE_ELEMENTS = 200_000
#: bounds of the functions' sources and variables sent with a trace
MAX_FUNCTIONS = 16
MAX_SOURCE = 20_000
MAX_HELD = 512
#: lines of one function noted as having run
MAX_RAN = 2000
#: what a step made by an operation that raised is said to be made by, before the operation's name
RAISED = "raised in "

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_HERE = os.path.dirname(__file__) + os.sep
#: the frames that stand between a learner's line and what it calls without being either: torch's own, and
#: this record's and the call's machinery (its modes, the product count's among them); the course's models in
#: harness/ are code of their own
_MACHINERY = (_TORCH_DIR, os.path.join(_HERE, "observe.py"), os.path.join(_HERE, "calls.py"),
              os.path.join(_HERE, "products.py"))


@dataclass(frozen=True)
class Step:
    """One value a line of the learner's code made."""

    #: the line's number in its cell (or file) and its text
    line: int
    source: str
    #: the learner's function the line belongs to
    function: str
    #: what made the value: "torch.exp", "self.norm1", "softmax", "return"; for an operation that raised,
    #: :data:`RAISED` and its name (the step has no value, only the steps it was given)
    made_by: str
    #: the value (None when it was too large to keep: ``shape`` still says what it was)
    value: torch.Tensor | None
    shape: tuple[int, ...] = ()
    #: the earlier steps whose values this one was made from (the tensors the call was given)
    uses: tuple[int, ...] = ()


@dataclass(frozen=True)
class Observed:
    """What one call did besides returning."""

    #: the learner's names of the arguments the call wrote into
    written: tuple[str, ...] = ()
    #: the learner's names of the arguments the result is a view of
    aliased: tuple[str, ...] = ()
    #: collected attributes that are still attached to the autograd graph
    attached: tuple[str, ...] = ()
    steps: tuple[Step, ...] = ()
    #: the trace stopped at its bounds
    truncated: bool = False
    #: whether a trace was asked for at all
    traced: bool = False
    #: what the probes of :mod:`harness.probes` found, by probe: where the result does not follow the
    #: arguments' device, where gradients do not reach what it was made from
    findings: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: the source of each of the learner's functions the trace holds a step of: (its name, the number of its
    #: first line, its text), so that the grader can read which lines a line depends on
    code: tuple[tuple[str, int, str], ...] = ()
    #: what each variable of those functions held when the function returned: (function, name, kind), the kind
    #: being "tensor" (a tensor, a list of tensors, a module) or "python" (a number, a list of numbers, a dict, ...)
    held: tuple[tuple[str, str, str], ...] = ()
    #: for a function of Python values, the lines of each of the learner's functions that ran (function, lines)
    ran: tuple[tuple[str, tuple[int, ...]], ...] = ()


def named_tensors(value: Any, path: str = "", depth: int = 0) -> Iterator[tuple[str, torch.Tensor]]:
    """(path, tensor) for each tensor in an argument (inside tuples, lists and dicts)."""
    if depth > 4:
        return
    if isinstance(value, torch.Tensor):
        yield path, value
    elif isinstance(value, (tuple, list)):
        for i, v in enumerate(value[:16]):
            yield from named_tensors(v, f"{path}[{i}]", depth + 1)
    elif isinstance(value, dict):
        for k, v in list(value.items())[:16]:
            yield from named_tensors(v, f"{path}[{k!r}]", depth + 1)


def tensors_in(value: Any) -> list[torch.Tensor]:
    """The tensors in a value (inside tuples, lists and dicts), within the same bounds."""
    return [t for _, t in named_tensors(value, "")]


def argument_names(fn: Callable, method: str, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """(the learner's name of each argument, its value), for the call ``fn(*args, **kwargs)``."""
    target = getattr(fn, method, None) if isinstance(fn, type) else fn
    names: list[str] = []
    try:
        parameters = [p for p in inspect.signature(target).parameters.values() if p.name != "self"]
        names = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        pass
    named = [(names[i] if i < len(names) else f"argument {i + 1}", a) for i, a in enumerate(args)]
    return named + list(kwargs.items())


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return bool(torch.equal(a, b))


class Arguments:
    """The arguments of one call, kept to see afterwards what the call did to them."""

    def __init__(self, named: list[tuple[str, Any]], originals: list[Any]):
        self.entries = []  # (name, the tensor the learner got, its original value, its version before)
        for (name, given), original in zip(named, originals):
            for (path, t), (_, o) in zip(named_tensors(given, name), named_tensors(original, name)):
                self.entries.append((path, t, o, t._version))

    def written(self) -> tuple[str, ...]:
        return tuple(name for name, t, o, version in self.entries
                     if t._version != version or not _same(t.detach(), o))

    def aliased(self, result: Any) -> tuple[str, ...]:
        stores = {}
        for name, t, _, _ in self.entries:
            if t.numel():
                stores.setdefault(t.untyped_storage().data_ptr(), name)
        found = []
        for _, r in named_tensors(result, "result"):
            if r.numel() and r.untyped_storage().data_ptr() in stores:
                found.append(stores[r.untyped_storage().data_ptr()])
        return tuple(dict.fromkeys(found))


class Recorder(TorchFunctionMode):
    """Records the values the learner's lines make (see the module's docstring)."""

    def __init__(self, own: set, is_cell: Callable[[str], bool], python_values: bool = False):
        super().__init__()
        self.own, self.is_cell, self.python_values = own, is_cell, python_values
        self.steps: list[Step] = []
        self.elements = 0
        self.truncated = False
        self.module_names: dict[int, str] = {}
        self.on = False
        #: id of a tensor a step made -> (that step's index, a weak reference that proves the id is still it)
        self.made: dict[int, tuple[int, weakref.ref]] = {}
        #: id of a learner's frame -> (the line it is on, what its variables last held (:func:`_snapshot`), its
        #: loops' counters)
        self.python: dict[int, tuple[int, dict[str, Any], frozenset[str]]] = {}
        #: ids of the tensors the call was given (see :meth:`know`)
        self.given: set[int] = set()
        #: id of a frame of the course's code a learner's line called -> the tensors it was given
        self.called: dict[int, list[torch.Tensor]] = {}
        #: the learner's function -> (its first line, its source); (function, variable) -> what it held
        self.code: dict[str, tuple[int, str]] = {}
        self.held: dict[tuple[str, str], str] = {}
        #: a function of Python values -> the lines of it that ran
        self.ran: dict[str, set[int]] = {}

    # -- which frames are the learner's ------------------------------------------------------

    def _learner(self, frame) -> bool:
        return frame.f_code in self.own or self.is_cell(frame.f_code.co_filename)

    def _caller(self, frame):
        """The first frame outside torch and this module, when it is the learner's; else None."""
        while frame is not None and frame.f_code.co_filename.startswith(_MACHINERY):
            frame = frame.f_back
        return frame if frame is not None and self._learner(frame) else None

    # -- recording ---------------------------------------------------------------------------

    def _keep(self, value: torch.Tensor) -> torch.Tensor | None:
        if value.numel() > MAX_VALUE_ELEMENTS or value.is_sparse:
            return None
        self.elements += value.numel()
        return value.detach().to("cpu", copy=True)

    def _uses(self, given: Any) -> tuple[int, ...]:
        found = []
        for _, t in named_tensors(given, ""):
            index, ref = self.made.get(id(t), (None, None))
            if index is not None and ref() is t and index not in found:
                found.append(index)
        return tuple(found[:8])

    def add(self, frame, made_by: str, value: Any, inputs: Any = None) -> None:
        if not self.on or self.truncated:
            return
        found = list(named_tensors(value, "")) if not isinstance(value, torch.Tensor) else [("", value)]
        if not found:
            return
        if len(self.steps) + len(found) > MAX_STEPS or self.elements > MAX_ELEMENTS:
            self.truncated = True
            return
        line = frame.f_lineno
        source, function = self._place(frame, line)
        self.on = False  # copying a value is not a step of the learner's
        try:
            uses = self._uses(inputs)
            for path, t in found[:4]:
                self.made[id(t)] = (len(self.steps), weakref.ref(t))
                self.steps.append(Step(line, source[:300], function[:200], (made_by + path)[:200], self._keep(t),
                                       tuple(t.shape), uses))
        finally:
            self.on = True

    def __torch_function__(self, func, types, args=(), kwargs=None):
        try:
            out = func(*args, **(kwargs or {}))
        except Exception:
            # Where a crash happened and what it was given: the values may have gone wrong lines before.
            frame = self._caller(sys._getframe(1)) if self.on else None
            if frame is not None:
                self.add_raised(frame, _op_name(func), (args, kwargs or {}))
            elif self.on:
                self._raised_in_course_code(sys._getframe(1))
            raise
        name = _op_name(func)
        # An uninitialised tensor holds whatever the memory held (a table of an earlier call, say):
        # no value to compare.
        if self.on and "empty" not in name:
            frame = self._caller(sys._getframe(1))
            if frame is not None:
                self.add(frame, name, out, inputs=(args, kwargs or {}))
        return out

    def _raised_in_course_code(self, frame) -> None:
        """A crash inside the course's code that a learner's line called (its scaled_dot_product_attention, given a
        mask of the wrong shape): recorded as that call raising on the learner's line, made from what it was given."""
        while frame is not None and frame.f_code.co_filename.startswith(_MACHINERY):
            frame = frame.f_back
        while frame is not None and not self._learner(frame):
            caller = self._caller(frame.f_back) if frame.f_back is not None else None
            if caller is not None:
                self.add_raised(caller, qualname(frame), self.called.get(id(frame), ()))
                return
            frame = frame.f_back

    def add_raised(self, frame, name: str, inputs: Any) -> None:
        """The operation that raised: a step with no value, made from the values it was given (``uses``: those
        earlier steps made); its ``shape`` holds how many of them came neither from a step nor from the call's
        arguments and parameters, and how many there were."""
        if self.truncated or len(self.steps) >= MAX_STEPS:
            return
        self.on = False
        try:
            source, function = self._place(frame, frame.f_lineno)
            uses = self._uses(inputs)
            given = {id(t): t for _, t in named_tensors(inputs, "")}
            elsewhere = [i for i, t in given.items()
                         if i not in self.given and self.made.get(i, (0, lambda: None))[1]() is not t]
            self.steps.append(Step(frame.f_lineno, source[:300], function[:200], (RAISED + name)[:200], None,
                                   (len(elsewhere), len(given)), uses))
        finally:
            self.on = True

    def _forward_hook(self, module, args, output):
        if self.on and id(module) in self.module_names:
            frame = self._caller(sys._getframe(1))
            if frame is not None:
                self.add(frame, "self." + self.module_names[id(module)], output, inputs=args)

    def _profile(self, frame, event, arg):
        if event == "call" and self.on and not frame.f_code.co_filename.startswith(_MACHINERY) \
                and frame.f_code not in self.own and not self.is_cell(frame.f_code.co_filename) \
                and self._caller(frame.f_back) is not None:
            # the course's code a learner's line calls: the tensors it is given are what its result is made from
            self.called[id(frame)] = [t for _, t in named_tensors(list(frame.f_locals.values()), "")]
            return
        if event != "return" or not self.on or frame.f_code.co_filename.startswith(_MACHINERY):
            return
        if self._learner(frame):
            self.on = False  # looking at its variables is not a step of the learner's
            try:
                self._remember_held(frame)
            finally:
                self.on = True
        if frame.f_code in self.own:
            caller = frame.f_back
            if caller is None or not self._learner(caller):  # the graded function's own return
                self.add(frame, "return", arg)
                if self.python_values:
                    self._add_returned(frame, arg)
            return
        if self.is_cell(frame.f_code.co_filename):
            return  # a helper of the learner's: its own lines were recorded
        # the course's code a learner's line calls (through torch's Module.__call__, say): what it returns is a
        # step of that line; what it does inside is not the learner's
        caller = self._caller(frame.f_back)
        if caller is not None:
            self.add(caller, qualname(frame), arg,
                     inputs=self.called.pop(id(frame), None))

    def _place(self, frame, line: int) -> tuple[str, str]:
        """The line's text and the function's name (:func:`_place`); the function's source is kept the first time."""
        source, function = _place(frame, line)
        if function not in self.code and len(self.code) < MAX_FUNCTIONS:
            lines = _block(frame.f_code, frame.f_globals)
            self.code[function] = (frame.f_code.co_firstlineno, "".join(lines)[:MAX_SOURCE])
        return source, function

    def _remember_held(self, frame) -> None:
        """What kind of value each variable of a learner's frame holds as it returns (or unwinds)."""
        _, function = self._place(frame, frame.f_lineno)  # its source too: a call stopped in a loop made no step
        for name, value in list(frame.f_locals.items())[:64]:
            if len(self.held) >= MAX_HELD:
                return
            # a module's work is recorded as its calls are, as a tensor's is
            kind = "tensor" if isinstance(value, (torch.Tensor, torch.nn.Module)) or (
                isinstance(value, (list, tuple, dict)) and tensors_in(value)) else "python"
            if self.held.get((function, name)) != "tensor":  # a variable that ever held a tensor is followed
                self.held[(function, name)] = kind

    def unwound(self, traceback: Any) -> None:
        """What the learner's frames held when the call raised: the frames of the traceback, as they were. (Their
        return events may not have been seen: an alarm that lands inside the profile function switches it off.)"""
        while traceback is not None:
            if self._learner(traceback.tb_frame):
                self._remember_held(traceback.tb_frame)
            traceback = traceback.tb_next

    def know(self, tensors: Any) -> None:
        """Tensors the call was given (its arguments, its module's parameters): no step made them, yet they
        are no value from elsewhere either."""
        self.given.update(id(t) for t in tensors)

    def name_modules(self, module: Any) -> None:
        """Call the submodules of the module under test by their attribute names."""
        if hasattr(module, "named_modules"):
            self.module_names = {id(m): name for name, m in module.named_modules() if name}

    # -- Python values: what the learner's variables hold, line by line ---------------------------

    def _trace(self, frame, event, arg):
        """sys.settrace's global tracer: the learner's own frames get a line tracer, no other frame does."""
        if event == "call" and self.on and not self.truncated and self._learner(frame):
            self.on = False
            try:  # the arguments are inputs, not values a line made
                given = {name: _snapshot(value) for name, value in frame.f_locals.items()}
            finally:
                self.on = True
            self.python[id(frame)] = (frame.f_lineno, {k: v for k, v in given.items() if v is not None},
                                      _loop_names(frame.f_code))
            return self._trace_lines
        return None

    def _trace_lines(self, frame, event, arg):
        """On each new line (and on return), the numbers and lists of numbers that the line before changed."""
        if self.truncated:
            self.python.pop(id(frame), None)
            frame.f_trace_lines = False  # the record is full: the rest of the call runs at full speed
            return None
        if event not in ("line", "return") or id(frame) not in self.python:
            return self._trace_lines
        if event == "line":
            ran = self.ran.setdefault(qualname(frame), set())
            if len(ran) < MAX_RAN:
                ran.add(frame.f_lineno)
        line, held, loops = self.python[id(frame)]
        if self.on and not self.truncated:
            self.on = False
            try:
                for name, value in list(frame.f_locals.items()):
                    if name in loops or isinstance(value, torch.Tensor):
                        continue  # a loop's counter matches anything; tensors have their own record
                    kept = _snapshot(value)
                    if kept is None or held.get(name) == kept:
                        continue
                    held[name] = kept
                    t = _number_tensor(value)
                    if t is not None:
                        self._add_python(frame, line, f"={name}", t)
            finally:
                self.on = True
        if event == "return":
            del self.python[id(frame)]
        else:
            self.python[id(frame)] = (frame.f_lineno, held, loops)
        return self._trace_lines

    def _add_returned(self, frame, value: Any) -> None:
        """The number or list of numbers the graded function returns."""
        if self.truncated:
            return
        self.on = False  # making the record's tensor is not a step of the learner's
        try:
            number = _number_tensor(value)
            if number is not None:
                self._add_python(frame, frame.f_lineno, "return", number)
        finally:
            self.on = True

    def _add_python(self, frame, line: int, made_by: str, value: torch.Tensor) -> None:
        if len(self.steps) >= MAX_STEPS or self.elements + value.numel() > MAX_ELEMENTS:
            self.truncated = True
            return
        self.elements += value.numel()
        source, function = self._place(frame, line)
        self.steps.append(Step(line, source[:300], function[:200], made_by[:200], value, tuple(value.shape)))

    @contextlib.contextmanager
    def recording(self):
        previous, previous_trace = sys.getprofile(), sys.gettrace()
        handle = torch.nn.modules.module.register_module_forward_hook(self._forward_hook)
        try:
            with self:
                sys.setprofile(self._profile)
                if self.python_values:
                    sys.settrace(self._trace)
                self.on = True
                try:
                    yield self
                finally:
                    self.on = False
                    sys.settrace(previous_trace)
                    sys.setprofile(previous)
        finally:
            handle.remove()


def qualname(frame) -> str:
    """The qualified name of a frame's function (``MultiHeadAttention.forward``)."""
    return getattr(frame.f_code, "co_qualname", frame.f_code.co_name)


def _place(frame, line: int) -> tuple[str, str]:
    """A line of a frame's code as a step names it: the line's text, and the function's qualified name."""
    source = linecache.getline(frame.f_code.co_filename, line, frame.f_globals).strip()
    return source, qualname(frame)


#: a Python value larger than this is not recorded
MAX_PYTHON_ELEMENTS = 10_000


def _snapshot(value: Any) -> Any:
    """What a variable holds, as plain Python to compare from line to line without making tensors: a number with
    its type (an int that becomes an equal float has changed), or a list's elements; None for anything else."""
    kind = type(value)
    if kind in (int, float):
        return kind, value
    if kind in (list, tuple) and len(value) <= MAX_PYTHON_ELEMENTS:
        return kind, tuple(value)
    return None


def _number_tensor(value: Any) -> torch.Tensor | None:
    """A float, or a list of numbers, as a float64 tensor, a lone int as an int64 one; None for anything
    else. A lone int is kept apart by its dtype (a count, an index or a cost of 0 or 1 equals some value
    of any computation by chance: :mod:`autograder.locate` compares it only with a computation that has
    single numbers among its steps). A table of lists is left out: filled in place a cell at a time, all
    but its last state are rightly unfinished."""
    if type(value) is float:
        return torch.tensor(value, dtype=torch.float64)
    if type(value) is int and abs(value) < 2 ** 53:
        return torch.tensor(value, dtype=torch.int64)
    if type(value) in (list, tuple) and value and len(value) <= MAX_PYTHON_ELEMENTS \
            and all(type(v) in (int, float) for v in value):
        return torch.tensor([float(v) for v in value], dtype=torch.float64)
    return None


def _loop_names(code: Any) -> frozenset[str]:
    """The variables a code object's ``for`` loops count with (the stores right after each FOR_ITER, an
    unpacking between): a counter equals some value of any computation by chance."""
    names, collecting = set(), False
    for instruction in dis.get_instructions(code):
        if instruction.opname == "FOR_ITER":
            collecting = True
        elif collecting and instruction.opname.startswith("STORE_"):
            names.add(instruction.argval)
        elif not (collecting and instruction.opname in ("UNPACK_SEQUENCE", "UNPACK_EX")):
            collecting = False
    return frozenset(names)


def _op_name(func: Any) -> str:
    name = str(getattr(func, "__name__", "") or type(func).__name__)
    qualname = str(getattr(func, "__qualname__", ""))
    if qualname.startswith(("TensorBase.", "Tensor.")) or name.startswith("__"):
        return name.strip("_") if name.startswith("__") else name
    module = str(getattr(func, "__module__", "") or "")
    return f"{module.replace('torch._C._nn', 'torch.nn.functional').replace('torch._C._linalg', 'torch.linalg')}.{name}" \
        if module.startswith("torch") else name


@dataclass
class Observer:
    """What :func:`harness.calls.call_learner` keeps while it calls the learner's function."""

    trace: bool
    #: whether to send the graded function's source even where its values are not traced (a visible case: the
    #: grader reads which lines use an argument a rule is about, and the defaults of its ``def`` line)
    source: bool = False
    recorder: Recorder | None = None
    arguments: Arguments | None = None
    result: Any = None
    attached: list[str] = field(default_factory=list)
    findings: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: the graded function's source, where ``source`` asked for it without a trace
    code: tuple[tuple[str, int, str], ...] = ()

    def watching(self):
        """The context in which the call runs: recording its values when a trace was asked for."""
        return self.recorder.recording() if self.recorder else contextlib.nullcontext()

    def observed(self) -> Observed:
        if self.arguments is None:
            return Observed(traced=self.trace, findings=dict(self.findings))
        r = self.recorder
        code = tuple((f, first, text) for f, (first, text) in r.code.items()) if r else ()
        code += tuple(c for c in self.code if c[0] not in (r.code if r else {}))
        held = tuple((f, name, kind) for (f, name), kind in r.held.items()) if r else ()
        ran = tuple((f, tuple(sorted(lines))) for f, lines in list(r.ran.items())[:MAX_FUNCTIONS]) if r else ()
        return Observed(self.arguments.written(), self.arguments.aliased(self.result), tuple(self.attached),
                        tuple(r.steps) if r else (), bool(r and r.truncated), self.trace, dict(self.findings),
                        code, held, ran)


def source_of(fn: Any) -> tuple[tuple[str, int, str], ...]:
    """A function's or a class's (qualified name, first line, source), as a trace holds it; () where there is none.
    A class defined in a notebook cell is found from its methods' code (its module has no file to read)."""
    try:
        if inspect.isfunction(fn):
            lines, first = _block(fn.__code__, fn.__globals__), fn.__code__.co_firstlineno
        elif inspect.isclass(fn):
            lines, first = _class_source(fn)
        else:
            return ()
    except Exception:  # a source that cannot be read only leaves the grader's sentences about it out
        return ()
    return ((getattr(fn, "__qualname__", fn.__name__)[:200], first, "".join(lines)[:MAX_SOURCE]),) if lines else ()


def _block(code: Any, globals_: dict) -> list[str]:
    """The lines of a function's definition (:func:`_block_from`)."""
    return _block_from(linecache.getlines(code.co_filename, globals_), code.co_firstlineno)


def _block_from(lines: list[str], first: int) -> list[str]:
    """The lines of the definition that starts on line ``first`` of a file or cell's ``lines``, read as a traceback
    reads them (``inspect.getsourcelines`` would look for the module among every module loaded first: a tenth of a
    second, at every call, for a function defined in a cell); [] where they do not make one."""
    try:
        return inspect.getblock(lines[first - 1:]) if lines else []
    except Exception:  # tokenize's errors (TokenError is none of SyntaxError's), on source that is not all there
        return []


def _class_source(cls: type) -> tuple[list[str], int]:
    """The lines of a class's definition and the number of the first, from the file or cell of one of its methods."""
    method = next((f for f in vars(cls).values() if inspect.isfunction(f)), None)
    if method is None:
        return [], 0
    code = method.__code__
    lines = linecache.getlines(code.co_filename, method.__globals__)
    head = f"class {cls.__name__}"
    start = next((i for i in range(min(code.co_firstlineno, len(lines)) - 1, -1, -1)
                  if lines[i].lstrip().startswith(head) and not lines[i].lstrip()[len(head):][:1].isidentifier()), None)
    if start is None:
        return [], 0
    return _block_from(lines, start + 1), start + 1
