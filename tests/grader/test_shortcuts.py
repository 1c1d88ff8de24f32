"""The scan of a submission's source: every alias of a forbidden built-in, every construct that
reaches past the checks, is judged before anything runs; correct code in any style is not."""
from __future__ import annotations

import csv
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import nbformat
import pytest
import torch

from autograder import messages
from autograder.assignment import Assignment
from autograder.checks import get
from autograder.engine import Result, grade_cells
from autograder.engine import TestOutcome as Outcome
from autograder.framework import CheckFailed, Tripwires, run_check
from autograder.outputs.feedback import feedback_html
from autograder.outputs.grade_files import write_csv
from autograder.run import summary
from autograder.sandbox import Limits
from autograder.source.shortcuts import REVIEW, RULES, OutOfTime, scan
from autograder.submissions import Unreadable, code_cells, notebook_cells
from course import source_trees
from course.tools.messages import WORDS
from harness.calls import follow_threads
from tests.conftest import NOTEBOOKS, chapter_of

#: a line that never runs and that the scan once could not read: an expression of 700 terms
PADDING = "    if False:\n        y = " + " + ".join(["x"] * 700) + "\n"

# (notebook, function, the learner's cell, what the message must say)
FORBIDDEN = [
    ("attention", "softmax", "import torch\ndef softmax(x, dim=-1):\n    return torch.softmax(x, dim)", "calls torch.softmax"),
    ("attention", "softmax", "import torch\ndef softmax(x, dim=-1):\n    return torch.log_softmax(x, dim).exp()",
     "calls torch.log_softmax"),
    ("attention", "softmax", "import torch\ndef softmax(x, dim=-1):\n    return torch._C._VariableFunctions.softmax(x, dim)",
     "calls torch._C._VariableFunctions.softmax"),
    ("attention", "softmax", "import torch\ndef softmax(x, dim=-1):\n    return torch.ops.aten._softmax(x, dim, False)",
     "calls torch.ops.aten._softmax"),
    ("attention", "softmax", "from torch.nn import functional as G\nsm = G.softmin\ndef softmax(x, dim=-1):\n"
     "    return sm(-x, dim)", "calls torch.nn.functional.softmin"),
    ("attention", "softmax", "def softmax(x, dim=-1):\n    return x.log_softmax(dim).exp()", "calls torch.Tensor.log_softmax"),
    ("attention", "softmax", "import torch\ndef softmax(x, dim=-1):\n    return getattr(torch, 'softmax')(x, dim)",
     "calls torch.softmax"),
    ("attention", "softmax", "import torch\ndef softmax(x, dim=-1):\n    return getattr(torch, 'soft' + 'max')(x, dim)",
     "named at run time"),
    ("attention", "softmax", "import torch\nf = torch.exp\ndef softmax(x, dim=-1):\n    g = f\n"
     "    while g.__closure__:\n        g = g.__closure__[0].cell_contents\n    return g(x)", "reaching inside functions"),
    ("attention", "softmax", "def softmax(x, dim=-1):\n    return eval('x.softmax(dim)')", "eval, exec and compile"),
    ("attention", "softmax", "from reference.attention import softmax as theirs\ndef softmax(x, dim=-1):\n"
     "    return theirs(x, dim)", "calls reference.attention.softmax"),
    ("attention", "scaled_dot_product_attention", "import torch\ndef scaled_dot_product_attention(q, k, v, mask=None):\n"
     "    return torch.ops.aten._scaled_dot_product_attention_math(q, k, v, attn_mask=mask)", "torch.ops.aten"),
    ("multihead", "MultiHeadAttention", "from autograder import oracles\nclass MultiHeadAttention:\n"
     "    def forward(self, *a):\n        return oracles.multi_head_attention(*a)", "own packages"),
    ("encoder", "LayerNorm", "import torch\nclass LayerNorm(torch.nn.Module):\n    def forward(self, x):\n"
     "        return torch.native_layer_norm(x, [x.shape[-1]], self.gamma, self.beta, 1e-5)[0]",
     "calls torch.native_layer_norm"),
    ("encoder", "LayerNorm", "import torch.nn.functional as F\nclass LayerNorm:\n    def forward(self, x):\n"
     "        return F.group_norm(x.reshape(-1, x.shape[-1], 1), 1).reshape(x.shape)",
     "calls torch.nn.functional.group_norm"),
    ("capstone", "label_smoothed_cross_entropy",
     "import torch\ndef label_smoothed_cross_entropy(l, t, smoothing=0.1, pad_id=0):\n"
     "    return torch._C._nn.cross_entropy_loss(l, t, None, 1, pad_id, smoothing)", "cross_entropy_loss"),
    ("capstone", "edit_distance", "from rapidfuzz.distance import Levenshtein\ndef edit_distance(a, b):\n"
     "    return Levenshtein.distance(a, b)", "calls rapidfuzz.distance.Levenshtein"),
    ("capstone", "beam_search", "from autograder.checks.capstone import _beam as beam_search", "own packages"),
    ("bert_gpt", "bpe_train", "import importlib\ndef bpe_train(text, n):\n"
     "    return importlib.import_module('autograder.checks.bert_gpt').bpe_merges(text, n)", "own packages"),
    ("bert_gpt", "generate_with_cache", "def generate_with_cache(model, prompt, steps):\n"
     "    from harness.toys import ToyGPT\n    return None", "own packages"),
    ("prerequisites", "rnn_forward", "import torch\ndef rnn_forward(x, h, W_xh, W_hh, b):\n"
     "    return torch.rnn_tanh_cell(x, h, W_xh, W_hh, b)", "calls torch.rnn_tanh_cell"),
    # The tripwires are the learner process's own; a thread or process started beside them is not
    # seen by them, so the source may not start one.
    ("attention", "softmax", "import threading, torch\ndef softmax(x, dim=-1):\n    out = []\n"
     "    t = threading.Thread(target=lambda: out.append(torch.exp(x)))\n    t.start(); t.join()\n"
     "    return out[0] / out[0].sum(dim, keepdim=True)", "thread or process"),
    ("attention", "softmax", "from concurrent.futures import ThreadPoolExecutor as Pool\ndef softmax(x, dim=-1):\n"
     "    return Pool().submit(x.exp).result()", "thread or process"),
    ("attention", "softmax", "import os as o\ndef softmax(x, dim=-1):\n    o.fork()\n    return x", "thread or process"),
    ("attention", "softmax", "import os\ndef softmax(x, dim=-1):\n    getattr(os, 'fo' + 'rk')()\n    return x",
     "named at run time"),
    ("attention", "softmax", "def softmax(x, dim=-1):\n    import subprocess\n    return subprocess.run(['true'])",
     "thread or process"),
    # a thread the notebook starts as it runs, which the graded function never names
    ("attention", "softmax", "import queue, threading, torch\nasked, answers = queue.Queue(), queue.Queue()\n"
     "def serve():\n    while True:\n        answers.put(torch.softmax(*asked.get()))\n"
     "threading.Thread(target=serve, daemon=True).start()\n"
     "def softmax(x, dim=-1):\n    asked.put((x, dim))\n    return answers.get()", "thread or process"),
    # the scan reads a line nested 700 deep: what else the function does is charged
    ("attention", "softmax", "import threading, torch\ndef softmax(x, dim=-1):\n" + PADDING
     + "    out = []\n    t = threading.Thread(target=lambda: out.append(torch.softmax(x, dim)))\n"
     "    t.start(); t.join()\n    return out[0]", "calls torch.softmax"),
    ("attention", "softmax", "import torch\ndef softmax(x, dim=-1):\n" + PADDING + "    return torch.softmax(x, dim)",
     "calls torch.softmax"),
]

