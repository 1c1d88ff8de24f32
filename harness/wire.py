"""How the grader and a sandboxed worker talk: JSON documents in length-prefixed frames.

Only data crosses: numbers, strings, lists, dicts and tensors (dtype, shape and raw bytes in
base64). Nothing is pickled, so nothing the learner's process sends can run code in the
grader's process; every tensor is rebuilt from its bytes after its size has been checked.

Whatever comes from the learner's side may have been written by the learner's code, so it is
read with bounds: a frame has a size limit, a document a limit on how many values it holds and
how deeply they nest, every field is checked for its type, and anything else is a
:class:`WireError`, never another exception. A reply that breaks these rules costs its own
submission, not the grading of the class.
"""
from __future__ import annotations

import base64
import binascii
import json
import struct
import time
from collections.abc import Iterable
from typing import Any

import torch

from .calls import Case, ModuleResult, Opaque, Raised, UsedForbidden
from .observe import MAX_FUNCTIONS, MAX_HELD, MAX_RAN, MAX_SOURCE, MAX_STEPS, Observed, Step
from .probes import PROBES
from .providers import Provided

HEADER = struct.Struct(">Q")
MAX_DEPTH = 32  # nesting of values inside one document
MAX_VALUES = 1_000_000  # lists, dicts and separators in one document: a bound on the objects it makes
MAX_DIMS = 16  # dimensions of one tensor
MAX_NAMES = 1000  # parameter names in a state mismatch
DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float64, torch.float32, torch.float16, torch.bfloat16,
        torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
        torch.complex64, torch.complex128,
    )
}
_BITS = {torch.bfloat16: torch.int16}  # numpy has no bfloat16: ship its bits as int16
#: how a tensor of a dtype that does not travel arrives: an Opaque value of this type and its dtype
#: (the grader words it in the learner's language)
OPAQUE_DTYPE = "tensor of dtype "
#: the caps on the text a learner's exception brings back, by field
_RAISED_TEXT = {"type": 200, "message": 2000, "where": 500, "origin": 200}
#: a part of an exception's details that is a count or a line's number, given by its digits (at most MAX_DIGITS)
COUNT = "count"
MAX_DIGITS = 18
#: the facts an exception's details may carry as a fixed number of parts, which the grader words in the learner's
#: language: what each is, and each part's cap (COUNT: a count); what a StateMismatch says besides its names, and
#: what the course's toys say (harness.toys)
_RAISED_PARTS = {
    "where": ("where it was raised", (500,) * 5),  # the course's function, the learner's, the line, its place, its text
    "made": ("where a submodule is made", (200, COUNT, 500, 200)),  # the attribute, the line, the method, its text
    "shape": ("a parameter of the wrong shape", (200, 500, 500)),  # its name, its shape, the shape expected
    "encoded": ("how often the source was encoded", (COUNT,)),
    "read": ("what the model read again", (200, COUNT, COUNT)),  # the weight, the positions it read, the budget
}

#: what a reply may carry; a case and a provided object only travel towards the learner
#: what the learner's side sends the moment a graded function has returned, before the probes that follow
#: it run: the call's own time limit ends there, and the probes' begins
CALLED = {"called": True}
REPLY_TAGS = frozenset({"$tensor", "$float", "$tuple", "$dict", "$raised", "$forbidden", "$module", "$opaque"})
REQUEST_TAGS = REPLY_TAGS | {"$case", "$provided"}


class WireError(ValueError):
    """A frame or a value that is not a well-formed message."""


# ---------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------


