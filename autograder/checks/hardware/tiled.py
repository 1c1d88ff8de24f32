"""The check of ``tiled_attention``: attention one block of keys at a time, with each row's log-sum-exp.

Oracle: plain attention in float64 (its scores, ``torch.logsumexp`` of them, their softmax times the
values) and PyTorch's ``F.scaled_dot_product_attention``. The known mistakes are replayed by
:func:`tiled`, the same loop with one step changed, so that a message names a mistake only where it
gives the learner's numbers. The long cases (24,576 keys among the visible ones; a length, a width, a block and
a mask drawn among the hidden ones, so that the visible case's answer cannot stand in for tiling) are judged on
a sample of their query rows: a whole oracle would take 4.5 GiB in float64.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

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
    rule,
)
from ...messages import N_, tr
from ..attention import SDPA_BUILTINS, SDPA_OPS

#: the visible long case: its float32 scores alone take LONG_T**2 * 4 bytes = 2.25 GiB, more than a graded process
#: may allocate (2 GiB). A right answer takes 2 to 9 s on one thread, whether it tiles the keys, the queries, or both
LONG_T, LONG_D, LONG_BLOCK = 24_576, 16, 256
#: the hidden long case's length is drawn from these: from 23,200 on, one T x T float32 matrix is over 2 GiB
HIDDEN_LONG_T = (23_200, 25_600)
#: what the long case's call may allocate beyond what the process holds, and its time limit
LONG_MB, LONG_SECONDS = 1024, 60.0
#: query rows of the long case that are judged
SAMPLED_ROWS = 48



def _gib(T: int) -> str:
    """The size of a T x T float32 matrix, as the long case's label and hint give it."""
    return f"{T * T * 4 / 2**30:.2f} GiB"


def memory_hint(name: str, case: Case, result: Any) -> str:
    """Why a long case ran out of memory: its scores do not fit, and what to keep between blocks instead."""
    T = case.args[1].shape[-2]
    return tr("The case's scores alone are {T} x {T} float32 numbers, {size}, and a graded process may "
              "allocate 2 GiB. Compute the scores of one block of keys at a time (block_size of them) and keep, between "
              "blocks, only each query's running maximum, running sum and running weighted sum of the values.").format(
        T=f"{T:,}", size=_gib(T))


def _long_case(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block: int, causal: bool) -> Case:
    T = k.shape[-2]
    label = (tr("q, k, v ({T}, {d}) float32, block_size={block}, causal: a long sequence, whose scores would take "
                "{size}") if causal else
             tr("q, k, v ({T}, {d}) float32, block_size={block}: a long sequence, whose scores would take {size}")
             ).format(T=f"{T:,}", d=q.shape[-1], block=block, size=_gib(T))
    return Case(label, (q, k, v, block), {"causal": True} if causal else {}, "long", seconds=LONG_SECONDS,
                memory_mb=LONG_MB)
CAUSAL_POSITIONS = N_(
    "the causal mask compared the positions within the block: a key's position is its index in the whole "
    "sequence, start + its index in the block, and query i may read the keys at positions j <= i."
)


def _scores(q: torch.Tensor, k: torch.Tensor, causal: bool, rows: torch.Tensor | None = None) -> torch.Tensor:
    """The scaled scores in float64, (..., T_q, T_k), -inf where the causal mask hides a key; only the query
    ``rows`` when given."""
    qd = q.double() if rows is None else q.double()[..., rows, :]
    s = qd @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., T_q, T_k)
    if causal:
        positions = torch.arange(q.shape[-2]) if rows is None else rows
        s = s.masked_fill(torch.arange(k.shape[-2])[None, :] > positions[:, None], float("-inf"))
    return s