# Correct code in other styles, and demonstrations that compare with the built-ins outside the
# graded function: none of it is judged.
HONEST = [
    ("attention", "import torch\ndef softmax(x, dim=-1):\n    e = torch.exp(x - x.amax(dim=dim, keepdim=True))\n"
     "    return e / e.sum(dim=dim, keepdim=True)\nx = torch.randn(3)\nexpected = torch.softmax(x, -1)\n"
     "print(torch.allclose(softmax(x), expected))"),
    ("attention", "import torch\ndef softmax(x, dim=-1):\n    return torch.exp(x - torch.logsumexp(x, dim, keepdim=True))"),
    ("attention", "import torch\ndef softmax(x, dim=-1):\n    shifted = x - x.max(dim, keepdim=True).values\n"
     "    return shifted.exp() / shifted.exp().sum(dim, keepdim=True)\n"
     "def scaled_dot_product_attention(q, k, v, mask=None):\n    w = softmax(torch.einsum('...qd,...kd->...qk', q, k))\n"
     "    return w @ v, w"),
    ("attention", "from autograder import check\nfrom autograder.toys import ToyTranslator\n"
     "check('attention.softmax', softmax)\nprint(ToyTranslator)"),  # what the notebook's own cells do
    ("encoder", "import torch\nclass LayerNorm(torch.nn.Module):\n    def forward(self, x):\n"
     "        mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)\n"
     "        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta"),
    ("encoder", "class EncoderLayer:\n    def forward(self, x):\n        return self.multi_head_attention(x, x, x)"),
    ("capstone", "import torch\ndef label_smoothed_cross_entropy(logits, target, smoothing=0.1, pad_id=0):\n"
     "    logp = torch.nn.functional.log_softmax(logits, dim=-1)\n"
     "    nll = torch.nn.functional.nll_loss(logp.flatten(0, -2), target.flatten(), ignore_index=pad_id)\n"
     "    return nll"),
]


