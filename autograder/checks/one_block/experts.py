"""The check of ``MoEFeedForward``: a feed-forward layer of experts, each token sent to k of them.

Oracle: a dense loop over the tokens, in float64, holding the layer's weights: each token's k experts
from a stable sort of its router logits, gated by a softmax over those k, each expert serving the
first C tokens sent to it in batch order. How the work was split is judged from outside the
learner's code: the rows each expert's first matrix multiplied, and the products it took part in,
are counted at ATen's matrix products (:mod:`harness.products`, advisory as everything in the
learner's process is): each expert multiplies exactly the tokens it serves, in one batch.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from ...framework import (
    INVALID,
    Case,
    Check,
    CheckFailed,
    Hint,
    ModuleResult,
    Stage,
    Stated,
    draw,
    expect_close,
    expect_shape,
    expect_tensor,
    expect_tuple,
    rule,
)
from ...messages import N_, tr
from .router import balance, gates_of, stable_top_k

DROPS = "drops"


def _ffn(state: dict, e: int, x: torch.Tensor) -> torch.Tensor:
    """Chapter 4's feed-forward network of expert e, in float64: w_2(relu(w_1 x))."""
    w = {n: state[f"experts.{e}.{n}"].double() for n in ("w_1.weight", "w_1.bias", "w_2.weight", "w_2.bias")}
    return torch.relu(x @ w["w_1.weight"].T + w["w_1.bias"]) @ w["w_2.weight"].T + w["w_2.bias"]


def capacity(N: int, k: int, E: int, factor: float | None, rounding=math.ceil) -> int:
    return N * k if factor is None else rounding(factor * N * k / E)


