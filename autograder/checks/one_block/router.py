"""The checks of ``top_k_router`` and ``load_balancing_loss``: which experts a token goes to, and the
auxiliary loss that keeps the router from sending every token to the same few.

Oracles: a stable sort of the logits (equal logits keep the lower expert first) and a softmax over
the chosen ones, in float64; the Switch Transformer's loss counted expert by expert in plain Python
(the fraction of choices f_e, the mean probability P_e), and its two properties: 1 for uniform
routing, n_experts when one expert takes every token with certainty.
"""
from __future__ import annotations

from typing import Any

import torch

from ...framework import (
    INVALID,
    Case,
    Check,
    CheckFailed,
    Hint,
    Stage,
    Stated,
    draw,
    expect_close,
    expect_shape,
    expect_tensor,
    expect_tuple,
    named_failure,
    rule,
)
from ...messages import N_, tr

TIES = "ties"


def stable_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """(..., k) long: the k largest logits' experts, largest first, equal logits in index order."""
    return torch.sort(logits.double(), dim=-1, descending=True, stable=True).indices[..., :k]


def gates_of(logits: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
    """(..., k) float64: a softmax over the chosen experts' logits."""
    return torch.softmax(logits.double().gather(-1, experts), dim=-1)


def _logits(g: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype, ties: bool = False) -> torch.Tensor:
    if ties:  # a few values only, so that equal logits meet inside the top k and at its edge
        return torch.randint(0, 3, shape, generator=g).to(dtype)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype) * 2


class TopKRouterCheck(Check):
    function = "top_k_router"
    oracle = N_("a stable sort of the logits and a softmax over the chosen k, in float64")
    trained_through = True  # the router learns through the gates
    invalid_argument = "k"
    hints = (Hint("RuntimeError", N_("gather the chosen logits with the experts' indices along the last axis: "
                                     "logits.gather(-1, experts), (..., k)."), containing=("index", "gather")),)

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(shape, k, dtype=torch.float32, ties=False, tag=""):
            logits = _logits(g, shape, dtype, ties)
            about = tr(", logits drawn from {{0, 1, 2}} (equal logits)").format() if ties else ""
            kind = str(dtype).replace("torch.", "")
            return Case(f"logits {tuple(shape)} {kind}, k={k}{about}", (logits, k), {}, tag or (TIES if ties else ""))

        out = [
            case((6, 4), 2),
            case((2, 3, 8), 2, torch.float64),
            case((5, 4), 1),
            case((3, 4), 4),
            case((8, 5), 3, ties=True),
            case((3, 4), 0, tag=INVALID),
            case((3, 4), 5, tag=INVALID),
        ]
        if hidden:
            E = draw(g, 3, 10)
            out += [
                case((draw(g, 2, 9), E), draw(g, 1, E)),
                case((2, draw(g, 2, 5), E), draw(g, 1, E), torch.float64),
                case((draw(g, 6, 12), E), draw(g, 2, E), ties=True),
                case((draw(g, 1, 4), E), E + draw(g, 1, 3), tag=INVALID),
            ]
        return out

    def _returned(self, case: Case, result: Any) -> tuple[torch.Tensor, torch.Tensor]:
        gates, experts = expect_tuple(result, 2, tr("`top_k_router`'s result"), case, "gates, experts")
        return (expect_tensor(gates, tr("`top_k_router`'s gates"), case),
                expect_tensor(experts, tr("`top_k_router`'s experts"), case))

    @rule("gates and experts, (..., k) each")
    def _shapes(self, case: Case, result: Any) -> None:
        logits, k = case.args
        gates, experts = self._returned(case, result)
        for what, value in ((tr("`top_k_router`'s experts"), experts), (tr("`top_k_router`'s gates"), gates)):
            if tuple(value.shape) == (*logits.shape[:-1], logits.shape[-1]) and k != logits.shape[-1]:
                raise CheckFailed(tr("{what} have shape {shape} on the case {case}: "
                                     "one per expert, all {count} of them. Keep the k = {k} chosen: "
                                     "(..., k).").format(what=what, shape=tuple(value.shape), case=case.label,
                                                         count=logits.shape[-1], k=k))
            expect_shape(value, (*logits.shape[:-1], k), what, case,
                         tr("One entry per chosen expert: (..., k)."))
        if experts.dtype != torch.long:
            raise CheckFailed(tr("`top_k_router`'s experts have dtype {dtype} on the case {case}: they are "
                                 "indices, torch.long, as torch.sort and torch.topk give them.").format(
                                     dtype=experts.dtype, case=case.label))

    @rule("the k largest logits, largest first, equal ones by index")
    def _experts(self, case: Case, result: Any) -> None:
        logits, k = case.args
        _, experts = self._returned(case, result)
        expected = stable_top_k(logits, k)
        if torch.equal(experts, expected):
            return
        chosen, wanted = logits.double().gather(-1, experts.clamp(0, logits.shape[-1] - 1)), logits.double().gather(-1, expected)
        explaining = []
        if torch.equal(experts, torch.sort(logits.double(), dim=-1, stable=True).indices[..., :k]):
            explaining.append(tr("the experts with the smallest logits were chosen: sort in descending order "
                                 "(descending=True), the largest logit first."))
        if torch.equal(chosen, wanted):
            explaining.append(tr("equal logits were not ordered by index: where two experts' logits are equal, the "
                                 "one with the lower index comes first. torch.topk promises no order among equal "
                                 "values; torch.sort(logits, dim=-1, descending=True, stable=True) does."))
        elif torch.equal(torch.sort(experts, -1).values, torch.sort(expected, -1).values):
            explaining.append(tr("the right experts, in the wrong order: list them from the largest logit down "
                                 "(torch.topk with sorted=False, or the indices sorted, lose that order)."))
        row = (experts != expected).any(-1).nonzero()[0].tolist()
        raise named_failure(tr("`top_k_router`'s experts are wrong on the case {case}: ").format(case=case.label),
                            explaining,
                            tr("`top_k_router`'s experts are wrong on the case {case}: for the token at index "
                               "{index}, the logits {logits} give "
                               "{expected}, but your function chose {chosen}.").format(
                                   case=case.label, index=tuple(row),
                                   logits=[round(v, 4) for v in logits[tuple(row)].tolist()],
                                   expected=expected[tuple(row)].tolist(), chosen=experts[tuple(row)].tolist()))

    @rule("gates: a softmax over the chosen logits")
    def _gates(self, case: Case, result: Any) -> None:
        logits, k = case.args
        gates, _ = self._returned(case, result)
        experts = stable_top_k(logits, k)
        z = logits.double()
        chosen = z.gather(-1, experts)
        diagnoses = [
            (lambda: torch.softmax(z, -1).gather(-1, experts),
             tr("the gates were taken from a softmax over all the experts and not renormalised over the chosen "
                "ones, so they do not sum to 1: take the softmax over the k chosen logits only.")),
            (lambda: chosen, tr("the gates are the chosen logits themselves: take a softmax over them.")),
            (lambda: torch.full_like(chosen, 1 / k), tr("every gate is 1/k: the gates weigh the experts by their "
                                                        "logits, a softmax over the chosen ones.")),
            (lambda: torch.softmax(chosen, dim=0),
             tr("the softmax ran over the first axis, across tokens: take it over the k chosen experts, dim=-1.")),
            (lambda: torch.sigmoid(chosen),
             tr("the gates are sigmoids of the logits: take a softmax over the chosen k.")),
        ]
        expect_close(gates, gates_of(logits, experts), tr("`top_k_router`'s gates"), case, diagnoses,
                     hint=tr("Each gate is exp(z_e) / sum of exp(z_e') over the chosen experts e'."))

    rules = (_shapes, _experts, _gates)

    def stages(self, case: Case) -> list[Stage]:
        if case.tag == INVALID:
            return []
        logits, k = case.args
        order = torch.sort(logits.double(), dim=-1, descending=True, stable=True)
        experts = order.indices[..., :k]
        chosen = logits.double().gather(-1, experts)
        return [Stage.of(tr("the logits sorted from the largest down"), order.values),
                Stage.of(tr("the chosen experts' logits, (..., k)"), chosen),
                Stage.of(tr("exp of the chosen logits (less their largest)"), torch.exp(chosen - chosen[..., :1])),
                Stage.of(tr("the gates, (..., k)"), gates_of(logits, experts))]


