"""Chapter 7's uncatalogued mistakes located at their line: ``sample_next``, ``mask_tokens``, ``GPTBlock`` and
``generate_with_cache``, and where the checks of the functions that draw or decode say nothing rather than mislead.

The wrong implementations here are not in ``tests/mistakes/bert_gpt.py``; each marks its faulty line with
``# FAULT``, which the message must quote as the first whose value does not agree.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

from reference.attention import scaled_dot_product_attention
from reference.bert_gpt import generate_with_cache as reference_generate
from reference.decoder import subsequent_mask
from reference.encoder import LayerNorm, PositionwiseFeedForward
from reference.multihead import MultiHeadAttention, merge_heads, split_heads
from tests.checks.test_locating import _message, assert_located_at_its_line

#: the sentences that locate a wrong value or a crash (autograder.locate)
LOCATED = ("the first value after that which does not", "the first that should is", "your values agree with",
           "is not what your function returns", "was given there comes from", "was given on that line are right")
#: the same sentences in Chinese (autograder/locale/zh_CN)
LOCATED_ZH = ("你的值与参考计算", "第一个不一致的值", "第一个本应一致的值", "你的函数返回的并不是这个值", "的值来自",
              "的张量是对的")

# ---------------------------------------------------------------------------------------------
# sample_next
# ---------------------------------------------------------------------------------------------


def sample_greedy_argmax_of_everything(logits, temperature=1.0, top_k=0, top_p=1.0, generator=None):
    if temperature < 0:
        raise ValueError(f"temperature must be at least 0, got {temperature}")
    if top_k < 0:
        raise ValueError(f"top_k must be at least 0, got {top_k}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if temperature == 0 or top_k == 1:
        return logits.argmax()  # FAULT
    scores = logits.double() / temperature
    if 0 < top_k < scores.shape[-1]:
        kth = scores.topk(top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1:
        probs, order = torch.softmax(scores, dim=-1).sort(dim=-1, descending=True)
        drop_sorted = probs.cumsum(dim=-1) - probs >= top_p
        scores = scores.masked_fill(torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted), float("-inf"))
    return torch.multinomial(torch.softmax(scores, dim=-1), 1, generator=generator).squeeze(-1)


def sample_kth_of_the_wrong_end(logits, temperature=1.0, top_k=0, top_p=1.0, generator=None):
    if temperature < 0 or top_k < 0 or not 0 < top_p <= 1:
        raise ValueError(f"temperature, top_k or top_p out of range: {temperature}, {top_k}, {top_p}")
    if temperature == 0 or top_k == 1:
        return logits.argmax(dim=-1)
    scores = logits.double() / temperature
    if 0 < top_k < scores.shape[-1]:
        kth = scores.topk(top_k, dim=-1).values[:, 1:]  # meant the last column
        scores = scores.masked_fill(scores < kth, float("-inf"))
    return torch.multinomial(torch.softmax(scores, dim=-1), 1, generator=generator).squeeze(-1)


# ---------------------------------------------------------------------------------------------
# mask_tokens
# ---------------------------------------------------------------------------------------------


def mask_chooses_above_rate(ids, mask_id, vocab_size, special_ids, generator, rate=0.15):
    if not 0 < rate <= 1:
        raise ValueError(f"rate must be in (0, 1], got {rate}")
    special = sorted(set(special_ids))
    ordinary = torch.tensor([i for i in range(vocab_size) if i not in special], dtype=ids.dtype)
    is_special = torch.isin(ids, torch.tensor(special, dtype=ids.dtype))
    chosen = (torch.rand(ids.shape, generator=generator) > rate) & ~is_special  # FAULT
    what = torch.rand(ids.shape, generator=generator)
    random_ids = ordinary[torch.randint(len(ordinary), ids.shape, generator=generator)]
    inputs = ids.clone()
    inputs[chosen & (what < 0.8)] = mask_id
    replace = chosen & (what >= 0.8) & (what < 0.9)
    inputs[replace] = random_ids[replace]
    return inputs, torch.where(chosen, ids, torch.full_like(ids, -100))


def mask_draws_for_the_chosen_only_with_labels_off(ids, mask_id, vocab_size, special_ids, generator, rate=0.15):
    """A right way to draw (one number and one replacement per chosen position, not per position), with a
    wrong label: the draws after the choice differ from the course's, rightly."""
    if not 0 < rate <= 1:
        raise ValueError(f"rate must be in (0, 1], got {rate}")
    special = sorted(set(special_ids))
    ordinary = torch.tensor([i for i in range(vocab_size) if i not in special], dtype=ids.dtype)
    chosen = (torch.rand(ids.shape, generator=generator) < rate) & ~torch.isin(ids, torch.tensor(special))
    n = int(chosen.sum())
    what = torch.rand(n, generator=generator)
    random_ids = ordinary[torch.randint(len(ordinary), (n,), generator=generator)]
    picked = ids[chosen]
    picked = torch.where(what < 0.8, torch.full_like(picked, mask_id), torch.where(what < 0.9, random_ids, picked))
    inputs = ids.clone()
    inputs[chosen] = picked
    return inputs, torch.where(chosen, ids, torch.full_like(ids, -1))  # -1, not -100