def routing(case: Case) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(tokens (N, d), logits (N, E), experts (N, k), gates (N, k)), in float64."""
    x, = case.args
    tokens = x.double().reshape(-1, x.shape[-1])
    logits = tokens @ case.state["router.weight"].double().T
    experts = stable_top_k(logits, case.init["k"])
    return tokens, logits, experts, gates_of(logits, experts)


def moe(case: Case, *, gates: str = "softmax_k", serve: str = "first", per: str = "batch", rounding=math.ceil,
        dropped: str = "zero") -> tuple[torch.Tensor, list[int], list[int]]:
    """(y in x's shape, tokens sent to each expert, tokens each expert served), token by token in float64.
    The keywords replay known mistakes: ``gates`` "all" (a softmax over every expert, not renormalised)
    or "none" (outputs added unweighted); ``serve`` "none" (no capacity), "index" (a token is kept when its
    index in the batch is below C, whatever expert it goes to), "shared" (one count for all experts) or "last"
    (the last C tokens kept); ``per="sequence"`` counts N in one sequence, T; ``dropped="input"`` passes a dropped
    token's features through in place of the expert's term."""
    x, = case.args
    E, k, factor = case.init["n_experts"], case.init["k"], case.init["capacity_factor"]
    tokens, logits, experts, g = routing(case)
    if gates == "all":
        g = torch.softmax(logits, -1).gather(-1, experts)
    elif gates == "none":
        g = torch.ones_like(g)
    rows = [range(len(tokens))]
    y = torch.zeros_like(tokens)
    sent, served = [0] * E, [0] * E
    for block in rows:
        C = capacity(x.shape[1] if per == "sequence" else len(block), k, E, factor, rounding)
        order = list(block)[::-1] if serve == "last" else list(block)
        count, shared = [0] * E, 0
        kept = {}
        for t in order:
            for j in range(k):
                e = int(experts[t, j])
                sent[e] += 1
                fits = {"first": count[e] < C, "last": count[e] < C, "none": True, "index": t - block[0] < C,
                        "shared": shared < C}[serve if factor is not None else "none"]
                count[e], shared = count[e] + 1, shared + 1
                kept[t, j] = fits
        for t in block:
            for j in range(k):
                e = int(experts[t, j])
                if kept[t, j]:
                    served[e] += 1
                    y[t] += g[t, j] * _ffn(case.state, e, tokens[t])
                elif dropped == "input":
                    y[t] += g[t, j] * tokens[t]
    return y.reshape(x.shape), sent, served


def _state(g: torch.Generator, d: int, d_ff: int, E: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    def draw_(*shape, scale):
        return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)

    state = {"router.weight": draw_(E, d, scale=1 / math.sqrt(d))}
    for e in range(E):
        state |= {f"experts.{e}.w_1.weight": draw_(d_ff, d, scale=1 / math.sqrt(d)),
                  f"experts.{e}.w_1.bias": draw_(d_ff, scale=0.1),
                  f"experts.{e}.w_2.weight": draw_(d, d_ff, scale=1 / math.sqrt(d_ff)),
                  f"experts.{e}.w_2.bias": draw_(d, scale=0.1)}
    return state


def _margin(x: torch.Tensor, router: torch.Tensor, k: int) -> float:
    """The smallest gap, over the tokens, between the k-th and the next logit (how safe the choice is from rounding)."""
    logits = x.double().reshape(-1, x.shape[-1]) @ router.double().T
    top = torch.sort(logits, -1, descending=True).values
    return float((top[:, k - 1] - top[:, k]).min()) if k < logits.shape[-1] else math.inf


class MoEFeedForwardCheck(Check):
    function = "MoEFeedForward"
    oracle = N_("a dense loop over the tokens holding the same weights, and the rows each expert multiplied, counted")
    trained_through = True
    hints = (Hint("RuntimeError", N_("Work on the tokens flattened, x.reshape(-1, d_model), (N, d_model): the "
                                     "router's logits are then (N, E) and the chosen experts and gates (N, k)."),
                  containing=("must match the size", "shape", "size of tensor")),)

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(B, T, d, d_ff, E, k, factor=None, dtype=torch.float32, tag=""):
            state = _state(g, d, d_ff, E, dtype)
            for _ in range(50):  # choices far from a tie, so that rounding cannot change them
                x = torch.randn(B, T, d, generator=g, dtype=torch.float64).to(dtype)
                init = {"d_model": d, "d_ff": d_ff, "n_experts": E, "k": k, "capacity_factor": factor}
                made = Case("", (x,), {}, tag, init=init, state=state)
                if tag == INVALID:
                    break
                if _margin(x, state["router.weight"], k) > 1e-3 and (tag != DROPS or moe(made)[1] != moe(made)[2]):
                    break
            kind = str(dtype).replace("torch.", "")
            label = (f"MoEFeedForward(d_model={d}, d_ff={d_ff}, n_experts={E}, k={k}, capacity_factor={factor}), "
                     f"x ({B}, {T}, {d}) {kind}")
            counted = tuple(f"experts.{e}.w_1.weight" for e in range(E)) if tag != INVALID else ()
            return Case(label, (x,), {}, tag, init=init, state=state, counted=counted)

        out = [
            case(2, 6, 8, 16, 4, 2),
            case(2, 12, 6, 12, 4, 1, factor=1.0, tag=DROPS),
            case(1, 10, 8, 8, 8, 2, dtype=torch.float64),
            case(3, 8, 4, 8, 4, 2, factor=1.25, tag=DROPS),
            case(2, 3, 4, 8, 2, 2),
            case(1, 4, 4, 8, 4, 5, tag=INVALID),
        ]
        if hidden:
            E = draw(g, 3, 8)
            out += [
                case(draw(g, 1, 3), draw(g, 4, 12), 8, draw(g, 8, 20), E, draw(g, 1, 3)),
                case(draw(g, 2, 4), draw(g, 6, 14), 6, 12, E, draw(g, 1, 2), factor=1.0, tag=DROPS),
                case(2, draw(g, 4, 9), 4, 8, E, 2, factor=1.5, dtype=torch.float64),
            ]
        return out

    def _returned(self, case: Case, result: Any) -> tuple[torch.Tensor, torch.Tensor]:
        output = result.output if isinstance(result, ModuleResult) else result
        y, loss = expect_tuple(output, 2, tr("`{function}`'s forward").format(function=self.function), case, "y, balance")
        return (expect_tensor(y, tr("`{function}`'s y").format(function=self.function), case),
                expect_tensor(loss, tr("`{function}`'s balance loss").format(function=self.function), case))

    @rule("y in the shape of x, and a 0-dimensional balance loss")
    def _shapes(self, case: Case, result: Any) -> None:
        y, loss = self._returned(case, result)
        x, = case.args
        expect_shape(y, x.shape, tr("`{function}`'s y").format(function=self.function), case,
                     tr("The layer maps each token to d_model features: (B, T, d_model); work on "
                        "x.reshape(-1, d_model) and reshape back."))
        if loss.dim() != 0:
            raise CheckFailed(tr("`MoEFeedForward`'s balance loss has shape {shape} on the case {case}: "
                                 "it is one number for the whole call, load_balancing_loss over all B * T tokens.")
                              .format(shape=tuple(loss.shape), case=case.label))

    @rule("the gated sum of each token's experts, capacity applied")
    def _values(self, case: Case, result: Any) -> None:
        y, _ = self._returned(case, result)
        E, k, factor = case.init["n_experts"], case.init["k"], case.init["capacity_factor"]
        expected, sent, served = self.worked_out(case, moe)
        N = y.numel() // y.shape[-1]
        C = capacity(N, k, E, factor)
        diagnoses = [
            (lambda: moe(case, gates="none")[0],
             tr("the experts' outputs were added without their gates: each expert's term is weighted by its gate, "
                "g * expert(x).")),
            (lambda: moe(case, gates="all")[0],
             tr("the gates are a softmax over all the experts, not renormalised over the chosen k: use "
                "top_k_router's gates.")),
            (lambda: moe(case, serve="none")[0],
             tr("no token was dropped, though an expert was sent {sent} tokens and each serves at most C = {C}: "
                "C = ceil(capacity_factor * N * k / E) with N = {N} tokens.").format(sent=max(sent), C=C, N=N)),
            (lambda: moe(case, serve="index")[0],
             tr("tokens were kept by their index in the batch (below C = {C}), whatever expert they went to: the "
                "capacity is counted per expert, each serving the first C tokens sent to it.").format(C=C)),
            (lambda: moe(case, serve="shared")[0],
             tr("one count served all the experts together: each expert serves its own first C = {C} tokens.")
             .format(C=C)),
            (lambda: moe(case, serve="last")[0],
             tr("each expert kept the last tokens sent to it: the tokens are served in the order they come, the "
                "first C kept.")),
            (lambda: moe(case, per="sequence")[0],
             tr("the capacity was worked out from one sequence's tokens: N is every token of the call, B * T.")),
            (lambda: moe(case, rounding=math.floor)[0],
             tr("C was rounded down: C = ceil(capacity_factor * N * k / E), rounded up.")),
            (lambda: moe(case, dropped="input")[0],
             tr("a dropped token's features were passed through in the expert's place: a dropped term is left out "
                "(zero); the block's residual connection carries the token past the layer.")),
        ]
        expect_close(y, expected, tr("`{function}`'s y").format(function=self.function), case, diagnoses,
                     hint=tr("Each token's y is the sum over its kept experts of gate * expert(x)."))

    @rule("the balance loss of the call's routing")
    def _balance(self, case: Case, result: Any) -> None:
        _, loss = self._returned(case, result)
        tokens, logits, experts, _ = routing(case)
        E = case.init["n_experts"]
        expected = balance(torch.softmax(logits, -1), experts, E)
        expect_close(loss, expected, tr("`{function}`'s balance loss").format(function=self.function), case, [
            (lambda: balance(torch.softmax(logits.gather(-1, experts), -1), torch.arange(experts.shape[-1]).expand_as(
                experts), experts.shape[-1]),
             tr("the loss was given the gates: give load_balancing_loss the softmax over all E logits.")),
        ], hint=tr("balance = load_balancing_loss(torch.softmax(logits, dim=-1), experts, n_experts), over every "
                   "token, counting the choices before any is dropped."))

    @rule("each expert multiplies the tokens it serves, in one batch")
    def _batched(self, case: Case, result: ModuleResult) -> None:
        products = result.products
        E, k, factor = case.init["n_experts"], case.init["k"], case.init["capacity_factor"]
        _, sent, served = self.worked_out(case, moe)
        N = sum(sent) // k
        if not products or not any(calls for _, _, calls in products.values()):
            raise CheckFailed(tr("On the case {case} no expert's `w_1` weight was seen in a matrix product. Call "
                                 "each expert on its tokens, self.experts[e](tokens[chosen]), so that the grader can "
                                 "count what each one multiplies.").format(case=case.label))
        bound = capacity(N, k, E, factor) if factor is not None else max(served)
        for e in range(E):
            rows, nonzero, calls = products.get(f"experts.{e}.w_1.weight", (0, 0, 0))
            if calls > 1:
                raise CheckFailed((
                    tr("on the case {case}, expert {expert}'s `w_1` took part in {calls} matrix products in one call "
                       "once per token: a loop over tokens gives the processor one row at a time. Gather the tokens "
                       "sent to each expert and multiply them in one batch: expert(tokens[index]).")
                    if calls >= served[e] else
                    tr("on the case {case}, expert {expert}'s `w_1` took part in {calls} matrix products in one call. "
                       "Gather the tokens sent to each expert and multiply them in one batch: expert(tokens[index]).")
                ).format(case=case.label, expert=e, calls=calls))
            if nonzero > served[e]:
                raise CheckFailed(
                    tr("on the case {case}, expert {expert} multiplied all {N} tokens: every expert ran on every "
                       "token, so the layer costs E experts per token instead of k.").format(
                        case=case.label, expert=e, N=N) if nonzero >= N else
                    tr("on the case {case}, expert {expert} multiplied {nonzero} tokens, the {sent} sent to it, "
                       "though it serves only the first {served}: drop a token before its expert runs, not after.")
                    .format(case=case.label, expert=e, nonzero=nonzero, sent=sent[e], served=served[e])
                    if nonzero == sent[e] else
                    tr("on the case {case}, expert {expert} multiplied {nonzero} tokens, though it serves {served}.")
                    .format(case=case.label, expert=e, nonzero=nonzero, served=served[e]))
            if rows > bound:
                raise CheckFailed(tr("on the case {case}, expert {expert} multiplied {rows} rows, {zeros} of them "
                                     "zeros: zeroing the tokens an expert does not serve still costs their products. "
                                     "Give each expert only its tokens (or a buffer of at most C rows).").format(
                                         case=case.label, expert=e, rows=rows, zeros=rows - nonzero))

    rules = (_shapes, _values, _balance, _batched)

    def stages(self, case: Case) -> list[Stage]:
        if case.tag == INVALID:
            return []
        tokens, logits, experts, gates = routing(case)
        y, _, _ = self.worked_out(case, moe)
        return [Stage.of(tr("the tokens, x.reshape(-1, d_model), (N, d_model)"), tokens),
                Stage.of(tr("the router's logits, (N, E)"), logits),
                Stage.of(tr("the router's probabilities, a softmax over all E, (N, E)"), torch.softmax(logits, -1)),
                Stage.of(tr("the gates of the chosen experts, (N, k)"), gates),
                Stage.of("y, (N, d_model)", y.reshape(tokens.shape)),
                Stage.of(tr("y in the shape of x"), y)]


STATED = {
    "MoEFeedForward": (
        Stated("each expert's output is weighted by its gate", "x (2, 6, 8)", "without their gates"),
        Stated("each expert serves at most C = ceil(capacity_factor * N * k / E)", DROPS, "no token was dropped"),
        Stated("the first tokens sent to an expert are the ones served", DROPS, "the first C kept"),
        Stated("a dropped token's term is zero", DROPS, "left out"),
        Stated("the tokens go to each expert in one batch", "x (2, 6, 8)", "one batch"),
        Stated("k above n_experts raises ValueError", INVALID, "raise ValueError"),
    ),
}