def encode(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        t = value.detach().to("cpu").contiguous()
        if t.dtype not in DTYPES.values():
            return {"$opaque": f"{OPAQUE_DTYPE}{t.dtype}"}
        raw = t.view(_BITS[t.dtype]) if t.dtype in _BITS else t
        data = raw.numpy().tobytes() if raw.numel() else b""
        return {"$tensor": [str(t.dtype).removeprefix("torch."), list(t.shape), base64.b64encode(data).decode()]}
    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        # JSON has no inf or nan; keep them exact.
        return value if value == value and abs(value) != float("inf") else {"$float": repr(value)}
    if type(value) is tuple:
        return {"$tuple": [encode(v) for v in value]}
    if type(value) is list:
        return [encode(v) for v in value]
    if type(value) is dict:
        return {"$dict": [[encode(k), encode(v)] for k, v in value.items()]}
    if isinstance(value, Provided):
        return {"$provided": [value.name, encode(dict(value.kwargs))]}
    if isinstance(value, Raised):
        fields = {k: getattr(value, k)[:cap] for k, cap in _RAISED_TEXT.items()}
        details = dict(getattr(value, "details", None) or {})
        return {"$raised": fields | {"details": {k: [list(v) if isinstance(v, tuple) else v for v in names]
                                                 for k, names in details.items()}}}
    if isinstance(value, UsedForbidden):
        return {"$forbidden": list(value.names)}
    if isinstance(value, ModuleResult):
        return {"$module": [encode(value.output), encode(dict(value.attributes)),
                            [[name, list(counts)] for name, counts in value.products.items()]]}
    if isinstance(value, Opaque):
        return {"$opaque": value.type}
    if isinstance(value, Case):
        return {
            "$case": {
                "label": value.label, "args": encode(value.args), "kwargs": encode(dict(value.kwargs)),
                "tag": value.tag, "init": encode(None if value.init is None else dict(value.init)),
                "state": encode(None if value.state is None else dict(value.state)),
                "method": value.method, "collect": list(value.collect), "train": value.train,
                "seconds": value.seconds, "memory_mb": value.memory_mb, "counted": list(value.counted),
            }
        }
    return {"$opaque": type(value).__name__}


def _products(value: Any) -> dict[str, tuple[int, int, int]]:
    """A module result's product counts: [[name, [rows, nonzero rows, products]], ...] of plain ints."""
    if type(value) is not list or len(value) > MAX_NAMES:
        raise WireError("a module's product counts are not a list of at most MAX_NAMES")
    counts = {}
    for entry in value:
        if (type(entry) is not list or len(entry) != 2 or type(entry[0]) is not str or type(entry[1]) is not list
                or len(entry[1]) != 3 or any(type(n) is not int or n < 0 for n in entry[1])):
            raise WireError("a module's product count is not a name and three counts")
        counts[entry[0][:200]] = tuple(entry[1])
    return counts


def _optional_number(value: Any, what: str, kind: type = float) -> Any:
    if value is None:
        return None
    if type(value) not in (int, float) or not 0 < value < 1e9:
        raise WireError(f"{what} is not a positive number")
    return kind(value)


def _text(value: Any, what: str, cap: int | None = None) -> str:
    if type(value) is not str:
        raise WireError(f"{what} is not a string")
    return value if cap is None else value[:cap]


def _list(value: Any, what: str, length: int | None = None) -> list:
    if type(value) is not list or (length is not None and len(value) != length):
        raise WireError(f"{what} is not a list" + (f" of {length}" if length is not None else ""))
    return value


def _names(value: Any, what: str) -> tuple[str, ...]:
    names = _list(value, what)
    if len(names) > MAX_NAMES:
        raise WireError(f"{what} lists too many names")
    return tuple(_text(n, what, 200) for n in names)


def _parts(value: Any, what: str, caps: tuple[int | str, ...]) -> tuple[str, ...]:
    """A fact of an exception's details: exactly ``len(caps)`` strings, each cut to its cap, or a count's digits."""
    parts = _list(value, what, len(caps))
    read = []
    for part, cap in zip(parts, caps):
        text = _text(part, what)
        if cap == COUNT:
            if not (0 < len(text) <= MAX_DIGITS and text.isascii() and text.isdigit()):
                raise WireError(f"{what} holds a count that is not a number")
            read.append(text)
        else:
            read.append(text[:cap])
    return tuple(read)


def _tensor(body: Any) -> torch.Tensor:
    dtype_name, shape, data = _list(body, "a tensor", 3)
    if dtype_name not in DTYPES:
        raise WireError(f"a tensor of unknown dtype {str(dtype_name)[:40]!r}")
    shape = _list(shape, "a tensor's shape")
    if len(shape) > MAX_DIMS or not all(type(s) is int and 0 <= s < 2**62 for s in shape):
        raise WireError("a tensor's shape is not a short list of sizes")
    dtype = DTYPES[dtype_name]
    storage = _BITS.get(dtype, dtype)
    try:
        raw = base64.b64decode(_text(data, "a tensor's data"), validate=True)
    except (binascii.Error, ValueError):
        raise WireError("a tensor's data is not base64") from None
    count = 1
    for s in shape:
        count *= s
    if len(raw) != count * torch.empty((), dtype=storage).element_size():
        raise WireError("a tensor's data does not match its shape")
    try:
        t = torch.frombuffer(bytearray(raw), dtype=storage) if raw else torch.empty(0, dtype=storage)
        t = t.reshape(shape)
    except (RuntimeError, ValueError, OverflowError) as exc:
        raise WireError(f"a tensor cannot be rebuilt ({str(exc)[:100]})") from None
    return t.view(dtype) if dtype in _BITS else t


def _raised(body: Any) -> Raised:
    if type(body) is not dict:
        raise WireError("an exception is not a record")
    text = {k: _text(body.get(k, ""), f"an exception's {k}", cap) for k, cap in _RAISED_TEXT.items()}
    details: dict[str, Any] = {}
    given = body.get("details", {})
    if type(given) is not dict:
        raise WireError("an exception's details are not a record")
    for key in ("missing", "unexpected"):
        if key in given:
            details[key] = _names(given[key], f"the {key} names")
    for key, what in (("guard", "the guard of a raise"), ("at", "the line that raised"),
                      ("stub", "the raise of an unwritten function")):
        if key in given:
            details[key] = _names(given[key], what)
            if len(details[key]) != 2:
                raise WireError(f"{what} is not a line and its text")
    for key, (what, caps) in _RAISED_PARTS.items():
        if key in given:
            details[key] = _parts(given[key], what, caps)
    if "shared" in given:
        pairs = _list(given["shared"], "the shared names")
        if len(pairs) > MAX_NAMES:
            raise WireError("too many shared names")
        details["shared"] = tuple(_names(p, "a shared pair") for p in pairs)
        if any(len(p) != 2 for p in details["shared"]):
            raise WireError("a shared pair is not two names")
    extra = {"details": details} if details else {}
    return Raised(text["type"], text["message"], text["where"], text["origin"], **extra)


_KEY_TYPES = (str, int, float, bool, type(None))


def decode(value: Any, tags: Iterable[str] = REPLY_TAGS, depth: int = 0) -> Any:
    """A value from its wire form; raises WireError, and only WireError, on anything malformed."""
    tags = tags if isinstance(tags, frozenset) else frozenset(tags)
    if depth > MAX_DEPTH:
        raise WireError("values nested too deeply")
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) is list:
        return [decode(v, tags, depth + 1) for v in value]
    if type(value) is not dict or len(value) != 1:
        raise WireError("an unexpected value")
    (tag, body), = value.items()
    if tag not in tags:
        raise WireError(f"an unexpected tag {str(tag)[:40]!r}")
    if tag == "$tensor":
        return _tensor(body)
    if tag == "$float":
        if body not in ("inf", "-inf", "nan"):
            raise WireError("a malformed special float")
        return float(body)
    if tag == "$tuple":
        return tuple(decode(v, tags, depth + 1) for v in _list(body, "a tuple"))
    if tag == "$dict":
        result = {}
        for pair in _list(body, "a dict"):
            k, v = _list(pair, "a dict item", 2)
            key = decode(k, tags, depth + 1)
            if type(key) not in _KEY_TYPES:
                raise WireError("a dict key that is not a plain value")
            result[key] = decode(v, tags, depth + 1)
        return result
    if tag == "$provided":
        name, kwargs = _list(body, "a provided object", 2)
        kwargs = decode(kwargs, tags, depth + 1)
        if type(kwargs) is not dict:
            raise WireError("a provided object's arguments are not a dict")
        return Provided(_text(name, "a provided object's name"), kwargs)
    if tag == "$raised":
        return _raised(body)
    if tag == "$forbidden":
        return UsedForbidden(_names(body, "the forbidden names"))
    if tag == "$module":
        output, attributes, products = _list(body, "a module's result", 3)
        attributes = decode(attributes, tags, depth + 1)
        if type(attributes) is not dict:
            raise WireError("a module's attributes are not a dict")
        return ModuleResult(decode(output, tags, depth + 1), attributes, _products(products))
    if tag == "$opaque":
        return Opaque(_text(body, "an opaque value's type", 200))
    # $case: only ever built by the grader, read by the worker
    if type(body) is not dict:
        raise WireError("a case is not a record")
    try:
        init, state = decode(body["init"], tags, depth + 1), decode(body["state"], tags, depth + 1)
        return Case(
            label=_text(body["label"], "a case's label"), args=decode(body["args"], tags, depth + 1),
            kwargs=decode(body["kwargs"], tags, depth + 1), tag=_text(body["tag"], "a case's tag"), init=init,
            state=state, method=_text(body["method"], "a case's method"),
            collect=_names(body["collect"], "a case's attributes"), train=bool(body["train"]),
            seconds=_optional_number(body.get("seconds"), "a case's time limit"),
            memory_mb=_optional_number(body.get("memory_mb"), "a case's memory budget", int),
            counted=_names(body.get("counted", []), "a case's counted weights"),
        )
    except KeyError as exc:
        raise WireError(f"a case without {exc}") from None


