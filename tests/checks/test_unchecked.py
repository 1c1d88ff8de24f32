"""What a line depends on that the record of values cannot check (:mod:`autograder.unchecked`): the Python
values it reads (a size, an index, an id), where they are set, and the conditions it runs under.

The wrong implementations here are the course's solutions with one line changed where the mistake makes no
wrong tensor of its own: a condition, an int that steers a loop, an id. Without this sentence their messages
quoted the line where a value first went wrong, or where the code crashed, but not the line at fault.
"""
from __future__ import annotations

import importlib
import inspect
import json
import textwrap

import pytest

from autograder.checks import get
from autograder.framework import CheckFailed, run_check
from autograder.unchecked import MAX_QUOTED, loop_around, unchecked
from harness import wire
from harness.calls import Case, call_learner, remember_cell
from harness.observe import Observer


def _mutant(chapter: str, function: str, old: str, new: str):
    """The course's solution of ``function`` with ``old`` made ``new``, defined in a notebook cell of its own."""
    reference = importlib.import_module(f"reference.{chapter}")
    source = textwrap.dedent(inspect.getsource(getattr(reference, function)))
    assert source.count(old) == 1, old
    cell = f"<cell {function} {old} -> {new}>"
    text = source.replace(old, new)
    remember_cell(cell, text)
    namespace = dict(vars(reference), __name__="__main__")
    exec(compile(text, cell, "exec"), namespace)  # noqa: S102
    return namespace[function]


def _changed_line(chapter: str, function: str, old: str, new: str) -> str:
    """The mutant's changed line, without its comment, as a message quotes it."""
    source = textwrap.dedent(inspect.getsource(getattr(importlib.import_module(f"reference.{chapter}"), function)))
    return next(line for line in source.replace(old, new).splitlines() if new in line).split("  #")[0].strip()


def _mutant_message(chapter: str, function: str, old: str, new: str) -> str:
    """The message the chapter's check gives the mutant of ``function`` (:func:`_mutant`)."""
    return _message(f"{chapter}.{function}", _mutant(chapter, function, old, new))


def _message(check_id: str, fn) -> str:
    with pytest.raises(CheckFailed) as failure:
        run_check(get(check_id), fn)
    return str(failure.value)


# ---------------------------------------------------------------------------------------------
# Mistakes that make no wrong tensor of their own, each quoted in the message
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("chapter, function, old, new", [
    # a wrong id: the first wrong value is the list it is appended to
    ("bert_gpt", "bpe_train", "256 + k, [], 0", "256 - k, [], 0"),
    # a condition: the pair is merged where it should not be, on the line that appends
    ("bert_gpt", "bpe_train", "ids[i + 1]) == best", "ids[i + 1]) != best"),
    # an int that steers a loop
    ("bert_gpt", "bpe_encode", "i += 2", "i += 3"),
    # the pairs counted wrong: a later sequence that a merge of the wrong pair left as it was agrees with the bytes
    # again, and the dict of counts is set from the pairs of a loop: one step further back
    ("bert_gpt", "bpe_train", "zip(ids, ids[1:])", "zip(ids[1:], ids)"),
    # a loop's start: each row of the table is compared, its counter is not
    ("capstone", "edit_distance", "enumerate(b, start=1)", "enumerate(b, start=2)"),
])
def test_a_wrong_python_value_or_condition_is_quoted_with_the_line_that_went_wrong(chapter, function, old, new):
    message = _mutant_message(chapter, function, old, new)
    said = message.split("also depends on what the record of your values cannot check:")
    assert len(said) == 2, message
    assert f"`{_changed_line(chapter, function, old, new)}`" in said[1], message


def test_a_python_crash_quotes_the_condition_that_let_the_index_run_past_the_end():
    message = _mutant_message("bert_gpt", "bpe_train", "while i < len(ids):", "while i <= len(ids):")
    assert "raised IndexError" in message, message
    assert "the condition on line" in message and "`while i <= len(ids):`, while which it runs" in message, message


@pytest.mark.parametrize("function", ["bpe_train", "bpe_encode"])
def test_a_loop_that_never_ends_is_stopped_where_it_runs_and_its_counter_is_quoted(function):
    fn = _mutant("bert_gpt", function, "i += 2", "i -= 2")
    with pytest.raises(CheckFailed) as failure:
        run_check(get(f"bert_gpt.{function}"), fn, call_seconds=1.0)
    message = str(failure.value)
    # wherever the alarm found it, the same words: the loop, its condition's counter and the line that moves it
    assert "did not finish within 1 s" in message, message
    assert f"(stopped in the loop on line {6 if function == 'bpe_encode' else 17} of your `{function}`, " \
           "`while i < len(ids):`)" in message, message
    assert "`i -= 2`" in message, message


