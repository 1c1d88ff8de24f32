"""Locating the mistakes nobody catalogued in chapter 8's beam_search and length_batches.

beam_search is located within its first step only, on the case of beam size 1, and only when the first token it
chose is wrong: that step starts from the exercise's own [bos_id] with score 0, while every later step decodes the
hypotheses the learner kept, chosen in Python where the trace sees no value (a wrong choice shows first as a right
computation on a wrong hypothesis, on a line that is not at fault). length_batches is not located at all: its
permutation comes from a generator the learner may seed in any way from seed and epoch, so no value of the course's
computation is one a right learner must make, and a batch cut at the wrong place shows only on the line that
appends to it, never on the condition that cut it.

The wrong implementations here are not in ``tests/mistakes/capstone.py``. Each message must quote the faulty line,
or say nothing of where the values part, never point at a right line.
"""
from __future__ import annotations

import pytest
import torch

from autograder.checks import get
from tests.checks.test_locating import _faulty_line, _message

#: what the sentences that locate a value (or the tensors a crash was given) begin with
LOCATING = ("Up to line", "Beyond your inputs", "The tensors", "What `", "and your function returns that value")


def _normalised(tokens, score, alpha):
    return score / ((5 + len(tokens) - 1) / 6) ** alpha


# ---------------------------------------------------------------------------------------------
# beam_search: wrong values within the first step, located at their line
# ---------------------------------------------------------------------------------------------