# ---------------------------------------------------------------------------------------------
# What a call did besides returning
# ---------------------------------------------------------------------------------------------


def encode_observed(seen: Observed) -> dict:
    steps = [[s.line, s.source, s.function, s.made_by, encode(s.value), list(s.shape), list(s.uses)] for s in seen.steps]
    return {"written": list(seen.written), "aliased": list(seen.aliased), "attached": list(seen.attached),
            "steps": steps, "truncated": seen.truncated, "traced": seen.traced,
            "findings": {k: list(v) for k, v in seen.findings.items()},
            "code": [list(c) for c in seen.code], "held": [list(h) for h in seen.held],
            "ran": [[f, list(lines)] for f, lines in seen.ran]}


def _optional_tensor(value: Any) -> torch.Tensor | None:
    if value is None:
        return None
    if type(value) is not dict or set(value) != {"$tensor"}:
        raise WireError("a traced value is not a tensor")
    return _tensor(value["$tensor"])


def decode_observed(value: Any) -> Observed:
    """What a call did besides returning, read with the same bounds as a result."""
    if type(value) is not dict:
        raise WireError("an observation is not a record")
    steps = _list(value.get("steps", []), "the traced steps")
    if len(steps) > MAX_STEPS:
        raise WireError("too many traced steps")
    read = []
    for step in steps:
        line, source, function, made_by, tensor, shape, uses = _list(step, "a traced step", 7)
        if type(line) is not int or not 0 <= line < 2**31:
            raise WireError("a traced step's line is not a number")
        shape = _list(shape, "a traced step's shape")
        if len(shape) > MAX_DIMS or not all(type(n) is int and 0 <= n < 2**62 for n in shape):
            raise WireError("a traced step's shape is not a short list of sizes")
        uses = _list(uses, "a traced step's sources")
        if len(uses) > 8 or not all(type(i) is int and 0 <= i < len(read) for i in uses):
            raise WireError("a traced step's sources are not earlier steps")
        read.append(Step(line, _text(source, "a traced line", 300), _text(function, "a traced function", 200),
                         _text(made_by, "a traced step's maker", 200), _optional_tensor(tensor), tuple(shape),
                         tuple(uses)))
    flags = [value.get(k, False) for k in ("truncated", "traced")]
    if not all(type(f) is bool for f in flags):
        raise WireError("an observation's flags are not booleans")
    findings = value.get("findings", {})
    if type(findings) is not dict or not set(findings) <= set(PROBES):
        raise WireError("an observation's findings are not the probes' records")
    return Observed(_names(value.get("written", []), "the written arguments"),
                    _names(value.get("aliased", []), "the aliased arguments"),
                    _names(value.get("attached", []), "the attached attributes"), tuple(read), *flags,
                    {k: _finding(v, k) for k, v in findings.items()}, _code(value.get("code", [])),
                    _held(value.get("held", [])), _ran(value.get("ran", [])))