def _assignment(notebook: str, source_nb) -> Assignment:
    return Assignment.from_notebook(chapter_of(notebook).assignment, notebook, source_nb(notebook))


def _scan(assignment: Assignment, cells: list[str], deadline: float | None = None):
    rules = {f: (assignment.forbidden(f), assignment.forbidden_ops(f)) for f in assignment.functions}
    return scan([*assignment.given, *cells], rules, assignment.given, deadline)


@pytest.mark.parametrize(("notebook", "function", "source", "phrase"), FORBIDDEN,
                         ids=[f"{f}-{i}" for i, (_, f, _, _) in enumerate(FORBIDDEN)])
def test_every_alias_of_a_shortcut_scores_zero_with_its_rule(notebook, function, source, phrase, source_nb):
    found = _scan(_assignment(notebook, source_nb), [source])
    message = found.message(function)
    assert message is not None and phrase in message, message


@pytest.mark.parametrize(("notebook", "source"), HONEST, ids=[f"{n}-{i}" for i, (n, _) in enumerate(HONEST)])
def test_correct_code_in_other_styles_is_not_judged(notebook, source, source_nb):
    found = _scan(_assignment(notebook, source_nb), [source])
    assert found.forbidden == {} and found.flags() == []


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_the_solutions_and_the_release_scan_clean(notebook, source_nb, release_nb):
    assignment = _assignment(notebook, source_nb)
    for nb in (source_nb(notebook), release_nb(notebook)):
        found = _scan(assignment, notebook_cells(nb, assignment.test_ids)[0])
        assert found.forbidden == {} and found.flags() == []


def test_a_universal_rule_costs_every_function_and_a_function_only_its_own(source_nb):
    assignment = _assignment("attention", source_nb)
    found = _scan(assignment, ["import torch\ndef softmax(x, dim=-1):\n    return torch.softmax(x, dim)"])
    assert set(found.forbidden) == {"softmax"}  # attention, which calls softmax, is graded with the course's
    found = _scan(assignment, ["import torch._C as C\nprint(C)"])
    assert set(found.forbidden) == set(assignment.functions)


