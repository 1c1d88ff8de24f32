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
    "where it was raised in four parts": {"result": {"$raised": {"type": "X", "message": "",
                                                                 "details": {"where": ["", "f", "3", "its cell"]}}}},
    "where it was raised with a number": {"result": {"$raised": {"type": "X", "message": "",
                                                                 "details": {"where": ["", "f", 3, "its cell", ""]}}}},
    "where a submodule is made in three parts": {"result": {"$raised": {"type": "StateMismatch", "message": "",
        "details": {"made": ["w_1", "5", "FFN.__init__"]}}}},
    "where a submodule is made on a line that is not a number": {"result": {"$raised": {"type": "StateMismatch",
        "message": "", "details": {"made": ["w_1", "five", "FFN.__init__", "self.w_1 = ..."]}}}},
    "where a submodule is made on a negative line": {"result": {"$raised": {"type": "StateMismatch",
        "message": "", "details": {"made": ["w_1", "-5", "FFN.__init__", "self.w_1 = ..."]}}}},
    "where a submodule is made, as a record": {"result": {"$raised": {"type": "StateMismatch", "message": "",
        "details": {"made": {"attribute": "w_1"}}}}},
    "a wrong shape whose shape is a list": {"result": {"$raised": {"type": "StateMismatch", "message": "",
        "details": {"shape": ["w_1.weight", [16, 32], "(32, 16)"]}}}},
    "a wrong shape in two parts": {"result": {"$raised": {"type": "StateMismatch", "message": "",
        "details": {"shape": ["w_1.weight", "(16, 32)"]}}}},
    "encoded a number of times that is a number": {"result": {"$raised": {"type": "EncodedAgain", "message": "",
        "details": {"encoded": [2]}}}},
    "encoded an empty number of times": {"result": {"$raised": {"type": "EncodedAgain", "message": "",
        "details": {"encoded": [""]}}}},
    "encoded a count of 40 digits": {"result": {"$raised": {"type": "EncodedAgain", "message": "",
        "details": {"encoded": ["9" * 40]}}}},
    "encoded a count in other digits": {"result": {"$raised": {"type": "EncodedAgain", "message": "",
        "details": {"encoded": ["\u0663"]}}}},
    "encoded twice over": {"result": {"$raised": {"type": "EncodedAgain", "message": "",
        "details": {"encoded": ["2", "3"]}}}},
    "positions read that are a float": {"result": {"$raised": {"type": "Recomputed", "message": "",
        "details": {"read": ["head", "1.5", "10"]}}}},
    "positions read without the budget": {"result": {"$raised": {"type": "Recomputed", "message": "",
        "details": {"read": ["head", "15"]}}}},
    "positions read by a weight that is a number": {"result": {"$raised": {"type": "Recomputed", "message": "",
        "details": {"read": [7, "15", "10"]}}}},
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


def test_what_a_state_mismatch_says_besides_its_names_travels_as_parts_cut_to_their_caps():
    from autograder.framework import StateMismatch, raised

    try:
        raise StateMismatch([], [], ("w_1", "5", "FFN.__init__", "self.w_1 = nn.Linear(d_ff, d_model)"),
                            shape=("w_1.weight", "(16, 32)", "(32, 16)"))
    except StateMismatch as exc:
        sent = raised(exc)
    back = wire.decode(json.loads(json.dumps(wire.encode(sent))))
    assert back.details["made"] == ("w_1", "5", "FFN.__init__", "self.w_1 = nn.Linear(d_ff, d_model)")
    assert back.details["shape"] == ("w_1.weight", "(16, 32)", "(32, 16)")
    long = {"$raised": {"type": "StateMismatch", "message": "",
                        "details": {"made": ["a" * 5000, "5", "b" * 5000, "c" * 5000], "shape": ["d" * 5000] * 3}}}
    back = wire.decode(long)
    assert [len(p) for p in back.details["made"]] == [200, 1, 500, 200]
    assert [len(p) for p in back.details["shape"]] == [200, 500, 500]


def test_what_the_course_s_toys_say_travels_as_numbers_and_names():
    from harness.calls import Case, call_learner
    from harness.providers import Provided

    def encodes_twice(model, src):
        model.encode(src)
        return model.encode(src)

    model = Provided("toy_translator", {"encodes": 1})
    sent = call_learner(encodes_twice, Case("src", (model, torch.ones(1, 3, dtype=torch.long))))
    back = wire.decode(json.loads(json.dumps(wire.encode(sent))))
    assert back.type == "EncodedAgain" and back.details["encoded"] == ("2",) and len(back.details["where"]) == 5

    def reads_twice(model, ids):
        model(ids)
        return model(ids)

    sent = call_learner(reads_twice, Case("ids", (Provided("toy_gpt", {"budget": 4}), torch.ones(1, 3, dtype=torch.long))))
    back = wire.decode(json.loads(json.dumps(wire.encode(sent))))
    assert back.type == "Recomputed" and back.details["read"] == ("blocks[0].self_attn.w_q", "6", "4")


def test_where_it_was_raised_travels_in_parts_that_the_grader_words_in_the_learner_s_language(monkeypatch):
    from autograder.framework import raised, raised_where

    def learner():
        return [1][2]

    try:
        learner()
    except IndexError as exc:
        sent = raised(exc, learner)
    back = wire.decode(json.loads(json.dumps(wire.encode(sent))))
    assert back.details["where"][1:3] == ("test_where_it_was_raised_travels_in_parts_that_the_grader_words_in_the_"
                                          "learner_s_language.<locals>.learner", str(learner.__code__.co_firstlineno + 1))
    # the English is the learner's process's own sentence, word for word; Chinese from the same parts
    assert raised_where(back) == f"\n  ({sent.where})" and sent.where.startswith("in your `")
    monkeypatch.setenv("COURSE_LANG", "zh")
    assert raised_where(back).startswith("\n  (在你的 `") and "return [1][2]" in raised_where(back)


def test_requests_carry_cases_and_provided_objects_to_the_learner():
    case = Case("x (2, 3)", args=(torch.ones(2, 3), Provided("toy_translator", {"seed": 1})), kwargs={"dim": -1},
                init={"d_model": 4}, collect=("attn_weights",), train=True, counted=("w_1.weight",))
    back = wire.decode(json.loads(json.dumps(wire.encode(case))), wire.REQUEST_TAGS)
    assert back.label == case.label and back.collect == case.collect and back.train and back.counted == case.counted
    assert back.args[1] == Provided("toy_translator", {"seed": 1})
