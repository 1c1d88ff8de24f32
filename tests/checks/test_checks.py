"""The checks can fail: solutions pass, stubs fail, every catalogued mistake is caught and named."""
from __future__ import annotations

import dataclasses
import importlib

import pytest
import torch
import torch.nn.functional as F

from autograder import oracles
from autograder.checks import chapter_checks
from autograder.framework import CheckFailed, ModuleResult, Raised, call_learner, rule_names, run_check
from course.notebook_format import check_calls, definitions, graded_cells
from tests.conftest import NOTEBOOKS

GRADED = [(nb, fn) for nb in NOTEBOOKS for fn in chapter_checks(nb)]
MISTAKES = [m for name in NOTEBOOKS for m in importlib.import_module(f"tests.mistakes.{name}").MISTAKES]


def test_every_chapter_has_checks_and_a_catalogue():
    assert NOTEBOOKS, "no instructor notebooks found"
    for notebook in NOTEBOOKS:
        assert chapter_checks(notebook), f"autograder/checks/{notebook}.py has no CHECKS"
        assert importlib.import_module(f"tests.mistakes.{notebook}").MISTAKES


@pytest.mark.parametrize("notebook, function", GRADED)
@pytest.mark.parametrize("hidden", [False, True], ids=["visible", "hidden"])
def test_reference_passes(notebook, function, hidden):
    reference = importlib.import_module(f"reference.{notebook}")
    line = run_check(chapter_checks(notebook)[function], getattr(reference, function), hidden=hidden)
    assert line.startswith(f"✓ {function}")


@pytest.mark.parametrize("notebook, function", GRADED)
def test_released_stub_fails(notebook, function, release_nb):
    stub = definitions(release_nb(notebook))[function]
    for hidden in (False, True):
        with pytest.raises(CheckFailed, match="not implemented yet"):
            run_check(chapter_checks(notebook)[function], stub, hidden=hidden)


@pytest.mark.parametrize("notebook, function", GRADED)
def test_solution_cell_of_the_release_notebook_is_the_reference(notebook, function, source_nb):
    """The instructor notebook's own definitions pass too (not just the generated module)."""
    fn = definitions(source_nb(notebook))[function]
    run_check(chapter_checks(notebook)[function], fn, hidden=True)


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_each_graded_function_has_one_test_cell_with_visible_and_hidden_checks(notebook, source_nb):
    nb = source_nb(notebook)
    seen = {}
    for cell in graded_cells(nb, "test"):
        calls = check_calls(cell.source)
        assert calls, f"test cell {cell.metadata['nbgrader']['grade_id']} calls no check"
        visible = cell.source.split("### BEGIN HIDDEN TESTS")[0]
        assert check_calls(visible) and not any(h for _, _, h in check_calls(visible))
        hidden_part = cell.source.split("### BEGIN HIDDEN TESTS")[1]
        assert any(h for _, _, h in check_calls(hidden_part)), "hidden tests must run the hidden cases"
        for check_id, fn, _ in calls:
            assert check_id == f"{notebook}.{fn}", f"{check_id} is called on {fn}"
            seen[fn] = cell.metadata["nbgrader"]["points"]
    assert sorted(seen) == sorted(chapter_checks(notebook)), "every check is graded, and only those"
    answers = {c.metadata["nbgrader"]["grade_id"] for c in graded_cells(nb, "solution")}
    assert answers == set(seen), "each graded function has its own answer cell named after it"


@pytest.mark.parametrize("mistake", MISTAKES, ids=[f"{m.check_id}: {m.name}" for m in MISTAKES])
def test_catalogued_mistake_is_caught_and_diagnosed(mistake):
    notebook, _, function = mistake.check_id.partition(".")
    check = chapter_checks(notebook)[function]
    runs = [True] if mistake.hidden_only else [False] if mistake.visible_only else [False, True]
    if mistake.hidden_only:
        run_check(check, mistake.fn, hidden=False)  # the visible cases really miss it
    for hidden in runs:
        with pytest.raises(CheckFailed) as failure:
            run_check(check, mistake.fn, hidden=hidden)
        assert mistake.diagnosis in str(failure.value), (
            f"{mistake.name}: expected the diagnosis {mistake.diagnosis!r}, got:\n{failure.value}"
        )
        if hidden == runs[0]:  # the learner's own run: a hidden case of another shape may trip an earlier rule
            assert_caught_by_its_rule(mistake, failure.value)
        for other in _named_besides(mistake, str(failure.value)):
            assert _indistinguishable(check, mistake.fn, other.fn), (
                f"{mistake.name}: the message also names another mistake, {other.name!r} "
                f"({other.diagnosis!r}), which returns other values:\n{failure.value}"
            )