def plain(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
          rows: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain attention's output and log-sum-exp, in float64."""
    s = _scores(q, k, causal, rows)
    return torch.softmax(s, dim=-1) @ v.double(), torch.logsumexp(s, dim=-1)


def tiled(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block: int, causal: bool, mistake: str = "",
          dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """The tiled loop in ``dtype``, right or with one ``mistake``: "no-acc-rescale" (the weighted sum is not
    rescaled when the maximum grows), "no-rescale" (neither sum is), "own-max" (each block measured against
    its own maximum, which may be lower than the last), "no-division" (the weighted sum returned as it is),
    "divide-per-block" (the block's terms divided by the running sum inside the loop, nothing after),
    "block-positions" (the causal mask compares positions within the block)."""
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    m = q.new_full((*q.shape[:-1], 1), float("-inf"))
    total = q.new_zeros((*q.shape[:-1], 1))
    acc = q.new_zeros((*q.shape[:-1], v.shape[-1]))
    rows = torch.arange(q.shape[-2])[:, None]
    for start in range(0, k.shape[-2], block):
        kb, vb = k[..., start:start + block, :], v[..., start:start + block, :]
        s = q @ kb.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            first = 0 if mistake == "block-positions" else start
            s = s.masked_fill(torch.arange(first, first + kb.shape[-2])[None, :] > rows, float("-inf"))
        block_max = s.amax(dim=-1, keepdim=True)
        m_new = block_max if mistake == "own-max" else torch.maximum(m, block_max)
        p = torch.exp(s - m_new)
        rescale = torch.exp(m - m_new)
        if mistake == "no-rescale":
            total, acc = total + p.sum(dim=-1, keepdim=True), acc + p @ vb
        else:
            total = total * rescale + p.sum(dim=-1, keepdim=True)
            if mistake == "no-acc-rescale":
                acc = acc + p @ vb
            elif mistake == "divide-per-block":
                acc = acc * rescale + p @ vb / total
            else:
                acc = acc * rescale + p @ vb
        m = m_new
    out = acc if mistake in ("no-division", "divide-per-block") else acc / total
    return out, (m + torch.log(total)).squeeze(-1)


#: the mistakes :func:`tiled` replays, and what a learner who made one is told
TILED_MISTAKES = {
    "no-acc-rescale": N_(  # english: a name of the code
        "when the running maximum grows, the running weighted sum of the values must be rescaled by "
        "exp(m_old - m_new) too, as the running sum is."),
    "no-rescale": N_("when the running maximum grows, what was summed so far was measured against the old maximum: "
                     "multiply the running sum and the running weighted sum by exp(m_old - m_new) before adding the "
                     "block's terms."),
    "no-division": N_("the running weighted sum was returned without the final division: the output is acc / l, the "
                      "weighted sum divided by the running sum of the exponentials, once, after the last block."),
    "divide-per-block": N_(  # english: a name of the code
        "each block's weighted values were divided by the running sum inside the loop; the sum is "
        "only complete after the last block: accumulate p @ v_block, and divide once at the end."),
    "block-positions": CAUSAL_POSITIONS,
}
OWN_MAX = N_(
    "each block's exponentials were measured against that block's own maximum. That maximum can be far below an "
    "earlier one, and rescaling the running sums by exp(m_old - m_new) then overflows; under a causal mask it is "
    "-inf for a query that sees no key of the block, and exp(-inf - (-inf)) is NaN. Keep the running maximum, "
    "m_new = torch.maximum(m, block maximum), so that it never goes down and every exponent stays at or below zero."
)


#: the names of the stages of the first two blocks, (first, second), each written whole so that it translates whole
BLOCK_STAGES = {
    "keys": (N_("the first block of keys, k[..., start:start + block_size, :]"),
             N_("the second block of keys, k[..., start:start + block_size, :]")),
    "values": (N_("the first block of values"), N_("the second block of values")),
    "dots": (N_("the dot products of the queries with the first block of keys"),
             N_("the dot products of the queries with the second block of keys")),
    "scaled": (N_("the scaled scores of the first block, (..., T_q, b)"),
               N_("the scaled scores of the second block, (..., T_q, b)")),
    "masked": (N_("the first block's scores, -inf where a key comes after the query"),
               N_("the second block's scores, -inf where a key comes after the query")),
    "max": (N_("the running maximum after the first block"), N_("the running maximum after the second block")),
    "exp": (N_("exp(s - m) of the first block"), N_("exp(s - m) of the second block")),
}


def _large_case(g: torch.Generator) -> Case:
    """The first block of keys scores near +60, the second near -60: exp of the 120 between them overflows float32."""
    q = torch.rand(2, 5, 8, generator=g) * 0.2 + 1.0  # positive features: a score follows the sign of the key
    k = torch.cat([torch.full((2, 4, 8), 21.0), torch.full((2, 4, 8), -21.0)], dim=1)
    k = k + torch.randn(2, 8, 8, generator=g) * 0.1
    v = torch.randn(2, 8, 6, generator=g)
    return Case(tr("q (2, 5, 8), k (2, 8, 8), v (2, 8, 6), block_size=4; the first block of keys scores near +60, "
                   "the second near -60"), (q, k, v, 4), {}, "large")


class TiledAttentionCheck(Check):
    function = "tiled_attention"
    oracle = N_("plain attention and torch.logsumexp of its scores, in float64, and F.scaled_dot_product_attention")
    forbidden = SDPA_BUILTINS
    forbidden_ops = SDPA_OPS
    follows_device = True
    hints = (
        Hint(("RuntimeError", "MemoryError"), memory_hint, containing=("can't allocate memory", "Cannot allocate"),
             when=lambda case, result: case.tag == "long"),
        Hint("MemoryError", memory_hint, when=lambda case, result: case.tag == "long"),
        Hint("RuntimeError", N_("Mind the shapes: the scores of a block are q @ k_block.transpose(-2, -1), "
                                "(..., T_q, b); the running maximum and sum keep a last axis of size 1 (keepdim=True) "
                                "so that they broadcast against them."),
             containing=("must match the size", "shapes cannot be multiplied")),
    )

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def rand(*shape, dtype=torch.float32):
            return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)

        def case(q_shape, T_k, d_v, block, causal=False, dtype=torch.float32, tag=""):
            *batch, T_q, d_k = q_shape
            q, k, v = rand(*q_shape, dtype=dtype), rand(*batch, T_k, d_k, dtype=dtype), rand(*batch, T_k, d_v, dtype=dtype)
            kind = str(dtype).replace("torch.", "")
            label = (f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} {kind}, block_size={block}"
                     + (", causal" if causal else ""))
            return Case(label, (q, k, v, block), {"causal": True} if causal else {}, tag)

        out = [
            case((10, 8), 10, 8, 4),  # blocks of 4, 4 and 2
            case((2, 3, 12, 16), 12, 16, 5, causal=True),
            case((2, 9, 8), 20, 6, 7),
            case((3, 16, 32), 16, 32, 4, causal=True, dtype=torch.float64),
            case((6, 4), 6, 3, 1, causal=True),
            _large_case(g),
            case((4, 8), 6, 8, 2, causal=True, tag=INVALID),
            case((5, 8), 5, 8, 0, tag=INVALID),
        ]
        if hidden:
            T = draw(g, 9, 30)
            out += [
                case((draw(g, 1, 3), T, 16), T, draw(g, 2, 9), draw(g, 2, 8), causal=True),
                case((2, 2, draw(g, 3, 12), 8), draw(g, 13, 40), 8, draw(g, 3, 11), dtype=torch.float64),
                case((T, 4), T, 4, T + draw(g, 0, 3), causal=True),  # one block holds every key
                case((3, draw(g, 20, 50), 8), T, 5, draw(g, 2, 6), causal=False),
                case((2, T, 8), T, 8, draw(g, 3, 9), causal=True, dtype=torch.float64),
            ]
            T, d = draw(g, *HIDDEN_LONG_T), 8 * draw(g, 1, 3)
            q, k, v = (torch.randn(T, d, generator=g) for _ in range(3))
            out.append(_long_case(q, k, v, draw(g, 160, 384), causal=bool(draw(g, 0, 1))))
        else:
            q, k, v = (torch.randn(LONG_T, LONG_D, generator=g) for _ in range(3))
            out.append(_long_case(q, k, v, LONG_BLOCK, causal=False))
        return out

    @staticmethod
    def _causal(case: Case) -> bool:
        return bool(case.kwargs.get("causal", False))

    def _rows(self, case: Case) -> torch.Tensor | None:
        """The query rows judged: every one, except on the long case."""
        if case.tag != "long":
            return None
        return torch.linspace(0, case.args[0].shape[-2] - 1, SAMPLED_ROWS).round().long()

    def _expected(self, case: Case) -> tuple[torch.Tensor, torch.Tensor]:
        q, k, v, _ = case.args
        return plain(q, k, v, self._causal(case), self._rows(case))

    def _returned(self, case: Case, result: Any) -> tuple[torch.Tensor, torch.Tensor]:
        output, lse = expect_tuple(result, 2, "`tiled_attention`", case, "output, lse")
        return (expect_tensor(output, tr("`{function}`'s output").format(function=self.function), case),
                expect_tensor(lse, tr("`{function}`'s lse").format(function=self.function), case))

    def _judged(self, case: Case, value: torch.Tensor, lse: bool = False) -> torch.Tensor:
        rows = self._rows(case)
        if rows is None:
            return value
        return value[..., rows] if lse else value[..., rows, :]

    def _scale(self, case: Case) -> float:
        """Scores in the tens carry float32 rounding of their size into every exponential."""
        if case.tag == "long":
            return 1.0
        scores = self.worked_out(case, lambda c: _scores(c.args[0], c.args[1], self._causal(c)))
        return max(1.0, float(scores.abs().nan_to_num(0.0, 0.0, 0.0).max()) / 30)

    @rule("output and lse")
    def _pair(self, case: Case, result: Any) -> None:
        self._returned(case, result)

    @rule("output is (..., T_q, d_v), lse is (..., T_q)")
    def _shapes(self, case: Case, result: Any) -> None:
        q, _, v, _ = case.args
        output, lse = self._returned(case, result)
        expect_shape(output, (*q.shape[:-1], v.shape[-1]), tr("`{function}`'s output").format(function=self.function), case,
                     tr("One weighted sum of the values per query: (..., T_q, d_v)."))
        if tuple(lse.shape) == (*q.shape[:-1], 1):
            raise CheckFailed(tr("`{function}`'s lse has shape {shape} on the case {case}: it kept the last axis of size "
                                 "1 that the running maximum and sum carry. Return one number per query, (..., T_q): "
                                 "squeeze(-1).").format(function=self.function, shape=tuple(lse.shape), case=case.label))
        expect_shape(lse, q.shape[:-1], tr("`{function}`'s lse").format(function=self.function), case,
                     tr("One log-sum-exp per query: (..., T_q)."))

    @rule("finite")
    def _finite(self, case: Case, result: Any) -> None:
        output, lse = self._returned(case, result)
        for name, value in (("output", output), ("lse", lse)):
            if torch.isfinite(value).all():
                continue
            q, k, v, block = case.args
            own = tiled(q, k, v, block, self._causal(case), "own-max", dtype=q.dtype)[name == "lse"]
            what = (tr("`{function}`'s lse") if name == "lse" else tr("`{function}`'s output")).format(
                function=self.function)
            if torch.equal(torch.isfinite(own), torch.isfinite(value)):
                raise CheckFailed(tr("{what} is not finite on the case {case}: {reason}").format(
                    what=what, case=case.label, reason=tr(OWN_MAX)))
            bad = (~torch.isfinite(value)).nonzero()[0].tolist()
            raise CheckFailed(tr(
                "{what} contains {value} (first at index {index}) on the case {case}. Subtract the running maximum "
                "before every exp, so that no exponent is above zero; where the maximum is still -inf (before any key "
                "is seen), the rescaling factor is exp(-inf) = 0."
            ).format(what=what, value=value[tuple(bad)].item(), index=tuple(bad), case=case.label))

    def _diagnoses(self, case: Case, which: int) -> list:
        if case.tag == "long":
            return []
        q, k, v, block = case.args
        causal = self._causal(case)
        found = [(lambda m=m: tiled(q, k, v, block, causal, m)[which], tr(advice)) for m, advice in TILED_MISTAKES.items()
                 if m != "block-positions" or causal]
        unscaled = math.sqrt(q.shape[-1])
        found.append((lambda: plain(q * unscaled, k, v, causal)[which],
                      tr("the scores were not divided by sqrt(d_k): s = q @ k_block.transpose(-2, -1) / math.sqrt(d_k).")))
        if causal:
            found.append((lambda: plain(q, k, v, False)[which],
                          tr("the causal mask was not applied: with causal=True, query i reads the keys at positions "
                             "j <= i only.")))
        return found

    @rule("output")
    def _output(self, case: Case, result: Any) -> None:
        output, _ = self._returned(case, result)
        expect_close(self._judged(case, output), self._expected(case)[0],
                     tr("`{function}`'s output").format(function=self.function), case,
                     self._diagnoses(case, 0), scale=self._scale(case))

    @rule("lse")
    def _lse(self, case: Case, result: Any) -> None:
        _, lse = self._returned(case, result)
        expected = self._expected(case)[1]
        diagnoses = []
        if case.tag != "long":
            q, k, _, _ = case.args
            s = _scores(q, k, self._causal(case))
            top = s.amax(dim=-1)
            diagnoses = [
                (lambda: expected - top, tr("the lse is missing the running maximum: the log-sum-exp is m + log(l), "
                                            "since l sums exp(s - m).")),
                (lambda: top, tr("the lse is the running maximum alone: the log-sum-exp is m + log(l).")),
                (lambda: torch.logsumexp(s * math.sqrt(q.shape[-1]), dim=-1),
                 tr("the lse was taken of the scores before their scale: use the same scaled scores as the weights.")),
            ] + self._diagnoses(case, 1)
        expect_close(self._judged(case, lse, lse=True), expected,
                     tr("`{function}`'s lse").format(function=self.function), case, diagnoses,
                     hint=tr("The lse is log(sum_j exp(s_ij)) over the scaled scores of row i: m + log(l) after the last "
                             "block."),
                     scale=self._scale(case))

    @rule("output agrees with PyTorch's kernel")
    def _kernel(self, case: Case, result: Any) -> None:
        if case.tag == "long":
            return
        q, k, v, _ = (a.double() if isinstance(a, torch.Tensor) else a for a in case.args)
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=self._causal(case))
        expect_close(result[0], expected, tr("`{function}`'s output").format(function=self.function), case,
                     dtype=case.args[0].dtype,
                     scale=self._scale(case))

    rules = (_pair, _shapes, _finite, _output, _lse, _kernel)

    def stages(self, case: Case) -> list[Stage]:
        if case.tag in ("long", INVALID):
            return []
        q, k, v, block = case.args
        causal = self._causal(case)
        qd, kd, vd = q.double(), k.double(), v.double()
        rows = torch.arange(q.shape[-2])[:, None]
        out: list[Stage] = []
        m = total = acc = None
        for n, start in enumerate(range(0, min(k.shape[-2], 2 * block), block)):
            said = {step: names[n] for step, names in BLOCK_STAGES.items()}  # the first block's names, or the second's
            kb, vb = kd[..., start:start + block, :], vd[..., start:start + block, :]
            raw = qd @ kb.transpose(-2, -1)
            s = raw / math.sqrt(q.shape[-1])
            out += [Stage.of(said["keys"], kb),
                    Stage.of(said["values"], vb),
                    Stage.of(said["dots"], raw),
                    Stage.of(said["scaled"], s)]
            if causal:
                s = s.masked_fill(torch.arange(start, start + kb.shape[-2])[None, :] > rows, float("-inf"))
                out.append(Stage.of(said["masked"], s))
            top = s.amax(dim=-1, keepdim=True)
            m_new = top if m is None else torch.maximum(m, top)
            p = torch.exp(s - m_new)
            out += [Stage.of(N_("the second block's largest score per query"), top)] if m is not None else []
            out += [Stage.of(said["max"], m_new),
                    Stage.of(said["exp"], p)]
            if m is None:
                total, acc = p.sum(dim=-1, keepdim=True), p @ vb
                out += [Stage.of(N_("the running sum after the first block"), total),
                        Stage.of(N_("the running weighted sum of the values after the first block"), acc)]
            else:
                rescale = torch.exp(m - m_new)
                total, acc = total * rescale + p.sum(dim=-1, keepdim=True), acc * rescale + p @ vb
                out += [Stage.of(N_("the rescaling factor exp(m_old - m_new) at the second block"), rescale),
                        Stage.of(N_("the running sum after the second block"), total),
                        Stage.of(N_("the running weighted sum of the values after the second block"), acc)]
            m = m_new
        output, lse = plain(q, k, v, causal)
        return out + [Stage.of(N_("the output, the weighted sum divided by the sum"), output),
                      Stage.of(N_("the log-sum-exp of each row, m + log(l)"), lse)]


STATED = {
    "tiled_attention": (
        Stated("the running sums are rescaled when the maximum grows", "block_size=4", "rescaled"),
        Stated("the output is divided once, after the last block", "block_size=4", "the final division"),
        Stated("causal positions are counted in the whole sequence", "causal", "positions within the block"),
        Stated("the lse is (..., T_q)", "block_size=4", "it kept the last axis"),
        Stated("causal attention needs T_q == T_k", INVALID, "raise ValueError"),
        Stated("only one block of scores is held at a time", "long", "2.25 GiB"),
    ),
}
