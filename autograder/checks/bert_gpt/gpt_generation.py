"""Chapter 7's GPT, generating: ``sample_next`` and ``generate_with_cache``.

Oracles: the top-k / top-p distribution computed token by token (:mod:`autograder.oracles.sampling`),
against which thousands of seeded draws per row must stay within a binomial bound; and the toy
GPT read without a cache, step by step (:mod:`autograder.oracles.gpt`).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from harness.observe import MAX_VALUE_ELEMENTS

from ... import toys
from ...framework import (
    INVALID,
    WHOLE_RESULT,
    Case,
    Check,
    CheckFailed,
    Hint,
    Opaque,
    Provided,
    Stage,
    Stated,
    expect_close,
    expect_dtype,
    expect_shape,
    expect_tensor,
    expect_tuple,
    matches,
    named_failure,
    opaque_kind,
    raised_text,
    rule,
    where_it_differs,
)
from ...messages import N_, tr
from ...oracles.gpt import generate_cached, generate_plain
from ...oracles.layers import split_heads
from ...oracles.sampling import nucleus_margin, sampling_distribution, sorted_positions, top_ids
from .draws import RETURNED, bound, seed_groups, seeded_generator


class SampleNextCheck(Check):
    function = "sample_next"
    follows_device = False  # it draws from the caller\'s generator, which lives on the CPU
    oracle = N_("the renormalised top-k / top-p distribution, over thousands of seeded draws per row "
                "(a 5-sigma binomial bound per token), and argmax where the choice is greedy")
    invalid_hint = N_("raise ValueError with a message that names the argument that is wrong.")
    invalid_returned = RETURNED
    hints = (
        Hint((), N_("A temperature of 0, or top_k=1, is greedy decoding: return logits.argmax(dim=-1) without dividing "
                    "by the temperature or drawing."), when=lambda case, result: case.tag == "greedy"),
        Hint((), lambda name, case, result: tr(
            "top_k={top_k} is more than the vocabulary's {V} tokens: the exercise keeps every token then, as top_k=0 "
            "does (topk cannot take more elements than a row has).").format(
                top_k=case.kwargs['top_k'], V=case.args[0].shape[-1]),
            when=lambda case, result: case.tag == "top_k above V"),
        Hint("RuntimeError", lambda name, case, result: (
            (tr("some row kept no token at all: the most likely token is always kept, even when its probability alone "
                "passes top_p (keep a token when the tokens more likely than it hold less than top_p together: "
                "cumsum - probs < top_p, not cumsum <= top_p). ") if case.kwargs.get("top_p", 1.0) < 1 else "")
            + tr("torch.multinomial needs, in every row, non-negative probabilities with a positive sum: keep at least "
                 "the most likely token, and give removed tokens probability 0 (logit -inf before the softmax), not "
                 "NaN.")),
            containing=("multinomial", "probability tensor")),
    )

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def describe(n_rows: int, V: int, n: int, shown: list[str], seed: int) -> str:
            """A case's label: its logits, the settings given and the generator's seed."""
            if shown:
                return tr("logits ({rows}, {V}): {n_rows} random rows, each repeated {n} times, {settings}, generator "
                          "seeded with {seed}").format(rows=n_rows * n, V=V, n_rows=n_rows, n=n,
                                                       settings=", ".join(shown), seed=seed)
            return tr("logits ({rows}, {V}): {n_rows} random rows, each repeated {n} times, generator seeded with "
                      "{seed}").format(rows=n_rows * n, V=V, n_rows=n_rows, n=n, seed=seed)

        #: each label's case described again with another seed
        reseeded: dict[str, Callable[[int], str]] = {}

        def case(n_rows, V, n, seed, temperature=None, top_k=None, top_p=None, tag="", scale=1.5, rows_from=None):
            kwargs: dict[str, Any] = {"generator": seeded_generator(seed)}
            shown = []
            for key, value in (("temperature", temperature), ("top_k", top_k), ("top_p", top_p)):
                if value is not None:
                    kwargs[key] = value
                    shown.append(f"{key}={value}")
            label = describe(n_rows, V, n, shown, seed)
            reseeded[label] = lambda other: describe(n_rows, V, n, shown, other)
            # Rows whose nucleus ends within rounding of top_p have no one right answer: drawn again.
            for _ in range(100):
                rows = torch.randn(n_rows, V, generator=rows_from or g, dtype=torch.float64) * scale  # (n_rows, V)
                logits = rows.repeat_interleave(n, dim=0).float()  # (R * n, V): each row drawn n times
                c = Case(label, (logits,), kwargs, tag)
                t, k, p = self._settings(c) if tag != "invalid" else (0, 0, 1.0)
                if t <= 0 or all(nucleus_margin(r, t, k, p) >= 1e-4 for r in logits[::n].double().tolist()):
                    return c
            raise RuntimeError(tr("grader error: top_p sits on a boundary in {case}, draw after draw").format(case=label))

        main = case(4, 12, 5000, seed=1, tag="main")
        out = [
            main,
            Case(main.label, main.args, dict(main.kwargs), "again"),
            Case(reseeded[main.label](2), main.args,
                 dict(main.kwargs) | {"generator": seeded_generator(2)}, "other-seed"),
            case(3, 10, 5000, seed=3, temperature=0.5),
            case(3, 10, 5000, seed=4, temperature=2.0),
            case(3, 16, 5000, seed=5, top_k=4),
            case(3, 16, 5000, seed=6, top_p=0.7),
            case(3, 16, 5000, seed=7, temperature=0.8, top_k=6, top_p=0.6),
            case(5, 9, 1, seed=8, temperature=0, top_k=3, tag="greedy"),
            case(5, 9, 1, seed=9, temperature=1.5, top_k=1, tag="greedy"),
            case(2, 6, 1, seed=10, temperature=-1.0, tag="invalid"),
            case(2, 6, 1, seed=10, top_k=-2, tag="invalid"),
            case(2, 6, 1, seed=10, top_p=0.0, tag="invalid"),
            case(2, 6, 1, seed=10, top_p=1.5, tag="invalid"),
        ]
        # A high temperature with both filters, where the order of the three steps shows: drawn from a generator of
        # its own, so that the other cases keep their rows.
        out.insert(7, case(3, 16, 5000, seed=21, temperature=2.5, top_k=8, top_p=0.5,
                           rows_from=self.generator(hidden, "high temperature")))
        # The text says a top_k of at least the vocabulary's size keeps every token: a visible case, rows of its own.
        out.insert(8, case(3, 10, 5000, seed=23, top_k=25, tag="top_k above V",
                           rows_from=self.generator(hidden, "top_k above V")))
        if hidden:
            hidden_main = case(3, 20, 5000, seed=11, temperature=1.2, tag="main")
            out += [
                hidden_main,
                Case(hidden_main.label, hidden_main.args, dict(hidden_main.kwargs), "again"),
                Case(reseeded[hidden_main.label](12), hidden_main.args,
                     dict(hidden_main.kwargs) | {"generator": seeded_generator(12)}, "other-seed"),
                case(3, 30, 5000, seed=13, top_k=30),
                case(4, 25, 4000, seed=14, temperature=0.7, top_k=10),
                case(3, 25, 5000, seed=15, temperature=1.5, top_p=0.9),
                case(3, 12, 5000, seed=16, top_p=0.3, scale=2.5),
                case(3, 40, 5000, seed=17, temperature=0.6, top_k=12, top_p=0.75),
                case(3, 14, 5000, seed=18, top_k=5, top_p=0.95),
                case(7, 50, 1, seed=19, temperature=0.0, tag="greedy"),
                case(2, 8, 1, seed=20, temperature=-0.5, top_k=2, tag="invalid"),
                case(2, 8, 1, seed=20, top_p=-0.2, tag="invalid"),
            ]
        return out

    def stages(self, case: Case) -> list[Stage]:
        """What is certain before the draw: the scaled logits, the filtered ones with -inf, the probabilities
        (the last stage: the draw itself may differ between right answers, drawn from sorted probabilities, say,
        and is judged by its counts). Nothing for a case whose logits the trace keeps by their shape only (the
        statistical cases with 16 tokens or 20000 rows): with no value of the learner's to compare, every one of
        them would look wrong."""
        (logits,) = case.args
        if case.tag == INVALID or logits.numel() > MAX_VALUE_ELEMENTS:
            return []
        temperature, top_k, top_p = self._settings(case)
        x = logits.double()
        if temperature == 0 or top_k == 1:
            return [Stage.of(tr("the most likely token of each row, logits.argmax(dim=-1)"), x.argmax(dim=-1))]
        scores = x / temperature  # (B, V)
        out = [] if temperature == 1 else [Stage.of(tr("the logits (as float64)"), x)]
        out.append(Stage.of(tr("the scaled logits, logits / temperature (temperature={temperature})").format(
            temperature=temperature), scores))
        V = scores.shape[-1]
        if 0 < top_k < V:
            largest = scores.topk(top_k, dim=-1).values  # (B, top_k)
            kth = largest[:, -1:]  # (B, 1)
            below = scores < kth
            out += [Stage.of(tr("the {top_k} largest scaled logits of each row (the k-th is the smallest kept)").format(
                top_k=top_k), kth, kth[:, 0], largest, scores.sort(dim=-1, descending=True).values),
                    Stage.of(tr("the tokens below the k-th largest, to remove"), below, ~below)]
            scores = scores.masked_fill(below, float("-inf"))
            out.append(Stage.of(tr("the scaled logits after top-k (top_k={top_k}), -inf where a token is removed").format(
                top_k=top_k), scores))
        if top_p < 1:
            probs = torch.softmax(scores, dim=-1)
            ranked, order = probs.sort(dim=-1, descending=True)
            running = ranked.cumsum(dim=-1)
            ahead = running - ranked  # the mass of the tokens more likely than each
            drop_sorted = ahead >= top_p
            drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)  # vocabulary order
            out += [Stage.of(tr("the probabilities of the tokens kept so far, softmax of those logits"), probs),
                    # the order is certain only where no two probabilities tie (the zeros of removed tokens do)
                    Stage(tr("those probabilities sorted from the most likely down"),
                          (ranked,) + ((order,) if bool((probs > 0).all()) else ())),
                    Stage.of(tr("their running sum, cumsum(dim=-1)"), running),
                    Stage.of(tr("the probability of the tokens more likely than each, cumsum - probs"), ahead),
                    Stage.of(tr("the sorted tokens to remove, those with top_p={top_p} or more ahead of them").format(
                        top_p=top_p), drop_sorted, ~drop_sorted),
                    Stage.of(tr("the tokens to remove, in vocabulary order"), drop, ~drop)]
            scores = scores.masked_fill(drop, float("-inf"))
            out.append(Stage.of(tr("the logits after top-p (top_p={top_p}), -inf where a token is removed").format(
                top_p=top_p), scores))
        final = torch.softmax(scores, dim=-1)
        out.append(Stage.of(tr("the probabilities to draw from, softmax of the kept logits (0 where removed)"), final,
                            final.sort(dim=-1, descending=True).values))
        return out

    def wrong_argument(self, case: Case) -> str:
        temperature, top_k, _ = self._settings(case)
        return "temperature" if temperature < 0 else "top_k" if top_k < 0 else "top_p"

    @staticmethod
    def _settings(case: Case) -> tuple[float, int, float]:
        return (case.kwargs.get("temperature", 1.0), case.kwargs.get("top_k", 0), case.kwargs.get("top_p", 1.0))

    @rule("one id per row", returns=(WHOLE_RESULT, "the ids"))
    def _one_per_row(self, case: Case, result: Any) -> None:
        drawn = expect_tensor(result, tr("`{function}`'s result").format(function=self.function), case)
        B = case.args[0].shape[0]
        if tuple(drawn.shape) == (B, 1):
            raise CheckFailed(tr(
                "`{function}`'s result has shape {shape} on the case {case}: return one id per row, shape ({B},); "
                "torch.multinomial(probs, 1) gives (B, 1), so .squeeze(-1) it."
            ).format(function=self.function, shape=(B, 1), case=case.label, B=B))
        if tuple(drawn.shape) != (B,):
            raise CheckFailed(tr(
                "`{function}`'s result has shape {shape} on the case {case}; it must have shape ({B},): one token id "
                "per row of logits."
            ).format(function=self.function, shape=tuple(drawn.shape), case=case.label, B=B))

    @rule("torch.long", returns=(WHOLE_RESULT, "the ids"))
    def _long(self, case: Case, drawn: torch.Tensor) -> None:
        if drawn.dtype != torch.long:
            raise CheckFailed(tr(
                "`{function}`'s result has dtype {dtype} on the case {case}; token ids are torch.long (what argmax and "
                "torch.multinomial return)."
            ).format(function=self.function, dtype=drawn.dtype, case=case.label))

    @rule("ids in the vocabulary", returns=(WHOLE_RESULT, "the ids"))
    def _in_vocabulary(self, case: Case, drawn: torch.Tensor) -> None:
        V = case.args[0].shape[1]
        if ((drawn < 0) | (drawn >= V)).any():
            bad = int(drawn[(drawn < 0) | (drawn >= V)][0])
            raise CheckFailed(tr(
                "`{function}` returned the id {id} on the case {case}, outside the vocabulary 0..{last}."
            ).format(function=self.function, id=bad, case=case.label, last=V - 1))

    @rule("greedy without temperature", about=("temperature", "top_k"))
    def _greedy(self, case: Case, drawn: torch.Tensor) -> None:
        (logits,) = case.args
        if case.tag == "greedy":
            expected = logits.argmax(dim=-1)
            if not torch.equal(drawn, expected):
                row = int((drawn != expected).nonzero()[0])
                raise CheckFailed(tr(
                    "`{function}` returned {got} for row {row} on the case {case}, where the largest logit is that of "
                    "token {expected}: a temperature of 0, or top_k=1, is greedy decoding, logits.argmax(dim=-1), and "
                    "draws nothing."
                ).format(function=self.function, got=int(drawn[row]), row=row, case=case.label,
                         expected=int(expected[row])))

    @rule("draws follow the distribution", about=("temperature", "top_k", "top_p"))
    def _distribution(self, case: Case, drawn: torch.Tensor) -> None:
        if case.tag == "greedy":
            return  # greedy draws nothing: the rule above judged it
        (logits,) = case.args
        temperature, top_k, top_p = self._settings(case)
        B, V = logits.shape
        # Rows come in blocks of n identical ones: each block is n draws from one distribution.
        starts = [0] + [i + 1 for i in (logits[1:] != logits[:-1]).any(dim=-1).nonzero().flatten().tolist()]
        blocks = [(s, e) for s, e in zip(starts, starts[1:] + [B])]
        observed = []
        for s, e in blocks:
            observed.append((logits[s].double().tolist(), torch.bincount(drawn[s:e], minlength=V).tolist(), e - s))

        def consistent(rule: Callable[[list[float]], list[float]]) -> bool:
            for row, counts, n in observed:
                p = rule(row)
                for v in range(V):
                    if p[v] == 0.0:
                        if counts[v] > 0:
                            return False
                    elif abs(counts[v] - n * p[v]) > bound(n, p[v]):
                        return False
            return True

        def likelihood(rule: Callable[[list[float]], list[float]]) -> float:
            """The log-probability of the observed counts under a rule (consistent ones only: no zero hit)."""
            total = 0.0
            for row, counts, _ in observed:
                p = rule(row)
                total += sum(c * math.log(p[v]) for v, c in enumerate(counts) if c)
            return total

        def rules(**mistake: Any) -> Callable[[list[float]], list[float]]:
            return lambda row: sampling_distribution(row, temperature, top_k, top_p, **mistake)

        if consistent(rules()):
            return
        diagnoses: list[tuple[Callable[[list[float]], list[float]], str]] = []
        if temperature != 1:
            diagnoses += [
                (rules(temperature_rule="multiply"),
                 tr("the logits were multiplied by the temperature; divide them by it: softmax(logits / temperature), "
                    "so that a temperature below 1 sharpens the distribution.")),
                (rules(temperature_rule="ignore"),
                 tr("the temperature was ignored: divide the logits by it before the softmax.")),
            ]
        if top_k > 0 and top_p < 1:
            # Before "top_k was ignored": where the nucleus of the whole vocabulary fits inside the top-k, the two agree.
            diagnoses.append((
                rules(order="p-then-k"),
                tr("the nucleus was taken from the whole vocabulary; take it from the tokens top-k kept, with their "
                   "probabilities renormalised (temperature, then top-k, then top-p)."),
            ))
        if top_k > 0:
            diagnoses += [
                (rules(k_shift=-1),
                 tr("only {kept} tokens were kept; top_k={top_k} keeps the {top_k} largest logits, the k-th included "
                    "(remove the logits strictly below the k-th largest, < not <=).").format(kept=top_k - 1, top_k=top_k)),
                (rules(k_shift=1),
                 tr("{kept} tokens were kept; top_k={top_k} keeps exactly the {top_k} largest logits.").format(
                     kept=top_k + 1, top_k=top_k)),
                (lambda row: sampling_distribution(row, temperature, 0, top_p),
                 tr("top_k={top_k} was ignored: keep only the {top_k} tokens with the largest logits.").format(
                     top_k=top_k)),
            ]
        if top_p < 1:
            diagnoses += [
                (rules(nucleus_extra=1),
                 tr("the nucleus kept one token more than it should: the token after the one whose probability takes "
                    "the total past top_p was kept too. Keep a token when the tokens more likely than it hold less than "
                    "top_p together (cumsum - probs < top_p): the crossing token is the last one kept.")),
                (rules(crossing=False),
                 tr("the nucleus left out the token that takes the total past top_p; keep the smallest set whose "
                    "probabilities reach top_p, that token included: a token is kept when the tokens more likely than "
                    "it hold less than top_p together (cumsum - probs < top_p).")),
                (rules(sorted_nucleus=False),
                 tr("the nucleus was cut in vocabulary order; sort the probabilities from the most likely down first, "
                    "then add them up.")),
                (lambda row: sampling_distribution(row, temperature, top_k, 1.0),
                 tr("top_p={top_p} was ignored: keep only the nucleus, the smallest set of most likely tokens whose "
                    "probabilities reach top_p.").format(top_p=top_p)),
            ]
            if temperature != 1:
                diagnoses.append((
                    rules(p_before_temperature=True),
                    tr("the temperature was applied after top-k and top-p (the nucleus was chosen from the probabilities "
                       "without it); apply the temperature first, then top-k, then top-p on what is left."),
                ))
        if top_k > 0 or top_p < 1:
            diagnoses.append((
                lambda row: sorted_positions(row, temperature, top_k, top_p),
                tr("the ids returned are positions in the sorted order, not token ids: after sorting, map a drawn "
                   "position back to its token with the indices the sort returned (or scatter the filter back to "
                   "vocabulary order before drawing)."),
            ))
        fitting = [(rule, message) for rule, message in diagnoses if consistent(rule)]
        if fitting:
            # Two mistakes can both pass the 5-sigma bounds; the draws are far likelier under the one made, unless
            # both give this case the same distribution: every one that fits is kept, the likeliest first, and
            # another case tells which one was made.
            fitting.sort(key=lambda pair: -likelihood(pair[0]))
            lead = tr("`{function}`'s draws are wrong on the case {case}: ").format(function=self.function,
                                                                                   case=case.label)
            raise named_failure(lead, [message for _, message in fitting], self._plain(case, blocks, observed, rules()))
        raise named_failure("", [], self._plain(case, blocks, observed, rules()))

    rules = (_one_per_row, _long, _in_vocabulary, _greedy, _distribution)

    @staticmethod
    def _plain(case: Case, blocks, observed, expected_rule) -> str:
        """Where the draws first leave the distribution they should follow, when no mistake explains them."""
        top_k = case.kwargs.get("top_k", 0)
        for block, (row, counts, n) in enumerate(observed):
            p = expected_rule(row)
            for v in range(len(row)):
                if p[v] == 0.0 and counts[v] > 0:
                    text = (tr("`{function}` drew token {token} {count} times out of {n} from row {row} on the case "
                               "{case}, although it is outside the top-k: a removed token must get probability exactly "
                               "0 (logit -inf before the softmax).")
                            if top_k > 0 and v not in top_ids(row, top_k) else
                            tr("`{function}` drew token {token} {count} times out of {n} from row {row} on the case "
                               "{case}, although it is outside the nucleus: a removed token must get probability "
                               "exactly 0 (logit -inf before the softmax)."))
                    return text.format(function="sample_next", token=v, count=counts[v], n=n, row=blocks[block][0],
                                       case=case.label)
            for v in range(len(row)):
                if abs(counts[v] - n * p[v]) > bound(n, p[v]):
                    return tr(
                        "`{function}` drew token {token} {count} times out of {n} from row {row} on the case {case}, "
                        "where its probability {p} gives {expected} ± {bound} (a 5-sigma bound): divide the logits by "
                        "the temperature, keep the top-k, then the nucleus, renormalise, and draw once per row with "
                        "torch.multinomial."
                    ).format(function="sample_next", token=v, count=counts[v], n=n, row=blocks[block][0],
                             case=case.label, p=f"{p[v]:.4f}", expected=f"{n * p[v]:.0f}", bound=f"{bound(n, p[v]):.0f}")
        return tr("`{function}`'s draws do not follow the distribution they should on the case {case}.").format(
            function="sample_next", case=case.label)

    @rule("draws only from the generator")
    def _from_the_generator(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        for group in seed_groups(cases, results):
            main_case, main = group["main"]
            if "again" in group and not torch.equal(main, group["again"][1]):
                raise CheckFailed(tr(
                    "`{function}` gave different tokens for the same logits and a generator with the same seed "
                    "({case}): draw with torch.multinomial(probs, 1, generator=generator), never from torch's global "
                    "generator."
                ).format(function=self.function, case=main_case.label))
            if "other-seed" in group and torch.equal(main, group["other-seed"][1]):
                raise CheckFailed(tr(
                    "`{function}` gave the same tokens with generators of different seeds ({case}): the draw must come "
                    "from the generator passed in (torch.multinomial(probs, 1, generator=generator))."
                ).format(function=self.function, case=main_case.label))

    rules_across = (_from_the_generator,)



def _toy(case: Case) -> toys.ToyGPT:
    """The grader's own copy of the case's model, without a budget: the oracle may read as it likes."""
    model = case.args[0]
    return toys.ToyGPT(**{k: v for k, v in model.kwargs.items() if k != "budget"})


def generation_stages(model: toys.ToyGPT, prompt: torch.Tensor, steps: int) -> tuple[list[Stage], int]:
    """The values of the cached greedy decoder, for locating a learner's first wrong one, and the index of the
    first stage that may stand for how far the learner's values are right (those before it never do).

    :func:`autograder.locate.locate` reads the stages as a chain: the furthest one a learner's value agrees with
    says how far the values are right, and the first value after the last one that agrees, which agrees with
    none, is where they part. A decoder is no chain: some of its values are right whatever went wrong before
    them, some are made side by side, and it returns a tuple. So the stages come in two parts.

    The chain: each step's values, block by block, in the order the reference makes them, up to the step before
    the last; then the last step's logits, the final stage (the stacking of the results comes after it). Two
    values made beside the chain are left out of it, since a right one made after a wrong one would hide it:
    the values so far (a learner concatenates the keys first, then the values), and the attention weights (the
    course's scaled_dot_product_attention gives them after its output).

    Before the chain, the values that agree with the computation without saying how far a learner's values are
    right, and so never stand for the furthest stage once a value of the chain agrees: what the function
    returns (a returned value that agreed with the furthest stage would hide the value after it that does not),
    the last step's other values (a mistake made at every step would be located at the last, after the cache
    returned), the positions' embeddings and the masks (they depend on no value), the tokens and their
    embeddings (greedy decoding often picks the same token from somewhat wrong logits), the values so far and
    the attention weights. They come in reverse order of the steps, so that before any value of the chain
    agrees, the first step's count for the furthest (a later step's mask is right whatever came before it); the
    last step's, when it is the only one, in the order of the chain.

    A value that two stages of the chain hold (the weights of a lone query, all ones, in every block) is left
    out: it says nothing of how far the learner's values are right."""
    chain: list[tuple[Any, Stage]] = []  # ((step, block), stage)
    early: list[list[Stage]] = []  # per step
    returned: list[Stage] = []
    tokens, all_logits = [], []
    cache: list[tuple[torch.Tensor, torch.Tensor]] = []
    new, start, B = prompt, 0, prompt.shape[0]
    with torch.no_grad():
        for step in range(steps):
            T_new, last_step = new.shape[1], step == steps - 1
            at = (tr("step {step} (the prompt)") if step == 0 else tr("step {step} (position {start})")).format(
                step=step + 1, start=start)
            embedded = model.embed(new)  # (B, T_new, d_model)
            pos = model.pos_embed(torch.arange(start, start + T_new))  # (T_new, d_model)
            x = embedded + pos
            full = torch.arange(start + T_new)[None, :] <= torch.arange(start + T_new)[:, None]  # (T, T)
            allow = full[start:]  # (T_new, start + T_new): query t may see the keys 0 .. start + t
            beside: list[Stage] = []  # made beside the chain: never the furthest, nor the one after the inputs
            found = [Stage.of(tr("{at}: the token read, logits.argmax(dim=-1) of the step before").format(at=at), new,
                              new[:, 0])] if step else []
            found += [Stage.of(tr("{at}: the causal mask subsequent_mask(start + T_new)[start:]").format(at=at), allow,
                               full),
                      Stage.of(tr("{at}: the position embeddings pos_embed(arange(start, start + T_new))").format(at=at),
                               pos, pos.unsqueeze(0)),
                      Stage.of(tr("{at}: the token embeddings embed(new)").format(at=at), embedded)]
            links = [((step, -1), Stage.of(tr("{at}: x = embed(new) + pos_embed(positions)").format(at=at), x))]
            for i, block in enumerate(model.blocks):
                attn, here = block.self_attn, tr("{at}, block {block}").format(at=at, block=i)
                a = block.norm1(x)
                q_flat, k_flat, v_flat = attn.w_q(a), attn.w_k(a), attn.w_v(a)  # (B, T_new, d_model)
                q, k, v = (split_heads(y, attn.h) for y in (q_flat, k_flat, v_flat))  # (B, h, T_new, d_k)
                stages = [Stage.of(tr("{here}: norm1(x)").format(here=here), a),
                          Stage.of(tr("{here}: the queries split into heads").format(here=here), q, q_flat),
                          Stage.of(tr("{here}: the new keys split into heads").format(here=here), k, k_flat,
                                   k.transpose(-2, -1)),
                          Stage.of(tr("{here}: the new values split into heads").format(here=here), v, v_flat)]
                if i < len(cache):
                    k_all, v_all = torch.cat([cache[i][0], k], dim=2), torch.cat([cache[i][1], v], dim=2)
                    cache[i] = (k_all, v_all)
                    keys = Stage.of(tr("{here}: the keys so far, the cached ones then the new, along dim=2").format(
                        here=here), k_all, k_all.transpose(-2, -1))
                    values = Stage.of(tr("{here}: the values so far, the cached ones then the new, along dim=2").format(
                        here=here), v_all)
                    if last_step:
                        returned += [keys, values]
                    else:
                        stages.append(keys)
                        beside.append(values)
                else:  # the first step's keys and values start the cache as they are
                    k_all, v_all = k, v
                    cache.append((k, v))
                    if last_step:
                        returned.append(Stage.of(tr("{here}: the keys and values the cache returns").format(here=here),
                                                 k, v))
                product = q @ k_all.transpose(-2, -1)  # (B, h, T_new, start + T_new)
                scores = product / math.sqrt(attn.d_k)
                weights = torch.softmax(scores.masked_fill(~allow, float("-inf")), dim=-1)
                context = weights @ v_all  # (B, h, T_new, d_k)
                merged = context.transpose(1, 2).reshape(B, T_new, -1)  # (B, T_new, d_model)
                attended = attn.w_o(merged)
                mid = x + attended
                b = block.norm2(mid)
                fed = block.feed_forward(b)
                stages += [Stage.of(tr("{here}: q k^T, before the scaling").format(here=here), product),
                           Stage.of(tr("{here}: the scores q k^T / sqrt(d_k)").format(here=here), scores)]
                if not bool(allow.all()):
                    stages.append(Stage.of(tr("{here}: the masked scores, -inf where a query may not see a key").format(
                        here=here), scores.masked_fill(~allow, float("-inf")), scores.masked_fill(~allow, -1e9)))
                if start + T_new > 1:  # a lone query's weights over a lone key are all ones, in every block
                    beside.append(Stage.of(tr("{here}: the attention weights").format(here=here), weights))
                stages += [Stage.of(tr("{here}: the attention's output weights @ v, per head").format(here=here), context),
                           Stage.of(tr("{here}: the heads merged, merge_heads(context)").format(here=here), merged),
                           Stage.of(tr("{here}: w_o of the merged heads").format(here=here), attended),
                           Stage.of(tr("{here}: x + the attention's output").format(here=here), mid),
                           Stage.of(tr("{here}: norm2(x)").format(here=here), b),
                           Stage.of(tr("{here}: the feed-forward output feed_forward(norm2(x))").format(here=here), fed),
                           Stage.of(tr("{here}: the block's output x + feed_forward(norm2(x))").format(here=here),
                                    mid + fed)]
                links += [((step, i), stage) for stage in stages]
                x = mid + fed
            normed = model.norm(x)  # (B, T_new, d_model): every new position, of which the newest counts
            logits = model.head(normed[:, -1])  # (B, V)
            links += [((step, len(cache)), stage) for stage in (
                Stage(tr("{at}: the newest position's output x[:, -1]").format(at=at),
                      (x[:, -1],) + ((x[:, -1:],) if T_new > 1 else ())),
                Stage.of(tr("{at}: the final LayerNorm model.norm(x[:, -1])").format(at=at), normed[:, -1], normed))]
            if last_step:  # without the keys and values the cache returns (the new ones, when it is the first step)
                kept = [(group, Stage(stage.name, tuple(v for v in stage.values if not any(
                    w.shape == v.shape and torch.equal(w, v) for r in returned for w in r.values))))
                    for group, stage in links]
                found += _unique(kept)
            else:
                chain += links + [((step, len(cache)), Stage.of(
                    tr("{at}: the logits model.head(model.norm(x[:, -1]))").format(at=at), logits, model.head(normed)))]
            early.append(beside + found)
            if step == 0:
                beside_first = beside
            token = logits.argmax(dim=-1)  # (B,)
            tokens.append(token)
            all_logits.append(logits)
            start += T_new
            new = token.unsqueeze(1)  # (B, 1)
    returned += [Stage.of(tr("the tokens, stacked (B, steps)"), torch.stack(tokens, dim=1)),
                 Stage.of(tr("the logits, stacked (B, steps, V)"), torch.stack(all_logits, dim=1)),
                 Stage.of(tr("step {step}: the token, logits.argmax(dim=-1)").format(step=steps), tokens[-1],
                          tokens[-1].unsqueeze(1))]
    final = Stage.of(tr("the last step's logits, model.head(model.norm(x[:, -1])) at step {step}").format(step=steps),
                     all_logits[-1], model.head(normed))
    quiet = returned + [stage for found in reversed(early[1:]) for stage in found] + beside_first
    return quiet + early[0][len(beside_first):] + _unique(chain) + [final], len(quiet)


