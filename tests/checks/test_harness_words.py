"""What the course's code in the learner's process reports (a module's parameters that do not match, the toy
translator encoding again, the toy GPT reading again, where an operation mixed devices) reaches the learner in
their language: the harness sends the facts as data (``Raised.details``, a probe's finding), the grader words them.

Each case here is made for real: the learner's code runs through :func:`harness.calls.call_learner`, and its result
crosses the wire as a sandboxed worker sends it, before the grader judges it.
"""
from __future__ import annotations

import json
import re

import pytest
import torch
from torch import nn

import autograder.framework as framework
from autograder.checks import get
from autograder.framework import CheckFailed, StateMismatch, raised, raised_text, run_check
from course.tools.messages import WORDS
from harness import wire
from harness.calls import Case, call_learner, remember_cell
from harness.providers import Provided
from tests.mistakes.bert_gpt import MISTAKES as BERT_GPT
from tests.mistakes.encoder import LayerSharedNorm

FFN_NAMED_OTHERWISE = '''
class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.lin1 = nn.Linear(d_model, d_ff)
        self.lin2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.lin2(self.dropout(torch.relu(self.lin1(x))))
'''
NORM_OF_THE_WRONG_SHAPE = '''
class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(1, d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
'''
GREEDY_ENCODING_IN_THE_LOOP = '''
def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long)
    finished = torch.zeros(src.shape[0], dtype=torch.bool)
    for _ in range(max_len):
        memory = model.encode(src)
        token = model.decode(memory, ys)[:, -1].argmax(dim=-1).masked_fill(finished, pad_id)
        ys = torch.cat([ys, token.unsqueeze(1)], dim=1)
        finished = finished | (token == eos_id)
        if bool(finished.all()):
            break
    return ys[:, 1:]
'''
SDPA_MASK_ON_THE_CPU = '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
    if mask is not None:
        scores = scores + torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    w = torch.exp(scores - scores.amax(-1, keepdim=True))
    w = torch.nan_to_num(w / w.sum(-1, keepdim=True))
    return w @ v, w
'''
RECOMPUTING = next(m.fn for m in BERT_GPT if m.name == "reads the whole sequence at every step")


def _cell(source: str, name: str, index: int):
    """The learner's ``name`` written in a notebook cell (whose lines the harness quotes)."""
    filename = f"<cell {index}>"
    remember_cell(filename, source)
    namespace = {"torch": torch, "nn": nn, "__name__": "__main__"}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102
    return namespace[name]


@pytest.fixture
def through_the_wire(monkeypatch):
    """Every result the learner's side gives crosses the wire, as from a sandboxed worker."""
    call = framework.call_learner

    def sent(*args, **kwargs):
        return wire.decode(wire.parse(json.dumps({"result": wire.encode(call(*args, **kwargs))}).encode())["result"])

    monkeypatch.setattr(framework, "call_learner", sent)


def _message(check_id: str, fn) -> str:
    with pytest.raises(CheckFailed) as failure:
        run_check(get(check_id), fn)
    return str(failure.value)


def _english(message: str) -> list[str]:
    """Runs of three English words outside backquotes (code, names) in a message."""
    return WORDS.findall(re.sub(r"`[^`]*`", "", message))


CASES = {
    "names the exercise does not give": ("encoder.PositionwiseFeedForward",
                                         lambda: _cell(FFN_NAMED_OTHERWISE, "PositionwiseFeedForward", 901),
                                         ("是在你的 `PositionwiseFeedForward.__init__` 第 5 行创建的", "lin1.weight")),
    "a parameter of the wrong shape": ("encoder.LayerNorm", lambda: _cell(NORM_OF_THE_WRONG_SHAPE, "LayerNorm", 902),
                                       ("gamma 的形状是 (1, 16)，应为 (16,)（gamma 是在你的 `LayerNorm.__init__` 第 5 行创建的",
                                        "请严格使用练习给出的子模块名称和形状。")),
    "one LayerNorm under two names": ("encoder.EncoderLayer", lambda: LayerSharedNorm,
                                      ("norm2 和 norm1 是同一个对象",)),
    "the source encoded at every step": ("prerequisites.greedy_decode",
                                         lambda: _cell(GREEDY_ENCODING_IN_THE_LOOP, "greedy_decode", 903),
                                         ("一次解码中调用了 2 次 model.encode", "在课程的 `ToyTranslator.encode` 内部抛出")),
    "the sequence read again at every step": ("bert_gpt.generate_with_cache", lambda: RECOMPUTING,
                                              ("已经读取了 15 个位置，超过了提示和生成的词元加起来的 10 个",)),
    "a mask made on the CPU": ("attention.scaled_dot_product_attention",
                               lambda: _cell(SDPA_MASK_ON_THE_CPU, "scaled_dot_product_attention", 904),
                               ("设备不匹配（在你的 `scaled_dot_product_attention` 中，单元格第 5 行：",)),
}


@pytest.mark.parametrize("name", CASES)
def test_what_the_learner_s_process_reports_reads_in_chinese(name, through_the_wire, monkeypatch):
    check_id, fn, said = CASES[name]
    monkeypatch.setenv("COURSE_LANG", "zh")
    message = _message(check_id, fn())
    assert all(s in message for s in said), message
    assert _english(message) == [], message


def _result(exc: BaseException) -> object:
    try:
        raise exc
    except BaseException as raised_here:
        sent = raised(raised_here)
    return wire.decode(json.loads(json.dumps(wire.encode(sent))))


@pytest.mark.parametrize("exc", [
    StateMismatch(["w_1.weight", "cross_attn.w_q.weight"], ["lin1.weight"], ("lin1", "5", "FFN.__init__", "self.lin1 = x"),
                  shared=[("cross_attn", "self_attn")]),
    StateMismatch(["cross_attn.w_q.weight"], [], shared=[("cross_attn", "self_attn")]),
    StateMismatch([], [], ("w_1", "5", "FFN.__init__", "self.w_1 = x"), shape=("w_1.weight", "(16, 32)", "(32, 16)")),
    StateMismatch([], [], shape=("gamma", "(1, 16)", "(16,)")),
    StateMismatch([f"w_{i}.weight" for i in range(9)], [f"v_{i}.weight" for i in range(9)]),
], ids=["names, made and shared", "shared only", "a shape and where it is made", "a shape", "many names"])
def test_the_grader_s_english_is_what_the_learner_s_process_says(exc):
    result = _result(exc)
    assert raised_text(result) == str(exc) == result.message


def test_the_toys_english_is_what_the_learner_s_process_says():
    def encodes_twice(model, src):
        model.encode(src)
        return model.encode(src)

    src = torch.ones(1, 3, dtype=torch.long)
    encoded = call_learner(encodes_twice, Case("src", (Provided("toy_translator", {"encodes": 1}), src)))
    read = call_learner(lambda model, ids: [model(ids), model(ids)],
                        Case("ids", (Provided("toy_gpt", {"budget": 4}), src)))
    for result in (encoded, read):
        back = wire.decode(json.loads(json.dumps(wire.encode(result))))
        assert back.type in ("EncodedAgain", "Recomputed") and raised_text(back) == result.message