def test_what_cannot_be_decided_is_flagged_for_review_everywhere(source_nb, tmp_path):
    assignment = _assignment("attention", source_nb)
    found = _scan(assignment, ["import ctypes, gc\ndef softmax(x, dim=-1):\n    return getattr(x, 'soft' + 'max')(dim)"])
    flags = found.flags()
    assert found.forbidden == {} and len(flags) == 3 and any("getattr(x" in f for f in flags), flags
    result = Result("learner1", assignment.name, assignment.notebook,
                    [Outcome(t.grade_id, t.points, t.points, True) for t in assignment.tests], flags=flags)
    honest = Result("learner2", assignment.name, assignment.notebook,
                    [Outcome(t.grade_id, t.points, t.points, True) for t in assignment.tests])
    write_csv(tmp_path / "grades.csv", assignment, [result, honest])
    with (tmp_path / "grades.csv").open() as f:
        rows = {r["learner"]: r for r in csv.DictReader(f)}
    assert "ctypes" in rows["learner1"]["flags"] and rows["learner2"]["flags"] == ""
    assert "For the instructor to review" in feedback_html(assignment, result)
    assert "For the instructor to review" not in feedback_html(assignment, honest)
    assert "to review in 'learner1'" in summary(assignment, [result, honest], 1.0)


# Sets the terminal's title, moves up a line and erases it: printed raw, it would hide the line before.
TERMINAL = "\x1b]0;graded\x07\x1b[1A\x1b[2K"


def test_a_flag_shows_the_learner_s_control_characters_never_sends_them(source_nb, tmp_path):
    assignment = _assignment("attention", source_nb)
    flags = _scan(assignment, [f"x = 1  # {TERMINAL}\u202e\nimport gc"]).flags()
    assert len(flags) == 1 and "\x1b" in flags[0], flags
    result = Result("learner1", assignment.name, assignment.notebook, flags=flags,
                    error=f"the notebook's structure is broken: {TERMINAL}")
    write_csv(tmp_path / "grades.csv", assignment, [result])
    shown = {"console": summary(assignment, [result], 1.0), "CSV": (tmp_path / "grades.csv").read_text(),
             "feedback": feedback_html(assignment, result)}
    for where, text in shown.items():
        assert not [c for c in text if c in "\x1b\x07\u202e"], where
        # what was there stays readable, escaped
        assert r"\x1b]0;graded\x07\x1b[1A\x1b[2K\u202e" in text and r"broken: \x1b]0;" in text, where


def test_a_given_cell_edited_by_the_learner_is_judged(source_nb):
    assignment = _assignment("attention", source_nb)
    edited = [c + "\nimport torch._C" if "import torch" in c else c for c in assignment.given]
    assert set(scan(edited, {"softmax": ((), ())}, assignment.given).forbidden) == {"softmax"}


# At run time, in the learner's process (advisory: the notebook's own check gives these messages).
RUN_TIME = {
    "torch._C": lambda x, dim=-1: torch._C._VariableFunctions.softmax(x, dim),
    "torch.ops": lambda x, dim=-1: torch.ops.aten._softmax(x, dim, False),
    "log_softmax": lambda x, dim=-1: torch.log_softmax(x, dim).exp(),
    "softmin": lambda x, dim=-1: torch.nn.functional.softmin(-x, dim),
    "multi-head attention's weights": lambda x, dim=-1: torch.nn.functional.scaled_dot_product_attention(
        x[..., None], x[..., None], x[..., None]),
}


@pytest.mark.parametrize("name", sorted(RUN_TIME))
def test_the_tripwires_see_every_alias_down_to_the_operator(name):
    with pytest.raises(CheckFailed, match="which this exercise asks you to build yourself"):
        run_check(get("attention.softmax"), RUN_TIME[name])


def test_the_tripwires_replace_nothing_so_no_original_can_be_taken_back():
    wires = Tripwires(get("attention.softmax").forbidden, get("attention.softmax").forbidden_ops)
    with wires.record() as used:
        assert torch.softmax is torch._C._VariableFunctions.softmax
        assert torch.Tensor.softmax is torch._C.TensorBase.softmax
        torch.ones(2).softmax(0)
    assert used == ["torch.Tensor.softmax"]