def test_a_crash_before_any_value_was_made_still_quotes_what_the_line_depends_on():
    # on the empty text the learner's function crashes before it holds any number: nothing to compare
    message = _mutant_message("bert_gpt", "bpe_train", "if not counts:", "if counts:")
    assert "raised ValueError" in message and "`if counts:`, which must be false for it to run" in message, message


@pytest.mark.parametrize("new", ["end = start", "end = start + k.shape[3]"])
def test_a_crash_in_a_method_of_an_untraced_class_quotes_the_line_that_set_what_it_reads(new):
    # KVCache's case is judged untraced, so only the class's source comes back; the write crashes on a slice
    # whose end, an int, another line computed wrong
    message = _mutant_message("hardware", "KVCache", "end = start + k.shape[2]", new)
    assert "raised RuntimeError" in message and "self.keys[:, :, start:end] = k" in message, message
    said = message.split("also depends on what the record of your values cannot check:")
    assert len(said) == 2, message
    assert f"`end`, set on line 13, `{new}`" in said[1], message


def test_a_crash_followed_back_to_several_lines_quotes_what_the_earliest_of_them_reads():
    # the size read from the wrong axis makes two wrong tables, both quoted; the int itself only shows as what the
    # earlier of them reads
    message = _mutant_message("hardware", "apply_rope", "d = x.shape[-1]", "d = x.shape[-2]")
    assert "raised RuntimeError" in message and "comes from line" in message, message
    said = message.split("also depends on what the record of your values cannot check:")
    assert len(said) == 2, message
    assert "`d`, set on line 3, `d = x.shape[-2]`" in said[1], message


def test_a_valid_case_sent_to_a_raise_is_told_what_the_guard_depends_on_even_untraced():
    message = _mutant_message("capstone", "length_batches", "if n > max_tokens", "if n >= max_tokens")
    assert "the condition that sent your function to that raise, line" in message, message
    assert "`too_long`, set on line" in message and "if n >= max_tokens]`" in message, message


def test_a_crash_on_right_tensors_quotes_the_condition_that_chose_the_line():
    message = _mutant_message("bert_gpt", "sample_next", "top_k < scores.shape[-1]", "top_k < scores.shape[-2]")
    assert "The tensors `topk` was given on that line are right" in message, message
    assert "`if 0 < top_k < scores.shape[-2]:`, under which it runs" in message, message


def test_a_step_that_never_happens_quotes_the_line_that_never_ran_and_its_condition():
    # the merge's condition never holds: bpe_encode returns the bytes as they were, a step short, no value wrong
    message = _mutant_message("bert_gpt", "bpe_encode", "ids[i] == a and", "ids[i] != a and")
    assert "`merged.append(new_id)`, never ran on this case: it runs only when the condition on line" in message, message
    assert f"`{_changed_line('bert_gpt', 'bpe_encode', 'ids[i] == a and', 'ids[i] != a and')}`, holds" in message, message


def test_a_crash_followed_back_to_its_line_quotes_the_early_return_that_should_have_left():
    message = _mutant_message("bert_gpt", "sample_next", "temperature == 0 or top_k == 1", "temperature == 0 and top_k == 1")
    assert "comes from line" in message, message
    assert "`if temperature == 0 and top_k == 1:`, which must be false for it to run" in message, message


@pytest.mark.parametrize("chapter, function, old, new", [
    ("bert_gpt", "mask_tokens", "if not 0 < rate <= 1:", "if not 0 < rate <= 2:"),
    ("prerequisites", "receptive_field", "len(strides) != n_layers or", "len(strides) != n_layers and"),
])
def test_a_refusal_that_did_not_happen_quotes_the_conditions_of_the_learners_raises(chapter, function, old, new):
    message = _mutant_message(chapter, function, old, new)
    said = message.split("ran on this case" if "ran on this case" in message else "did not run on this case")
    assert len(said) == 2 and "returned" in said[0], message
    assert f"`{_changed_line(chapter, function, old, new)}`" in said[1], message


def test_a_wrong_value_made_beside_the_culprit_on_its_line_is_followed_back_too():
    # (1 - eps) * nll + eps * uniform: the culprit named is eps * uniform (made from a right value); the nll it is
    # added to comes from a wrong line above
    message = _mutant_message("capstone", "label_smoothed_cross_entropy", ".squeeze(-1)  # (...,): -log p_y", ".squeeze(-2)")
    assert "It is made from what line" in message and ".squeeze(-2)" in message.split("It is made from")[1], message


