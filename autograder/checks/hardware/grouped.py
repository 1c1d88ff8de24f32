"""The checks of ``grouped_query_attention`` and ``KVCache``: keys and values shared by groups of query heads.

Oracle for the attention: chapter 3's multi-head attention with each key/value head repeated for its
group (``repeat_interleave``), judged by chapter 2's rules (masked keys at zero weight, rows that sum
to one, a fully masked query at zero) and compared with ``F.scaled_dot_product_attention`` on the
repeated heads. Oracle for the cache: the keys and values written so far, concatenated, with the
cache's buffers given the case's contents before the call (``Case.state`` names buffers too).
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
from ..attention import SDPA_BUILTINS, SDPA_OPS, _AttentionCheck

GROUPS = N_("consecutive query heads share one key/value head: head j reads key/value head j // g, g = h / h_kv "
            "(k.repeat_interleave(g, dim=1), or q viewed as (B, h_kv, g, T_q, d_k) against k.unsqueeze(2))")


def _group(case: Case) -> int:
    q, k = case.args[:2]
    return q.shape[1] // k.shape[1]


class GroupedQueryAttentionCheck(_AttentionCheck):
    function = "grouped_query_attention"
    trained_through = True
    oracle = N_("multi-head attention with each key/value head repeated for its group, and "
                "F.scaled_dot_product_attention")
    forbidden = SDPA_BUILTINS
    forbidden_ops = SDPA_OPS
    hints = (Hint("RuntimeError", N_("Mind the heads: q has h of them and k and v h_kv. Line them up before the "
                                     "scores: q.view(B, h_kv, g, T_q, d_k) against k.unsqueeze(2), or "
                                     "k.repeat_interleave(g, dim=1)."),
                  containing=("must match the size", "shape", "size of tensor")),)

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def rand(*shape, dtype=torch.float32):
            return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)

        def case(B, h, h_kv, T_q, T_k, d_k, d_v=None, mask=None, dtype=torch.float32, tag="", about=""):
            d_v = d_v or d_k
            q, k = rand(B, h, T_q, d_k, dtype=dtype), rand(B, h_kv, T_k, d_k, dtype=dtype)
            v = rand(B, h_kv, T_k, d_v, dtype=dtype)
            kind = str(dtype).replace("torch.", "")
            label = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} {kind}" + (f", {about}" if about else "")
            return Case(label, (q, k, v), {} if mask is None else {"mask": mask}, tag)

        causal = torch.tril(torch.ones(4, 4, dtype=torch.bool))
        padding = torch.tensor([[True] * 7, [True] * 5 + [False] * 2]).view(2, 1, 1, 7)  # (B, 1, 1, T_k)
        blind = torch.ones(2, 4, 3, 5, dtype=torch.bool)
        blind[1, 2, 0] = False  # one query of one head sees no key
        out = [
            case(2, 4, 2, 5, 6, 8),
            case(1, 6, 3, 4, 4, 16, mask=causal, about=tr("causal mask (4, 4)")),
            case(2, 8, 1, 3, 7, 8, d_v=5, mask=padding, about=tr("padding mask (2, 1, 1, 7), one key/value head")),
            case(2, 4, 4, 4, 4, 8, dtype=torch.float64, about=tr("as many key/value heads as query heads")),
            case(2, 4, 2, 3, 5, 8, mask=blind, tag="fully-masked", about=tr("mask (2, 4, 3, 5) hiding every key from one query")),
            case(1, 6, 4, 3, 3, 8, tag=INVALID, about=tr("6 query heads cannot share 4 key/value heads")),
        ]
        if hidden:
            h_kv, groups = draw(g, 1, 3), draw(g, 2, 4)
            T = draw(g, 3, 9)
            out += [
                case(draw(g, 1, 3), h_kv * groups, h_kv, T, T, 8, mask=torch.tril(torch.ones(T, T, dtype=torch.bool)),
                     about=tr("causal mask")),
                case(2, 2 * groups, 2, draw(g, 2, 6), draw(g, 4, 9), 16, d_v=draw(g, 2, 7), dtype=torch.float64),
                case(1, groups, 1, T, draw(g, 2, 8), 4),
                case(2, 3 * h_kv, h_kv, 4, 4, 8, mask=torch.rand(2, 3 * h_kv, 4, 4, generator=g) > 0.4, tag="fully-masked",
                     about=tr("a random mask (B, h, T_q, T_k)")),
                case(1, 2 * groups + 1, 2, 3, 3, 4, tag=INVALID, about=tr("an odd number of query heads for 2 key/value heads")),
            ]
        return out

    def keys_values(self, case: Case) -> tuple[torch.Tensor, torch.Tensor]:
        _, k, v = case.args
        return k.repeat_interleave(_group(case), dim=1), v.repeat_interleave(_group(case), dim=1)

    def scores(self, case: Case) -> torch.Tensor:
        q = case.args[0].double()
        k, _ = self.keys_values(case)
        return q @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, h, T_q, T_k)

    def score_stages(self, case: Case) -> list[Stage]:
        k, v = self.keys_values(case)
        return [Stage.of(tr("the keys of each query head's group, (B, h, T_k, d_k)"), k.double()),
                Stage.of(tr("the values of each query head's group, (B, h, T_k, d_v)"), v.double())]

    def mistaken_scores(self, case: Case):
        q, k, _ = (t.double() for t in case.args)
        g = _group(case)
        tiled = k.repeat(1, g, 1, 1)  # head j reads key head j % h_kv
        out = [(q @ k.repeat_interleave(g, dim=1).transpose(-2, -1),
                tr("the scores were not divided by sqrt(d_k): use (q @ k.transpose(-2, -1)) / math.sqrt(d_k)."))]
        if 1 < g < q.shape[1]:
            out.append((q @ tiled.transpose(-2, -1) / math.sqrt(q.shape[-1]),
                        tr("query head j read key/value head j % h_kv (k.repeat tiles the heads); {groups}.")
                        .format(groups=tr(GROUPS))))
        return out

    def mistaken_outputs(self, case: Case, weights: torch.Tensor):
        _, _, v = case.args
        g = _group(case)
        if not 1 < g < weights.shape[1]:
            return []
        return [(weights @ v.double().repeat(1, g, 1, 1),
                 tr("the keys were grouped right but the values were tiled (v.repeat): {groups}; values as keys.")
                 .format(groups=tr(GROUPS)))]

    @rule("output agrees with PyTorch's kernel")
    def _kernel(self, case: Case, result: Any) -> None:
        q = case.args[0].double()
        k, v = self.keys_values(case)
        mask = case.kwargs.get("mask")
        expected = F.scaled_dot_product_attention(q, k.double(), v.double(), attn_mask=mask)
        expect_close(result[0], expected.nan_to_num(0.0),
                     tr("`{function}`'s output").format(function="grouped_query_attention"), case,
                     dtype=case.args[0].dtype, scale=self.rounding_scale(case))

    rules = (*_AttentionCheck.rules, _kernel)


def _filled(B: int, h_kv: int, max_len: int, d: int, length: int, g: torch.Generator, dtype: torch.dtype):
    """A cache's buffers with ``length`` positions written and the rest as a fresh cache leaves them."""
    keys, values = torch.zeros(B, h_kv, max_len, d, dtype=dtype), torch.zeros(B, h_kv, max_len, d, dtype=dtype)
    keys[:, :, :length] = torch.randn(B, h_kv, length, d, generator=g, dtype=torch.float64).to(dtype)
    values[:, :, :length] = torch.randn(B, h_kv, length, d, generator=g, dtype=torch.float64).to(dtype)
    return {"keys": keys, "values": values, "length": torch.tensor(length)}