def balance(probs: torch.Tensor, index: torch.Tensor, n_experts: int, *, by: str = "choices", factor: bool = True,
            mean_p: bool = True, first_only: bool = False) -> torch.Tensor:
    """E * sum_e f_e P_e in float64, expert by expert; the keywords replay known mistakes: ``by="tokens"``
    divides the choices by N instead of N k, ``by="probs"`` takes f from the probabilities, ``factor=False``
    leaves out E, ``mean_p=False`` sums the probabilities over tokens, ``first_only`` counts the first choices."""
    p = probs.double().reshape(-1, n_experts)  # (N, E)
    chosen = index.reshape(p.shape[0], -1)  # (N, k)
    if first_only:
        chosen = chosen[:, :1]
    N, k = chosen.shape
    total = 0.0
    for e in range(n_experts):
        count = int((chosen == e).sum())
        f = {"choices": count / (N * k), "tokens": count / N, "probs": float(p[:, e].mean())}[by]
        total = total + f * (p[:, e].mean() if mean_p else p[:, e].sum())
    return (n_experts if factor else 1) * total


class LoadBalancingLossCheck(Check):
    function = "load_balancing_loss"
    oracle = N_("E * sum_e f_e P_e counted expert by expert in float64, and its values 1 (uniform) and E (collapsed)")
    trained_through = True  # the router learns to spread its tokens through P

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(lead, E, k, dtype=torch.float32, about=""):
            logits = torch.randn(*lead, E, generator=g, dtype=torch.float64) * 1.5
            probs = torch.softmax(logits, dim=-1).to(dtype)
            index = stable_top_k(logits + 0.8 * torch.randn(*lead, E, generator=g, dtype=torch.float64), k)
            kind = str(dtype).replace("torch.", "")
            return Case(f"router_probs {(*lead, E)} {kind}, expert_index {(*lead, k)}{about}", (probs, index, E))

        N, E = 8, 4
        uniform = Case(tr("uniform routing: router_probs (8, 4) all 1/4, each expert chosen twice"),
                       (torch.full((N, E), 1 / E), (torch.arange(N) % E)[:, None], E), {}, "uniform")
        sure = Case(tr("collapsed routing: router_probs (6, 4) one-hot on expert 2, every token sent to it"),
                    (torch.nn.functional.one_hot(torch.full((6,), 2), E).float(), torch.full((6, 1), 2), E), {},
                    "collapsed")
        out = [case((16,), 4, 1), case((2, 10), 4, 2), case((12,), 8, 2, torch.float64), uniform, sure,
               case((3, 5), 6, 3, about=" (k = 3)")]
        if hidden:
            E = draw(g, 3, 9)
            out += [case((draw(g, 5, 20),), E, draw(g, 1, min(3, E))),
                    case((draw(g, 2, 4), draw(g, 3, 8)), E, draw(g, 2, E), torch.float64)]
        return out

    @rule("a 0-dimensional tensor")
    def _scalar(self, case: Case, result: Any) -> None:
        loss = expect_tensor(result, tr("`load_balancing_loss`'s result"), case)
        if loss.dim() != 0:
            raise CheckFailed(tr("`load_balancing_loss` returned a tensor of shape {shape} on the case "
                                 "{case}: the loss is one number, a 0-dimensional tensor. Sum f_e P_e over the "
                                 "experts: (f * P).sum().").format(shape=tuple(loss.shape), case=case.label))

    @rule("n_experts * sum of f_e P_e")
    def _value(self, case: Case, loss: torch.Tensor) -> None:
        probs, index, E = case.args
        k = index.shape[-1]
        p = probs.double().reshape(-1, E)
        diagnoses = [
            (lambda: balance(probs, index, E, factor=False),
             tr("the sum was not multiplied by the number of experts: the loss is n_experts * sum f_e P_e, so that "
                "uniform routing gives 1 (here n_experts = {E}).").format(E=E)),
            (lambda: balance(probs, index, E, by="tokens"),
             tr("the counts were divided by the number of tokens N, not by the number of choices N * k (k = {k}): "
                "f must sum to 1 over the experts.").format(k=k)),
            (lambda: balance(probs, index, E, by="probs"),
             tr("f was taken from the probabilities, as P is: f_e is the fraction of the choices (expert_index) "
                "that went to expert e, counted.")),
            (lambda: balance(probs, index, E, mean_p=False),
             tr("P was summed over the tokens, not averaged: P_e is the router's mean probability for expert e.")),
            (lambda: balance(probs, index, E, first_only=True),
             tr("only each token's first choice was counted: with k = {k}, every choice counts toward f.").format(
                 k=k)),
            (lambda: E * (torch.nn.functional.one_hot(index.reshape(p.shape[0], -1), E).double().mean(1) * p).sum(-1).mean(),
             tr("the product f_e P_e was taken token by token and then averaged: f and P are each averaged over the "
                "batch first, then multiplied.")),
        ]
        hint = tr("f_e = (choices of expert e) / (N * k), P_e = router_probs[..., e] averaged over the tokens.")
        expect_close(loss, balance(probs, index, E), tr("`load_balancing_loss`'s result"), case, diagnoses, hint=hint)

    rules = (_scalar, _value)

    def stages(self, case: Case) -> list[Stage]:
        probs, index, E = case.args
        p = probs.double().reshape(-1, E)
        chosen = index.reshape(p.shape[0], -1)
        counts = torch.bincount(chosen.flatten(), minlength=E).double()
        f, P = counts / chosen.numel(), p.mean(0)
        return [Stage.of(tr("the choices per expert, (E,)"), counts),
                Stage.of(tr("f, the fraction of choices per expert"), f),
                Stage.of(tr("P, the mean probability per expert"), P), Stage.of(tr("f * P, (E,)"), f * P),
                Stage.of(tr("the sum of f * P"), (f * P).sum()), Stage.of(tr("the loss, E * sum f P"), E * (f * P).sum())]


STATED = {
    "top_k_router": (
        Stated("the experts are listed from the largest logit down", "logits (6, 4)", "smallest logits"),
        Stated("equal logits go to the lower index first", TIES, "lower index"),
        Stated("the gates are a softmax over the chosen k", "logits (6, 4)", "not renormalised"),
        Stated("k outside 1 .. E raises ValueError", INVALID, "raise ValueError"),
    ),
    "load_balancing_loss": (
        Stated("the sum is multiplied by n_experts", "uniform", "multiplied by the number of experts"),
        Stated("every one of the k choices counts", "(k = 3)", "number of choices N * k"),
        Stated("f counts the choices", "(16, 4)", "f was taken from the probabilities"),
        Stated("P is averaged over the tokens", "(16, 4)", "not averaged"),
    ),
}
