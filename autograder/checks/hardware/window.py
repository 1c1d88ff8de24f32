"""The check of ``sliding_window_mask``: causal attention restricted to the last ``window`` keys.

Oracle: the rule written position by position, i - window < j <= i, in plain Python.
"""
from __future__ import annotations

from typing import Any

import torch

from ...framework import (
    INVALID,
    Case,
    Check,
    CheckFailed,
    Stage,
    Stated,
    draw,
    expect_shape,
    expect_tensor,
    named_failure,
    rule,
)
from ...messages import N_, tr


def window_rule(T: int, window: int, *, low: int = 1, causal: bool = True) -> torch.Tensor:
    """(T, T) bool, True where i - window + low <= j and (j <= i when causal, else |i - j| < window); the
    defaults are the exercise's rule, the keywords replay known mistakes."""
    return torch.tensor([[(i - window + low <= j <= i) if causal else abs(i - j) < window for j in range(T)]
                         for i in range(T)], dtype=torch.bool).reshape(T, T)


MISTAKES = (
    (lambda T, w: window_rule(T, w, low=0),
     N_("each query reads window + 1 keys: the window holds `window` keys, itself included, i - window < j <= i.")),
    (lambda T, w: window_rule(T, w, low=2),
     N_("each query reads window - 1 keys: the window holds `window` keys, itself included, i - window < j <= i.")),
    (lambda T, w: window_rule(T, w, causal=False),
     N_("the window reaches into the future: a query reads only keys at or before its own position, j <= i.")),
    (lambda T, w: ~window_rule(T, w),
     N_("the mask is inverted: in the course's convention True means 'may read' (chapter 2).")),
    (lambda T, w: window_rule(T, w).T,
     N_("the mask is transposed: rows are queries and columns keys, mask[i, j] says whether query i reads key j.")),
    (lambda T, w: torch.tril(torch.ones(T, T, dtype=torch.bool)),
     N_("this is plain causal attention: the window was not applied (j > i - window).")),
)


class SlidingWindowMaskCheck(Check):
    function = "sliding_window_mask"
    oracle = N_("the rule i - window < j <= i, position by position")

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)
        sizes = [(6, 3), (5, 1), (7, 7), (4, 10)]
        if hidden:
            T = draw(g, 8, 20)
            sizes = [(T, draw(g, 2, T - 2)), (draw(g, 3, 9), 1), (T, T + draw(g, 0, 5)), (draw(g, 10, 30), draw(g, 2, 6))]
        out = [Case(f"T={T}, window={w}", (T, w), {}, "whole" if w >= T else "") for T, w in sizes]
        out.append(Case("T=5, window=0", (5, 0), {}, INVALID))
        return out

    @rule("a (T, T) tensor")
    def _shape(self, case: Case, result: Any) -> None:
        T, _ = case.args
        m = expect_tensor(result, tr("`sliding_window_mask`'s result"), case)
        expect_shape(m, (T, T), tr("`sliding_window_mask`'s result"), case, tr("One row per query, one column per key."))

    @rule("boolean")
    def _boolean(self, case: Case, m: torch.Tensor) -> None:
        if m.dtype != torch.bool:
            raise CheckFailed(tr("`sliding_window_mask` returned a {dtype} tensor on the case "
                                 "{case}: the course's masks are boolean (dtype torch.bool), True where a query may "
                                 "read a key. A comparison such as j <= i is boolean already.").format(
                dtype=str(m.dtype).replace('torch.', ''), case=case.label))

    @rule("True where i - window < j <= i")
    def _values(self, case: Case, m: torch.Tensor) -> None:
        T, window = case.args
        expected = window_rule(T, window)
        if torch.equal(m, expected):
            return
        named = [tr(advice) for mistaken, advice in MISTAKES if torch.equal(m, mistaken(T, window))]
        i, j = (m != expected).nonzero()[0].tolist()
        # m and expected are boolean and differ at (i, j): the query reads the key exactly where it may not
        plain = (tr("`sliding_window_mask`'s result is wrong on the case {case}: query {i} reads key {j}, but with "
                    "window={window} it may not: query i reads the keys i - window + 1 .. i.") if bool(m[i, j]) else
                 tr("`sliding_window_mask`'s result is wrong on the case {case}: query {i} does not read key {j}, but "
                    "with window={window} it may: query i reads the keys i - window + 1 .. i."))
        raise named_failure(tr("`sliding_window_mask`'s result is wrong on the case {case}: ").format(case=case.label),
                            named, plain.format(case=case.label, i=i, j=j, window=window))

    rules = (_shape, _boolean, _values)

    def stages(self, case: Case) -> list[Stage]:
        if case.tag == INVALID:
            return []
        T, window = case.args
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        causal, near = (j <= i), (j > i - window)
        return [Stage.of(tr("the query positions i, (T, 1)"), i), Stage.of(tr("the key positions j, (1, T)"), j),
                Stage.of("i - window", i - window),
                Stage.of(tr("j <= i: no key after the query"), causal, (i >= j)),
                Stage.of(tr("j > i - window: the keys inside the window"), near, (i - j < window)),
                Stage.of(tr("the mask, both at once"), window_rule(T, window))]


STATED = {
    "sliding_window_mask": (
        Stated("the window holds `window` keys, the query's own included", "T=6, window=3", "window + 1 keys"),
        Stated("a query reads no key after it", "T=6, window=3", "into the future"),
        Stated("True means the query may read the key", "T=6, window=3", "inverted"),
        Stated("a window of T or more is causal attention", "whole", "query"),
        Stated("a window below 1 raises ValueError", INVALID, "raise ValueError"),
    ),
}
