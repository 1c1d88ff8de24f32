"""Feedback blames the right thing: the learner's failing helper, their own line, their own frames.

* A function that fails because a helper the learner wrote (their softmax, their LayerNorm) is
  wrong is told so first, in the notebook; the grader, which uses the course's helpers, notes
  when a function passed only thanks to that.
* A line number is always the learner's, with that line shown; an error raised inside the
  course's code names the course's function separately.
* In a notebook, a failed check shows the diagnosis and the learner's frames, not the grader's.
"""
from __future__ import annotations

import inspect
import re
import subprocess
from types import SimpleNamespace

import pytest
from nbclient import NotebookClient

import reference.attention
from autograder import CheckFailed, check, messages
from autograder.assignment import Assignment
from autograder.checks import chapter_checks, get
from autograder.engine import Result, grade_cells
from autograder.framework import remember_cell, run_check
from autograder.outputs.feedback import feedback_html
from autograder.sandbox import Limits
from autograder.source.helpers import helpers_in_source, helpers_of, substitution_notes
from course.layout import SOLUTIONS
from course.notebook_format import cell_role, complete, write_notebook
from course.tools.messages import WORDS
from tests.conftest import PYTHON, REPO
from tests.mistakes import attention as attention_mistakes

AUTOGRADER = REPO / "autograder"

# The layer of chapter 4 calling chapter 3's attention with the padding mask in the place of
# its attention mask: the shapes only clash inside the course's code.
# A float mask reaches the course's MultiHeadAttention, whose `~key_padding_mask` then raises there.
FLOAT_PADDING_MASK = "self.self_attn(x, x, x, key_padding_mask=None if key_padding_mask is None else key_padding_mask.float())"

LAYERNORM_UNBIASED = '''
class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        variance = x.var(dim=-1, keepdim=True)  # unbiased: divides by d_model - 1
        return self.gamma * (x - mean) / torch.sqrt(variance + self.eps) + self.beta
'''

SDPA_UNSCALED = '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)
    return weights @ v, weights