def beam_search_costs_kept_as_scores(model, src, beam_size, max_len, bos_id, eos_id, alpha=0.0):
    memory = model.encode(src)
    live, finished = [([bos_id], 0.0)], []
    for _ in range(max_len):
        if not live:
            break
        rows = [torch.log_softmax(model.decode(memory, torch.tensor([tokens]))[0, -1].double(), dim=-1)
                for tokens, _ in live]
        held = torch.tensor([score for _, score in live], dtype=torch.float64)
        scores = held.unsqueeze(1) - torch.stack(rows)  # FAULT
        V = scores.shape[1]
        best = scores.flatten().topk(min(beam_size, scores.numel()))
        survivors = []
        for score, index in zip(best.values.tolist(), best.indices.tolist()):
            tokens = live[index // V][0] + [index % V]
            (finished if index % V == eos_id else survivors).append((tokens, score))
        live = survivors
    tokens, score = max(finished or live, key=lambda hyp: _normalised(*hyp, alpha))
    return torch.tensor(tokens), _normalised(tokens, score, alpha)


def beam_search_batched_softmax_over_hypotheses(model, src, beam_size, max_len, bos_id, eos_id, alpha=0.0):
    memory = model.encode(src)
    live, finished = [([bos_id], 0.0)], []
    for _ in range(max_len):
        if not live:
            break
        ys = torch.tensor([tokens for tokens, _ in live])  # (k, t)
        logits = model.decode(memory.expand(len(live), -1, -1), ys)[:, -1].double()  # (k, V)
        log_probs = torch.log_softmax(logits, dim=0)  # FAULT
        scores = torch.tensor([score for _, score in live], dtype=torch.float64)[:, None] + log_probs
        V = scores.shape[1]
        values, indices = scores.flatten().topk(min(beam_size, scores.numel()))
        survivors = []
        for score, index in zip(values.tolist(), indices.tolist()):
            row, token = divmod(index, V)
            (finished if token == eos_id else survivors).append((live[row][0] + [token], score))
        live = survivors
    tokens, score = max(finished or live, key=lambda hyp: _normalised(*hyp, alpha))
    return torch.tensor(tokens), _normalised(tokens, score, alpha)


LOCATED = [beam_search_costs_kept_as_scores, beam_search_batched_softmax_over_hypotheses]


@pytest.mark.parametrize("fn", LOCATED, ids=[f.__name__ for f in LOCATED])
def test_a_wrong_value_of_the_first_step_is_located_at_its_line(fn):
    message = _message("capstone.beam_search", fn)
    line = _faulty_line(fn)
    marker = "the first value after that which does not is"
    assert marker in message, message
    parting = message.split(marker)[-1]
    assert line in parting or ("on the same line" in parting and line in message), message
    assert "beam_size=1" in message.split("\n")[0], message  # the greedy case, the first to fail


# ---------------------------------------------------------------------------------------------
# beam_search: what cannot be located is said nothing about
# ---------------------------------------------------------------------------------------------


def beam_search_wrong_parent(model, src, beam_size, max_len, bos_id, eos_id, alpha=0.0):
    memory = model.encode(src)
    live, finished = [([bos_id], 0.0)], []
    for _ in range(max_len):
        if not live:
            break
        rows = [torch.log_softmax(model.decode(memory, torch.tensor([tokens]))[0, -1].double(), dim=-1)
                for tokens, _ in live]
        scores = torch.tensor([score for _, score in live], dtype=torch.float64).unsqueeze(1) + torch.stack(rows)
        V = scores.shape[1]
        best = scores.flatten().topk(min(beam_size, scores.numel()))
        survivors = []
        for score, index in zip(best.values.tolist(), best.indices.tolist()):
            tokens = live[index % len(live)][0] + [index % V]  # the parent's row is index // V
            (finished if index % V == eos_id else survivors).append((tokens, score))
        live = survivors
    tokens, score = max(finished or live, key=lambda hyp: _normalised(*hyp, alpha))
    return torch.tensor(tokens), _normalised(tokens, score, alpha)


def beam_search_listed_extensions_scored_as_costs(model, src, beam_size, max_len, bos_id, eos_id, alpha=0.0):
    memory = model.encode(src)
    live, finished = [([bos_id], 0.0)], []
    for _ in range(max_len):
        if not live:
            break
        candidates = []
        for tokens, score in live:
            log_probs = torch.log_softmax(model.decode(memory, torch.tensor([tokens]))[0, -1].double(), dim=-1)
            for v, log_p in enumerate(log_probs):
                candidates.append((tokens + [v], score - float(log_p)))  # a cost, in Python: the trace sees no value
        candidates.sort(key=lambda c: -c[1])
        live = []
        for tokens, score in candidates[:beam_size]:
            (finished if tokens[-1] == eos_id else live).append((tokens, score))
    tokens, score = max(finished or live, key=lambda hyp: _normalised(*hyp, alpha))
    return torch.tensor(tokens), _normalised(tokens, score, alpha)


def beam_search_sorted_ascending(model, src, beam_size, max_len, bos_id, eos_id, alpha=0.0):
    memory = model.encode(src)
    live, finished = [([bos_id], 0.0)], []
    for _ in range(max_len):
        if not live:
            break
        rows = [torch.log_softmax(model.decode(memory, torch.tensor([tokens]))[0, -1].double(), dim=-1)
                for tokens, _ in live]
        scores = (torch.tensor([score for _, score in live], dtype=torch.float64)[:, None] + torch.stack(rows)).flatten()
        V = scores.numel() // len(live)
        order = scores.argsort()[:beam_size]  # an index is no number the trace can call wrong
        survivors = []
        for index in order.tolist():
            tokens = live[index // V][0] + [index % V]
            (finished if index % V == eos_id else survivors).append((tokens, scores[index].item()))
        live = survivors
    tokens, score = max(finished or live, key=lambda hyp: _normalised(*hyp, alpha))
    return torch.tensor(tokens), _normalised(tokens, score, alpha)


UNLOCATED = [beam_search_wrong_parent, beam_search_listed_extensions_scored_as_costs, beam_search_sorted_ascending]


@pytest.mark.parametrize("fn", UNLOCATED, ids=[f.__name__ for f in UNLOCATED])
def test_a_wrong_choice_made_in_python_is_not_blamed_on_a_right_line(fn):
    message = _message("capstone.beam_search", fn)
    assert "returned" in message and not any(sentence in message for sentence in LOCATING), message


def test_a_crash_on_right_tensors_in_the_first_step_says_so():
    def beam_search_log_softmax_over_a_missing_axis(model, src, beam_size, max_len, bos_id, eos_id, alpha=0.0):
        memory = model.encode(src)
        logits = model.decode(memory, torch.tensor([[bos_id]]))[0, -1].double()
        return torch.log_softmax(logits, dim=1), 0.0

    message = _message("capstone.beam_search", beam_search_log_softmax_over_a_missing_axis)
    assert "raised IndexError" in message
    assert "The tensors `torch.log_softmax` was given on that line are right (the logits of the first token" in message


def test_only_the_greedy_case_has_stages():
    check = get("capstone.beam_search")
    assert [bool(check.stages(case)) for case in check.cases(False)] == [c.tag == "greedy" for c in check.cases(False)]


# ---------------------------------------------------------------------------------------------
# length_batches: not located
# ---------------------------------------------------------------------------------------------


def length_batches_seeded_otherwise_budget_without_the_new_example(lengths, max_tokens, seed=0, epoch=0):
    if any(n > max_tokens for n in lengths):
        raise ValueError("an example is longer than max_tokens")
    g = torch.Generator().manual_seed(7919 * seed + 31 * epoch + 1)  # any seed from seed and epoch will do
    order = torch.randperm(len(lengths), generator=g).tolist()
    order.sort(key=lambda i: lengths[i])
    batches, batch, longest = [], [], 0
    for i in order:
        if batch and len(batch) * max(longest, lengths[i]) > max_tokens:  # FAULT: the batch with i has one more
            batches.append(batch)
            batch, longest = [], 0
        batch.append(i)
        longest = max(longest, lengths[i])
    if batch:
        batches.append(batch)
    return [batches[k] for k in torch.randperm(len(batches), generator=g).tolist()]


def test_length_batches_is_not_located():
    # Its values depend on the learner's own seeding, and a batch cut wrong shows on the line that appends to it.
    assert not get("capstone.length_batches").traced
    message = _message("capstone.length_batches", length_batches_seeded_otherwise_budget_without_the_new_example)
    assert "more than max_tokens" in message and not any(sentence in message for sentence in LOCATING), message


def noam_rate_warmup_to_the_power_one(step, d_model, warmup, factor=1.0):
    if step < 1:
        raise ValueError(f"step must be at least 1, got {step}")
    if warmup < 1:
        raise ValueError(f"warmup must be at least 1, got {warmup}")
    a = step ** -0.5  # the computation's second step, made first: 1 at step 1, a number any step may equal
    b = step / warmup ** 1.0  # the faulty line
    return factor * (d_model ** -0.5) * min(a, b)


def test_numbers_made_in_another_order_than_the_computations_are_not_blamed_nor_compared_as_if_in_order():
    message = _message("capstone.noam_rate", noam_rate_warmup_to_the_power_one)
    assert "a = step ** -0.5" not in message, message  # right, though out of the computation's order
    assert "`b = step / warmup ** 1.0" in message, message
    # which step b stands for is not known: the message does not compare it with the scale as the "next step"
    assert "The computation's next step is" not in message, message
    assert "step * warmup ** -1.5" in message.split("`b = step / warmup ** 1.0")[1], message
