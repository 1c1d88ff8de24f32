"""How the grader and a sandboxed worker talk: JSON documents in length-prefixed frames.

Only data crosses: numbers, strings, lists, dicts and tensors (dtype, shape and raw bytes in
base64). Nothing is pickled, so nothing the learner's process sends can run code in the
grader's process; every tensor is rebuilt from its bytes after its size has been checked.
"""
from __future__ import annotations

import base64
import json
import struct
from typing import Any, BinaryIO

import torch

from .framework import Case, ModuleResult, Opaque, Provided, Raised, UsedForbidden

MAX_FRAME = 256 << 20  # no single message may be larger than this
DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float64, torch.float32, torch.float16, torch.bfloat16,
        torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
        torch.complex64, torch.complex128,
    )
}
_BITS = {torch.bfloat16: torch.int16}  # numpy has no bfloat16: ship its bits as int16


class WireError(ValueError):
    """A frame that is not a well-formed message."""


def encode(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        t = value.detach().to("cpu").contiguous()
        if t.dtype not in DTYPES.values():
            return {"$opaque": f"tensor of dtype {t.dtype}"}
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
        return {"$raised": [value.type, value.message[:2000], value.where[:500], value.origin[:200]]}
    if isinstance(value, UsedForbidden):
        return {"$forbidden": list(value.names)}
    if isinstance(value, ModuleResult):
        return {"$module": [encode(value.output), encode(dict(value.attributes))]}
    if isinstance(value, Opaque):
        return {"$opaque": value.type}
    if isinstance(value, Case):
        return {
            "$case": {
                "label": value.label, "args": encode(value.args), "kwargs": encode(dict(value.kwargs)),
                "tag": value.tag, "init": encode(None if value.init is None else dict(value.init)),
                "state": encode(None if value.state is None else dict(value.state)),
                "method": value.method, "collect": list(value.collect), "train": value.train,
            }
        }
    return {"$opaque": type(value).__name__}


def _tensor(dtype_name: Any, shape: Any, data: Any) -> torch.Tensor:
    if dtype_name not in DTYPES or not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
        raise WireError("malformed tensor")
    dtype = DTYPES[dtype_name]
    raw = base64.b64decode(data, validate=True)
    count = 1
    for s in shape:
        count *= s
    storage = _BITS.get(dtype, dtype)
    if len(raw) != count * torch.empty((), dtype=storage).element_size():
        raise WireError("tensor data does not match its shape")
    t = torch.frombuffer(bytearray(raw), dtype=storage) if raw else torch.empty(0, dtype=storage)
    t = t.reshape(shape)
    return t.view(dtype) if dtype in _BITS else t


def decode(value: Any, depth: int = 0) -> Any:
    if depth > 32:
        raise WireError("nested too deeply")
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) is list:
        return [decode(v, depth + 1) for v in value]
    if type(value) is not dict or len(value) != 1:
        raise WireError("unexpected value")
    (tag, body), = value.items()
    if tag == "$tensor":
        return _tensor(*body)
    if tag == "$float":
        return float(body) if body in ("inf", "-inf", "nan") else _bad(tag)
    if tag == "$tuple":
        return tuple(decode(v, depth + 1) for v in body)
    if tag == "$dict":
        return {decode(k, depth + 1): decode(v, depth + 1) for k, v in body}
    if tag == "$provided":
        return Provided(str(body[0]), decode(body[1], depth + 1))
    if tag == "$raised":
        return Raised(*(str(b) for b in body[:4]))
    if tag == "$forbidden":
        return UsedForbidden(tuple(str(b) for b in body))
    if tag == "$module":
        attributes = decode(body[1], depth + 1)
        return ModuleResult(decode(body[0], depth + 1), attributes if isinstance(attributes, dict) else {})
    if tag == "$opaque":
        return Opaque(str(body))
    if tag == "$case":
        return Case(
            label=body["label"], args=decode(body["args"], depth + 1), kwargs=decode(body["kwargs"], depth + 1),
            tag=body["tag"], init=decode(body["init"], depth + 1), state=decode(body["state"], depth + 1),
            method=body["method"], collect=tuple(body["collect"]), train=bool(body["train"]),
        )
    return _bad(tag)


def _bad(tag: str):
    raise WireError(f"unknown tag {tag!r}")


def send(stream: BinaryIO, message: dict) -> None:
    data = json.dumps(message, separators=(",", ":")).encode()
    stream.write(struct.pack(">Q", len(data)) + data)
    stream.flush()


def receive(stream: BinaryIO) -> dict:
    """One message; EOFError when the other side is gone."""
    header = _read_exactly(stream, 8)
    (size,) = struct.unpack(">Q", header)
    if size > MAX_FRAME:
        raise WireError(f"a message of {size} bytes is larger than the limit")
    try:
        message = json.loads(_read_exactly(stream, size))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise WireError(f"not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise WireError("a message must be a JSON object")
    return message


def _read_exactly(stream: BinaryIO, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