'''

SOFTMAX_STUB = "def softmax(x, dim=-1):\n    raise NotImplementedError()\n"


def _renamed(fn, name: str) -> str:
    """A catalogued mistake's source, under the name the exercise gives the function."""
    return inspect.getsource(fn).replace(f"def {fn.__name__}(", f"def {name}(", 1)


def _answers(notebook: str, source_nb) -> list[str]:
    """The instructor's exported and answer cells: a learner's notebook that solved everything."""
    return [c.source for c in source_nb(notebook).cells if c.cell_type == "code" and cell_role(c) in ("export", "solution")]


def _namespace(cells: list[str]) -> dict:
    """Run cells as a notebook kernel does: one namespace, named __main__, each cell's text kept."""
    namespace: dict = {"__name__": "__main__"}
    for index, source in enumerate(cells, 1):
        remember_cell(f"<cell {index}>", source)
        exec(compile(source, f"<cell {index}>", "exec"), namespace)  # noqa: S102
    return namespace


def _failure(action) -> str:
    with pytest.raises(CheckFailed) as failed:
        action()
    return str(failed.value)


# --------------------------------------------------------------------------------------------
# A failing helper, in the notebook
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("function", ["scaled_dot_product_attention", "additive_attention"])
def test_a_failing_helper_is_named_before_the_diagnosis(function, source_nb):
    ns = _namespace(_answers("attention", source_nb) + [_renamed(attention_mistakes.softmax_no_keepdim, "softmax")])
    check_id = f"attention.{function}"
    original = _failure(lambda: run_check(get(check_id), ns[function]))
    message = _failure(lambda: check(check_id, ns[function]))
    assert message.startswith("your `softmax`, used here, fails its own test: fix it first")
    assert "class grader judges each function with the course's version of the others" in message
    assert message.endswith(original), "the check's own diagnosis follows the lead"


def test_a_wrong_layernorm_is_blamed_in_the_layer_that_builds_it(source_nb):
    ns = _namespace(_answers("encoder", source_nb) + [LAYERNORM_UNBIASED])
    message = _failure(lambda: check("encoder.EncoderLayer", ns["EncoderLayer"]))
    assert message.startswith("your `LayerNorm`, used here, fails its own test: fix it first")


def test_a_right_helper_is_not_blamed(source_nb):
    ns = _namespace(_answers("attention", source_nb) + [SDPA_UNSCALED])
    message = _failure(lambda: check("attention.scaled_dot_product_attention", ns["scaled_dot_product_attention"]))
    assert "used here" not in message
    assert message == _failure(
        lambda: run_check(get("attention.scaled_dot_product_attention"), ns["scaled_dot_product_attention"])
    )


def test_an_unwritten_helper_keeps_its_own_message(source_nb):
    ns = _namespace(_answers("attention", source_nb) + [SOFTMAX_STUB])
    message = _failure(lambda: check("attention.scaled_dot_product_attention", ns["scaled_dot_product_attention"]))
    assert "not implemented yet" in message and "used here" not in message


def test_an_operation_torch_lacks_for_its_input_is_not_an_unwritten_function(source_nb):
    """torch raises NotImplementedError for an operation with no kernel for its dtype (bincount of floats,
    which a load-balancing loss given its arguments in the wrong order meets): the learner's code ran, and
    is told what raised, where; only a raise statement of the learner's is an unwritten function."""
    wrong_order = _namespace(_answers("one_block", source_nb) + [
        "def load_balancing_loss(router_probs, expert_index, n_experts):\n"
        "    counts = torch.bincount(router_probs.flatten(), minlength=n_experts)\n"
        "    return counts.sum()\n"])
    message = _failure(lambda: run_check(get("one_block.load_balancing_loss"), wrong_order["load_balancing_loss"]))
    assert "not implemented yet" not in message
    assert "raised NotImplementedError" in message and "torch.bincount(router_probs.flatten()" in message
    to_do = _namespace(["def softmax(x, dim=-1):\n    raise NotImplementedError('to do')\n"])
    assert "not implemented yet" in _failure(lambda: run_check(get("attention.softmax"), to_do["softmax"]))


def test_helpers_are_the_learners_graded_functions_the_code_loads(source_nb):
    attention = _namespace(_answers("attention", source_nb))
    graded = chapter_checks("attention")
    assert set(helpers_of(attention["scaled_dot_product_attention"], graded)) == {"softmax"}
    assert helpers_of(attention["score_variance"], graded) == {}
    # through an ungraded function of the learner's
    via = _namespace(_answers("attention", source_nb) + [
        "def _weights(scores):\n    return softmax(scores, dim=-1)\n",
        "def scaled_dot_product_attention(q, k, v, mask=None):\n    w = _weights(q @ k.transpose(-2, -1))\n    return w @ v, w\n",
    ])
    assert set(helpers_of(via["scaled_dot_product_attention"], graded)) == {"softmax"}
    # the course's own softmax, imported, is not the learner's to fix
    attention["softmax"] = reference.attention.softmax
    assert helpers_of(attention["scaled_dot_product_attention"], graded) == {}
    # a class: what its methods load
    encoder = _namespace(_answers("encoder", source_nb))
    assert set(helpers_of(encoder["EncoderLayer"], chapter_checks("encoder"))) == {"LayerNorm", "PositionwiseFeedForward"}


def test_helpers_in_source_read_the_submission_without_running_it():
    cells = [
        "import torch\ndef softmax(x, dim=-1):\n    return x\n",
        "def _w(s):\n    return softmax(s)\n",
        "def scaled_dot_product_attention(q, k, v, mask=None):\n    w = _w(q)\n    return w @ v, w\n",
        "def additive_attention(q, k, v, W_q, W_k, w_v, mask=None):\n    return torch.softmax(q, -1), q\n",
        "def broken(:\n",
    ]
    graded = {"softmax", "scaled_dot_product_attention", "additive_attention"}
    assert helpers_in_source(cells, "scaled_dot_product_attention", graded) == ["softmax"]
    assert helpers_in_source(cells, "additive_attention", graded) == []
    assert helpers_in_source(cells, "missing", graded) == []


def test_substitution_notes_only_for_a_pass_that_needed_the_course_helper():
    tests = [
        SimpleNamespace(calls=(("attention.softmax", "softmax", False),)),
        SimpleNamespace(calls=(("attention.scaled_dot_product_attention", "scaled_dot_product_attention", False),
                               ("attention.scaled_dot_product_attention", "scaled_dot_product_attention", True))),
    ]
    cells = ["def softmax(x, dim=-1):\n    return x\n",
             "def scaled_dot_product_attention(q, k, v, mask=None):\n    return softmax(q), q\n"]
    passed, failed = SimpleNamespace(passed=True), SimpleNamespace(passed=False)
    asked = []

    def fails_hidden(check_id, function, hidden, helper):
        asked.append((function, hidden, helper))
        return not hidden

    assert substitution_notes(tests, [passed, passed], cells, True, fails_hidden) == []
    assert asked == [], "nothing is graded again when no helper failed"
    assert substitution_notes(tests, [failed, passed], cells, True, lambda *a: True) == []
    notes = substitution_notes(tests, [failed, passed], cells, True, fails_hidden)
    assert notes == ["`scaled_dot_product_attention` was graded with the course's `softmax`, because yours fails "
                     "its own test; with your `softmax` it fails some hidden cases."]
    notes = substitution_notes(tests, [failed, passed], cells, True, lambda *a: False)
    assert notes[0].endswith("in your notebook it fails until `softmax` is fixed.")

    def out_of_time(*args):
        raise TimeoutError

    assert substitution_notes(tests, [failed, passed], cells, True, out_of_time) == []


FFN_WITHOUT_RELU = '''
class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.w_2(self.dropout(self.w_1(x)))
'''


def _what_the_helpers_say(source_nb) -> dict[str, str]:
    """The notes and leads about a learner's helpers, produced for real, in the language spoken now."""
    tests = [SimpleNamespace(calls=(("attention.softmax", "softmax", False),)),
             SimpleNamespace(calls=(("attention.scaled_dot_product_attention", "scaled_dot_product_attention", False),
                                    ("attention.scaled_dot_product_attention", "scaled_dot_product_attention", True)))]
    cells = ["def softmax(x, dim=-1):\n    return x\n",
             "def scaled_dot_product_attention(q, k, v, mask=None):\n    return softmax(q), q\n"]
    outcomes = [SimpleNamespace(passed=False), SimpleNamespace(passed=True)]
    said = {"hidden": substitution_notes(tests, outcomes, cells, True, lambda c, f, hidden, h: not hidden)[0],
            "notebook": substitution_notes(tests, outcomes, cells, True, lambda *a: False)[0]}
    sdpa = "attention.scaled_dot_product_attention"
    ns = _namespace(_answers("attention", source_nb) + [_renamed(attention_mistakes.softmax_no_keepdim, "softmax")])
    said["one"] = _failure(lambda: check(sdpa, ns["scaled_dot_product_attention"]))
    ns = _namespace(_answers("encoder", source_nb) + [LAYERNORM_UNBIASED, FFN_WITHOUT_RELU])
    said["two"] = _failure(lambda: check("encoder.EncoderLayer", ns["EncoderLayer"]))
    ns = _namespace(_answers("attention", source_nb) + [SOFTMAX_STUB])
    said["unwritten"] = _failure(lambda: check(sdpa, ns["scaled_dot_product_attention"]))
    said["unwritten, alone"] = _failure(lambda: run_check(get(sdpa), ns["scaled_dot_product_attention"]))
    return said


def test_what_is_said_of_a_helper_reads_in_chinese_and_the_english_is_unchanged(source_nb):
    english = _what_the_helpers_say(source_nb)
    assert english["notebook"] == NOTE and english["hidden"] == NOTE.replace(
        "in your notebook it fails until `softmax` is fixed.", "with your `softmax` it fails some hidden cases.")
    assert english["two"].startswith(
        "your `LayerNorm` and `PositionwiseFeedForward`, used here, fail their own tests: fix them first. Your notebook "
        "runs `EncoderLayer` with your own `LayerNorm` and `PositionwiseFeedForward`, so their mistake shows up here "
        "too. The class grader judges each function with the course's version of the others, so there one mistake "
        "costs its own points only.\nWhat this test saw with your `LayerNorm` and `PositionwiseFeedForward`:\n")
    messages.set_language("zh")
    try:
        chinese = _what_the_helpers_say(source_nb)
    finally:
        messages.set_language(None)
    # the leads, not the check's own diagnosis that follows them (it quotes what torch raised)
    spoken = [chinese["hidden"], chinese["notebook"], *chinese["one"].split("\n")[:2], *chinese["two"].split("\n")[:2]]
    assert [(s, WORDS.findall(re.sub(r"`[^`]*`", "", s))) for s in spoken if WORDS.search(re.sub(r"`[^`]*`", "", s))] == []
    assert chinese["two"].startswith("这里用到的你的 `LayerNorm` 和 `PositionwiseFeedForward` 没有通过它们自己的测试")
    # an unwritten helper keeps the check's own message in either language: what decides it is no English phrase
    assert english["unwritten"] == english["unwritten, alone"] and chinese["unwritten"] == chinese["unwritten, alone"]
    assert "尚未实现" in chinese["unwritten"]
    assert english == _what_the_helpers_say(source_nb), "the English is what it was before Chinese was spoken"


# --------------------------------------------------------------------------------------------
# A failing helper, in the grader and in `python -m autograder check`
# --------------------------------------------------------------------------------------------


def _no_keepdim_notebook(source_nb, release_nb):
    nb = complete(release_nb("attention"), source_nb("attention"))
    answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "softmax")
    answer.source = _renamed(attention_mistakes.softmax_no_keepdim, "softmax")
    return nb


NOTE = ("`scaled_dot_product_attention` was graded with the course's `softmax`, because yours fails its own test; "
        "in your notebook it fails until `softmax` is fixed.")


def test_local_check_notes_a_pass_that_needed_the_course_helper(tmp_path, source_nb, release_nb):
    path = tmp_path / "attention.ipynb"
    write_notebook(_no_keepdim_notebook(source_nb, release_nb), path)
    done = subprocess.run([PYTHON, "-m", "autograder", "check", str(path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert f"note: {NOTE}" in done.stdout, done.stdout + done.stderr
    assert "note: `additive_attention` was graded with the course's `softmax`" in done.stdout
    assert "score_variance` was graded" not in done.stdout, "it does not use softmax"
    assert re.search(r"pass\s+test_scaled_dot_product_attention", done.stdout)


def test_class_feedback_notes_a_pass_that_needed_the_course_helper(source_nb, release_nb):
    nb = _no_keepdim_notebook(source_nb, release_nb)
    cells = [c.source for c in nb.cells if c.cell_type == "code"]
    assignment = Assignment.from_notebook("ch02_attention", "attention", source_nb("attention"))
    outcomes, notes = grade_cells(assignment, cells, Limits(), [REPO / SOLUTIONS])
    assert NOTE in notes
    page = feedback_html(assignment, Result("learner", assignment.name, assignment.notebook, outcomes, notes))
    assert "graded with the course&#x27;s `softmax`, because yours fails its own test" in page


# --------------------------------------------------------------------------------------------
# Line numbers are the learner's
# --------------------------------------------------------------------------------------------


def _encoder_with_float_mask(source_nb) -> list[str]:
    cells = _answers("encoder", source_nb)
    layer = next(i for i, c in enumerate(cells) if "class EncoderLayer" in c)
    assert "self.self_attn(x, x, x, key_padding_mask=key_padding_mask)" in cells[layer]
    cells[layer] = cells[layer].replace("self.self_attn(x, x, x, key_padding_mask=key_padding_mask)", FLOAT_PADDING_MASK)
    return cells


def _learners_line(cells: list[str], text: str) -> tuple[int, str]:
    for source in cells:
        for number, line in enumerate(source.splitlines(), 1):
            if text in line:
                return number, line.strip()
    raise AssertionError(text)


def test_an_error_inside_the_course_code_points_at_the_learners_call(source_nb):
    cells = _encoder_with_float_mask(source_nb)
    ns = _namespace(cells)
    message = _failure(lambda: check("encoder.EncoderLayer", ns["EncoderLayer"]))
    number, line = _learners_line(cells, FLOAT_PADDING_MASK)
    assert (f"raised inside the course's `MultiHeadAttention.forward`, called from your `EncoderLayer.forward`, "
            f"line {number} of its cell: {line}") in message


def test_an_error_in_the_learners_own_code_shows_their_line(source_nb):
    cells = _answers("attention", source_nb) + [_renamed(attention_mistakes.softmax_no_keepdim, "softmax")]
    message = _failure(lambda: check("attention.softmax", _namespace(cells)["softmax"]))
    number, line = _learners_line(cells[-1:], "e.sum(dim=dim)")
    assert f"in your `softmax`, line {number} of its cell: {line}" in message


def test_the_grader_quotes_the_same_line(tmp_path, source_nb, release_nb):
    nb = complete(release_nb("encoder"), source_nb("encoder"))
    answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "EncoderLayer")
    answer.source = answer.source.replace("self.self_attn(x, x, x, key_padding_mask=key_padding_mask)", FLOAT_PADDING_MASK)
    path = tmp_path / "encoder.ipynb"
    write_notebook(nb, path)
    done = subprocess.run([PYTHON, "-m", "autograder", "check", str(path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    number, line = _learners_line([answer.source], FLOAT_PADDING_MASK)
    assert (f"raised inside the course's `MultiHeadAttention.forward`, called from your `EncoderLayer.forward`, "
            f"line {number} of its cell: {line}") in done.stdout, done.stdout + done.stderr


# --------------------------------------------------------------------------------------------
# What a notebook shows
# --------------------------------------------------------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _grader_lines() -> set[str]:
    """Distinctive lines of the grader's own source, which a learner's traceback must not show."""
    return {
        line.strip()
        for path in [*AUTOGRADER.glob("*.py"), *AUTOGRADER.glob("checks/*.py")]
        for line in path.read_text(encoding="utf-8").splitlines()
        if len(line.strip()) >= 25
    }


def test_a_notebook_shows_the_diagnosis_and_only_the_learners_frames(tmp_path, source_nb, release_nb):
    nb = complete(release_nb("attention"), source_nb("attention"))
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    cells["softmax"].source = _renamed(attention_mistakes.softmax_no_keepdim, "softmax")
    nb.cells = nb.cells[: nb.cells.index(cells["test_scaled_dot_product_attention"]) + 1]
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()

    def shown(grade_id: str) -> str:
        errors = [o for o in cells[grade_id].outputs if o.output_type == "error"]
        assert len(errors) == 1 and errors[0].ename == "CheckFailed"
        text = ANSI.sub("", "\n".join(errors[0].traceback))
        assert "autograder" not in text, text
        leaked = [line for line in _grader_lines() if line in text]
        assert not leaked, leaked
        assert re.search(r"Cell In\[\d+\], line \d+, in softmax\n\s+return e / e\.sum\(dim=dim\)", text), text
        return text

    assert shown("test_softmax").startswith("CheckFailed: `softmax` raised RuntimeError")
    assert "keepdim=True" in shown("test_softmax")
    attention = shown("test_scaled_dot_product_attention")
    assert attention.startswith("CheckFailed: your `softmax`, used here, fails its own test: fix it first"), attention
    assert re.search(r"in scaled_dot_product_attention\n", attention), "the learner's frames, outermost first"


def test_outside_ipython_the_failure_is_an_ordinary_exception(source_nb):
    import traceback

    ns = _namespace(_answers("attention", source_nb) + [_renamed(attention_mistakes.softmax_no_keepdim, "softmax")])
    with pytest.raises(CheckFailed) as failed:
        check("attention.softmax", ns["softmax"])
    printed = "".join(traceback.format_exception(failed.value))
    assert "Traceback (most recent call last)" in printed and "keepdim=True" in printed
    assert failed.value._render_traceback_()[0].startswith("CheckFailed: `softmax` raised RuntimeError")
