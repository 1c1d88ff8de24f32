"""Wrong answers to chapter 7, as learners write them, and the words that must name each one."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from reference.attention import scaled_dot_product_attention
from reference.decoder import subsequent_mask
from reference.encoder import LayerNorm, PositionwiseFeedForward
from reference.multihead import MultiHeadAttention, merge_heads, split_heads

from . import Mistake, Spoiled

TRAIN = "bert_gpt.bpe_train"
ENCODE = "bert_gpt.bpe_encode"
MERGES, IDS = "the merges of byte-level BPE", "the ids the merges give"  # their rules across the cases
MASK = "bert_gpt.mask_tokens"
LOSS = "bert_gpt.causal_lm_loss"
LOSS_SCALAR = "a scalar loss, NaN when every target is padding"  # its first rule
SAMPLE = "bert_gpt.sample_next"
BLOCK = "bert_gpt.GPTBlock"
LATER = "a later token changes no earlier position"  # its rule across the cases
GENERATE = "bert_gpt.generate_with_cache"


# Wrong only in training mode, like the encoder's.
SPOILED = Spoiled(
    "GPTBlock",
    "self.dropout1(self.self_attn(normed, normed, normed, attn_mask=mask))",
    "self.self_attn(normed, normed, normed, attn_mask=mask)",
)


# ----------------------------------------------------------------------------------------
# bpe_train
# ----------------------------------------------------------------------------------------


def _merge(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _train(text, num_merges, *, units=None, pick=None, min_count=2, merge=_merge, count=None):
    if num_merges < 0:
        raise ValueError(f"num_merges must be at least 0, got {num_merges}")
    ids = units(text) if units else list(text.encode("utf-8"))
    merges = []
    for k in range(num_merges):
        counts = count(ids) if count else {}
        if not count:
            for pair in zip(ids, ids[1:]):
                counts[pair] = counts.get(pair, 0) + 1
        if not counts:
            break
        best = pick(counts) if pick else max(counts, key=counts.get)
        if counts[best] < min_count:
            break
        ids = merge(ids, best, 256 + k)
        merges.append(best)
    return merges


def train_smallest_pair_on_ties(text, num_merges):
    # max over (count, pair) would take the largest; min over (-count, pair) the smallest on ties.
    return _train(text, num_merges, pick=lambda counts: min(counts, key=lambda p: (-counts[p], p)))


def train_last_of_ascending_sort(text, num_merges):
    # The last of an ascending (stable) sort: among equal counts, the pair seen last.
    return _train(text, num_merges, pick=lambda counts: sorted(counts.items(), key=lambda item: item[1])[-1][0])


def train_never_stops(text, num_merges):
    return _train(text, num_merges, min_count=1)


def train_on_characters(text, num_merges):
    return _train(text, num_merges, units=lambda t: [ord(c) for c in t])


def train_counts_once(text, num_merges):
    if num_merges < 0:
        raise ValueError(f"num_merges must be at least 0, got {num_merges}")
    ids = list(text.encode("utf-8"))
    counts = {}
    for pair in zip(ids, ids[1:]):
        counts[pair] = counts.get(pair, 0) + 1
    ranked = sorted(counts, key=counts.get, reverse=True)
    return [p for p in ranked if counts[p] >= 2][:num_merges]


def train_counts_like_str_count(text, num_merges):
    def count(ids):
        counts, last = {}, {}
        for i, pair in enumerate(zip(ids, ids[1:])):
            if i < last.get(pair, 0):
                continue  # overlaps the previous occurrence
            last[pair] = i + 2
            counts[pair] = counts.get(pair, 0) + 1
        return counts

    return _train(text, num_merges, count=count)


def train_merges_from_the_right(text, num_merges):
    def merge(ids, pair, new_id):
        out, i = [], len(ids) - 1
        while i >= 0:
            if i > 0 and (ids[i - 1], ids[i]) == pair:
                out.append(new_id)
                i -= 2
            else:
                out.append(ids[i])
                i -= 1
        return out[::-1]

    return _train(text, num_merges, merge=merge)


def train_no_validation(text, num_merges):
    return _train(text, max(num_merges, 0))


def train_returns_text_pairs(text, num_merges):
    tokens = list(text)
    merges = []
    for _ in range(num_merges):
        counts = {}
        for pair in zip(tokens, tokens[1:]):
            counts[pair] = counts.get(pair, 0) + 1
        if not counts or max(counts.values()) < 2:
            break
        best = max(counts, key=counts.get)
        out, i = [], 0
        while i < len(tokens):
            if i + 1 < len(tokens) and (tokens[i], tokens[i + 1]) == best:
                out.append(tokens[i] + tokens[i + 1])
                i += 2
            else:
                out.append(tokens[i])
                i += 1
        tokens = out
        merges.append(best)
    return merges


# ----------------------------------------------------------------------------------------
# bpe_encode
# ----------------------------------------------------------------------------------------


def encode_reversed(text, merges):
    ids = list(text.encode("utf-8"))
    for k in reversed(range(len(merges))):
        ids = _merge(ids, tuple(merges[k]), 256 + k)
    return ids


def encode_longest_match(text, merges):
    pieces = {bytes([i]): i for i in range(256)}
    vocab = {i: bytes([i]) for i in range(256)}
    for k, (a, b) in enumerate(merges):
        vocab[256 + k] = vocab[a] + vocab[b]
        pieces.setdefault(vocab[256 + k], 256 + k)
    data, out, at = text.encode("utf-8"), [], 0
    while at < len(data):
        size = max(n for n in range(1, len(data) - at + 1) if data[at : at + n] in pieces)
        out.append(pieces[data[at : at + size]])
        at += size
    return out


def encode_first_occurrence_only(text, merges):
    ids = list(text.encode("utf-8"))
    for k, (a, b) in enumerate(merges):
        for i in range(len(ids) - 1):
            if ids[i] == a and ids[i + 1] == b:
                ids[i : i + 2] = [256 + k]
                break
    return ids


def encode_overlapping(text, merges):
    # Writes the new id for every matching position, and forgets to skip the second half of the pair.
    ids = list(text.encode("utf-8"))
    for k, (a, b) in enumerate(merges):
        out, i = [], 0
        while i < len(ids):
            if i + 1 < len(ids) and ids[i] == a and ids[i + 1] == b:
                out.append(256 + k)
            else:
                out.append(ids[i])
            i += 1
        ids = out
    return ids


def encode_ids_from_257(text, merges):
    ids = list(text.encode("utf-8"))
    for k, (a, b) in enumerate(merges):
        ids = _merge(ids, (a, b), 257 + k)  # "the first id after the 256 bytes" counted one too far
    return ids


def encode_characters(text, merges):
    ids = [ord(c) for c in text]
    for k, (a, b) in enumerate(merges):
        ids = _merge(ids, (a, b), 256 + k)
    return ids


def encode_from_the_right(text, merges):
    ids = list(text.encode("utf-8"))
    for k, (a, b) in enumerate(merges):
        out, i = [], len(ids) - 1
        while i >= 0:
            if i > 0 and ids[i - 1] == a and ids[i] == b:
                out.append(256 + k)
                i -= 2
            else:
                out.append(ids[i])
                i -= 1
        ids = out[::-1]
    return ids


# ----------------------------------------------------------------------------------------
# mask_tokens
# ----------------------------------------------------------------------------------------


def _mask(ids, mask_id, vocab_size, special_ids, generator, rate=0.15, *, skip_specials=True, shares=(0.8, 0.9),
          random_from=None, labels_for="chosen", in_place=False, unchosen_label=-100, use_global=False,
          overwrite=False, per_row_count=False):
    if not 0 < rate <= 1:
        raise ValueError(f"rate must be in (0, 1], got {rate}")
    g = None if use_global else generator

    def rand(shape):
        return torch.rand(shape, generator=g) if g is not None else torch.rand(shape)

    special = torch.isin(ids, torch.tensor(list(special_ids)))
    if per_row_count:
        chosen = torch.zeros_like(ids, dtype=torch.bool)
        n = round(rate * ids.shape[1])  # 15% of the row's length, padding included
        for b in range(ids.shape[0]):
            candidates = (~special[b]).nonzero().flatten()
            pick = candidates[torch.randperm(len(candidates), generator=generator)[:n]]
            chosen[b, pick] = True
    else:
        chosen = rand(ids.shape) < rate
        if skip_specials:
            chosen &= ~special
    u = rand(ids.shape)
    to_mask = chosen & (u < shares[0])
    to_random = chosen & (u >= shares[0]) & (u < shares[1])
    if overwrite:
        to_random = chosen & (rand(ids.shape) < 0.1)
    ordinary = torch.tensor([i for i in range(vocab_size) if i not in set(special_ids)])
    if random_from == "vocab":
        random_ids = torch.randint(vocab_size, ids.shape, generator=generator)
    elif random_from == "after-specials":
        random_ids = torch.randint(len(special_ids), vocab_size, ids.shape, generator=generator)
    elif random_from == "not-itself":  # each chosen token's own id left out of its draw
        shift = torch.randint(1, len(ordinary), ids.shape, generator=generator)
        index = torch.searchsorted(ordinary, ids.clamp(min=int(ordinary.min()), max=int(ordinary.max())))
        random_ids = ordinary[(index + shift) % len(ordinary)]
    elif random_from == "exclusive-end":
        random_ids = ordinary[torch.randint(len(ordinary) - 1, ids.shape, generator=generator)]
    else:
        random_ids = ordinary[torch.randint(len(ordinary), ids.shape, generator=generator)]
    inputs = ids if in_place else ids.clone()
    inputs[to_mask] = mask_id
    inputs[to_random] = random_ids[to_random]
    where = {"chosen": chosen, "masked": to_mask}[labels_for]
    labels = torch.where(where, ids, torch.full_like(ids, unchosen_label))
    return inputs, labels


def mask_chooses_specials(ids, mask_id, vocab_size, special_ids, generator, rate=0.15):
    return _mask(ids, mask_id, vocab_size, special_ids, generator, rate, skip_specials=False)


def mask_always_mask(ids, mask_id, vocab_size, special_ids, generator, rate=0.15):
    return _mask(ids, mask_id, vocab_size, special_ids, generator, rate, shares=(1.0, 1.0))


def mask_random_from_whole_vocabulary(ids, mask_id, vocab_size, special_ids, generator, rate=0.15):
    return _mask(ids, mask_id, vocab_size, special_ids, generator, rate, random_from="vocab")


def mask_assumes_specials_come_first(ids, mask_id, vocab_size, special_ids, generator, rate=0.15):
    return _mask(ids, mask_id, vocab_size, special_ids, generator, rate, random_from="after-specials")


def mask_random_never_itself(ids, mask_id, vocab_size, special_ids, generator, rate=0.15):
    return _mask(ids, mask_id, vocab_size, special_ids, generator, rate, random_from="not-itself")


def mask_never_draws_last_id(ids, mask_id, vocab_size, special_ids, generator, rate=0.15):
    return _mask(ids, mask_id, vocab_size, special_ids, generator, rate, random_from="exclusive-end")


def mask_labels_only_masked(ids, mask_id, vocab_size, special_ids, generator, rate=0.15):
    return _mask(ids, mask_id, vocab_size, special_ids, generator, rate, labels_for="masked")


def mask_in_place(ids, mask_id, vocab_size, special_ids, generator, rate=0.15):
    return _mask(ids, mask_id, vocab_size, special_ids, generator, rate, in_place=True)


def mask_labels_zero(ids, mask_id, vocab_size, special_ids, generator, rate=0.15):
    return _mask(ids, mask_id, vocab_size, special_ids, generator, rate, unchosen_label=0)


def mask_global_generator(ids, mask_id, vocab_size, special_ids, generator, rate=0.15):
    return _mask(ids, mask_id, vocab_size, special_ids, generator, rate, use_global=True)


def mask_random_overwrites_masks(ids, mask_id, vocab_size, special_ids, generator, rate=0.15):
    return _mask(ids, mask_id, vocab_size, special_ids, generator, rate, shares=(0.8, 0.8), overwrite=True)


def mask_counts_padding_in_rate(ids, mask_id, vocab_size, special_ids, generator, rate=0.15):
    return _mask(ids, mask_id, vocab_size, special_ids, generator, rate, per_row_count=True)


def mask_no_rate_check(ids, mask_id, vocab_size, special_ids, generator, rate=0.15):
    return _mask(ids, mask_id, vocab_size, special_ids, generator, min(max(rate, 1e-9), 1.0))


# ----------------------------------------------------------------------------------------
# causal_lm_loss
# ----------------------------------------------------------------------------------------


def loss_no_shift(logits, ids, pad_id):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1), ignore_index=pad_id)


def loss_shift_wrong_way(logits, ids, pad_id):
    V = logits.shape[-1]
    return F.cross_entropy(logits[:, 1:].reshape(-1, V), ids[:, :-1].reshape(-1), ignore_index=pad_id)


def loss_counts_padding(logits, ids, pad_id):
    V = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1))


def loss_sum(logits, ids, pad_id):
    V = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1), ignore_index=pad_id,
                           reduction="sum")


def loss_mean_of_sequence_means(logits, ids, pad_id):
    V = logits.shape[-1]
    per_sequence = []
    for b in range(ids.shape[0]):
        target = ids[b, 1:]
        if (target != pad_id).any():
            per_sequence.append(F.cross_entropy(logits[b, :-1].reshape(-1, V), target, ignore_index=pad_id))
    return torch.stack(per_sequence).mean()


def loss_masks_by_input(logits, ids, pad_id):
    log_probs = torch.log_softmax(logits[:, :-1], dim=-1)
    nll = -log_probs.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    real = ids[:, :-1] != pad_id
    return nll[real].mean()


def loss_divides_by_all(logits, ids, pad_id):
    log_probs = torch.log_softmax(logits[:, :-1], dim=-1)
    nll = -log_probs.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return (nll * (ids[:, 1:] != pad_id)).mean()


def loss_item(logits, ids, pad_id):
    V = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1), ignore_index=pad_id).item()


# ----------------------------------------------------------------------------------------
# sample_next
# ----------------------------------------------------------------------------------------


def _sample(logits, temperature=1.0, top_k=0, top_p=1.0, generator=None, *, multiply=False, k_le=False,
            crossing=True, scatter=True, validate=True, greedy=True, use_global=False, p_first=False,
            nucleus_extra=False, keep_first=True, temperature_last=False, clamp_k=True):
    if validate:
        if temperature < 0:
            raise ValueError(f"temperature must be at least 0, got {temperature}")
        if top_k < 0:
            raise ValueError(f"top_k must be at least 0, got {top_k}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if greedy and (temperature == 0 or top_k == 1):
        return logits.argmax(dim=-1)
    scores = logits if temperature_last else logits * temperature if multiply else logits / temperature

    def keep_top_k(scores):
        if 0 < top_k and (top_k < scores.shape[-1] or not clamp_k):
            kth = scores.topk(top_k, dim=-1).values[:, -1:]
            return scores.masked_fill(scores <= kth if k_le else scores < kth, float("-inf"))
        return scores

    def keep_nucleus(scores):
        if top_p >= 1:
            return scores
        probs, order = torch.softmax(scores, dim=-1).sort(dim=-1, descending=True)
        cumulative = probs.cumsum(dim=-1)
        if crossing:
            drop_sorted = cumulative - probs >= top_p
        else:
            drop_sorted = cumulative > top_p
            if keep_first:
                drop_sorted[:, 0] = False
        if nucleus_extra:  # also the token after the one that crosses top_p
            drop_sorted = torch.cat([torch.zeros_like(drop_sorted[:, :1]), drop_sorted[:, :-1]], dim=-1)
        if not scatter:
            return torch.where(drop_sorted, float("-inf"), scores.sort(dim=-1, descending=True).values)
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        return scores.masked_fill(drop, float("-inf"))

    scores = keep_top_k(keep_nucleus(scores)) if p_first else keep_nucleus(keep_top_k(scores))
    if temperature_last:
        scores = scores / temperature
    probs = torch.softmax(scores, dim=-1)
    if use_global:
        return torch.multinomial(probs, 1).squeeze(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def sample_top_k_above_vocabulary_crashes(logits, temperature=1.0, top_k=0, top_p=1.0, generator=None):
    # topk(top_k) for any positive top_k: it raises when top_k exceeds the vocabulary
    return _sample(logits, temperature, top_k, top_p, generator, clamp_k=False)


def sample_multiplies_temperature(logits, temperature=1.0, top_k=0, top_p=1.0, generator=None):
    return _sample(logits, temperature, top_k, top_p, generator, multiply=True)


def sample_top_k_drops_kth(logits, temperature=1.0, top_k=0, top_p=1.0, generator=None):
    return _sample(logits, temperature, top_k, top_p, generator, k_le=True)


def sample_nucleus_without_crossing_token(logits, temperature=1.0, top_k=0, top_p=1.0, generator=None):
    return _sample(logits, temperature, top_k, top_p, generator, crossing=False)


def sample_nucleus_one_too_many(logits, temperature=1.0, top_k=0, top_p=1.0, generator=None):
    return _sample(logits, temperature, top_k, top_p, generator, nucleus_extra=True)


def sample_nucleus_may_be_empty(logits, temperature=1.0, top_k=0, top_p=1.0, generator=None):
    # cumsum <= top_p: one token too few, and none at all when the most likely one alone passes top_p
    return _sample(logits, temperature, top_k, top_p, generator, crossing=False, keep_first=False)


def sample_temperature_after_filters(logits, temperature=1.0, top_k=0, top_p=1.0, generator=None):
    return _sample(logits, temperature, top_k, top_p, generator, temperature_last=True)


def sample_returns_sorted_positions(logits, temperature=1.0, top_k=0, top_p=1.0, generator=None):
    return _sample(logits, temperature, top_k, top_p, generator, scatter=False)


def sample_global_generator(logits, temperature=1.0, top_k=0, top_p=1.0, generator=None):
    return _sample(logits, temperature, top_k, top_p, generator, use_global=True)


def sample_no_greedy_path(logits, temperature=1.0, top_k=0, top_p=1.0, generator=None):
    return _sample(logits, temperature, top_k, top_p, generator, greedy=False)


def sample_no_validation(logits, temperature=1.0, top_k=0, top_p=1.0, generator=None):
    return _sample(logits, abs(temperature), abs(top_k), min(max(top_p, 1e-6), 1.0), generator, validate=False)


def sample_nucleus_before_top_k(logits, temperature=1.0, top_k=0, top_p=1.0, generator=None):
    return _sample(logits, temperature, top_k, top_p, generator, p_first=True)


def sample_silent_value_error(logits, temperature=1.0, top_k=0, top_p=1.0, generator=None):
    if temperature < 0 or top_k < 0 or not 0 < top_p <= 1:
        raise ValueError("bad argument")
    return _sample(logits, temperature, top_k, top_p, generator)


# ----------------------------------------------------------------------------------------
# GPTBlock
# ----------------------------------------------------------------------------------------


def _block(wiring="pre", mask="causal", norms=("norm1", "norm2"), shared_norm=False, final_norm=False,
           functional_dropout=False, use_dropout=True):
    class Block(torch.nn.Module):
        def __init__(self, d_model, h, d_ff, dropout=0.1):
            super().__init__()
            self.norm1 = LayerNorm(d_model)
            self.self_attn = MultiHeadAttention(d_model, h, dropout)
            self.dropout1 = torch.nn.Dropout(dropout)
            self.norm2 = self.norm1 if shared_norm else LayerNorm(d_model)
            self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
            self.dropout2 = torch.nn.Dropout(dropout)
            if final_norm:
                self.norm3 = LayerNorm(d_model)
            self.p = dropout

        def drop(self, z, module):
            if functional_dropout:
                return F.dropout(z, self.p)  # training=True by default, whatever the module's mode
            return module(z) if use_dropout else z

        def forward(self, x):
            allowed = {"causal": subsequent_mask(x.shape[1]), "none": None,
                       "inverted": ~subsequent_mask(x.shape[1])}[mask]
            first, second = (getattr(self, n) for n in norms)

            def attend(z):
                return self.self_attn(z, z, z, attn_mask=allowed)

            wirings = wiring if isinstance(wiring, tuple) else (wiring, wiring)
            for f, norm, dropout, wiring_ in zip((attend, self.feed_forward), (first, second),
                                                 (self.dropout1, self.dropout2), wirings):
                if wiring_ == "dropped-sum":
                    x = self.drop(x + f(norm(x)), dropout)
                elif wiring_ == "pre":
                    x = x + self.drop(f(norm(x)), dropout)
                elif wiring_ == "post":
                    x = norm(x + self.drop(f(x), dropout))
                elif wiring_ == "no-residual":
                    x = self.drop(f(norm(x)), dropout)
                elif wiring_ == "normed-residual":
                    x = norm(x)
                    x = x + self.drop(f(x), dropout)
            return self.norm3(x) if final_norm else x

    return Block


# ----------------------------------------------------------------------------------------
# generate_with_cache
# ----------------------------------------------------------------------------------------


def _generate(model, prompt, steps, *, recompute=False, prompt_mask=True, restart_positions=False, extend=True,
              feed_last=False, with_prompt=False, final_norm=True, item=False, validate=True, swap=False,
              merged=False):
    if validate and steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    cache, new, start, tokens, logits = [], prompt, 0, [], []
    with torch.no_grad():
        for step in range(steps + int(feed_last)):
            if recompute:
                step_logits = model(torch.cat([prompt, *[t.unsqueeze(1) for t in tokens]], dim=1))[:, -1]
                tokens.append(step_logits.argmax(dim=-1))
                logits.append(step_logits)
                continue
            T_new = new.shape[1]
            first = 0 if restart_positions else start
            x = model.embed(new) + model.pos_embed(torch.arange(first, first + T_new))
            mask = subsequent_mask(start + T_new)[start:] if prompt_mask else None
            for i, block in enumerate(model.blocks):
                attn = block.self_attn
                a = block.norm1(x)
                q, k, v = (split_heads(w(a), attn.h) for w in (attn.w_q, attn.w_k, attn.w_v))
                if i < len(cache):
                    if extend:
                        k, v = torch.cat([cache[i][0], k], dim=2), torch.cat([cache[i][1], v], dim=2)
                    cache[i] = (k, v)
                else:
                    cache.append((k, v))
                context, _ = scaled_dot_product_attention(q, k, v, mask if k.shape[2] == start + T_new else None)
                x = x + attn.w_o(merge_heads(context))
                x = x + block.feed_forward(block.norm2(x))
            last = x[:, -1]
            step_logits = model.head(model.norm(last) if final_norm else last)
            next_token = torch.tensor([int(step_logits.argmax())]) if item else step_logits.argmax(dim=-1)
            if step < steps:
                tokens.append(next_token)
                logits.append(step_logits)
            start += T_new
            new = tokens[-1].unsqueeze(1)
    out = torch.stack(tokens, dim=1)
    if with_prompt:
        out = torch.cat([prompt, out], dim=1)
    if swap:
        cache = [(v, k) for k, v in cache]
    if merged:
        cache = [(merge_heads(k), merge_heads(v)) for k, v in cache]
    return out, torch.stack(logits, dim=1), cache


def _generating(**mistake):
    def generate_with_cache(model, prompt, steps):
        return _generate(model, prompt, steps, **mistake)

    return generate_with_cache


MISTAKES = [
    Mistake(TRAIN, "ties go to the smallest pair", train_smallest_pair_on_ties, "you took the smallest pair",
            rule=MERGES),
    Mistake(TRAIN, "ties go to the pair seen last", train_last_of_ascending_sort, "you took the one seen last",
            rule=MERGES),
    Mistake(TRAIN, "merges pairs that occur once", train_never_stops, "occur only once", rule=MERGES),
    Mistake(TRAIN, "starts from characters", train_on_characters, "started from the characters", rule=MERGES),
    Mistake(TRAIN, "counts the pairs once", train_counts_once, "count again after every merge", rule=MERGES),
    Mistake(TRAIN, "counts without overlaps", train_counts_like_str_count, "without overlaps", rule=MERGES),
    Mistake(TRAIN, "replaces from the right", train_merges_from_the_right, "replaced the pair's occurrences from the right",
            rule=MERGES),
    Mistake(TRAIN, "accepts a negative num_merges", train_no_validation, "raise ValueError", rule="refusal"),
    Mistake(TRAIN, "merges of text pieces", train_returns_text_pairs, "not of text", rule="a list of (int, int) pairs"),
    Mistake(ENCODE, "merges in reverse order", encode_reversed, "from the last to the first", rule=IDS),
    Mistake(ENCODE, "greedy longest match", encode_longest_match, "WordPiece", rule=IDS),
    Mistake(ENCODE, "first occurrence only", encode_first_occurrence_only, "only the first occurrence", rule=IDS),
    Mistake(ENCODE, "overlapping replacements", encode_overlapping, "does not give the text back", rule=IDS),
    Mistake(ENCODE, "new ids from 257", encode_ids_from_257, "the k-th merge makes the id 256 + k", rule=IDS),
    Mistake(ENCODE, "starts from characters", encode_characters, "started from the characters", rule=IDS),
    Mistake(ENCODE, "replaces from the right", encode_from_the_right, "replaced the pairs from the right", rule=IDS),
    Mistake(MASK, "special tokens can be chosen", mask_chooses_specials, "chose the special token",
            rule="no special token chosen"),
    Mistake(MASK, "every chosen token becomes [MASK]", mask_always_mask, "only 80% do", rule="80 / 10 / 10"),
    Mistake(MASK, "random tokens from the whole vocabulary", mask_random_from_whole_vocabulary,
            "a random replacement is drawn from the ordinary ids only", rule="replacements are ordinary ids"),
    Mistake(MASK, "assumes the special ids come first", mask_assumes_specials_come_first,
            "a random replacement is drawn from the ordinary ids only", hidden_only=True, rule="replacements are ordinary ids"),
    Mistake(MASK, "never draws the last ordinary id", mask_never_draws_last_id, "not spread evenly",
            rule="replacements spread evenly"),
    Mistake(MASK, "a random replacement is never the original", mask_random_never_itself,
            "never gave back the original token", rule="80 / 10 / 10"),
    Mistake(MASK, "labels only where [MASK] was put", mask_labels_only_masked, "every chosen position gets its label",
            rule="only chosen positions change"),
    Mistake(MASK, "writes into ids", mask_in_place, "Did you write into ids itself",
            rule="labels: the original id where chosen, -100 elsewhere"),
    Mistake(MASK, "label 0 instead of -100", mask_labels_zero, "must have the label -100",
            rule="labels: the original id where chosen, -100 elsewhere"),
    Mistake(MASK, "global random generator", mask_global_generator, "never from torch's global generator",
            rule="draws only from the generator"),
    Mistake(MASK, "a second draw overwrites [MASK]s", mask_random_overwrites_masks, "Draw one number u per chosen position",
            rule="80 / 10 / 10"),
    Mistake(MASK, "15% of the padded row", mask_counts_padding_in_rate, "count only the ordinary tokens", rule="rate"),
    Mistake(MASK, "accepts any rate", mask_no_rate_check, "raise ValueError", rule="refusal"),
    Mistake(LOSS, "no shift", loss_no_shift, "there is no shift", rule="values"),
    Mistake(LOSS, "shift the wrong way", loss_shift_wrong_way, "the shift goes the wrong way", rule="values"),
    Mistake(LOSS, "padding counted", loss_counts_padding, "padding was counted", rule="values"),
    Mistake(LOSS, "sum instead of mean", loss_sum, "this is the sum", rule="values"),
    Mistake(LOSS, "mean of per-sequence means", loss_mean_of_sequence_means, "mean of per-sequence means", rule="values"),
    Mistake(LOSS, "masks by the input token", loss_masks_by_input, "instead of their target", rule="values"),
    Mistake(LOSS, "divides by every position", loss_divides_by_all, "not out of the count", rule="values"),
    Mistake(LOSS, ".item()", loss_item, "no .item()", rule=LOSS_SCALAR),
    Mistake(SAMPLE, "multiplies by the temperature", sample_multiplies_temperature, "multiplied by the temperature",
            rule="draws follow the distribution"),
    Mistake(SAMPLE, "top_k above the vocabulary crashes", sample_top_k_above_vocabulary_crashes,
            "more than the vocabulary's", rule="raises nothing"),
    Mistake(SAMPLE, "top-k drops the k-th token", sample_top_k_drops_kth, "the k-th included",
            rule="draws follow the distribution"),
    Mistake(SAMPLE, "nucleus without the crossing token", sample_nucleus_without_crossing_token,
            "left out the token that takes the total past top_p", rule="draws follow the distribution"),
    Mistake(SAMPLE, "one token too many in the nucleus", sample_nucleus_one_too_many,
            "the nucleus kept one token more", rule="draws follow the distribution"),
    Mistake(SAMPLE, "a nucleus that can be empty", sample_nucleus_may_be_empty, "the most likely token is always kept",
            rule="raises nothing"),
    Mistake(SAMPLE, "temperature after the filters", sample_temperature_after_filters,
            "the temperature was applied after top-k and top-p", rule="draws follow the distribution"),
    Mistake(SAMPLE, "returns sorted positions", sample_returns_sorted_positions, "positions in the sorted order",
            rule="draws follow the distribution"),
    Mistake(SAMPLE, "global random generator", sample_global_generator, "never from torch's global generator",
            rule="draws only from the generator"),
    Mistake(SAMPLE, "divides by a zero temperature", sample_no_greedy_path, "greedy", rule="raises nothing"),
    Mistake(SAMPLE, "accepts bad arguments", sample_no_validation, "raise ValueError", rule="refusal"),
    Mistake(SAMPLE, "nucleus before top-k", sample_nucleus_before_top_k, "taken from the whole vocabulary",
            rule="draws follow the distribution"),
    Mistake(SAMPLE, "a ValueError that names nothing", sample_silent_value_error, "say which argument is wrong",
            rule="refusal names the argument"),
    Mistake(BLOCK, "post-norm, as in chapter 4", _block(wiring="post"), "post-norm wiring", rule="values"),
    Mistake(BLOCK, "no causal mask", _block(mask="none"), "there is no causal mask", rule="values"),
    Mistake(BLOCK, "the causal mask flipped", _block(mask="inverted"), "the causal mask is flipped", rule="values"),
    Mistake(BLOCK, "no residual connections", _block(wiring="no-residual"), "the residual connections are missing",
            rule="values"),
    Mistake(BLOCK, "the residual taken after the norm", _block(wiring="normed-residual"),
            "the residual was taken after the LayerNorm", rule="values"),
    Mistake(BLOCK, "the attention's residual taken after norm1", _block(wiring=("normed-residual", "pre")),
            "the attention's residual was taken after norm1", rule="values"),
    Mistake(BLOCK, "dropout on the residual sum", _block(wiring="dropped-sum"), "dropout was applied to the residual sum",
            rule="values"),
    Mistake(BLOCK, "one LayerNorm object for both sub-layers", _block(shared_norm=True), "one and the same LayerNorm",
            rule="parameters match"),
    Mistake(BLOCK, "norm1 before both sub-layers", _block(norms=("norm1", "norm1")), "norm1 served both sub-layers",
            rule="values"),
    Mistake(BLOCK, "norms swapped", _block(norms=("norm2", "norm1")), "norm1 and norm2 are swapped", rule="values"),
    Mistake(BLOCK, "a final LayerNorm in every block", _block(final_norm=True), "belongs to the model", rule="parameters match"),
    Mistake(BLOCK, "F.dropout, on in eval mode", _block(functional_dropout=True), "dropout is active in eval mode",
            rule="values"),
    Mistake(BLOCK, "dropout1 and dropout2 never used", _block(use_dropout=False), "dropout1 and dropout2 are never used",
            rule="values"),
    Mistake(GENERATE, "reads the whole sequence at every step", _generating(recompute=True), "read positions again",
            rule="raises nothing"),
    Mistake(GENERATE, "no causal mask over the prompt", _generating(prompt_mask=False), "without a causal mask", rule="logits"),
    Mistake(GENERATE, "positions restart at 0", _generating(restart_positions=True), "got position 0", rule="logits"),
    Mistake(GENERATE, "the cache never grows", _generating(extend=False), "the cache never grew", rule="logits"),
    Mistake(GENERATE, "reads the last token too", _generating(feed_last=True), "one more than were needed",
            rule="cache is (B, h, T0 + steps - 1, d_k)"),
    Mistake(GENERATE, "returns the prompt with the tokens", _generating(with_prompt=True), "they begin with the prompt",
            rule="tokens are (B, steps)"),
    Mistake(GENERATE, "no final LayerNorm", _generating(final_norm=False), "the final LayerNorm was skipped", rule="logits"),
    Mistake(GENERATE, "one row only (.item())", _generating(item=True), "no .item()", rule="raises nothing"),
    Mistake(GENERATE, "accepts steps=0", _generating(validate=False), "raise ValueError", rule="refusal"),
    Mistake(GENERATE, "the cache as (v, k)", _generating(swap=True), "store each pair as (k, v)", rule="cached keys and values"),
    Mistake(GENERATE, "the cache with the heads merged", _generating(merged=True), "keep the heads apart",
            rule="cache is (B, h, T0 + steps - 1, d_k)"),
]