# ---------------------------------------------------------------------------------------------
# GPTBlock
# ---------------------------------------------------------------------------------------------


class _Block(nn.Module):
    def __init__(self, d_model, h, d_ff, dropout=0.1):
        super().__init__()
        self.norm1 = LayerNorm(d_model)
        self.self_attn = MultiHeadAttention(d_model, h, dropout)
        self.dropout1 = nn.Dropout(dropout)
        self.norm2 = LayerNorm(d_model)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.dropout2 = nn.Dropout(dropout)


class BlockWithoutNorm2(_Block):
    def forward(self, x):
        mask = subsequent_mask(x.shape[1])
        a = self.norm1(x)
        x = x + self.dropout1(self.self_attn(a, a, a, attn_mask=mask))
        return x + self.dropout2(self.feed_forward(x))  # FAULT


class BlockKeysFromTheInput(_Block):
    def forward(self, x):
        mask = subsequent_mask(x.shape[1])
        a = self.norm1(x)
        attended = self.self_attn(a, x, x, attn_mask=mask)  # FAULT
        x = x + self.dropout1(attended)
        return x + self.dropout2(self.feed_forward(self.norm2(x)))


# ---------------------------------------------------------------------------------------------
# generate_with_cache
# ---------------------------------------------------------------------------------------------


def generate_norm1_before_the_feed_forward(model, prompt, steps):
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    cache, new, start, tokens, logits = [], prompt, 0, [], []
    with torch.no_grad():
        for _ in range(steps):
            T_new = new.shape[1]
            x = model.embed(new) + model.pos_embed(torch.arange(start, start + T_new))
            mask = subsequent_mask(start + T_new)[start:]
            for i, block in enumerate(model.blocks):
                attn = block.self_attn
                normed = block.norm1(x)
                q, k, v = (split_heads(w(normed), attn.h) for w in (attn.w_q, attn.w_k, attn.w_v))
                if i < len(cache):
                    k, v = torch.cat([cache[i][0], k], dim=2), torch.cat([cache[i][1], v], dim=2)
                    cache[i] = (k, v)
                else:
                    cache.append((k, v))
                context, _ = scaled_dot_product_attention(q, k, v, mask)
                x = x + attn.w_o(merge_heads(context))
                x = x + block.feed_forward(block.norm1(x))  # FAULT
            step_logits = model.head(model.norm(x[:, -1]))
            tokens.append(step_logits.argmax(dim=-1))
            logits.append(step_logits)
            start += T_new
            new = tokens[-1].unsqueeze(1)
    return torch.stack(tokens, dim=1), torch.stack(logits, dim=1), cache


def generate_values_after_the_cached_keys(model, prompt, steps):
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    cache, new, start, tokens, logits = [], prompt, 0, [], []
    with torch.no_grad():
        for _ in range(steps):
            T_new = new.shape[1]
            x = model.embed(new) + model.pos_embed(torch.arange(start, start + T_new))
            mask = subsequent_mask(start + T_new)[start:]
            for i, block in enumerate(model.blocks):
                attn = block.self_attn
                normed = block.norm1(x)
                q = split_heads(attn.w_q(normed), attn.h)
                k = split_heads(attn.w_k(normed), attn.h)
                v = split_heads(attn.w_v(normed), attn.h)
                if i < len(cache):
                    k = torch.cat([cache[i][0], k], dim=2)
                    v = torch.cat([cache[i][0], v], dim=2)  # FAULT
                    cache[i] = (k, v)
                else:
                    cache.append((k, v))
                context, _ = scaled_dot_product_attention(q, k, v, mask)
                x = x + attn.w_o(merge_heads(context))
                x = x + block.feed_forward(block.norm2(x))
            step_logits = model.head(model.norm(x[:, -1]))
            tokens.append(step_logits.argmax(dim=-1))
            logits.append(step_logits)
            start += T_new
            new = tokens[-1].unsqueeze(1)
    return torch.stack(tokens, dim=1), torch.stack(logits, dim=1), cache