class KVCacheCheck(Check):
    function = "KVCache"
    oracle = N_("the keys and values written so far, concatenated")
    follows_device = False
    hints = (Hint("RuntimeError", N_("Mind the shapes: the buffers are (batch, n_kv_heads, max_len, d_head), and the "
                                     "new keys go into the positions length .. length + T_new - 1 of axis 2: "
                                     "self.keys[:, :, start:end] = k."),
                  containing=("must match the size", "shape", "expanded size")),)

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(B, h_kv, max_len, d, length, T_new, dtype=torch.float32, tag=""):
            init = {"batch": B, "n_kv_heads": h_kv, "max_len": max_len, "d_head": d}
            k = torch.randn(B, h_kv, T_new, d, generator=g, dtype=torch.float64).to(dtype)
            v = torch.randn(B, h_kv, T_new, d, generator=g, dtype=torch.float64).to(dtype)
            kind = str(dtype).replace("torch.", "")
            held = tr("an empty cache") if length == 0 else tr("a cache holding {length} positions").format(length=length)
            label = tr("KVCache(batch={B}, n_kv_heads={h_kv}, max_len={max_len}, d_head={d}), {held}, {T_new} new {kind}")
            label = label.format(B=B, h_kv=h_kv, max_len=max_len, d=d, held=held, T_new=T_new, kind=kind)
            state = _filled(B, h_kv, max_len, d, length, g, dtype) if length or dtype != torch.float32 else None
            return Case(label, (k, v), {}, tag, init=init, state=state, collect=("keys", "values", "length"))

        out = [
            case(2, 2, 8, 4, 0, 3),
            case(2, 2, 8, 4, 5, 2),
            case(1, 1, 6, 8, 4, 2, dtype=torch.float64),  # fills the cache exactly
            case(3, 2, 10, 4, 7, 1),  # one decoding step
            case(1, 2, 8, 4, 6, 3, tag=INVALID),  # 6 + 3 > 8
        ]
        if hidden:
            max_len = draw(g, 8, 20)
            length = draw(g, 1, max_len - 3)
            out += [
                case(draw(g, 1, 3), draw(g, 1, 4), max_len, 2 * draw(g, 1, 4), length, draw(g, 1, max_len - length)),
                case(2, 1, max_len, 4, 0, max_len, dtype=torch.float64),
                case(1, draw(g, 1, 3), max_len, 8, max_len - 1, 1),
                case(2, 2, max_len, 4, max_len - 2, 3, tag=INVALID),
            ]
        return out

    @staticmethod
    def _length(case: Case) -> int:
        return 0 if case.state is None else int(case.state["length"])

    def _expected(self, case: Case) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = case.args
        n = self._length(case)
        if case.state is None:
            return k.double(), v.double()
        return (torch.cat([case.state["keys"][:, :, :n].double(), k.double()], dim=2),
                torch.cat([case.state["values"][:, :, :n].double(), v.double()], dim=2))

    def _returned(self, case: Case, result: Any) -> tuple[torch.Tensor, torch.Tensor]:
        output = result.output if isinstance(result, ModuleResult) else result
        keys, values = expect_tuple(output, 2, tr("`{function}`'s forward").format(function="KVCache"), case,
                                    "keys, values")
        return (expect_tensor(keys, tr("`{function}`'s keys").format(function="KVCache"), case),
                expect_tensor(values, tr("`{function}`'s values").format(function="KVCache"), case))

    @rule("keys and values")
    def _pair(self, case: Case, result: Any) -> None:
        self._returned(case, result)

    @rule("every position filled so far, (B, h_kv, length, d_head)")
    def _shapes(self, case: Case, result: Any) -> None:
        k, _ = case.args
        B, h_kv, T_new, d = k.shape
        end, max_len = self._length(case) + T_new, case.init["max_len"]
        whats = (tr("`{function}`'s keys").format(function="KVCache"),
                 tr("`{function}`'s values").format(function="KVCache"))
        for what, value in zip(whats, self._returned(case, result)):
            shape = tuple(value.shape)
            if shape == (B, h_kv, max_len, d) and max_len != end:
                raise CheckFailed(tr("{what} have shape {shape} on the case {case}: the whole buffer, "
                                     "positions not yet written included. Return the positions filled so far: "
                                     "self.keys[:, :, :length].").format(what=what, shape=shape, case=case.label))
            if shape == (B, h_kv, T_new, d) and T_new != end:
                raise CheckFailed(tr("{what} have shape {shape} on the case {case}: only the new ones. "
                                     "Attention reads every position written so far: return self.keys[:, :, :length] "
                                     "after writing.").format(what=what, shape=shape, case=case.label))
            expect_shape(value, (B, h_kv, end, d), what, case,
                         tr("Every position filled so far: (batch, n_kv_heads, length, d_head)."))

    @rule("the length advances")
    def _advances(self, case: Case, result: ModuleResult) -> None:
        length = result.attributes.get("length")
        end = self._length(case) + case.args[0].shape[2]
        if not isinstance(length, torch.Tensor) or length.dim() != 0 or length.is_floating_point():
            held = (tr("not a tensor") if not isinstance(length, torch.Tensor)
                    else tr("a {dtype} tensor of shape {shape}").format(dtype=length.dtype, shape=tuple(length.shape)))
            raise CheckFailed(tr("`KVCache`'s `length` after the call on the case {case} is {held}:"
                                 " keep it as a 0-dimensional torch.long buffer (register_buffer), so that it moves and "
                                 "is saved with the cache.").format(case=case.label, held=held))
        if int(length) != end:
            raise CheckFailed(tr("`KVCache`'s `length` is {length} after the call on the case {case}; it held "
                                 "{held} positions and was given {given}, so {end}. Advance "
                                 "it by the number of new positions: self.length += k.shape[2].").format(
                length=int(length), case=case.label, held=self._length(case), given=case.args[0].shape[2], end=end))

    @rule("the keys and values written so far")
    def _values(self, case: Case, result: Any) -> None:
        keys, values = self._returned(case, result)
        want_k, want_v = self._expected(case)
        swapped = tr("keys and values were swapped: the keys go into self.keys and come back first.")
        expect_close(keys, want_k, tr("`{function}`'s keys").format(function="KVCache"), case, [(lambda: want_v, swapped)],
                     hint=tr("Write the new keys at positions length .. length + T_new - 1 and keep the earlier ones."))
        expect_close(values, want_v, tr("`{function}`'s values").format(function="KVCache"), case,
                     [(lambda: want_k, swapped)],
                     hint=tr("Write the new values at positions length .. length + T_new - 1 and keep the earlier ones."))

    @rule("written into the buffers")
    def _in_place(self, case: Case, result: ModuleResult) -> None:
        want_k, _ = self._expected(case)
        buffer = result.attributes.get("keys")
        B, h_kv, max_len, d = (case.init[n] for n in ("batch", "n_kv_heads", "max_len", "d_head"))
        if not isinstance(buffer, torch.Tensor) or tuple(buffer.shape) != (B, h_kv, max_len, d):
            shape = tuple(buffer.shape) if isinstance(buffer, torch.Tensor) else None
            raise CheckFailed(tr("`KVCache`'s buffer `keys` has shape {shape} after the call on the case {case}; it "
                                 "should stay ({B}, {h_kv}, {max_len}, {d}). Write into it in place, "
                                 "self.keys[:, :, start:end] = k, instead of making a new tensor (torch.cat copies every "
                                 "key so far at every step, which is what the cache is there to avoid).").format(
                shape=shape, case=case.label, B=B, h_kv=h_kv, max_len=max_len, d=d))
        expect_close(buffer[:, :, :want_k.shape[2]], want_k, tr("`KVCache`'s buffer `keys` after the call"), case,
                     hint=tr("The returned keys are right but the buffer does not hold them: write into self.keys "
                             "itself."))

    rules = (_pair, _shapes, _advances, _values, _in_place)


STATED = {
    "grouped_query_attention": (
        Stated("consecutive query heads share a key/value head", "q (2, 4, 5, 8)", "j % h_kv"),
        Stated("the scores are divided by sqrt(d_k)", "q (2, 4, 5, 8)", "not divided by sqrt(d_k)"),
        Stated("a mask is True where a query may attend", "causal mask", "mask is inverted"),
        Stated("a query whose keys are all masked gets zero weights", "fully-masked", "fully masked query"),
        Stated("h must be a multiple of h_kv", INVALID, "raise ValueError"),
    ),
    "KVCache": (
        Stated("new positions are written after the filled ones", "holding 5 positions", "the earlier ones"),
        Stated("forward returns every position filled so far", "holding 5 positions", "only the new ones"),
        Stated("length advances by T_new", "holding 5 positions", "Advance it"),
        Stated("the buffers are written in place", "holding 5 positions", "in place"),
        Stated("keys that do not fit raise ValueError", INVALID, "raise ValueError"),
    ),
}