def test_a_reduction_over_an_axis_of_size_one_is_no_right_value_though_it_equals_its_input():
    # mask (B, 1, T_k).any(dim=-2) is the mask itself: equal to an input, yet not what the computation made there
    message = _mutant_message("attention", "scaled_dot_product_attention", "mask.any(dim=-1, keepdim=True)",
                              "mask.any(dim=-2, keepdim=True)")
    assert "visible = mask.any(dim=-2, keepdim=True)" in message.split("It is made from")[-1], message


@pytest.mark.parametrize("parameter, shows", [
    ("temperature", "sample_next` drew"),  # a wrong value
    ("top_p", "raised ValueError"),  # a crash: its own refusal of the default it was given
])
def test_a_default_of_the_def_line_that_the_case_relies_on_is_named(parameter, shows):
    message = _mutant_message("bert_gpt", "sample_next", f"{parameter}: float = 1.0", f"{parameter}: float = 2.0")
    assert shows in message, message
    assert f"Your `def` line gives `{parameter}` the default 2.0 where the exercise's is 1.0" in message, message


def test_a_rule_about_an_argument_quotes_the_lines_that_use_it_even_untraced():
    # length_batches has no stages (its permutation is the learner's to draw): its source is sent all the same
    assert not get("capstone.length_batches").traced
    message = _mutant_message("capstone", "length_batches", "1_000_003 * seed + epoch", "1_000_003 * seed")
    assert "Your lines that use `seed` or `epoch`: line" in message, message
    assert "`g = torch.Generator().manual_seed(1_000_003 * seed)`" in message, message


def test_a_tensor_that_a_line_only_renamed_is_quoted_where_it_was_renamed():
    # `centred = x` makes no value for the record to see: the first wrong value is its square, a line later
    message = _mutant_message("encoder", "LayerNorm", "centred = x - mean", "centred = x")
    assert "`centred`, set on line" in message and "`centred = x`" in message, message


def test_an_attribute_a_method_reads_is_quoted_where_the_class_sets_it():
    message = _mutant_message("positional", "PositionalEmbedding", "sinusoidal_encoding(max_len, d_model)",
                              "sinusoidal_encoding(d_model, max_len)")
    assert "`self.pe`, set on line" in message, message
    assert "sinusoidal_encoding(d_model, max_len), persistent=False)`" in message, message


def test_a_crash_inside_a_counting_mode_is_the_operations_not_the_courses_code():
    # the course counts a cached decoder's reads with a dispatch mode, which runs inside torch's operations
    message = _mutant_message("bert_gpt", "generate_with_cache", "start += T_new", "start -= T_new")
    assert "raised IndexError" in message, message
    assert "Reads" not in message and "__torch_dispatch__" not in message, message
    assert "`start -= T_new`" in message, message


@pytest.mark.parametrize("chapter, function, old, new, what", [
    # a rule about one value of the result, judged by counts where no stage applies: the lines that make it
    ("bert_gpt", "mask_tokens", "torch.full_like(ids, -100)", "torch.full_like(ids, 100)", "the labels"),
    ("bert_gpt", "mask_tokens", "chosen & (what >= 0.8) & (what < 0.9)", "chosen & (what >= 0.85) & (what < 0.9)",
     "the inputs"),  # one step further back: the line that sets what a line that writes the inputs reads
    # a score made by a function the learner's function defines: its return is quoted
    ("capstone", "beam_search", "score / ((5 + len(tokens) - 1) / 6) ** alpha",
     "score * ((5 + len(tokens) - 1) / 6) ** alpha", "the score"),
    # a shape: the return that makes it
    ("bert_gpt", "generate_with_cache", "torch.stack(logits, dim=1)", "torch.stack(logits, dim=2)", "the logits"),
])
def test_a_wrong_value_of_the_result_no_stage_locates_quotes_the_lines_that_make_it(chapter, function, old, new, what):
    message = _mutant_message(chapter, function, old, new)
    said = message.split(f"Your lines that make {what}: ")
    assert len(said) == 2, message
    assert f"`{_changed_line(chapter, function, old, new)}`" in said[1], message