def assert_caught_by_its_rule(mistake, failure: CheckFailed) -> None:
    """The rule the catalogue states for ``mistake`` is the one whose failure the learner got."""
    assert failure.rule == mistake.rule, (
        f"{mistake.name}: the catalogue says the rule {mistake.rule!r} catches it, but {failure.rule!r} did:\n{failure}"
    )


def test_a_mistake_caught_by_another_rule_than_its_entry_states_fails():
    mistake = next(m for m in MISTAKES if m.check_id == "attention.softmax" and m.rule == "values")
    notebook, _, function = mistake.check_id.partition(".")
    with pytest.raises(CheckFailed) as failure:
        run_check(chapter_checks(notebook)[function], mistake.fn)
    assert_caught_by_its_rule(mistake, failure.value)
    with pytest.raises(AssertionError, match="the catalogue says the rule 'finite' catches it, but 'values' did"):
        assert_caught_by_its_rule(dataclasses.replace(mistake, rule="finite"), failure.value)


def test_each_catalogued_mistake_states_a_rule_its_check_has():
    unknown = [(m.check_id, m.name, m.rule) for m in MISTAKES
               if m.rule not in rule_names(chapter_checks(m.check_id.partition(".")[0])[m.check_id.partition(".")[2]])]
    assert not unknown, unknown


def _named_besides(mistake, message: str) -> list:
    """The other catalogued mistakes of the same function whose diagnosis ``message`` quotes (one
    diagnosis held in the other is the same mistake, said more or less precisely)."""
    return [o for o in MISTAKES if o.check_id == mistake.check_id and o.diagnosis in message
            and o.diagnosis not in mistake.diagnosis and mistake.diagnosis not in o.diagnosis]


def _indistinguishable(check, fn, other) -> bool:
    """Two functions no case of the check tells apart: a message may then name both."""
    return all(_same(call_learner(fn, case), call_learner(other, case)) for case in check.cases(hidden=True))


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.nan_to_num(), b.nan_to_num())
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, Raised) and isinstance(b, Raised):
        return a.type == b.type
    if isinstance(a, ModuleResult) and isinstance(b, ModuleResult):
        return _same(a.output, b.output) and a.attributes.keys() == b.attributes.keys() and all(
            _same(a.attributes[n], b.attributes[n]) for n in a.attributes)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("notebook, function", GRADED)
def test_at_least_five_mistakes_per_function(notebook, function):
    count = sum(m.check_id == f"{notebook}.{function}" for m in MISTAKES)
    assert count >= 5, f"{notebook}.{function} has only {count} catalogued mistakes"


# ---------------------------------------------------------------------------------------------
# The oracle toolkit itself
# ---------------------------------------------------------------------------------------------


def _training_cases():
    """(check id, case, reference function) for every case a check runs in training mode."""
    found = []
    for notebook in NOTEBOOKS:
        reference = importlib.import_module(f"reference.{notebook}")
        for function, check in chapter_checks(notebook).items():
            for case in check.cases(hidden=True):
                if case.train:
                    found.append((f"{notebook}.{function}", case, getattr(reference, function)))
    return found


TRAINING = _training_cases()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("check_id, case, module", TRAINING, ids=[f"{c}: {case.label[:60]}" for c, case, _ in TRAINING])
def test_dropout_masks_are_those_nn_dropout_draws(check_id, case, module, dtype, monkeypatch):
    """oracles.Dropout reproduces, bit for bit and in the same order, every mask the learner's
    nn.Dropout modules draw in a training-mode case, without touching the global generator."""
    # The same case in either dtype: a module whose weights are float64 runs in float64.
    case = dataclasses.replace(
        case, args=tuple(a.to(dtype) if torch.is_tensor(a) and a.is_floating_point() else a for a in case.args),
        state={k: v.to(dtype) for k, v in case.state.items()})
    drawn = []
    original = F.dropout

    def recording(input, p=0.5, training=True, inplace=False):
        # ones_like keeps input's layout, so the draw is the one F.dropout(input) would make.
        scaled = original(torch.ones_like(input), p, training)
        if training and 0 < p:
            drawn.append((input.shape, input.dtype, p, input.is_contiguous(), scaled))
        return input * scaled

    monkeypatch.setattr(F, "dropout", recording)
    result = call_learner(module, case)
    assert not isinstance(result, Raised), result
    assert bool(drawn) == (case.init["dropout"] > 0), f"{check_id}: dropout={case.init['dropout']}, {len(drawn)} masks"
    stream = oracles.Dropout(0.5, dtype)
    for shape, got_dtype, p, contiguous, scaled in drawn:
        assert got_dtype == dtype and contiguous, "the emulation assumes contiguous tensors of the case's dtype"
        assert torch.equal(stream.at(p).mask(shape), scaled.double()), f"{check_id}: a mask of shape {tuple(shape)} differs"