def _unique(stages: Sequence[tuple[Any, Stage]]) -> list[Stage]:
    """The stages, each without the values that a stage of another group (another step or block) holds too,
    and without the stages left empty."""
    values = [(group, v) for group, stage in stages for v in stage.values]

    def shared(group: Any, v: torch.Tensor) -> bool:
        return any(g != group and w.shape == v.shape and torch.equal(w, v) for g, w in values)

    kept = [Stage(stage.name, tuple(v for v in stage.values if not shared(group, v))) for group, stage in stages]
    return [stage for stage in kept if stage.values]


GENERATE_MISTAKES: list[tuple[dict, str]] = [
    (dict(prompt_mask=False),
     N_("the prompt was read without a causal mask, so its positions saw each other's future and their keys and values "
        "are wrong from the second block on. When several positions are read at once, query t (at position start + t) "
        "may see the keys 0 .. start + t: subsequent_mask(start + T_new)[start:].")),
    (dict(positions="restart"),
     N_("each new token got position 0 (or positions counted from 0 at every step): a token's position is its place in "
        "the whole sequence, so the first generated token sits at position T0, the next at T0 + 1, and so on: "
        "model.pos_embed(torch.arange(start, start + T_new)).")),
    (dict(extend=False),
     N_("each new position attended to its own key and value only: the cache never grew. Concatenate the new keys and "
        "values to the cached ones along the positions, torch.cat([k_cached, k_new], dim=2), and attend over all of them.")),
    (dict(final_norm=False),
     N_("the final LayerNorm was skipped: the logits are model.head(model.norm(x)) at the newest position.")),
]