def generate_cache_newest_first(model, prompt, steps):
    """Keys and values kept newest first: the attention over them is the same, so the logits are right; only the
    cache returned is wrong."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    cache, new, start, tokens, logits = [], prompt, 0, [], []
    with torch.no_grad():
        for _ in range(steps):
            T_new = new.shape[1]
            x = model.embed(new) + model.pos_embed(torch.arange(start, start + T_new))
            # the newest position comes first among the keys: the mask's columns turned round to match
            mask = subsequent_mask(start + T_new)[start:].flip(-1)
            for i, block in enumerate(model.blocks):
                attn = block.self_attn
                normed = block.norm1(x)
                q, k, v = (split_heads(w(normed), attn.h) for w in (attn.w_q, attn.w_k, attn.w_v))
                if i < len(cache):
                    k, v = torch.cat([k, cache[i][0]], dim=2), torch.cat([v, cache[i][1]], dim=2)
                    cache[i] = (k, v)
                else:
                    k, v = k.flip(2), v.flip(2)
                    cache.append((k, v))
                context, _ = scaled_dot_product_attention(q, k, v, mask)
                x = x + attn.w_o(merge_heads(context))
                x = x + block.feed_forward(block.norm2(x))
            step_logits = model.head(model.norm(x[:, -1]))
            tokens.append(step_logits.argmax(dim=-1))
            logits.append(step_logits)
            start += T_new
            new = tokens[-1].unsqueeze(1)
    return torch.stack(tokens, dim=1), torch.stack(logits, dim=1), cache


def generate_tokens_stacked_along_the_steps(model, prompt, steps):
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    cache, new, start, tokens, logits = [], prompt, 0, [], []
    with torch.no_grad():
        for _ in range(steps):
            T_new = new.shape[1]
            x = model.embed(new) + model.pos_embed(torch.arange(start, start + T_new))
            mask = subsequent_mask(start + T_new)[start:]
            for i, block in enumerate(model.blocks):
                attn = block.self_attn
                normed = block.norm1(x)
                q, k, v = (split_heads(w(normed), attn.h) for w in (attn.w_q, attn.w_k, attn.w_v))
                if i < len(cache):
                    k, v = torch.cat([cache[i][0], k], dim=2), torch.cat([cache[i][1], v], dim=2)
                    cache[i] = (k, v)
                else:
                    cache.append((k, v))
                context, _ = scaled_dot_product_attention(q, k, v, mask)
                x = x + attn.w_o(merge_heads(context))
                x = x + block.feed_forward(block.norm2(x))
            step_logits = model.head(model.norm(x[:, -1]))
            tokens.append(step_logits.argmax(dim=-1))
            logits.append(step_logits)
            start += T_new
            new = tokens[-1].unsqueeze(1)
    return torch.stack(tokens, dim=0), torch.stack(logits, dim=1), cache  # (steps, B): the wrong axis


def generate_through_a_function_the_trace_does_not_follow(model, prompt, steps):
    tokens, logits, cache = reference_generate(model, prompt, steps)
    return tokens, logits, [(v, k) for k, v in cache]


# ---------------------------------------------------------------------------------------------
# Located at the faulty line
# ---------------------------------------------------------------------------------------------


UNSEEN = [
    ("bert_gpt.sample_next", sample_greedy_argmax_of_everything),
    ("bert_gpt.mask_tokens", mask_chooses_above_rate),
    ("bert_gpt.GPTBlock", BlockWithoutNorm2),
    ("bert_gpt.GPTBlock", BlockKeysFromTheInput),
    ("bert_gpt.generate_with_cache", generate_norm1_before_the_feed_forward),
    ("bert_gpt.generate_with_cache", generate_values_after_the_cached_keys),
]


@pytest.mark.parametrize(("check_id", "fn"), UNSEEN, ids=[f"{c}: {f.__name__}" for c, f in UNSEEN])
def test_an_uncatalogued_mistake_is_located_at_its_line(check_id, fn):
    assert_located_at_its_line(check_id, fn)


def test_a_cached_decoder_s_location_names_the_step_and_the_block():
    # A mistake made at every step from the second on is located at a step the chain holds (the last one's
    # values are what the function returns), in the words of that step and block.
    message = _message("bert_gpt.generate_with_cache", generate_values_after_the_cached_keys)
    assert "block 0: the keys so far, the cached ones then the new" in message and "(position " in message, message


# ---------------------------------------------------------------------------------------------
# Nothing rather than a misleading location
# ---------------------------------------------------------------------------------------------


def test_a_statistical_case_too_large_to_record_is_not_located():
    # top_k=4 is first met on 15000 rows of 16 logits, kept by their shape only: the crash it causes is not
    # blamed on the first line made from the logits.
    message = _message("bert_gpt.sample_next", sample_kth_of_the_wrong_end)
    assert "top_k=4" in message and not any(m in message for m in LOCATED), message


def test_draws_made_another_right_way_are_not_blamed_for_a_wrong_label():
    message = _message("bert_gpt.mask_tokens", mask_draws_for_the_chosen_only_with_labels_off)
    assert "-1" in message and not any(m in message for m in LOCATED), message


@pytest.mark.parametrize("fn", [generate_cache_newest_first, generate_tokens_stacked_along_the_steps])
def test_a_decoder_right_up_to_its_last_logits_is_told_only_what_the_rule_says(fn):
    # Every step's values agree: "look after the last logits" would point past a cache kept newest first.
    message = _message("bert_gpt.generate_with_cache", fn)
    assert not any(m in message for m in LOCATED), message


def test_a_decoder_whose_steps_the_trace_does_not_hold_is_not_located():
    # Only what the course's function returned is recorded: the returned logits agree, which says nothing of
    # where the cache went wrong.
    message = _message("bert_gpt.generate_with_cache", generate_through_a_function_the_trace_does_not_follow)
    assert "(k, v)" in message and not any(m in message for m in LOCATED), message


@pytest.mark.parametrize(("check_id", "fn", "located"), [
    ("bert_gpt.generate_with_cache", generate_cache_newest_first, False),
    ("bert_gpt.generate_with_cache", generate_values_after_the_cached_keys, True),
    ("bert_gpt.mask_tokens", mask_draws_for_the_chosen_only_with_labels_off, False),
    ("bert_gpt.mask_tokens", mask_chooses_above_rate, True),
], ids=lambda v: getattr(v, "__name__", str(v)))
def test_the_checks_that_read_locate_s_sentence_decide_alike_in_chinese(check_id, fn, located, monkeypatch):
    # These two checks keep or drop the location by a phrase of the sentence locate wrote, which is Chinese here
    monkeypatch.setenv("COURSE_LANG", "zh")
    message = _message(check_id, fn)
    assert any(m in message for m in LOCATED_ZH) == located, message
    assert not any(m in message for m in LOCATED), message


def test_the_stages_of_the_cached_decoder_end_at_the_oracle_s_last_logits():
    from autograder.checks import get
    from autograder.oracles.gpt import generate_plain

    check = get("bert_gpt.generate_with_cache")
    for case in check.cases(hidden=False):
        if case.tag == "invalid":
            continue
        model, prompt = check._expected(case)[0], case.args[1]
        _, logits, _ = generate_plain(model, prompt, case.kwargs["steps"])
        assert torch.allclose(check.stages(case)[-1].values[0], logits[:, -1], atol=1e-12, rtol=0), case.label


def test_the_stages_of_sample_next_end_at_the_distribution_its_draws_are_judged_by():
    from autograder.checks import get
    from autograder.oracles.sampling import sampling_distribution

    check = get("bert_gpt.sample_next")
    judged = 0
    for case in check.cases(hidden=False):
        stages = check.stages(case)
        if not stages or case.tag == "greedy":
            continue
        temperature, top_k, top_p = check._settings(case)
        (logits,) = case.args
        for row in (0, logits.shape[0] - 1):
            expected = torch.tensor(sampling_distribution(logits[row].double().tolist(), temperature, top_k, top_p),
                                    dtype=torch.float64)
            assert torch.allclose(stages[-1].values[0][row], expected, atol=1e-12), case.label
        judged += 1
    assert judged >= 3  # the cases of 150000 logits or fewer: two temperatures, and top_k above the vocabulary