@pytest.fixture
def unreadable(monkeypatch):
    """The grader's reading fails, with the given error, on every statement that holds "UNREADABLE"."""
    def install(error: Exception):
        read = source_trees.symbol_table

        def failing(source, *args):
            if "UNREADABLE" in source:
                raise error
            return read(source, *args)

        monkeypatch.setattr(source_trees, "symbol_table", failing)
    return install


# (the learner's cell, the functions that must score 0): an unread helper costs those that use it;
# an unread statement that runs as its cell runs (a default, a class's body, a plain statement),
# every function, since what it does cannot be known.
UNREAD = [
    ("def helper(x):\n    return x, 'UNREADABLE'\ndef softmax(x, dim=-1):\n    return helper(x)", {"softmax"}),
    ("def helper(x):\n    return x, 'UNREADABLE'", set()),
    ("import torch\ny = torch.ones(1), 'UNREADABLE'", "all"),
    ("def helper(x, scale=2):\n    return x, 'UNREADABLE'", "all"),
    ("class Helper:\n    tag = 'UNREADABLE'", "all"),
]


@pytest.mark.parametrize("error", [RecursionError("maximum recursion depth exceeded"), SyntaxError("unknown syntax"),
                                   ValueError("anything")], ids=lambda e: type(e).__name__)
@pytest.mark.parametrize(("source", "charged"), UNREAD, ids=range(len(UNREAD)))
def test_what_the_grader_cannot_read_is_charged_never_passed(source, charged, error, unreadable, source_nb):
    unreadable(error)
    assignment = _assignment("attention", source_nb)
    found = _scan(assignment, [source])
    assert set(found.forbidden) == (set(assignment.functions) if charged == "all" else charged)
    for function in found.forbidden:
        assert "could not read line" in found.message(function), found.message(function)


def test_a_cell_the_grader_cannot_parse_costs_every_function(source_nb):
    assignment = _assignment("attention", source_nb)
    found = _scan(assignment, ["y = " + " + ".join(["1"] * 5000)])
    assert set(found.forbidden) == set(assignment.functions)
    assert "nested too deeply" in found.message("softmax")


# A learner's cell for each rule and each flag for review: what the learner reads of each, in either language.
SPOKEN = [
    "def softmax(x, dim=-1):\n    return eval('x.softmax(dim)')",
    "import torch\ndef softmax(x, dim=-1):\n    return torch.softmax(x, dim)",
    "import torch._C as C",
    "import torch\ndef softmax(x, dim=-1):\n    return softmax.__globals__, getattr(torch, 'soft' + 'max')",
    "from autograder import oracles",
    "from transformer import model",
    "import threading",
    "y = " + " + ".join(["1"] * 5000),
    "".join(f"import m{i} as a\nb{i} = a\n" for i in range(40)) + "print(a.x)",
    "import ctypes, importlib, torch\nfrom math import *\ng = globals()\ntorch.softmax = None\n"
    "m = importlib.import_module(name)\ndef softmax(x, dim=-1):\n    return getattr(x, 'soft' + 'max')(dim)",
]


def _spoken(assignment: Assignment) -> tuple[list[str], set[str], set[str]]:
    """Every message and flag the cells of SPOKEN give, and the rules and flags they come from."""
    texts, rules, flags = [], set(), set()
    for source in SPOKEN:
        found = _scan(assignment, [source])
        texts += [found.message(f) for f in sorted(found.forbidden)] + found.flags()
        rules |= {f.rule for findings in found.forbidden.values() for f in findings}
        flags |= {f.rule for f in found.review}
    return texts, rules, flags


def _english_outside_code(text: str) -> list[str]:
    """Runs of three English words outside backquotes."""
    return WORDS.findall(re.sub(r"`[^`]*`", "", text))