def _ran(value: Any) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The lines of each traced function that ran: (function, lines), within the recorder's bounds."""
    functions = _list(value, "the lines that ran")
    if len(functions) > MAX_FUNCTIONS:
        raise WireError("too many functions whose lines ran")
    read = []
    for function in functions:
        name, lines = _list(function, "a function's lines that ran", 2)
        lines = _list(lines, "a function's lines that ran")
        if len(lines) > MAX_RAN or not all(type(n) is int and 0 <= n < 2**31 for n in lines):
            raise WireError("a function's lines that ran are not a short list of line numbers")
        read.append((_text(name, "a function whose lines ran", 200), tuple(lines)))
    return tuple(read)


def _code(value: Any) -> tuple[tuple[str, int, str], ...]:
    """The sources of the traced functions: (name, first line, text), within the recorder's bounds."""
    functions = _list(value, "the traced functions' sources")
    if len(functions) > MAX_FUNCTIONS:
        raise WireError("too many traced functions")
    read = []
    for function in functions:
        name, first, text = _list(function, "a traced function's source", 3)
        if type(first) is not int or not 0 <= first < 2**31:
            raise WireError("a traced function's first line is not a number")
        read.append((_text(name, "a traced function", 200), first, _text(text, "a traced function's source", MAX_SOURCE)))
    return tuple(read)


