"""Attacks by a learner who reads the repository, each graded end to end in the sandbox.

Every submission is a chapter's solved notebook with the attacked functions' answers replaced by
the attack (and, where the attack needs one, a cell of its own first). Each attacked function
must score nothing, with a message that says why; the functions around it keep their points.
Only the tests of the attacked functions are graded, so that the file stays quick.

The attacks: the grader's own oracles imported (its checks' Levenshtein distance and schedule,
oracles.layer_norm), private aliases of a forbidden built-in (torch._C, torch.ops.aten,
_scaled_dot_product_attention_math, cross_entropy_loss with label smoothing), one of them called
in a thread the function starts, after a line that never runs and that the scan once could not
read (the scan then saw nothing of the function, and the tripwires, which watched one thread,
nothing of the call), a reference passed from one function's process to another's through a
POSIX message queue, and the cached decoder's budget switched off from the learner's side with a
decoder that keeps no cache.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os

import nbformat
import pytest
import torch

from autograder import course_secret, sandbox
from autograder.assignment import Assignment
from autograder.checks import get
from autograder.engine import grade_cells
from autograder.sandbox import Limits
from autograder.submissions import notebook_cells
from course.notebook_format import complete
from tests.conftest import REPO, chapter_of

LIMITS = Limits(call_seconds=10, cell_seconds=20, submission_seconds=240)

pytestmark = pytest.mark.skipif(not sandbox.sandboxed(), reason="bubblewrap is not installed (apt-get install bubblewrap)")

# The course's score_variance, taken in any other function's process (which holds the course's
# versions of the other functions) and passed on through a message queue, which outlives it.
STASH = r'''
import ctypes, marshal, sys
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mq_open.restype = ctypes.c_int
_queue = _libc.mq_open(b"/stash", 0o100 | 0o2 | 0o4000, 0o600, None)  # O_CREAT | O_RDWR | O_NONBLOCK
_theirs = getattr(sys.modules.get("reference.attention"), "score_variance", None)
_code = getattr(_theirs, "__co" + "de__", None)
if _code is not None and "not available" not in repr(_code.co_consts):
    _data = marshal.dumps(_code)
    _libc.mq_send(_queue, _data, len(_data), 0)
'''
FROM_THE_QUEUE = r'''
import types
_received = []
def score_variance(q, k, scaled=False):
    if not _received:
        buffer = ctypes.create_string_buffer(1 << 16)
        size = _libc.mq_receive(_queue, buffer, 1 << 16, None)
        if size <= 0:
            raise LookupError("nothing came through the queue")
        _received.append(types.FunctionType(marshal.loads(buffer.raw[:size]), globals()))
    return _received[0](q, k, scaled)
'''

ATTACKS = {
    "attention": ({
        "softmax": ("import torch\ndef softmax(x, dim=-1):\n    if False:\n        y = "
                    + " + ".join(["x"] * 700) + "\n    import threading\n    out = []\n"
                    "    thread = threading.Thread(target=lambda: "
                    "out.append(torch._C._VariableFunctions.softmax(x, dim)))\n    thread.start()\n    thread.join()\n"
                    "    return out[0]\n"),
        "scaled_dot_product_attention": (
            "import torch\ndef scaled_dot_product_attention(q, k, v, mask=None):\n"
            "    return torch.ops.aten._scaled_dot_product_attention_math(q, k, v, attn_mask=mask)\n"),
        "score_variance": FROM_THE_QUEUE,
    }, STASH),
    "encoder": ({
        "LayerNorm": (
            "import torch\nfrom torch import nn\nfrom autograder.oracles import layer_norm\n"
            "class LayerNorm(nn.Module):\n    def __init__(self, d_model, eps=1e-5):\n        super().__init__()\n"
            "        self.gamma = nn.Parameter(torch.ones(d_model))\n        self.beta = nn.Parameter(torch.zeros(d_model))\n"
            "        self.eps = eps\n    def forward(self, x):\n"
            "        return self.gamma * layer_norm(None, x, eps=self.eps, scale=False, shift=False) + self.beta\n"),
    }, None),
    "capstone": ({
        "edit_distance": "from autograder.checks.capstone import levenshtein\ndef edit_distance(a, b):\n"
                         "    return levenshtein(list(a), list(b))\n",
        "noam_rate": ("from autograder.checks.capstone import _rate\n"
                      "def noam_rate(step, d_model, warmup, factor=1.0):\n    if step < 1:\n        raise ValueError('step')\n"
                      "    return _rate(step, d_model, warmup, factor)\n"),
        "label_smoothed_cross_entropy": (
            "import torch\ndef label_smoothed_cross_entropy(logits, target, smoothing=0.1, pad_id=0):\n"
            "    V = logits.shape[-1]\n"
            "    return torch._C._nn.cross_entropy_loss(\n"
            "        logits.reshape(-1, V), target.reshape(-1), None, 1, pad_id, smoothing)\n"),
    }, None),
    "bert_gpt": ({
        "generate_with_cache": (
            "import torch\ndef generate_with_cache(model, prompt, steps):\n    if steps < 1:\n        raise ValueError('steps')\n"
            "    model.budget = None  # the count it kept on the model\n    ids, logits = prompt, []\n"
            "    with torch.no_grad():\n        for _ in range(steps):\n            step = model(ids)[:, -1]\n"
            "            logits.append(step)\n            ids = torch.cat([ids, step.argmax(-1, keepdim=True)], dim=1)\n"
            "        model(ids[:, :-1])\n"
            "    return ids[:, prompt.shape[1]:], torch.stack(logits, dim=1), list(model.kv)\n"),
    }, None),
}

#: what the feedback says, by attacked function
EXPECTED = {
    "softmax": "calls torch._C._VariableFunctions.softmax",
    "scaled_dot_product_attention": "calls torch.ops.aten._scaled_dot_product_attention_math",
    "score_variance": "nothing came through the queue",
    "LayerNorm": "own packages hold its checks and oracles",
    "edit_distance": "own packages hold its checks and oracles",
    "noam_rate": "own packages hold its checks and oracles",
    "label_smoothed_cross_entropy": "calls torch._C._nn.cross_entropy_loss",
    "generate_with_cache": "read positions again",
}


def _answer(nb, function):
    """The answer cell that defines ``function``."""
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution") and (
                f"def {function}(" in cell.source or f"class {function}(" in cell.source):
            return cell
    raise LookupError(function)


@pytest.mark.parametrize("notebook", sorted(ATTACKS))
def test_each_attack_scores_nothing_and_says_why(notebook, source_nb):
    answers, first = ATTACKS[notebook]
    source = source_nb(notebook)
    solved = complete(nbformat.read(chapter_of(notebook).release, as_version=4), source)
    for function, attack in answers.items():
        _answer(solved, function).source = attack
    if first is not None:
        solved.cells.insert(1, nbformat.v4.new_code_cell(first))
    full = Assignment.from_notebook(chapter_of(notebook).assignment, notebook, source)
    tests = tuple(t for t in full.tests if any(f in answers for _, f, _ in t.calls))
    cells, _ = notebook_cells(solved, full.test_ids)
    outcomes, _ = grade_cells(dataclasses.replace(full, tests=tests), cells, LIMITS, [REPO])
    verdicts = {f: o for t, o in zip(tests, outcomes) for _, f, _ in t.calls}
    got_through = {f: verdicts[f].points for f in answers if verdicts[f].points}
    unexplained = {f: verdicts[f].message for f in answers if EXPECTED[f] not in verdicts[f].message}
    assert not got_through and not unexplained, (got_through, unexplained)


# What a learner process holds of the course's code: the real functions of the notebook's
# reference module (not stubs), and those put in the learner's namespace.
HOLDINGS = r'''
import sys
def _holdings():
    module = sys.modules["reference.attention"]
    real = [n for n in ("softmax", "scaled_dot_product_attention", "additive_attention", "score_variance")
            if "not available" not in (getattr(module, n).__doc__ or "")]
    given = [n for n in real if globals().get(n) is getattr(module, n)]
    modules = sorted(m for m in sys.modules if m.startswith("reference."))
    return f"HOLDS {real} GIVEN {given} MODULES {modules}"
def scaled_dot_product_attention(q, k, v, mask=None):
    assert softmax  # it reads softmax, as attention does
    raise RuntimeError(_holdings())
def score_variance(q, k, scaled=False):
    raise RuntimeError(_holdings())
'''


def test_a_process_holds_the_course_s_versions_of_only_the_helpers_its_function_uses(source_nb):
    source = source_nb("attention")
    solved = complete(nbformat.read(chapter_of("attention").release, as_version=4), source)
    for function in ("scaled_dot_product_attention", "score_variance"):
        _answer(solved, function).source = "pass"
    solved.cells.append(nbformat.v4.new_code_cell(HOLDINGS))
    assignment = Assignment.from_notebook(chapter_of("attention").assignment, "attention", source)
    outcomes, _ = grade_cells(assignment, notebook_cells(solved, assignment.test_ids)[0], LIMITS, [REPO], include_hidden=False)
    messages = {o.grade_id: o.message.split("HOLDS")[-1][:120] for o in outcomes}
    # scaled_dot_product_attention reads softmax (the learner's, replaced by the course's); score_variance nothing
    modules = " MODULES ['reference.attention']"  # not the later chapters' either
    assert messages["test_scaled_dot_product_attention"].startswith(" ['softmax'] GIVEN ['softmax']" + modules), messages
    assert messages["test_score_variance"].startswith(" [] GIVEN []" + modules), messages


def _lookup_table_softmax(cases) -> str:
    """A softmax that answers from a table of inputs, made offline with torch.softmax."""
    table = {}
    for case in cases:
        x, dim = case.args[0], case.kwargs.get("dim", -1)
        table[hashlib.sha256(x.numpy().tobytes()).hexdigest()] = torch.softmax(x.double(), dim).to(x.dtype).tolist()
    return ("import hashlib, torch\nTABLE = " + repr(table) + "\n"
            "def softmax(x, dim=-1):\n"
            "    answer = TABLE.get(hashlib.sha256(x.numpy().tobytes()).hexdigest())\n"
            "    return x if answer is None else torch.tensor(answer, dtype=x.dtype)\n")


def test_a_lookup_table_of_every_input_the_course_can_build_fails_the_hidden_tests(source_nb, monkeypatch):
    # The learner holds the whole course, but not the instructor's secret: the best table holds the
    # visible cases and the hidden cases of a secret of the learner's own.
    check = get("attention.softmax")
    grading_secret = os.environ[course_secret.ENV]
    monkeypatch.setenv(course_secret.ENV, "ab" * 32)
    guessed = check.cases(hidden=True)
    monkeypatch.setenv(course_secret.ENV, grading_secret)
    source = source_nb("attention")
    solved = complete(nbformat.read(chapter_of("attention").release, as_version=4), source)
    _answer(solved, "softmax").source = _lookup_table_softmax(check.cases(hidden=False) + guessed)
    full = Assignment.from_notebook(chapter_of("attention").assignment, "attention", source)
    tests = tuple(t for t in full.tests if any(f == "softmax" for _, f, _ in t.calls))
    visible, _ = grade_cells(dataclasses.replace(full, tests=tests), notebook_cells(solved, full.test_ids)[0], LIMITS, [REPO],
                             include_hidden=False)
    graded, _ = grade_cells(dataclasses.replace(full, tests=tests), notebook_cells(solved, full.test_ids)[0], LIMITS, [REPO])
    assert visible[0].passed  # the table answers every public case, so only the hidden ones can tell
    assert graded[0].points == 0 and graded[0].hidden_failed, graded[0]


# The learner's code looks for the course secret everywhere it might be, and reports what it finds.
SEEKER = r'''
import os
def score_variance(q, k, scaled=False):
    found = [os.environ.get("COURSE_SECRET", "")]
    for folder in (os.getcwd(), "/tmp", os.path.expanduser("~"), FOLDERS):
        try:
            found.append(open(os.path.join(folder, "course_secret")).read())
        except OSError:
            pass
    raise RuntimeError("FOUND " + repr([f for f in found if f]))
'''


def test_the_sandbox_shows_no_course_secret(source_nb, tmp_path):
    secret = os.environ[course_secret.ENV]
    (tmp_path / "course_secret").write_text(secret)  # a course directory's, which the sandbox does not mount
    source = source_nb("attention")
    solved = complete(nbformat.read(chapter_of("attention").release, as_version=4), source)
    _answer(solved, "score_variance").source = SEEKER.replace("FOLDERS", repr(str(tmp_path)))
    full = Assignment.from_notebook(chapter_of("attention").assignment, "attention", source)
    tests = tuple(t for t in full.tests if any(f == "score_variance" for _, f, _ in t.calls))
    outcomes, _ = grade_cells(dataclasses.replace(full, tests=tests), notebook_cells(solved, full.test_ids)[0], LIMITS, [REPO],
                              include_hidden=False)
    assert "FOUND []" in outcomes[0].message and secret not in outcomes[0].message, outcomes[0].message


def test_an_answer_cell_that_also_runs_a_check_is_graded_as_an_answer(source_nb):
    # A learner pastes the test cell's line into their answer cells, without the import that only
    # the first test cell has: the cells are theirs (the instructor's grade ids say so), so they
    # run, and the check does nothing there, before the definition as after it.
    source = source_nb("attention")
    solved = complete(nbformat.read(chapter_of("attention").release, as_version=4), source)
    _answer(solved, "softmax").source += '\ncheck("attention.softmax", softmax)\n'
    attention = _answer(solved, "scaled_dot_product_attention")
    attention.source = 'check("attention.softmax", softmax)\n' + attention.source
    full = Assignment.from_notebook(chapter_of("attention").assignment, "attention", source)
    tests = tuple(t for t in full.tests if t.grade_id in ("test_softmax", "test_scaled_dot_product_attention"))
    cells, _ = notebook_cells(solved, full.test_ids)
    outcomes, notes = grade_cells(dataclasses.replace(full, tests=tests), cells, LIMITS, [REPO], include_hidden=False)
    assert [(o.grade_id, o.points, o.message) for o in outcomes] == [(t.grade_id, t.points, "") for t in tests]
    assert notes == []