def test_what_a_shortcut_costs_reads_in_chinese_and_the_english_is_unchanged(source_nb):
    assignment = _assignment("attention", source_nb)
    english, rules, flags = _spoken(assignment)
    assert rules == {*RULES, "forbidden", "unread"} and flags == set(REVIEW), (rules, flags)
    cell = len(assignment.given) + 1
    assert english[0] == (f"`softmax` scores 0: line 2 of code cell {cell} (`def softmax(x, dim=-1):`) "
                          "uses `eval`, and eval, exec and compile run code the grader cannot read. Graded code may "
                          "not use it anywhere in the notebook.")
    messages.set_language("zh")
    try:
        chinese, _, _ = _spoken(assignment)
    finally:
        messages.set_language(None)
    assert len(chinese) == len(english)
    assert [(c, _english_outside_code(c)) for c in chinese if _english_outside_code(c)] == []
    assert chinese[1].startswith("`softmax` 调用了 torch.softmax（") and english[1].startswith(
        "`softmax` calls torch.softmax, which this exercise asks you to build yourself (line 3 of code cell")
    assert english == _spoken(assignment)[0], "the English is what it was before Chinese was spoken"


def _in_a_thread(x, dim=-1):
    out = []
    thread = threading.Thread(target=lambda: out.append(torch.softmax(x, dim)))
    thread.start()
    thread.join()
    return out[0]


def _in_a_pool_started_before(pool: ThreadPoolExecutor):
    pool.submit(int).result()  # its thread runs before the call, as a pool a cell starts would
    return lambda x, dim=-1: pool.submit(torch.softmax, x, dim).result()


@pytest.mark.parametrize("function", [lambda pool: _in_a_thread, _in_a_pool_started_before],
                         ids=["a thread the call starts", "a pool started before"])
def test_the_tripwires_see_the_threads_of_the_learner_s_process(function):
    undo = follow_threads()
    try:
        with ThreadPoolExecutor(1) as pool, pytest.raises(CheckFailed, match="which this exercise asks you to build yourself"):
            run_check(get("attention.softmax"), function(pool))
    finally:
        undo()


def _lines_run(function, *args) -> int:
    """How many lines of Python a call runs: its work, which no other load on the machine changes."""
    count = 0

    def trace(frame, event, arg):
        nonlocal count
        count += event == "line"
        return trace

    before = sys.gettrace()
    sys.settrace(trace)
    try:
        function(*args)
    finally:
        sys.settrace(before)
    return count


# Sources of n statements or terms in the shapes that once cost the scan the square of their size.
SHAPES = {
    "chained assignments": lambda n: "import torch\nx0 = torch\n" + "".join(f"x{i} = x{i - 1}\n" for i in range(1, n)),
    "many definitions": lambda n: "".join(f"def f{i}(x):\n    return f{i - 1}(x) + x.exp()\n" for i in range(n))
    + "".join(f"def {graded}(x, *args):\n    return f{n - 1}(x)\n" for graded in ("softmax", "score_variance",
                                                                                  "scaled_dot_product_attention")),
    "a name for many modules": lambda n: "".join(f"import m{i} as a\nb{i} = a\n" for i in range(n)),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_scan_s_work_grows_in_step_with_the_source(shape, source_nb):
    assignment = _assignment("attention", source_nb)
    small, large = (_lines_run(_scan, assignment, [SHAPES[shape](n)]) for n in (200, 800))
    assert large < 5 * small, (small, large)  # four times the source: about four times the work, not sixteen


def test_the_scan_stops_at_the_submission_s_deadline(source_nb):
    assignment = _assignment("attention", source_nb)
    with pytest.raises(OutOfTime):
        _scan(assignment, ["x = 1"], deadline=time.monotonic() - 1)
    cells, _ = notebook_cells(source_nb("attention"), assignment.test_ids)
    outcomes, _ = grade_cells(assignment, cells, Limits(submission_seconds=0), [])
    assert all(o.points == 0 and "ran out while the grader read its source" in o.message for o in outcomes), outcomes


def test_a_notebook_with_more_code_than_the_grader_reads_is_not_graded(tmp_path):
    limit = Limits().source_kb
    path = tmp_path / "attention.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"x = {'1' * (limit << 10)}")]), path)
    with pytest.raises(Unreadable, match=f"over the {limit} KB the grader reads"):
        code_cells(path, Limits().notebook_mb << 20, (), limit << 10)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), path)
    assert code_cells(path, Limits().notebook_mb << 20, (), limit << 10)[0] == ["x = 1"]