def _tokens_name() -> str:
    return tr("`{function}`'s tokens").format(function="generate_with_cache")


def _logits_name() -> str:
    return tr("`{function}`'s logits").format(function="generate_with_cache")


def _cache_name() -> str:
    return tr("`{function}`'s cache").format(function="generate_with_cache")


class GenerateWithCacheCheck(Check):
    function = "generate_with_cache"
    oracle = N_("the same model read without a cache, step by step (logits, tokens and keys and values)")
    invalid_hint = N_("fewer than 1 step means nothing to generate: raise ValueError with a message that names steps.")
    invalid_returned = RETURNED
    invalid_argument = "steps"
    hints = (
        Hint("Recomputed", lambda name, case, result: tr(
            "{name} read positions again on the case {case}: {message}. Each step after the first reads only the "
            "newest token, shape (B, 1), through the blocks; the keys and values of the earlier positions come from "
            "the cache. Do not call model(...) or a block's forward, which read the whole sequence.").format(
                name=name, case=case.label, message=raised_text(result)),
            whole=True),
        Hint(("RuntimeError", "ValueError", "IndexError"),
             N_("Mind the shapes: the first step reads the prompt (B, T0), each later one the new tokens (B, 1); the "
                "cache of a block holds k and v of shape (B, h, positions so far, d_k), and the new ones join along "
                "dim=2. Keep every row of the batch: next_token = logits.argmax(dim=-1) has shape (B,), no .item().")),
    )

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(B, T_0, steps, seed, tag="", **shape):
            spec = {"vocab_size": 11, "d_model": 16, "h": 4, "d_ff": 32, "N": 2} | shape
            model = Provided("toy_gpt", spec | {"seed": seed, "budget": B * (T_0 + max(steps, 1))})
            prompt = torch.randint(spec["vocab_size"], (B, T_0), generator=g)
            label = tr("a prompt ({B}, {T0}), steps={steps}, a model of {N} blocks, d_model={d_model}, h={h}, "
                       "vocabulary {V}").format(B=B, T0=T_0, steps=steps, N=spec['N'], d_model=spec['d_model'],
                                                h=spec['h'], V=spec['vocab_size'])
            return Case(label, (model, prompt), {"steps": steps}, tag)

        out = [
            case(1, 4, 6, seed=1),
            case(3, 5, 5, seed=2),
            case(2, 1, 4, seed=3, N=3, d_model=24, h=3),
            case(2, 3, 1, seed=4),
            case(2, 3, 0, seed=5, tag="invalid"),
        ]
        if hidden:
            out += [
                case(4, 6, 8, seed=6, vocab_size=17),
                case(1, 2, 10, seed=7, N=1),
                case(5, 3, 3, seed=8, N=4, h=2),
                case(1, 3, -2, seed=9, tag="invalid"),
            ]
        return out

    @staticmethod
    def _expected(case: Case) -> tuple[toys.ToyGPT, tuple]:
        """The grader's model of the case, and its plain (uncached) generation: tokens, logits, keys and values."""
        model = _toy(case)
        _, prompt = case.args
        return model, generate_plain(model, prompt, case.kwargs["steps"])

    @staticmethod
    def _stages(case: Case) -> tuple[list[Stage], int]:
        _, prompt = case.args
        return generation_stages(_toy(case), prompt, case.kwargs["steps"])

    def stages(self, case: Case) -> list[Stage]:
        return self.worked_out(case, self._stages)[0]

    def where_values_part(self, case: Case, seen: Any) -> str:
        """Where the learner's values part from the decoder's, unless they reach the last step's logits, or reach
        none of the stages that say how far they are right (:func:`generation_stages`). In the first case what is
        wrong is how the results are put together, or a cache kept in a way the logits do not show (the keys and
        values in another order, the heads merged), which the rule's own message says; "look after the last
        logits" would point past the second. In the second the trace holds no value of the decoding (a helper
        the trace does not follow did it): a returned value that agrees says nothing of where the others part."""
        said = super().where_values_part(case, seen)
        # a phrase of locate's sentence, as the learner's language gives it (locate.py, "computes {stage} correctly")
        if not said or tr("is not what your function returns") in said:
            return ""
        stages, first = self.worked_out(case, self._stages)
        _, _, agree = self._compared(case, seen)
        telling = [v for stage in stages[first:] for v in stage.values]
        reached = any(step.value is not None and step.value.numel() > 1 and any(
            v.shape == step.value.shape and agree(step.value, v) for v in telling) for step in seen.steps)
        return said if reached else ""

    #: a crash is not followed back: the course's functions a decoder calls (split_heads, scaled_dot_product_attention,
    #: ...) are recorded without what they were given, so a wrong token read a step later would be blamed on that call
    crash_followed_back = False

    @staticmethod
    def _returned(case: Case, result: Any) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """(tokens, logits, cache), the first two tensors."""
        tokens, logits, cache = expect_tuple(result, 3, "`generate_with_cache`", case, "tokens, logits, cache")
        return expect_tensor(tokens, _tokens_name(), case), expect_tensor(logits, _logits_name(), case), cache

    @rule("tokens, logits and cache")
    def _three(self, case: Case, result: Any) -> None:
        self._returned(case, result)

    @rule("tokens are (B, steps)", returns=(0, "the tokens"))
    def _tokens_shape(self, case: Case, result: Any) -> None:
        tokens, _, _ = self._returned(case, result)
        _, prompt = case.args
        steps = case.kwargs["steps"]
        B, T_0 = prompt.shape
        if tuple(tokens.shape) == (B, T_0 + steps) and torch.equal(tokens[:, :T_0], prompt):
            raise CheckFailed(tr(
                "`{function}`'s tokens have shape {shape} on the case {case}: they begin with the prompt. Return the "
                "generated tokens only, shape (B, steps) = ({B}, {steps})."
            ).format(function=self.function, shape=tuple(tokens.shape), case=case.label, B=B, steps=steps))
        expect_shape(tokens, (B, steps), _tokens_name(), case,
                     tr("One row per prompt, one column per generated token."))

    @rule("logits are float64 (B, steps, V)", returns=(1, "the logits"))
    def _logits_shape(self, case: Case, result: Any) -> None:
        _, logits, _ = self._returned(case, result)
        model, _ = self.worked_out(case, self._expected)
        expect_shape(logits, (case.args[1].shape[0], case.kwargs["steps"], model.vocab_size), _logits_name(), case,
                     tr("Step s's logits over the vocabulary, one row per prompt: stack the (B, V) logits along dim=1."))
        expect_dtype(logits, torch.float64, _logits_name(), case)

    @rule("logits", returns=(1, "the logits"))
    def _logits(self, case: Case, result: Any) -> None:
        _, logits, _ = self._returned(case, result)
        _, prompt = case.args
        steps = case.kwargs["steps"]
        model, (_, expected_logits, _) = self.worked_out(case, self._expected)
        if not matches(logits, expected_logits):
            assert matches(generate_cached(model, prompt, steps)[1], expected_logits), (
                "grader error: the cached decoder disagrees with the plain one")  # english: the grader's own assertion
            bad_step = int((~torch.isclose(logits, expected_logits, atol=1e-9, rtol=1e-7)).any(dim=-1).any(dim=0)
                           .nonzero()[0])
            hint = (tr("The first step's logits (the prompt, read at once) are wrong: check the causal mask over the "
                       "prompt, the positions 0 .. T0 - 1, the pre-norm wiring of each block and the final LayerNorm.")
                    if bad_step == 0 else
                    tr("The first {steps} step(s) agree, so the prompt is read right; look at what a later step reads: "
                       "the new token at its own position (start), its query against every cached key plus its own, "
                       "and the cache of each block extended by the new keys and values.").format(steps=bad_step))
            diagnoses = [(lambda kw=kw: generate_cached(model, prompt, steps, **kw)[1], tr(message))
                         for kw, message in GENERATE_MISTAKES]
            expect_close(logits, expected_logits,
                         tr("`{function}`'s logits tensor").format(function=self.function), case, diagnoses,
                         hint=hint, dtype=torch.float64)

    @rule("tokens are the argmax", returns=(0, "the tokens"))
    def _tokens(self, case: Case, result: Any) -> None:
        tokens, _, _ = self._returned(case, result)
        _, (expected_tokens, _, _) = self.worked_out(case, self._expected)
        if not torch.equal(tokens, expected_tokens):
            b, s = (int(i) for i in (tokens != expected_tokens).nonzero()[0])
            raise CheckFailed(tr(
                "`{function}`'s tokens are wrong on the case {case}, though the logits are right: row {row}, step {step} "
                "holds {got} where the largest logit is that of token {expected}. Each step's token is "
                "logits.argmax(dim=-1) over the vocabulary, and it is the token read next."
            ).format(function=self.function, case=case.label, row=b, step=s, got=int(tokens[b, s]),
                     expected=int(expected_tokens[b, s])))

    def _cache(self, case: Case, result: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The cache's (k, v) pairs, one per block, each a pair of tensors."""
        fn = _cache_name()
        _, _, cache = self._returned(case, result)
        model, _ = self.worked_out(case, self._expected)
        N = model.N
        if isinstance(cache, Opaque) or not isinstance(cache, (list, tuple)) or len(cache) != N:
            got = opaque_kind(cache) if isinstance(cache, Opaque) else (
                tr("{count} entries").format(count=len(cache)) if isinstance(cache, (list, tuple))
                else type(cache).__name__)
            raise CheckFailed(tr(
                "{cache} is {got} on the case {case}; return a list with one (k, v) pair per block, {N} here."
            ).format(cache=fn, got=got, case=case.label, N=N))
        pairs = []
        for i, pair in enumerate(cache):
            k, v = expect_tuple(pair, 2, f"{fn}[{i}]", case, "k, v")
            pairs.append((expect_tensor(k, f"{fn}[{i}][0] (k)", case), expect_tensor(v, f"{fn}[{i}][1] (v)", case)))
        return pairs

    @rule("one (k, v) pair per block", returns=(2, "the cache"))
    def _cache_pairs(self, case: Case, result: Any) -> None:
        self._cache(case, result)

    @rule("cache is (B, h, T0 + steps - 1, d_k)", returns=(2, "the cache"))
    def _cache_shape(self, case: Case, result: Any) -> None:
        fn = _cache_name()
        model, _ = self.worked_out(case, self._expected)
        B, T_0 = case.args[1].shape
        steps, h, d_k = case.kwargs["steps"], model.h, model.d_model // model.h
        length = T_0 + steps - 1
        for i, (k, v) in enumerate(self._cache(case, result)):
            for what, t in (("k", k), ("v", v)):
                if tuple(t.shape) == (B, h, length + 1, d_k):
                    raise CheckFailed(tr(
                        "{cache}[{i}] holds {held} positions on the case {case}, one more than were needed: the last "
                        "generated token was read too. After {steps} step(s) the model has read the prompt and the first "
                        "{read} generated token(s), T0 + steps - 1 = {length} positions; the last token is returned, not "
                        "read."
                    ).format(cache=fn, i=i, held=length + 1, case=case.label, steps=steps, read=steps - 1,
                             length=length))
                if tuple(t.shape) == (B, length, h * d_k):
                    raise CheckFailed(tr(
                        "{cache}[{i}]'s {what} has shape {shape} on the case {case}: keep the heads apart, "
                        "(B, h, positions, d_k) = {expected}, as split_heads gives them."
                    ).format(cache=fn, i=i, what=what, shape=tuple(t.shape), case=case.label,
                             expected=(B, h, length, d_k)))
                expect_shape(t, (B, h, length, d_k), tr("{cache}[{i}]'s {what}").format(cache=fn, i=i, what=what), case,
                             tr("The cache of a block holds the keys (and the values) of every position read so far, "
                                "T0 + steps - 1 of them, one new position per step after the prompt."))

    @rule("cached keys and values", returns=(2, "the cache"))
    def _cache_values(self, case: Case, result: Any) -> None:
        fn = _cache_name()
        _, (_, _, expected_kv) = self.worked_out(case, self._expected)
        for i, ((k, v), (k_expected, v_expected)) in enumerate(zip(self._cache(case, result), expected_kv)):
            if matches(k, v_expected) and matches(v, k_expected):
                raise CheckFailed(tr("{cache}[{i}] holds (v, k) on the case {case}: store each pair as (k, v).").format(
                    cache=fn, i=i, case=case.label))
            for what, got, expected in (("keys", k, k_expected), ("values", v, v_expected)):
                if not matches(got, expected):
                    text = (tr("{cache}[{i}]'s keys are wrong on the case {case}, though the logits are right: {where}. "
                               "Store, for block {i}, the keys of every position read: w_k (or w_v) of norm1(x), split "
                               "into heads, the cached ones first.") if what == "keys" else
                            tr("{cache}[{i}]'s values are wrong on the case {case}, though the logits are right: "
                               "{where}. Store, for block {i}, the values of every position read: w_k (or w_v) of "
                               "norm1(x), split into heads, the cached ones first."))
                    raise CheckFailed(text.format(cache=fn, i=i, case=case.label, where=where_it_differs(got, expected)))

    rules = (_three, _tokens_shape, _logits_shape, _logits, _tokens, _cache_pairs, _cache_shape, _cache_values)


# What the instructions state, and the visible case that holds a learner to it. The rules every graded
# function keeps (its arguments left unchanged, no view of them returned) are the base class's
# (Check.judge_effects, judge_dtype) and are not repeated here.
STATED = {
    "sample_next": (
        Stated("the logits are divided by the temperature", "temperature=0.5", "multiplied by the temperature"),
        Stated("temperature 0 is greedy", "temperature=0,", "greedy"),
        Stated("top_k at least the vocabulary size keeps every token", "top_k above V",
               "more than the vocabulary's"),
        Stated("top-k keeps the top_k largest logits, the k-th included", "top_k=4,", "the k-th included"),
        Stated("the nucleus is the smallest set reaching top_p", "top_p=0.7", "left out the token that takes"),
        Stated("the most likely token is always kept", "top_p=0.6", "the most likely token is always kept"),
        Stated("temperature, then top-k, then top-p", "temperature=2.5", "applied after top-k and top-p"),
        Stated("top-p reads what top-k kept", "temperature=2.5", "taken from the whole vocabulary"),
        Stated("a token id is the vocabulary's, not a sorted position", "top_p=0.7",
               "positions in the sorted order"),
        Stated("all randomness comes from generator", "seeded with 1", "never from torch's global generator"),
        Stated("the result is a LongTensor of token ids", "main", "token ids are torch.long"),
        Stated("a negative temperature or top_k, or top_p outside (0, 1], raises ValueError", "invalid",
               "raise ValueError"),
        Stated("that ValueError names the argument", "invalid", "say which argument is wrong"),
    ),
    "generate_with_cache": (
        Stated("each step reads only the positions not read yet", "prompt (1, 4)", "read positions again"),
        Stated("the prompt is read with a causal mask", "prompt (1, 4)", "without a causal mask"),
        Stated("the first generated token sits at position T0", "prompt (1, 4)", "got position 0"),
        Stated("the cache holds the keys and values of every position read", "prompt (1, 4)",
               "the cache never grew"),
        Stated("the last token is returned but never read", "prompt (1, 4)", "one more than were needed"),
        Stated("tokens holds the generated ids only", "prompt (1, 4)", "they begin with the prompt"),
        Stated("the final LayerNorm comes before the output layer", "prompt (1, 4)",
               "the final LayerNorm was skipped"),
        Stated("every row of a batch is generated", "prompt (3, 5)", "no .item()"),
        Stated("each cache entry is (k, v)", "prompt (1, 4)", "store each pair as (k, v)"),
        Stated("the cache keeps the heads apart, (B, h, T, d_k)", "prompt (1, 4)", "keep the heads apart"),
        Stated("steps below 1 raises ValueError", "invalid", "raise ValueError"),
    ),
}