def test_only_the_return_that_ran_is_quoted_and_the_beams_score_is_worked_out():
    message = _mutant_message("bert_gpt", "sample_next", "torch.multinomial(probs, 1,", "torch.multinomial(probs, 2,")
    assert "`return torch.multinomial(probs, 2, generator=generator).squeeze(-1)`" in message, message
    assert "argmax" not in message.split("Your lines that make the ids: ")[1], message  # the greedy return did not run
    message = _mutant_message("capstone", "beam_search", "[([bos_id], 0.0)]", "[([bos_id], 1.0)]")
    # the sum and the length penalty the score is made of, for the right hypothesis the learner found
    assert "the sum of its tokens' log-probabilities, -1.31255, divided by lp(Y)" in message, message
    assert "`live: list[tuple[list[int], float]] = [([bos_id], 1.0)]`" in message, message


def test_a_crash_on_a_case_no_stage_fits_quotes_the_tensors_the_line_reads():
    # the statistical cases' values are too large to keep: what the crashing line reads is unchecked, and a line
    # that sets it later, outside any loop, is not quoted
    message = _mutant_message("bert_gpt", "sample_next", "values[:, -1:]", "values[:, 1:]")
    assert "`kth`, set on line" in message and "`kth = scores.topk(top_k, dim=-1).values[:, 1:]`" in message, message
    assert "masked_fill(drop" not in message, message


def test_the_wrong_exception_on_an_invalid_case_quotes_the_line_that_raised_it():
    message = _mutant_message("capstone", "length_batches", "example {too_long[0]}", "example {too_long[1]}")
    assert "raised IndexError" in message and "{too_long[1]}" in message, message


# ---------------------------------------------------------------------------------------------
# The sentence itself, on a learner's source
# ---------------------------------------------------------------------------------------------


SOURCE = '''\
def f(x, mask=None, scaled=True):
    n = x.shape[0]
    total, seen = [], {}
    for i in range(n):
        if mask is None:
            y = x[i] * 2
        elif i % 2:
            y = x[i] + n
        else:
            y = x[i] - n
            total.append(y)
        self.kept = y
        seen[i] = y
    if scaled:
        total = [t / n for t in total]
    return total
'''
HELD = [("f", name, "python") for name in ("n", "total", "seen", "i", "self")] + [("f", "y", "tensor")]


def _said(line: int, **kwargs) -> str:
    return unchecked([("f", 1, SOURCE)], HELD, "f", line, **kwargs)


def test_the_python_values_a_line_reads_are_quoted_with_the_lines_that_set_them():
    said = _said(8)  # y = x[i] + n
    assert "`n`, set on line 2, `n = x.shape[0]`" in said and "`i`, set on line 4, `for i in range(n):`" in said, said
    assert "`y`" not in said  # a tensor: the record compares it
    assert "mask is None" not in said  # the caller chose that branch, not the learner's values
    assert "the condition on line 7, `elif i % 2:`, under which it runs" in said, said


def test_the_branch_and_the_loop_a_line_runs_in_are_said_as_they_are():
    said = _said(10)
    assert "`elif i % 2:`, which must be false for it to run" in said, said
    # a bare parameter steers a branch the caller chose
    assert "if scaled" not in _said(15)


def test_what_a_line_changes_is_no_suspect_of_its_own_and_attributes_are_not_variables():
    said = _said(11, made="total")  # total.append(y): the value blamed is total itself
    assert "`total`" not in said, said
    assert "line 12" not in _said(13)  # self.kept = y sets no variable a later line reads
    assert "line 13" not in _said(13)  # seen[i] = y: the line itself is not one of the lines that set seen for it


def test_a_line_anywhere_in_a_loop_is_in_that_loop():
    inside = (4, 5, 6, 7, 8, 10, 11, 12, 13)  # line 9 is an `else:`, where no code runs
    assert all(loop_around([("f", 1, SOURCE)], "f", line) == (4, "for i in range(n):") for line in inside)
    assert loop_around([("f", 1, SOURCE)], "f", 2) is None and loop_around([("f", 1, SOURCE)], "f", 15) is None


def test_checked_variables_arguments_and_unreadable_sources_give_nothing():
    assert "`n`" not in _said(8, checked={"n"})
    assert _said(2) == ""  # reads only the argument x
    assert unchecked([("f", 1, "def f(:\n")], HELD, "f", 2) == ""
    assert unchecked([("g", 1, SOURCE)], HELD, "f", 8) == ""
    assert unchecked([("f", 1, "x = (" * 300 + ")" * 300)], HELD, "f", 1) == ""


def test_the_lines_that_use_an_argument_and_the_defaults_of_the_def_line():
    from autograder.unchecked import default_differs, readers

    said = readers([("f", 1, SOURCE)], "f", ("mask", "scaled"))
    assert "line 5, `if mask is None:`" in said and "line 14, `if scaled:`" in said, said
    assert default_differs([("f", 1, SOURCE)], "f", {"scaled": False}, set()) != ""
    assert default_differs([("f", 1, SOURCE)], "f", {"scaled": False}, {"scaled"}) == ""  # the case gives it
    assert default_differs([("f", 1, SOURCE)], "f", {"scaled": True, "mask": None}, set()) == ""


