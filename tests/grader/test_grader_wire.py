"""The reply parser is bounded: whatever the learner's side sends, the grader gets a WireError.

Deeply nested documents, sizes that cannot be, values of the wrong type and tags that only
travel the other way once crashed the grader's process (RecursionError, MemoryError,
TypeError); now each is a WireError that costs its own submission.
"""
from __future__ import annotations

import json

import pytest
import torch

from autograder.framework import Case, ModuleResult, Opaque, Provided, Raised, UsedForbidden
from harness import wire


def _parsed(document) -> object:
    data = document if isinstance(document, bytes) else json.dumps(document).encode()
    return wire.decode(wire.parse(data)["result"])


MALFORMED = {
    "nested 200 000 deep": b'{"result":' + b"[" * 200_000 + b"]" * 200_000 + b"}",
    "nested past the depth limit": b'{"result":{"$tuple":[' + b"[" * 40 + b"0" + b"]" * 40 + b"]}}",
    "a million empty lists": b'{"result":[' + b",".join([b"[]"] * 1_100_000) + b"]}",
    "an integer of 5000 digits": b'{"result":' + b"9" * 5000 + b"}",
    "not JSON": b'{"result": [1, 2',
    "not an object": b"[1, 2, 3]",
    "a tensor with a huge shape": {"result": {"$tensor": ["float32", [0, 10**30], ""]}},
    "a tensor with too many dims": {"result": {"$tensor": ["float32", [1] * 40, "AAAAAA=="]}},
    "a tensor of the wrong size": {"result": {"$tensor": ["float32", [2**31, 2**31], "AAAAAA=="]}},
    "a tensor whose data is a number": {"result": {"$tensor": ["float32", [1], 5]}},
    "a tensor whose data is not base64": {"result": {"$tensor": ["float32", [1], "!!!!"]}},
    "a tensor of an unknown dtype": {"result": {"$tensor": ["object", [1], ""]}},
    "a tensor that is a string": {"result": {"$tensor": "float32"}},
    "a dict with a list for a key": {"result": {"$dict": [[[1], 2]]}},
    "a dict item of three": {"result": {"$dict": [[1, 2, 3]]}},
    "a tuple that is a number": {"result": {"$tuple": 5}},
    "an exception that is a number": {"result": {"$raised": 5}},
    "an exception whose message is a list": {"result": {"$raised": {"type": "X", "message": [1]}}},
    "mismatch names that are numbers": {"result": {"$raised": {"type": "StateMismatch", "message": "",
                                                              "details": {"missing": [1, 2]}}}},
    "a shared pair of three": {"result": {"$raised": {"type": "StateMismatch", "message": "",
                                                     "details": {"shared": [["a", "b", "c"]]}}}},
    "forbidden names that are a dict": {"result": {"$forbidden": {"a": 1}}},
    "a module result of one": {"result": {"$module": [1]}},
    "a product count that is not a number": {"result": {"$module": [1, {"$dict": []}, [["w", [1, "2", 3]]]]}},
    "a negative product count": {"result": {"$module": [1, {"$dict": []}, [["w", [1, -2, 3]]]]}},
    "a special float that is not": {"result": {"$float": "1e5"}},
    "a case, which only the grader sends": {"result": {"$case": {"label": "x"}}},
    "a provided object, which only the grader sends": {"result": {"$provided": ["toy_translator", {"$dict": []}]}},
    "an unknown tag": {"result": {"$pickle": "gASV"}},
    "a value with two tags": {"result": {"$tuple": [], "$dict": []}},
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_reply_is_a_wire_error_and_nothing_else(name):
    with pytest.raises(wire.WireError):
        _parsed(MALFORMED[name])


def test_a_frame_header_claiming_more_than_the_limit_is_refused_before_reading():
    with pytest.raises(wire.WireError, match="larger than the limit"):
        wire.frame_size(wire.HEADER.pack(2**62), 64 << 20)
    assert wire.frame_size(wire.HEADER.pack(100), 64 << 20) == 100


def test_well_formed_values_survive_the_round_trip():
    values = [
        torch.arange(6, dtype=torch.float32).reshape(2, 3), torch.zeros(0, 4, dtype=torch.bfloat16),
        torch.tensor([True, False]), (1, 2.5, float("inf"), None, "x"), [{"a": (1, 2)}, {3: "b"}],
        UsedForbidden(("torch.softmax",)), Opaque("generator"),
        ModuleResult(torch.ones(2), {"attn_weights": torch.eye(2)}, {"experts.0.w_1.weight": (6, 5, 1)}),
        Raised("ValueError", "bad", "in your `f`, line 3", "f"),
    ]
    for value in values:
        back = wire.decode(json.loads(json.dumps(wire.encode(value))))
        if isinstance(value, torch.Tensor):
            assert back.dtype == value.dtype and torch.equal(back, value)
        elif isinstance(value, ModuleResult):
            assert torch.equal(back.output, value.output) and torch.equal(back.attributes["attn_weights"], torch.eye(2))
            assert back.products == {"experts.0.w_1.weight": (6, 5, 1)}
        else:
            assert back == value


def test_a_state_mismatch_travels_as_fields_not_as_a_sentence():
    from autograder.framework import StateMismatch, raised

    try:
        raise StateMismatch(["w_q.weight"], ["norm1.gamma"], shared=[("cross_attn", "self_attn")])
    except StateMismatch as exc:
        sent = raised(exc)
    back = wire.decode(json.loads(json.dumps(wire.encode(sent))))
    assert back.details["missing"] == ("w_q.weight",)
    assert back.details["unexpected"] == ("norm1.gamma",)
    assert back.details["shared"] == (("cross_attn", "self_attn"),)


def test_requests_carry_cases_and_provided_objects_to_the_learner():
    case = Case("x (2, 3)", args=(torch.ones(2, 3), Provided("toy_translator", {"seed": 1})), kwargs={"dim": -1},
                init={"d_model": 4}, collect=("attn_weights",), train=True, counted=("w_1.weight",))
    back = wire.decode(json.loads(json.dumps(wire.encode(case))), wire.REQUEST_TAGS)
    assert back.label == case.label and back.collect == case.collect and back.train and back.counted == case.counted
    assert back.args[1] == Provided("toy_translator", {"seed": 1})
