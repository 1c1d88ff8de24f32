"""Wrong answers to chapter 8, as learners write them, and the words that must name each one."""
from __future__ import annotations

import math

import torch

from . import Mistake, Spoiled

EDIT = "capstone.edit_distance"
DISTANCE = "the Levenshtein distance"  # the rule across its cases
LOSS = "capstone.label_smoothed_cross_entropy"
LOSS_SCALAR = "a scalar loss, NaN when every target is padding"  # its first rule
RATE = "capstone.noam_rate"
BATCHES = "capstone.length_batches"
# length_batches' rules
PARTITION = "every example in exactly one batch"
BUDGET = "each batch within the budget, padded"
PACKING = "examples of similar length together, batches full"
SEEDED = "shuffled by its own generator, from seed and epoch"
NEIGHBOURS = "equal lengths meet new neighbours each epoch"
ORDER = "batches in shuffled order"
BEAM = "capstone.beam_search"
BEST = "the best hypothesis and its normalised score"  # its rule across the cases


SPOILED = Spoiled("edit_distance", "previous[j - 1] + (x != y)", "previous[j - 1] + 1")


# ----------------------------------------------------------------------------------------
# edit_distance
# ----------------------------------------------------------------------------------------


def _table(a, b, border=True, substitution=1):
    D = [[(i + j if border else 0) if i == 0 or j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            D[i][j] = min(D[i - 1][j] + 1, D[i][j - 1] + 1, D[i - 1][j - 1] + (a[i - 1] != b[j - 1]) * substitution)
    return D


def edit_zero_borders(a, b):
    return _table(a, b, border=False)[-1][-1]


def edit_position_by_position(a, b):
    return sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))


def edit_substitution_costs_two(a, b):
    return _table(a, b, substitution=2)[-1][-1]


def edit_on_letters(a, b):
    return _table("".join(map(str, a)), "".join(map(str, b)))[-1][-1]


def edit_with_transpositions(a, b):
    return _osa(a, b)