def test_a_line_that_sets_a_value_after_its_reader_outside_a_loop_is_not_quoted():
    straight = "def f(x):\n    n = 2\n    y = x * n\n    n = 3\n    return y\n"
    assert "line 2" in unchecked([("f", 1, straight)], [("f", "n", "python")], "f", 3)
    assert "line 4" not in unchecked([("f", 1, straight)], [("f", "n", "python")], "f", 3)
    looped = "def f(x):\n    n = 1\n    for _ in x:\n        y = x * n\n        n = n + 1\n    return y\n"
    assert "line 5, `n = n + 1`" in unchecked([("f", 1, looped)], [("f", "n", "python")], "f", 4)


MADE = """\
def f(x, k):
    def scale(v):
        return v / k
    if k == 0:
        return x.argmax(dim=-1), None
    w = x.softmax(dim=-1)
    out = w * 2
    return out.sum(dim=-1), scale(out)
"""


def test_the_lines_that_make_a_value_of_the_result():
    from autograder.unchecked import WHOLE_RESULT, made_on

    first = made_on([("f", 1, MADE)], "f", 0, "the sums")
    assert first.startswith("Your lines that make the sums: line 5, `return x.argmax(dim=-1), None`"), first
    assert "line 6, `w = x.softmax(dim=-1)`" in first and "line 7, `out = w * 2`" in first, first
    ran = made_on([("f", 1, MADE)], "f", 1, "the scaled values", returned_on=8)
    assert "line 5" not in ran and "in `scale`, line 3, `return v / k`" in ran, ran
    assert made_on([("f", 1, MADE)], "f", WHOLE_RESULT, "the result", returned_on=8).count("line 8") == 1
    assert made_on([("f", 1, MADE)], "f", 3, "a fourth value") == ""  # no return has one
    assert made_on([("g", 1, MADE)], "f", 0, "the sums") == ""


def test_at_most_a_few_lines_are_quoted():
    many = "def f(x):\n" + "".join(f"    a{k} = {k}\n" for k in range(10)) + \
        "    return x + " + " + ".join(f"a{k}" for k in range(10)) + "\n"
    held = [("f", f"a{k}", "python") for k in range(10)]
    said = unchecked([("f", 1, many)], held, "f", 12)
    assert said.count(", set on line") == MAX_QUOTED, said


# ---------------------------------------------------------------------------------------------
# What crosses the wire
# ---------------------------------------------------------------------------------------------


def test_the_source_and_the_kinds_of_the_variables_cross_the_wire_within_bounds():
    def scaled(x):
        n = x.shape[-1]
        return x / n

    import torch

    seen = Observer(trace=True)
    call_learner(scaled, Case("x", (torch.randn(2, 3),)), observer=seen)
    sent = json.loads(json.dumps(wire.encode_observed(seen.observed())))
    back = wire.decode_observed(sent)
    assert back.code and back.code[0][0].endswith("scaled") and "n = x.shape[-1]" in back.code[0][2]
    assert (back.code[0][0], "n", "python") in back.held and (back.code[0][0], "x", "tensor") in back.held
    for broken in ({**sent, "code": [["f", -1, "def f(): pass"]]}, {**sent, "code": "def f(): pass"},
                   {**sent, "held": [["f", "n", "int"]]}, {**sent, "held": [["f", "n"]]},
                   {**sent, "code": [["f", 1, "x"]] * 100}, {**sent, "ran": [["f", [-1]]]}, {**sent, "ran": [["f"]]}):
        with pytest.raises(wire.WireError):
            wire.decode_observed(broken)


def test_a_source_that_does_not_tokenize_is_left_out_and_the_call_goes_on(tmp_path):
    # a part loaded from a notebook: the file its code names holds the notebook's JSON, not its Python
    from harness.observe import source_of

    path = tmp_path / "parts.ipynb"
    path.write_text('class Net: [\n  "def forward(self, x):\\n",\n', encoding="utf-8")
    namespace: dict = {}
    exec(compile("class Net:\n    def forward(self, x):\n        return x\n", str(path), "exec"), namespace)  # noqa: S102
    assert source_of(namespace["Net"]) == ()
    assert source_of(namespace["Net"].forward) in ((), (("Net.forward", 2, '  "def forward(self, x):\\n",\n'),))