def _eval_module_cases(check_id: str):
    notebook, _, function = check_id.partition(".")
    check = chapter_checks(notebook)[function]
    return [c for c in check.cases(hidden=True) if c.state is not None and not c.train and c.method == "forward"]


def test_functional_attention_agrees_with_nn_multiheadattention():
    cases = _eval_module_cases("multihead.MultiHeadAttention")
    assert cases
    for case in cases:
        h = case.init["h"]
        q, k, v = (t.double() for t in case.args)
        am, kpm = case.kwargs.get("attn_mask"), case.kwargs.get("key_padding_mask")
        if am is not None and not am.any(-1).all():
            continue  # PyTorch leaves a query that sees nothing as NaN; the course gives it zero weights
        torch_layer = oracles.torch_mha(oracles.double_state(case.state), q.shape[-1], h)
        with torch.no_grad():
            expected, weights = torch_layer(q, k, v, attn_mask=oracles.torch_attn_mask(am, h), key_padding_mask=kpm,
                                            need_weights=True, average_attn_weights=False)
        out, ours = oracles.multi_head_attention(case.state, q, k, v, h=h, attn_mask=am, key_padding_mask=kpm)
        torch.testing.assert_close(out, expected, rtol=1e-9, atol=1e-10)
        torch.testing.assert_close(ours, weights, rtol=1e-9, atol=1e-10)


def test_functional_feed_forward_and_layer_norm_agree_with_pytorch():
    assert _eval_module_cases("encoder.PositionwiseFeedForward") and _eval_module_cases("encoder.LayerNorm")
    for case in _eval_module_cases("encoder.PositionwiseFeedForward"):
        x = case.args[0].double()
        with torch.no_grad():
            expected = oracles.torch_feed_forward(case.state, case.init["d_model"], case.init["d_ff"])(x)
        torch.testing.assert_close(oracles.feed_forward(case.state, x), expected, rtol=1e-9, atol=1e-10)
    for case in _eval_module_cases("encoder.LayerNorm"):
        x, eps = case.args[0].double(), case.init.get("eps", 1e-5)
        with torch.no_grad():
            expected = oracles.torch_layer_norm(case.state, x.shape[-1], eps)(x)
        torch.testing.assert_close(oracles.layer_norm(case.state, x, eps=eps), expected, rtol=1e-9, atol=1e-10)
        # The spelled-out formula, which the mistakes vary, is the same computation.
        torch.testing.assert_close(oracles.layer_norm(case.state, x, eps=eps, scale=True, swap_affine=False,
                                                      dims=[-1], naive_variance=False, unbiased=False) * 1.0,
                                   expected, rtol=1e-9, atol=1e-10)


def test_functional_layers_agree_with_pytorch():
    from autograder.checks.decoder import layer_forward
    from autograder.checks.encoder import encoder_layer

    assert _eval_module_cases("encoder.EncoderLayer") and _eval_module_cases("decoder.DecoderLayer")
    for case in _eval_module_cases("encoder.EncoderLayer"):
        i, x, mask = case.init, case.args[0].double(), case.kwargs.get("key_padding_mask")
        with torch.no_grad():
            expected = oracles.torch_encoder_layer(case.state, i["d_model"], i["h"], i["d_ff"])(x, src_key_padding_mask=mask)
            ours = encoder_layer(case.state, x, h=i["h"], key_padding_mask=mask)
        torch.testing.assert_close(ours, expected, rtol=1e-9, atol=1e-10)
    for case in _eval_module_cases("decoder.DecoderLayer"):
        i, (x, memory) = case.init, (t.double() for t in case.args)
        masks = {k: case.kwargs.get(k) for k in ("tgt_mask", "tgt_key_padding_mask", "memory_key_padding_mask")}
        layer = oracles.torch_decoder_layer(oracles.double_state(case.state), i["d_model"], i["h"], i["d_ff"])
        with torch.no_grad():
            expected = layer(x, memory, **(masks | {"tgt_mask": oracles.torch_attn_mask(masks["tgt_mask"], i["h"])}))
            ours = layer_forward(case.state, x, memory, h=i["h"], **masks)
        torch.testing.assert_close(ours, expected, rtol=1e-9, atol=1e-10)


def test_pytorch_oracles_are_built_without_touching_the_global_generator():
    g = torch.Generator().manual_seed(0)
    state = oracles.decoder_layer_state(g, 8, 16)
    before = torch.get_rng_state()
    oracles.torch_decoder(oracles.stack_state(oracles.decoder_layer_state, g, 2, 8, 16), 2, 8, 2, 16)
    oracles.torch_encoder_layer(oracles.encoder_layer_state(g, 8, 16), 8, 2, 16)
    oracles.torch_mha(state, 8, 2, "cross_attn.")
    oracles.torch_feed_forward(state, 8, 16, "feed_forward.")
    assert torch.equal(torch.get_rng_state(), before)