def _held(value: Any) -> tuple[tuple[str, str, str], ...]:
    """What kind of value each variable of the traced functions held: (function, name, kind)."""
    entries = _list(value, "the traced variables")
    if len(entries) > MAX_HELD:
        raise WireError("too many traced variables")
    read = tuple(_names(entry, "a traced variable") for entry in entries)
    if any(len(entry) != 3 or entry[2] not in ("tensor", "python") for entry in read):
        raise WireError("a traced variable is not a function, a name and a kind")
    return read


def _finding(value: Any, probe: str) -> tuple[str, ...]:
    parts = _list(value, f"the {probe} probe's finding")
    if len(parts) > 8:
        raise WireError(f"the {probe} probe's finding is too long")
    return tuple(_text(p, f"the {probe} probe's finding", 500) for p in parts)


# ---------------------------------------------------------------------------------------------
# Frames
# ---------------------------------------------------------------------------------------------


def frame(message: dict) -> bytes:
    data = json.dumps(message, separators=(",", ":")).encode()
    return HEADER.pack(len(data)) + data


def frame_size(header: bytes, limit: int) -> int:
    """The size a frame's header announces, refused when over ``limit`` bytes."""
    (size,) = HEADER.unpack(header)
    if size > limit:
        raise WireError(f"a message of {size} bytes is larger than the limit of {limit} bytes")
    return size


def parse(data: bytes) -> dict:
    """One message from a frame's body: a JSON object, within the bounds above."""
    # Every list, dict and element costs a separator or a bracket: counting them bounds the
    # objects json would build before it builds any (tensor data, in base64, has none).
    if data.count(b",") + data.count(b"[") + data.count(b"{") > MAX_VALUES:
        raise WireError("a message with too many values")
    try:
        message = json.loads(data)
    except RecursionError:
        raise WireError("values nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, and integers too long to read
        raise WireError(f"not JSON: {str(exc)[:200]}") from None
    if type(message) is not dict:
        raise WireError("a message must be a JSON object")
    return message


def read_exactly(sock, size: int, deadline: float | None = None) -> bytes:
    """``size`` bytes from the socket ``sock``: EOFError when the other side closes it first,
    TimeoutError once ``deadline`` (on :func:`time.monotonic`'s clock) has passed; without one, it
    waits as the socket does."""
    data = bytearray()
    while len(data) < size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            sock.settimeout(left)
        chunk = sock.recv(min(size - len(data), 1 << 20))
        if not chunk:
            raise EOFError
        data += chunk  # grows with what arrives, not with what the header claims
    return bytes(data)


def receive(sock, limit: int, deadline: float | None = None) -> dict:
    """One message from the socket ``sock``, by both sides: a frame over ``limit`` bytes is refused
    before its body is read, and the body is read with the bounds above."""
    size = frame_size(read_exactly(sock, HEADER.size, deadline), limit)
    return parse(read_exactly(sock, size, deadline))