def _osa(a, b):
    D = [[i + j if i == 0 or j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            D[i][j] = min(D[i - 1][j] + 1, D[i][j - 1] + 1, D[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                D[i][j] = min(D[i][j], D[i - 2][j - 2] + 1)
    return D[-1][-1]


def edit_returns_float(a, b):
    return float(_table(a, b)[-1][-1])


def edit_lcs(a, b):
    L = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            L[i][j] = L[i - 1][j - 1] + 1 if a[i - 1] == b[j - 1] else max(L[i - 1][j], L[i][j - 1])
    return L[-1][-1]


# ----------------------------------------------------------------------------------------
# label_smoothed_cross_entropy
# ----------------------------------------------------------------------------------------


def _parts(logits, target):
    log_probs = torch.log_softmax(logits, dim=-1)
    nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    return log_probs, nll


def loss_counts_padding(logits, target, smoothing=0.1, pad_id=0):
    log_probs, nll = _parts(logits, target)
    return ((1 - smoothing) * nll - smoothing * log_probs.mean(-1)).mean()


def loss_divides_by_all_positions(logits, target, smoothing=0.1, pad_id=0):
    log_probs, nll = _parts(logits, target)
    loss = (1 - smoothing) * nll - smoothing * log_probs.mean(-1)
    return (loss * (target != pad_id)).sum() / target.numel()


def loss_smooths_wrong_tokens_only(logits, target, smoothing=0.1, pad_id=0):
    log_probs, nll = _parts(logits, target)
    V = logits.shape[-1]
    others = (-log_probs.sum(-1) - nll) / (V - 1)
    loss = (1 - smoothing) * nll + smoothing * others
    real = target != pad_id
    return loss[real].mean()


def loss_no_smoothing(logits, target, smoothing=0.1, pad_id=0):
    _, nll = _parts(logits, target)
    real = target != pad_id
    return nll[real].mean()


def loss_no_one_minus(logits, target, smoothing=0.1, pad_id=0):
    log_probs, nll = _parts(logits, target)
    real = target != pad_id
    return (nll - smoothing * log_probs.mean(-1))[real].mean()


def loss_uniform_sum(logits, target, smoothing=0.1, pad_id=0):
    log_probs, nll = _parts(logits, target)
    real = target != pad_id
    return ((1 - smoothing) * nll - smoothing * log_probs.sum(-1))[real].mean()


def loss_log_of_softmax(logits, target, smoothing=0.1, pad_id=0):
    e = torch.exp(logits - logits.amax(-1, keepdim=True))
    log_probs = torch.log(e / e.sum(-1, keepdim=True))  # -inf where a probability underflows
    nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    real = target != pad_id
    return ((1 - smoothing) * nll - smoothing * log_probs.mean(-1))[real].mean()


def loss_returns_float(logits, target, smoothing=0.1, pad_id=0):
    log_probs, nll = _parts(logits, target)
    real = target != pad_id
    return ((1 - smoothing) * nll - smoothing * log_probs.mean(-1))[real].mean().item()


def loss_sum(logits, target, smoothing=0.1, pad_id=0):
    log_probs, nll = _parts(logits, target)
    real = target != pad_id
    return ((1 - smoothing) * nll - smoothing * log_probs.mean(-1))[real].sum()


# ----------------------------------------------------------------------------------------
# noam_rate
# ----------------------------------------------------------------------------------------


def _checked(step, warmup):
    if step < 1 or warmup < 1:
        raise ValueError("step and warmup start at 1")


def rate_warmup_unchecked(step, d_model, warmup, factor=1.0):
    if step < 1:  # warmup is never looked at: 0 divides by zero
        raise ValueError("step starts at 1")
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def rate_as_tensor(step, d_model, warmup, factor=1.0):
    _checked(step, warmup)
    step = torch.tensor(float(step))  # vectorised, and never turned back into a number
    return factor * d_model ** -0.5 * torch.minimum(step ** -0.5, step * warmup ** -1.5)


def rate_max(step, d_model, warmup, factor=1.0):
    _checked(step, warmup)
    return factor * d_model ** -0.5 * max(step ** -0.5, step * warmup ** -1.5)


def rate_no_d_model(step, d_model, warmup, factor=1.0):
    _checked(step, warmup)
    return factor * min(step ** -0.5, step * warmup ** -1.5)


def rate_from_zero(step, d_model, warmup, factor=1.0):
    _checked(step, warmup)
    step = step + 1  # "the optimiser's counter starts at 0"
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def rate_warmup_exponent(step, d_model, warmup, factor=1.0):
    _checked(step, warmup)
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -0.5)


def rate_ignores_factor(step, d_model, warmup, factor=1.0):
    _checked(step, warmup)
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def rate_no_validation(step, d_model, warmup, factor=1.0):
    if step == 0:
        return 0.0
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def rate_zero_division(step, d_model, warmup, factor=1.0):
    return factor * d_model ** -0.5 * min(1 / math.sqrt(step), step / warmup ** 1.5)


# ----------------------------------------------------------------------------------------
# length_batches
# ----------------------------------------------------------------------------------------


def _check_lengths(lengths, max_tokens):
    if any(n > max_tokens for n in lengths):
        raise ValueError("an example is longer than max_tokens")


def _pack(lengths, order, max_tokens, cost=lambda batch, lengths: len(batch) * max(lengths[i] for i in batch)):
    batches, batch = [], []
    for i in order:
        if batch and cost(batch + [i], lengths) > max_tokens:
            batches.append(batch)
            batch = []
        batch.append(i)
    if batch:
        batches.append(batch)
    return batches


def _sorted_order(lengths, g):
    order = torch.randperm(len(lengths), generator=g).tolist()
    order.sort(key=lambda i: lengths[i])
    return order


def _shuffle(batches, g):
    return [batches[k] for k in torch.randperm(len(batches), generator=g).tolist()]


def batches_equal_lengths_unshuffled(lengths, max_tokens, seed=0, epoch=0):
    _check_lengths(lengths, max_tokens)
    g = torch.Generator().manual_seed(1_000_003 * seed + epoch)
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])  # ties stay in index order, every epoch
    return _shuffle(_pack(lengths, order, max_tokens), g)


def batches_count_real_tokens(lengths, max_tokens, seed=0, epoch=0):
    _check_lengths(lengths, max_tokens)
    g = torch.Generator().manual_seed(1_000_003 * seed + epoch)
    real = lambda batch, lengths: sum(lengths[i] for i in batch)  # noqa: E731
    return _shuffle(_pack(lengths, _sorted_order(lengths, g), max_tokens, real), g)


def batches_not_sorted(lengths, max_tokens, seed=0, epoch=0):
    _check_lengths(lengths, max_tokens)
    g = torch.Generator().manual_seed(1_000_003 * seed + epoch)
    return _pack(lengths, torch.randperm(len(lengths), generator=g).tolist(), max_tokens)


def batches_ignore_epoch(lengths, max_tokens, seed=0, epoch=0):
    _check_lengths(lengths, max_tokens)
    g = torch.Generator().manual_seed(seed)
    return _shuffle(_pack(lengths, _sorted_order(lengths, g), max_tokens), g)


def batches_drop_last(lengths, max_tokens, seed=0, epoch=0):
    _check_lengths(lengths, max_tokens)
    g = torch.Generator().manual_seed(1_000_003 * seed + epoch)
    batches = _pack(lengths, _sorted_order(lengths, g), max_tokens)
    return _shuffle(batches[:-1], g)  # "a partial batch would skew the statistics"


def batches_in_length_order(lengths, max_tokens, seed=0, epoch=0):
    _check_lengths(lengths, max_tokens)
    g = torch.Generator().manual_seed(1_000_003 * seed + epoch)
    return _pack(lengths, _sorted_order(lengths, g), max_tokens)


def batches_global_rng(lengths, max_tokens, seed=0, epoch=0):
    _check_lengths(lengths, max_tokens)
    order = torch.randperm(len(lengths)).tolist()
    order.sort(key=lambda i: lengths[i])
    batches = _pack(lengths, order, max_tokens)
    return [batches[k] for k in torch.randperm(len(batches)).tolist()]


def batches_one_example_each(lengths, max_tokens, seed=0, epoch=0):
    _check_lengths(lengths, max_tokens)
    g = torch.Generator().manual_seed(1_000_003 * seed + epoch)
    return [[i] for i in torch.randperm(len(lengths), generator=g).tolist()]


def batches_refuse_exact_fit(lengths, max_tokens, seed=0, epoch=0):
    if any(n >= max_tokens for n in lengths):  # an example exactly at the budget is refused too
        raise ValueError("an example does not fit in max_tokens")
    g = torch.Generator().manual_seed(1_000_003 * seed + epoch)
    return _shuffle(_pack(lengths, _sorted_order(lengths, g), max_tokens), g)


def batches_check_after_adding(lengths, max_tokens, seed=0, epoch=0):
    _check_lengths(lengths, max_tokens)
    g = torch.Generator().manual_seed(1_000_003 * seed + epoch)
    batches, batch = [], []
    for i in _sorted_order(lengths, g):
        batch.append(i)
        if len(batch) * max(lengths[j] for j in batch) >= max_tokens:  # the batch is already over when it is cut
            batches.append(batch)
            batch = []
    if batch:
        batches.append(batch)
    return _shuffle(batches, g)


# ----------------------------------------------------------------------------------------
# beam_search
# ----------------------------------------------------------------------------------------


def _beam(model, src, beam_size, max_len, bos_id, eos_id, alpha=0.0, *, scores_of="log_softmax", stop_at_eos=True,
          keep_width=False, own_best_only=False, lp=lambda n, alpha: ((5 + n) / 6) ** alpha, rank_normalised=True,
          return_raw=False, shrink_for_good=False, fallback=True):
    memory = model.encode(src)
    live, finished = [([bos_id], 0.0)], []
    for _ in range(max_len):
        if not live:
            break
        width = beam_size - len(finished) if shrink_for_good else beam_size
        if width <= 0:
            break
        rows = []
        for tokens, _ in live:
            logits = model.decode(memory, torch.tensor([tokens]))[0, -1].double()
            rows.append({"log_softmax": torch.log_softmax(logits, -1), "logits": logits,
                         "probs": torch.softmax(logits, -1)}[scores_of])
        scores = torch.tensor([s for _, s in live], dtype=torch.float64).unsqueeze(1) + torch.stack(rows)
        V = scores.shape[1]
        if own_best_only and len(live) > 1:
            picked = [(r * V + int(scores[r].argmax()), float(scores[r].max())) for r in range(len(live))]
        else:
            flat = scores.flatten()
            order = flat.argsort(descending=True).tolist()
            picked, kept = [], 0
            for index in order:
                if kept == width or (not keep_width and len(picked) == width):
                    break
                picked.append((index, float(flat[index])))
                kept += index % V != eos_id
        live_next = []
        for index, score in picked:
            tokens = live[index // V][0] + [index % V]
            (finished if stop_at_eos and index % V == eos_id else live_next).append((tokens, score))
        live = live_next

    def normalised(tokens, score):
        return score / lp(len(tokens) - 1, alpha) if rank_normalised else score

    tokens, score = max(finished if not fallback else finished or live, key=lambda h: normalised(*h))
    return torch.tensor(tokens), (score if return_raw else score / lp(len(tokens) - 1, alpha))


def beam_sums_logits(model, src, beam_size, max_len, bos_id, eos_id, alpha=0.0):
    return _beam(model, src, beam_size, max_len, bos_id, eos_id, alpha, scores_of="logits")


def beam_sums_probabilities(model, src, beam_size, max_len, bos_id, eos_id, alpha=0.0):
    return _beam(model, src, beam_size, max_len, bos_id, eos_id, alpha, scores_of="probs")


def beam_own_best_only(model, src, beam_size, max_len, bos_id, eos_id, alpha=0.0):
    return _beam(model, src, beam_size, max_len, bos_id, eos_id, alpha, own_best_only=True)


def beam_ignores_eos(model, src, beam_size, max_len, bos_id, eos_id, alpha=0.0):
    return _beam(model, src, beam_size, max_len, bos_id, eos_id, alpha, stop_at_eos=False)


def beam_keeps_width(model, src, beam_size, max_len, bos_id, eos_id, alpha=0.0):
    return _beam(model, src, beam_size, max_len, bos_id, eos_id, alpha, keep_width=True)


def beam_shrinks_for_good(model, src, beam_size, max_len, bos_id, eos_id, alpha=0.0):
    # "the beam shrinks by one for each finished hypothesis", read as a beam that stays smaller
    return _beam(model, src, beam_size, max_len, bos_id, eos_id, alpha, shrink_for_good=True)


def beam_never_finishes(model, src, beam_size, max_len, bos_id, eos_id, alpha=0.0):
    # A hypothesis ending in <eos> is not set aside: it stays in the beam, as it is, and competes by its raw
    # score with the extensions of the others for the beam_size places.
    memory = model.encode(src)
    beam = [([bos_id], 0.0)]
    for _ in range(max_len):
        if all(tokens[-1] == eos_id for tokens, _ in beam):
            break
        candidates = []
        for tokens, score in beam:
            if tokens[-1] == eos_id:
                candidates.append((tokens, score))
                continue
            logits = model.decode(memory, torch.tensor([tokens]))[0, -1].double()
            candidates += [(tokens + [v], score + float(lp)) for v, lp in enumerate(torch.log_softmax(logits, -1))]
        beam = sorted(candidates, key=lambda h: -h[1])[:beam_size]
    ended = [h for h in beam if h[0][-1] == eos_id] or beam
    tokens, score = max(ended, key=lambda h: h[1] / ((5 + len(h[0]) - 1) / 6) ** alpha)
    return torch.tensor(tokens), score / ((5 + len(tokens) - 1) / 6) ** alpha


def beam_no_fallback(model, src, beam_size, max_len, bos_id, eos_id, alpha=0.0):
    return _beam(model, src, beam_size, max_len, bos_id, eos_id, alpha, fallback=False)


def beam_power_penalty(model, src, beam_size, max_len, bos_id, eos_id, alpha=0.0):
    return _beam(model, src, beam_size, max_len, bos_id, eos_id, alpha, lp=lambda n, alpha: n ** alpha)


def beam_ranks_raw_scores(model, src, beam_size, max_len, bos_id, eos_id, alpha=0.0):
    return _beam(model, src, beam_size, max_len, bos_id, eos_id, alpha, rank_normalised=False)


def beam_returns_raw_score(model, src, beam_size, max_len, bos_id, eos_id, alpha=0.0):
    return _beam(model, src, beam_size, max_len, bos_id, eos_id, alpha, return_raw=True)


MISTAKES = [
    # edit_distance
    Mistake(EDIT, "borders of the table left at 0", edit_zero_borders, "D[i, 0] = i and D[0, j] = j", rule=DISTANCE),
    Mistake(EDIT, "position by position", edit_position_by_position, "position by position", rule=DISTANCE),
    Mistake(EDIT, "a substitution costs 2", edit_substitution_costs_two, "a substitution costs 1", rule=DISTANCE),
    Mistake(EDIT, "joins phonemes into letters", edit_on_letters, "you compared letters, not phonemes", rule=DISTANCE),
    Mistake(EDIT, "a swap costs 1", edit_with_transpositions, "swapping two neighbours is two edits", rule=DISTANCE),
    Mistake(EDIT, "returns a float", edit_returns_float, "return an int", rule="an int"),
    Mistake(EDIT, "longest common subsequence", edit_lcs, "longest common subsequence", rule=DISTANCE),
    # label_smoothed_cross_entropy
    Mistake(LOSS, "padding counted", loss_counts_padding, "padding positions were counted", rule="values"),
    Mistake(LOSS, "divides by every position", loss_divides_by_all_positions, "not out of the count", rule="values"),
    Mistake(LOSS, "smoothing over the wrong tokens only", loss_smooths_wrong_tokens_only, "over all V tokens", rule="values"),
    Mistake(LOSS, "no smoothing", loss_no_smoothing, "the smoothing was ignored", rule="values"),
    Mistake(LOSS, "no (1 - eps) on the right token", loss_no_one_minus, "must be weighted by (1 - smoothing)", rule="values"),
    Mistake(LOSS, "sums the uniform term over the vocabulary", loss_uniform_sum, "mean, not sum", rule="values"),
    Mistake(LOSS, "log of softmax", loss_log_of_softmax, "torch.log_softmax", rule=LOSS_SCALAR),
    Mistake(LOSS, "returns .item()", loss_returns_float, "no .item()", rule=LOSS_SCALAR),
    Mistake(LOSS, "sum instead of mean", loss_sum, "this is the sum over positions", rule="values"),
    # noam_rate
    Mistake(RATE, "max instead of min", rate_max, "not max", rule="equation 3"),
    Mistake(RATE, "returns a tensor", rate_as_tensor, "as a Python float", rule="a Python float"),
    Mistake(RATE, "no d_model ** -0.5", rate_no_d_model, "d_model ** -0.5 is missing", rule="equation 3"),
    Mistake(RATE, "step + 1", rate_from_zero, "not step + 1", rule="equation 3"),
    Mistake(RATE, "warmup ** -0.5 in the warm-up term", rate_warmup_exponent, "not warmup ** -0.5", rule="equation 3"),
    Mistake(RATE, "factor ignored", rate_ignores_factor, "factor argument was ignored", rule="equation 3"),
    Mistake(RATE, "returns 0 at step 0", rate_no_validation, "raise ValueError", rule="refusal"),
    Mistake(RATE, "ZeroDivisionError at step 0", rate_zero_division, "raise ValueError", rule="refusal"),
    Mistake(RATE, "warmup 0 not refused", rate_warmup_unchecked, "warmup=0; raise ValueError", rule="refusal"),
    # length_batches
    Mistake(BATCHES, "examples of equal length never shuffled", batches_equal_lengths_unshuffled,
            "the examples of equal length were not shuffled", rule=NEIGHBOURS),
    Mistake(BATCHES, "budget counts real tokens", batches_count_real_tokens, "not the sum of its lengths", rule=BUDGET),
    Mistake(BATCHES, "random batches", batches_not_sorted, "sort the examples by length", rule=PACKING),
    Mistake(BATCHES, "the same order every epoch", batches_ignore_epoch, "for another epoch", rule=SEEDED),
    Mistake(BATCHES, "drops the last batch", batches_drop_last, "exactly one batch", rule=PARTITION),
    Mistake(BATCHES, "batches in order of length", batches_in_length_order, "shuffle the order of the batches",
            rule=ORDER),
    Mistake(BATCHES, "global random generator", batches_global_rng, "never from the global random generator",
            rule=SEEDED),
    Mistake(BATCHES, "one example per batch", batches_one_example_each, "fill each batch up to the budget", rule=PACKING),
    Mistake(BATCHES, "budget checked after adding", batches_check_after_adding, "more than max_tokens", rule=BUDGET),
    Mistake(BATCHES, "refuses an example as long as the budget", batches_refuse_exact_fit,
            "An example exactly as long as max_tokens fits", rule="raises nothing"),
    # beam_search
    Mistake(BEAM, "sums logits", beam_sums_logits, "the raw logits were added up", rule=BEST),
    Mistake(BEAM, "sums probabilities", beam_sums_probabilities, "probabilities were added up", rule=BEST),
    Mistake(BEAM, "each hypothesis keeps its own best token", beam_own_best_only, "compare all extensions", rule=BEST),
    Mistake(BEAM, "extends hypotheses after <eos>", beam_ignores_eos, "went on after <eos>", rule=BEST),
    Mistake(BEAM, "keeps beam_size live hypotheses", beam_keeps_width, "the beam shrinks", rule=BEST),
    Mistake(BEAM, "the beam stays smaller once a hypothesis finished", beam_shrinks_for_good,
            "the beam stayed smaller after a hypothesis finished", rule=BEST),
    Mistake(BEAM, "finished hypotheses stay in the beam", beam_never_finishes, "did not finish at <eos>", rule=BEST),
    Mistake(BEAM, "no fallback when nothing finishes", beam_no_fallback, "no hypothesis finished within max_len",
            rule="raises nothing"),
    Mistake(BEAM, "|Y| ** alpha", beam_power_penalty, "not |Y| ** alpha", rule=BEST),
    Mistake(BEAM, "ranks by raw scores", beam_ranks_raw_scores, "ignored the length penalty", rule=BEST),
    Mistake(BEAM, "returns the raw score", beam_returns_raw_score, "return the normalised score", rule=BEST),
]
