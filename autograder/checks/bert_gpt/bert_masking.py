"""Chapter 7's BERT: ``mask_tokens``, the masked-language-model corruption (80 / 10 / 10).

Oracle: the probabilities the rules give, against which the learner's draws over many seeded rows
must stay within the binomial bounds of :mod:`.draws`.
"""
from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import torch

from ...framework import (
    INVALID,
    Case,
    Check,
    CheckFailed,
    Stage,
    Stated,
    expect_tensor,
    expect_tuple,
    rule,
    seeded,
)
from ...messages import N_, tr
from .draws import RETURNED, bound, seed_groups, seeded_generator


def _bert_batch(g: torch.Generator, B: int, T: int, ordinary: list[int], pad: int, cls: int, sep: int) -> torch.Tensor:
    """(B, T) sentence pairs as BERT reads them: [CLS] a [SEP] b [SEP], then padding."""
    pool = torch.tensor(ordinary)
    ids = pool[torch.randint(len(pool), (B, T), generator=g)]  # (B, T)
    lengths = torch.randint(max(5, T // 2), T + 1, (B,), generator=g).tolist()
    lengths[0] = T  # one full row
    for b, n in enumerate(lengths):
        middle = int(torch.randint(2, n - 2, (1,), generator=g))
        ids[b, 0], ids[b, middle], ids[b, n - 1] = cls, sep, sep
        ids[b, n:] = pad
    return ids


#: the stages of the choice that a learner's values must reach for a location to be given
FIRST_DRAW = N_("the first uniform draw, torch.rand(ids.shape, generator=generator)")
BELOW_RATE = N_("the positions whose first draw is below rate")


def _label(shape: tuple, vocab_size: int, specials: Sequence[int], mask: int, seed: int, rate: float | None) -> str:
    """A case's label: its ids, its arguments and its generator's seed."""
    if rate is None:
        text = tr("ids {shape} (sentence pairs with [CLS], [SEP] and padding), vocab_size={vocab_size}, "
                  "special_ids={specials}, mask_id={mask}, generator seeded with {seed}")
    else:
        text = tr("ids {shape} (sentence pairs with [CLS], [SEP] and padding), vocab_size={vocab_size}, "
                  "special_ids={specials}, mask_id={mask}, generator seeded with {seed}, rate={rate}")
    return text.format(shape=tuple(shape), vocab_size=vocab_size, specials=list(specials), mask=mask, seed=seed,
                       rate=rate)


class MaskTokensCheck(Check):
    function = "mask_tokens"
    follows_device = False  # it draws from the caller\'s generator, which lives on the CPU
    oracle = N_("BERT's rule: the exact properties, and its rates within a 5-sigma binomial bound")
    invalid_hint = N_("a rate outside (0, 1] means nothing: raise ValueError with a message that names rate.")
    invalid_returned = RETURNED
    invalid_argument = "rate"

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(B, T, vocab_size, specials=(0, 1, 2, 3), seed=0, rate=None, tag="", ids=None):
            pad, cls, sep, mask = specials[:4]
            ordinary = [i for i in range(vocab_size) if i not in specials]
            if ids is None:
                ids = _bert_batch(g, B, T, ordinary, pad, cls, sep)
            kwargs = {"mask_id": mask, "vocab_size": vocab_size, "special_ids": list(specials),
                      "generator": seeded_generator(seed)}
            if rate is not None:
                kwargs["rate"] = rate
            label = _label(ids.shape, vocab_size, specials, mask, seed, rate)
            return Case(label, (ids,), kwargs, tag), ids

        def reseeded(c: Case, seed: int) -> str:
            """The label of ``c`` with a generator of another seed."""
            kw = c.kwargs
            return _label(c.args[0].shape, kw["vocab_size"], kw["special_ids"], kw["mask_id"], seed, kw.get("rate"))

        main, _ = case(96, 64, 40, seed=1, tag="main")
        out = [
            main,
            Case(main.label, main.args, dict(main.kwargs), "again"),
            Case(reseeded(main, 2), main.args,
                 dict(main.kwargs) | {"generator": seeded_generator(2)}, "other-seed"),
            case(160, 100, 12, seed=3, rate=1.0, tag="all")[0],
            case(48, 40, 30, specials=(0, 1, 2, 3, 4), seed=4, rate=0.4)[0],
            # Two ordinary ids: a random replacement gives the original token back half the time, as the text allows.
            case(200, 60, 6, seed=6, rate=1.0, tag="two ordinary ids")[0],  # english: a tag, matched in code
            case(4, 12, 20, seed=5, rate=0.0, tag="invalid")[0],
            case(4, 12, 20, seed=5, rate=1.5, tag="invalid")[0],
        ]
        if hidden:
            bert_like = (0, 101, 102, 103, 100)  # [PAD], [CLS], [SEP], [MASK], [UNK], as in BERT's vocabulary
            hidden_main, _ = case(128, 80, 120, specials=bert_like, seed=11, tag="main")
            out += [
                hidden_main,
                Case(hidden_main.label, hidden_main.args, dict(hidden_main.kwargs), "again"),
                Case(reseeded(hidden_main, 12), hidden_main.args,
                     dict(hidden_main.kwargs) | {"generator": seeded_generator(12)}, "other-seed"),
                case(200, 100, 10, specials=(7, 0, 9, 3), seed=13, rate=1.0, tag="all")[0],
                case(64, 50, 60, seed=14, rate=0.05)[0],
                case(3, 8, 20, seed=15, rate=-0.1, tag="invalid")[0],
            ]
        return out

    def stages(self, case: Case) -> list[Stage]:
        """The choice of the positions, up to which a learner's values are certain: the special positions, the
        first uniform draw from the generator and the positions it chooses (the final stage). What follows it is
        not: a right answer may draw the 80 / 10 / 10 numbers and the replacements in another order or shape (only
        for the chosen positions, say), and it writes the inputs in place, which the trace does not see. So the
        values are located only where they part before the choice is made (:meth:`where_values_part`). The first
        draw is torch.rand(ids.shape) in float32 or float64 (torch.bernoulli draws the same numbers). With rate=1
        every ordinary position is chosen whatever the draw: nothing there tells a right choice from a wrong one."""
        (ids,) = case.args
        rate = case.kwargs.get("rate", 0.15)
        if case.tag == INVALID or rate >= 1:
            return []
        special = torch.isin(ids, torch.tensor(sorted(set(case.kwargs["special_ids"])), dtype=ids.dtype))  # (B, T)
        seed = case.kwargs["generator"].kwargs["seed"]
        drawn = [torch.rand(ids.shape, generator=seeded(seed), dtype=dtype) for dtype in (torch.float32, torch.float64)]
        below = [u < rate for u in drawn]
        return [
            Stage.of(tr("the positions of the special tokens (or of the ordinary ones), torch.isin(ids, special_ids)"),
                     special, ~special),
            Stage(tr(FIRST_DRAW), tuple(drawn)),
            Stage(tr(BELOW_RATE), tuple(below)),
            Stage(tr("the chosen positions: below rate, and not a special token"), tuple(b & ~special for b in below)),
        ]

    def where_values_part(self, case: Case, seen: Any) -> str:
        """Where the learner's values part from the choice of the positions, when they do after the first draw
        agrees: a first draw of another kind, or one for something else, may be right, and a value after the
        choice may be made in another right way (:meth:`stages`)."""
        said = super().where_values_part(case, seen)
        # the stage's name as the sentence gives it, in parentheses (full-width ones in Chinese)
        names = [tr(name) for name in (FIRST_DRAW, BELOW_RATE)]
        return said if any(f"({name})" in said or f"（{name}）" in said for name in names) else ""

    #: a crash is not followed back: the values made after the choice are none of the stages', so an earlier
    #: line blamed could be a right one
    crash_followed_back = False

    @staticmethod
    def _draws(case: Case, result: Any) -> SimpleNamespace:
        """What the rules read: the case's ids and arguments, the learner's inputs and labels, and which
        positions were special and which chosen."""
        (ids,) = case.args
        kw = case.kwargs
        specials = set(kw["special_ids"])
        ordinary = [i for i in range(kw["vocab_size"]) if i not in specials]
        inputs, labels = result
        return SimpleNamespace(
            ids=ids, mask_id=kw["mask_id"], rate=kw.get("rate", 0.15), specials=specials, ordinary=ordinary,
            K=len(ordinary), inputs=inputs, labels=labels,
            is_special=torch.isin(ids, torch.tensor(sorted(specials))),  # (B, T)
            chosen=labels != -100,  # (B, T)
        )

    @staticmethod
    def _first(where: torch.Tensor) -> tuple[int, int]:
        b, t = where.nonzero()[0].tolist()
        return b, t

    @rule("long tensors of ids' shape")
    def _two_long_tensors(self, case: Case, result: Any) -> None:
        (ids,) = case.args
        inputs, labels = expect_tuple(result, 2, "`mask_tokens`", case, "inputs, labels")
        for name, t in (("inputs", inputs), ("labels", labels)):
            t = expect_tensor(t, tr("`{function}`'s {name}").format(function=self.function, name=name), case)
            if tuple(t.shape) != tuple(ids.shape):
                raise CheckFailed(tr(
                    "`{function}`'s {name} have shape {shape} on the case {case}; they must have the shape of ids, "
                    "{expected}: one entry per position."
                ).format(function=self.function, name=name, shape=tuple(t.shape), case=case.label,
                         expected=tuple(ids.shape)))
            if t.dtype != torch.long:
                raise CheckFailed(tr(
                    "`{function}`'s {name} have dtype {dtype} on the case {case}; token ids and labels are torch.long, "
                    "the dtype of ids (embeddings and F.cross_entropy need it)."
                ).format(function=self.function, name=name, dtype=t.dtype, case=case.label))

    @rule("labels: the original id where chosen, -100 elsewhere", returns=(1, "the labels"))
    def _labels(self, case: Case, result: Any) -> None:
        d = self._draws(case, result)
        ids, labels = d.ids, d.labels
        wrong_label = d.chosen & (labels != ids)
        if wrong_label.any():
            b, t = self._first(wrong_label)
            values = labels[wrong_label].unique().tolist()
            if len(values) == 1 and (labels == values[0]).sum() > 0.5 * labels.numel():
                raise CheckFailed(tr(
                    "`{function}`'s labels are {value} at most positions on the case {case}: a position that was not "
                    "chosen must have the label -100, the value F.cross_entropy ignores, and a chosen one its original id."
                ).format(function=self.function, value=values[0], case=case.label))
            if labels[b, t] == d.mask_id or (labels[wrong_label] == d.inputs[wrong_label]).all():
                raise CheckFailed(tr(
                    "`{function}`'s label at {position} is {label} on the case {case}, where the original token was "
                    "{original}: the labels were taken after the replacements were written. Did you write into ids "
                    "itself (inputs = ids, then inputs[...] = mask_id)? Clone ids first, and take the labels from the "
                    "original ids."
                ).format(function=self.function, position=(b, t), label=int(labels[b, t]), case=case.label,
                         original=int(ids[b, t])))
            raise CheckFailed(tr(
                "`{function}`'s label at {position} is {label} on the case {case}, where the original token was "
                "{original}: a chosen position's label is its original id, every other one is -100."
            ).format(function=self.function, position=(b, t), label=int(labels[b, t]), case=case.label,
                     original=int(ids[b, t])))

    @rule("no special token chosen", returns=(1, "the labels"))
    def _no_special_chosen(self, case: Case, result: Any) -> None:
        d = self._draws(case, result)
        if (d.chosen & d.is_special).any():
            b, t = self._first(d.chosen & d.is_special)
            raise CheckFailed(tr(
                "`{function}` chose the special token {token} at {position} on the case {case}: special tokens (those "
                "in special_ids: padding, [CLS], [SEP], ...) are never chosen. Choose only among the positions whose "
                "id is not in special_ids (torch.isin helps)."
            ).format(function=self.function, token=int(d.ids[b, t]), position=(b, t), case=case.label))

    @rule("only chosen positions change", returns=(0, "the inputs"))
    def _only_chosen_change(self, case: Case, result: Any) -> None:
        d = self._draws(case, result)
        ids, inputs, chosen, mask_id = d.ids, d.inputs, d.chosen, d.mask_id
        changed = ~chosen & (inputs != ids)
        if changed.any():
            b, t = self._first(changed)
            hint = ""
            if (inputs[changed] != mask_id).all() and chosen.any() and (inputs[chosen] == mask_id).all():
                hint = tr(" It looks as if only the [MASK] positions got a label: every chosen position gets its "
                          "label, whether it became [MASK], a random token or stayed as it was.")
            raise CheckFailed(tr(
                "`{function}` changed the input at {position} from {before} to {after} on the case {case}, where the "
                "label is -100 (not chosen). Only chosen positions may change; draw the chosen positions once and use "
                "that one mask for the inputs and the labels.{hint}"
            ).format(function=self.function, position=(b, t), before=int(ids[b, t]), after=int(inputs[b, t]),
                     case=case.label, hint=hint))

    @rule("replacements are ordinary ids", returns=(0, "the inputs"))
    def _ordinary_replacements(self, case: Case, result: Any) -> None:
        d = self._draws(case, result)
        bad_draw = d.chosen & (d.inputs != d.mask_id) & torch.isin(d.inputs, torch.tensor(sorted(d.specials)))
        if bad_draw.any():
            b, t = self._first(bad_draw)
            raise CheckFailed(tr(
                "`{function}` put the special token {token} at {position} on the case {case}: a random replacement is "
                "drawn from the ordinary ids only, never a special one. Draw an index into the list of ordinary ids "
                "(torch.randint(len(ordinary), ..., generator=generator))."
            ).format(function=self.function, token=int(d.inputs[b, t]), position=(b, t), case=case.label))

    # The rates. Counts of independent draws: binomial, judged with a 5-sigma bound.
    @rule("rate", about=("rate",))
    def _rate(self, case: Case, result: Any) -> None:
        d = self._draws(case, result)
        rate = d.rate
        n_candidates, n_chosen = int((~d.is_special).sum()), int(d.chosen.sum())
        if rate == 1.0:
            if n_chosen != n_candidates:
                raise CheckFailed(tr(
                    "`{function}` chose {chosen} of the {candidates} ordinary tokens on the case {case}: with rate=1.0 "
                    "every ordinary token is chosen. Choose each with probability rate, e.g. torch.rand(...) < rate."
                ).format(function=self.function, chosen=n_chosen, candidates=n_candidates, case=case.label))
        else:
            low, high = n_candidates * rate - bound(n_candidates, rate), n_candidates * rate + bound(n_candidates, rate)
            if not low <= n_chosen <= high:
                share = n_chosen / max(1, d.ids.numel())
                hint = (tr(" That is about rate times all positions: count only the ordinary tokens (specials and "
                           "padding are never candidates), and choose each of them with probability rate.")
                        if abs(share - rate) < abs(n_chosen / max(1, n_candidates) - rate) else
                        tr(" Choose each ordinary token independently with probability rate: torch.rand(ids.shape, "
                           "generator=generator) < rate, restricted to the ordinary positions."))
                raise CheckFailed(tr(
                    "`{function}` chose {chosen} of the {candidates} ordinary tokens ({share}) on the case {case}, where "
                    "rate={rate} expects between {low} and {high} (a 5-sigma bound).{hint}"
                ).format(function=self.function, chosen=n_chosen, candidates=n_candidates,
                         share=f"{n_chosen / n_candidates:.1%}", case=case.label, rate=rate, low=f"{max(low, 0):.0f}",
                         high=f"{high:.0f}", hint=hint))

    @rule("80 / 10 / 10", returns=(0, "the inputs"))
    def _shares(self, case: Case, result: Any) -> None:
        """The shares of the chosen tokens that became [MASK], another token, or stayed (on 200 chosen or more)."""
        d = self._draws(case, result)
        chosen, inputs, ids, K = d.chosen, d.inputs, d.ids, d.K
        n_chosen = int(chosen.sum())
        if n_chosen < 200:
            return
        masked = int((chosen & (inputs == d.mask_id)).sum())
        same = int((chosen & (inputs == ids)).sum())
        other = n_chosen - masked - same
        p_same = 0.1 + 0.1 / K  # left alone, or replaced by itself
        p_other = 0.1 * (K - 1) / K
        shares = tr("{masked} became [MASK], {other} another token, {same} stayed as they were").format(
            masked=masked, other=other, same=same)
        one_draw = tr(" Draw one number u per chosen position: u < 0.8 gives [MASK], 0.8 <= u < 0.9 a random ordinary "
                      "token, the rest stay as they are (a second draw that overwrites some [MASK]s changes the shares).")

        def outside(count: int, p: float) -> bool:
            return abs(count - n_chosen * p) > bound(n_chosen, p)

        if outside(masked, 0.8):
            hint = (tr("every chosen token became [MASK]; only 80% do: 10% get a random ordinary token and 10% keep "
                       "their own.")
                    if masked == n_chosen else
                    tr("80% of the chosen tokens become [MASK].{draw}").format(draw=one_draw))
            raise CheckFailed(tr(
                "`{function}`: of the {chosen} chosen tokens on the case {case}, {shares}; about {expected} (80%, within "
                "{bound}) should have become [MASK]: {hint}"
            ).format(function=self.function, chosen=n_chosen, case=case.label, shares=shares,
                     expected=f"{0.8 * n_chosen:.0f}", bound=f"{bound(n_chosen, 0.8):.0f}", hint=hint))
        if outside(other, p_other) and not outside(other, 0.1) and not outside(same, 0.1):
            raise CheckFailed(tr(
                "`{function}`: of the {chosen} chosen tokens on the case {case}, {shares}; about {expected} (within "
                "{bound}) should have become another token: a random replacement never gave back the original token, "
                "but it is drawn from all {K} ordinary ids, the original included, so 1 time in {K} it is the token "
                "itself, which then stays as it was."
            ).format(function=self.function, chosen=n_chosen, case=case.label, shares=shares,
                     expected=f"{p_other * n_chosen:.0f}", bound=f"{bound(n_chosen, p_other):.0f}", K=K))
        if outside(other, p_other):
            raise CheckFailed(tr(
                "`{function}`: of the {chosen} chosen tokens on the case {case}, {shares}; about {expected} (within "
                "{bound}) should have been replaced by a random ordinary token, 10% of the chosen ones (a random draw "
                "that happens to give the original token leaves it as it was).{draw}"
            ).format(function=self.function, chosen=n_chosen, case=case.label, shares=shares,
                     expected=f"{p_other * n_chosen:.0f}", bound=f"{bound(n_chosen, p_other):.0f}", draw=one_draw))
        if outside(same, p_same):
            raise CheckFailed(tr(
                "`{function}`: of the {chosen} chosen tokens on the case {case}, {shares}; about {expected} (within "
                "{bound}) should have kept their own id: 10%, plus the random draws that happen to give the original "
                "token.{draw}"
            ).format(function=self.function, chosen=n_chosen, case=case.label, shares=shares,
                     expected=f"{p_same * n_chosen:.0f}", bound=f"{bound(n_chosen, p_same):.0f}", draw=one_draw))

    @rule("replacements spread evenly", returns=(0, "the inputs"))
    def _even_replacements(self, case: Case, result: Any) -> None:
        """Each ordinary id is an equally likely replacement (on 200 chosen tokens or more)."""
        d = self._draws(case, result)
        chosen, ids, inputs, ordinary, K = d.chosen, d.ids, d.inputs, d.ordinary, d.K
        if int(chosen.sum()) < 200:
            return
        for v in ordinary:
            could = int((chosen & (ids != v)).sum())
            drawn = int((chosen & (ids != v) & (inputs == v)).sum())
            p = 0.1 / K
            if abs(drawn - could * p) > bound(could, p) and could * p > 20:
                hint = (tr(" It is the largest ordinary id: the upper end of torch.randint(low, high) is excluded.")
                        if v == max(ordinary) and drawn == 0 else "")
                raise CheckFailed(tr(
                    "`{function}`'s random replacements are not spread evenly over the ordinary ids on the case {case}: "
                    "the id {id} replaced a chosen token {drawn} times, where about {expected} (within {bound}) were "
                    "expected. Draw uniformly from all the ids of range(vocab_size) that are not in special_ids.{hint}"
                ).format(function=self.function, case=case.label, id=v, drawn=drawn, expected=f"{could * p:.0f}",
                         bound=f"{bound(could, p):.0f}", hint=hint))

    rules = (_two_long_tensors, _labels, _no_special_chosen, _only_chosen_change, _ordinary_replacements, _rate, _shares,
             _even_replacements)

    @rule("draws only from the generator")
    def _from_the_generator(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        for group in seed_groups(cases, results):
            main_case, (inputs, labels) = group["main"]
            if "again" in group:
                again_inputs, again_labels = group["again"][1]
                if not (torch.equal(inputs, again_inputs) and torch.equal(labels, again_labels)):
                    raise CheckFailed(tr(
                        "`{function}` gave different results for the same arguments and a generator with the same seed "
                        "({case}): draw every random number from the generator passed in (torch.rand(shape, "
                        "generator=generator), torch.randint(n, shape, generator=generator)), never from torch's global "
                        "generator."
                    ).format(function=self.function, case=main_case.label))
            if "other-seed" in group:
                other_inputs, other_labels = group["other-seed"][1]
                if torch.equal(inputs, other_inputs) and torch.equal(labels, other_labels):
                    raise CheckFailed(tr(
                        "`{function}` gave the same result with generators of different seeds (the case {case}, and the "
                        "same with another seed): the random choices must come from the generator passed in, not from "
                        "torch's global generator or a generator of your own."
                    ).format(function=self.function, case=main_case.label))

    rules_across = (_from_the_generator,)


# What the instructions state, and the visible case that holds a learner to it. The base class's rules
# (Check.judge_effects) are not repeated here, except that ids stays unchanged, which the exercise
# states and this check names in its own words.
STATED = {
    "mask_tokens": (
        Stated("ids is not modified", "main", "Did you write into ids itself"),
        Stated("a special token is never chosen", "main", "chose the special token"),
        Stated("the rate applies to the ordinary tokens only", "main", "count only the ordinary tokens"),
        Stated("one uniform number per chosen position decides 80/10/10", "main",
               "Draw one number u per chosen position"),
        Stated("a random replacement is an ordinary id", "main",
               "a random replacement is drawn from the ordinary ids only"),
        Stated("a random replacement may by chance be the original token", "two ordinary ids",
               "never gave back the original token"),
        Stated("every chosen position gets its original id as label", "main", "every chosen position gets its label"),
        Stated("the other positions get the label -100", "main", "must have the label -100"),
        Stated("everything is drawn from generator", "seeded with 1", "never from torch's global generator"),
        Stated("rate=1.0 is valid", "all", "This case is valid"),
        Stated("a rate outside (0, 1] raises ValueError", "invalid", "raise ValueError"),
        Stated("that ValueError names rate", "invalid", "say which argument is wrong"),
    ),
}
