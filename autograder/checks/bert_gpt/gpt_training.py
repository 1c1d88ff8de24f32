"""Chapter 7's GPT, trained: ``causal_lm_loss`` and ``GPTBlock``.

Oracles: ``F.cross_entropy(ignore_index=pad_id)`` on tensors shifted here; for the block,
``nn.TransformerEncoderLayer(norm_first=True)`` holding the case's weights under a causal mask, in
float64, and its functional twin (:func:`autograder.oracles.gpt.gpt_block`), which names the
mistakes and replays the learner's dropout masks in training mode.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ... import oracles
from ...framework import (
    Case,
    Check,
    CheckFailed,
    Hint,
    LossCheck,
    Opaque,
    Stage,
    Stated,
    expect_close,
    expect_finite,
    expect_shape,
    matches,
    module_output,
    rule,
    where_it_differs,
)
from ...messages import N_, tr
from ...oracles.gpt import gpt_block
from ...oracles.layers import feed_forward, layer_norm, multi_head_attention
from ...oracles.masks import causal_mask
from .. import Mismatch, state_mismatch


def _ce(logits: torch.Tensor, targets: torch.Tensor, pad_id: int | None, reduction: str = "mean") -> torch.Tensor:
    V = logits.shape[-1]
    kwargs = {} if pad_id is None else {"ignore_index": pad_id}
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), reduction=reduction, **kwargs)


class CausalLmLossCheck(LossCheck):
    function = "causal_lm_loss"
    # a mistake that averages per sequence crashes on the batch with nothing to average: its value elsewhere names it
    values_first = True
    trained_through = True  # a model learns through it: gradients must reach what it was made from
    oracle = N_("F.cross_entropy(ignore_index=pad_id) on logits[:, :-1] against ids[:, 1:]")

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(B, T, V, lengths=None, pad_id=0, dtype=torch.float32, scale=2.0, tag=""):
            logits = (torch.randn(B, T, V, generator=g, dtype=torch.float64) * scale).to(dtype)
            ordinary = torch.tensor([i for i in range(V) if i != pad_id])
            ids = ordinary[torch.randint(len(ordinary), (B, T), generator=g)]  # (B, T)
            if lengths is not None:
                ids[torch.arange(T).unsqueeze(0) >= torch.tensor(lengths).unsqueeze(1)] = pad_id  # padded at the end
            extra = tr(" with entries near ±1000") if tag == "large" else ""
            empty = tr(" (every target is padding)") if lengths is not None and max(lengths) <= 1 else ""
            padding = tr("real lengths {lengths}").format(lengths=lengths) if lengths is not None else tr("no padding")
            label = tr("logits {shape} {dtype}{extra}, ids {ids_shape} with {padding}, pad_id={pad_id}{empty}").format(
                shape=(B, T, V), dtype=str(dtype)[6:], extra=extra, ids_shape=(B, T), padding=padding, pad_id=pad_id,
                empty=empty)
            return Case(label, (logits, ids), {"pad_id": pad_id}, tag)

        out = [
            case(3, 7, 11, lengths=[7, 4, 5]),
            case(2, 5, 6, dtype=torch.float64),
            case(4, 9, 13, lengths=[9, 2, 6, 3], pad_id=5, dtype=torch.float64),
            case(2, 6, 9, lengths=[6, 3], scale=500.0, tag="large"),
            case(2, 4, 7, lengths=[1, 1]),  # one real token per row, which predicts padding: nothing to average
        ]
        if hidden:
            out += [
                case(5, 12, 30, lengths=[12, 1, 7, 10, 4], dtype=torch.float64),
                case(1, 2, 5),
                case(3, 8, 17, lengths=[8, 8, 2], pad_id=16),
                case(6, 10, 7, lengths=[10, 9, 3, 5, 2, 8], dtype=torch.float64, scale=4.0),
                case(2, 5, 20, lengths=[5, 4], scale=2000.0, dtype=torch.float64, tag="large"),
            ]
        return out

    def stages(self, case: Case) -> list[Stage]:
        logits, ids = case.args
        pad_id = case.kwargs["pad_id"]
        log_probs = torch.log_softmax(logits.double(), dim=-1)  # (B, T, V): slicing before or after is the same
        targets = ids[:, 1:]  # (B, T-1)
        nll = -log_probs[:, :-1].gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T-1)
        real = targets != pad_id
        return [
            Stage(tr("the log-probabilities log_softmax(logits, dim=-1)"), (log_probs, log_probs[:, :-1])),
            Stage(tr("the targets ids[:, 1:], the token after each position"), (targets,)),
            Stage(tr("the negative log-probability of each position's target, (B, T - 1)"), (nll,)),
            Stage(tr("the positions whose target is not padding"), (real,)),
            Stage(tr("the loss, the mean of those over the real targets"), (nll[real].sum() / real.sum(),)),
        ]

    what = N_("`causal_lm_loss`'s result")
    mean_of = N_("the mean over every real target of the batch")
    stable_hint = N_("use torch.log_softmax or F.cross_entropy, which compute it stably.")

    def real_targets(self, case: Case) -> torch.Tensor:
        return case.args[1][:, 1:] != case.kwargs["pad_id"]  # position t predicts the token at t + 1

    @rule("values")
    def _values(self, case: Case, loss: Any) -> None:
        if self.nothing_to_average(case):
            return
        logits, ids = case.args
        pad_id = case.kwargs["pad_id"]
        name = tr(self.what)
        x = logits.double()
        B, T, V = x.shape
        shifted, targets = x[:, :-1], ids[:, 1:]  # position t predicts the token at t + 1
        expected = _ce(shifted, targets, pad_id)
        real = targets != pad_id  # (B, T-1)
        per_token = _ce(shifted, targets, None, reduction="none").view(B, T - 1)  # (B, T-1)
        padded = bool((ids == pad_id).any())

        diagnoses: list[tuple[Callable[[], torch.Tensor], str]] = [
            (lambda: _ce(x, ids, pad_id),
             tr("there is no shift: position t was scored against ids[:, t], the token it already sees. Position t "
                "predicts the next token: compare logits[:, :-1] with ids[:, 1:].")),
            (lambda: _ce(x[:, 1:], ids[:, :-1], pad_id),
             tr("the shift goes the wrong way: logits[:, 1:] were scored against ids[:, :-1], so every position "
                "predicts the token before it. Use logits[:, :-1] against ids[:, 1:].")),
            (lambda: _ce(x[:, :-1], ids[:, :-1], pad_id),
             tr("the last position was dropped but nothing was shifted: logits[:, :-1] must meet ids[:, 1:], the "
                "tokens one step ahead.")),
            (lambda: _ce(x[:, 1:], ids[:, 1:], pad_id),
             tr("logits[:, 1:] were scored against ids[:, 1:]: those are the same positions, with no shift. Position t "
                "predicts ids[:, t + 1]: use logits[:, :-1] against ids[:, 1:].")),
        ]
        if padded:
            by_input = ids[:, :-1] != pad_id  # (B, T-1)
            diagnoses += [
                (lambda: _ce(shifted, targets, None),
                 tr("padding was counted: leave out every target equal to pad_id, from the sum and from the count "
                    "(F.cross_entropy(..., ignore_index=pad_id)).")),
                (lambda: per_token[real].sum() / real.numel(),
                 tr("padding was left out of the sum but not out of the count: divide by the number of real targets, "
                    "(ids[:, 1:] != pad_id).sum(), not by B * (T - 1).")),
                (lambda: per_token[by_input].sum() / by_input.sum(),
                 tr("the positions were kept by their input token instead of their target: the last real token of a row "
                    "predicts padding and must be left out, so mask with ids[:, 1:] != pad_id.")),
            ]
            if B > 1:
                diagnoses.append((
                    lambda: torch.stack([per_token[b][real[b]].mean() for b in range(B) if real[b].any()]).mean(),
                    tr("this is the mean of per-sequence means; the loss is the mean over all real targets of the batch "
                       "together, so that every token weighs the same and a short sequence weighs less."),
                ))
        diagnoses += [
            (lambda: per_token[real].sum(),
             tr("this is the sum over the targets; return the mean over the real targets.")),
            (lambda: -(x[:, :-1].gather(-1, targets.unsqueeze(-1)).squeeze(-1)[real]).mean(),
             tr("the logits were used as log-probabilities: take torch.log_softmax(logits, dim=-1) first (or use "
                "F.cross_entropy, which does).")),
        ]
        expect_close(loss, expected, name, case, diagnoses, dtype=logits.dtype,
                     hint=tr("The loss is the mean of -log softmax(logits[:, t])[ids[:, t + 1]] over the positions "
                             "whose target ids[:, t + 1] is not pad_id."))

    rules = (LossCheck._loss, _values)




GPT_BLOCK_RULE = N_(
    "A GPT block is pre-norm: x = x + dropout1(self_attn(a, a, a, attn_mask=subsequent_mask(T))) with a = norm1(x), "
    "then x = x + dropout2(feed_forward(norm2(x)))."
)

GPT_BLOCK_MISTAKES: list[tuple[dict, str]] = [
    (dict(wiring=("post", "post")),
     N_("this is the paper's post-norm wiring, LayerNorm(x + Sublayer(x)), as in chapter 4's EncoderLayer. GPT-2 moved "
        "the LayerNorm in front of each sub-layer and leaves the residual path alone: x = x + Sublayer(LayerNorm(x)).")),
    (dict(mask="none"),
     N_("there is no causal mask, so every position saw the positions after it. The block makes its own mask: "
        "self_attn(a, a, a, attn_mask=subsequent_mask(T)) with T = x.shape[1].")),
    (dict(mask="inverted"),
     N_("the causal mask is flipped: each position saw only the positions after it. subsequent_mask(T) is already True "
        "where a query may attend, which is what MultiHeadAttention's attn_mask expects: pass it without ~.")),
    (dict(wiring=("no-residual", "no-residual")),
     N_("the residual connections are missing: add each sub-layer's output to its input, x = x + Sublayer(LayerNorm(x)).")),
    (dict(wiring=("pre", "no-residual")),
     N_("the feed-forward network's residual connection is missing: x = x + dropout2(feed_forward(norm2(x))).")),
    (dict(wiring=("no-residual", "pre")),
     N_("the attention's residual connection is missing: x = x + dropout1(self_attn(a, a, a, attn_mask=...)), "
        "a = norm1(x).")),
    (dict(wiring=("normed-residual", "normed-residual")),
     N_("the residual was taken after the LayerNorm (x = norm(x); x = x + Sublayer(x)), so the residual path is "
        "normalised at every block. Keep x itself on the residual path: x = x + Sublayer(norm(x)).")),
    (dict(wiring=("normed-residual", "pre")),
     N_("the attention's residual was taken after norm1 (x = norm1(x); x = x + self_attn(x, ...)), so the input itself "
        "never reaches the output. Keep x on the residual path: a = norm1(x); x = x + dropout1(self_attn(a, a, a, ...)).")),
    (dict(wiring=("pre", "normed-residual")),
     N_("the feed-forward network's residual was taken after norm2 (x = norm2(x); x = x + feed_forward(x)). Keep x on "
        "the residual path: x = x + dropout2(feed_forward(norm2(x))).")),
    (dict(wiring=("inner", "inner")),
     N_("the LayerNorm was applied to the sub-layer's output, x + LayerNorm(Sublayer(x)); pre-norm normalises the "
        "sub-layer's input: x + Sublayer(LayerNorm(x)).")),
    (dict(norms=("norm1", "norm1")),
     N_("norm1 served both sub-layers, and norm2 was never used: each sub-layer has its own LayerNorm, norm1 before the "
        "attention and norm2 before the feed-forward network.")),
    (dict(norms=("norm2", "norm2")),
     N_("norm2 served both sub-layers, and norm1 was never used: norm1 goes before the attention and norm2 before the "
        "feed-forward network.")),
    (dict(norms=("norm2", "norm1")),
     N_("norm1 and norm2 are swapped: norm1 goes before the attention and norm2 before the feed-forward network.")),
    (dict(order=("ffn", "attn"), norms=("norm2", "norm1")),
     N_("the feed-forward network came before the attention: attention first, then the feed-forward network.")),
]

GPT_BLOCK_TRAINING_MISTAKES: list[tuple[Callable[[oracles.Dropout], dict], str]] = [
    (lambda d: dict(dropout=d, wiring=("dropped-sum", "dropped-sum")),
     N_("in training mode dropout was applied to the residual sum, dropout1(x + self_attn(...)), so it also drops parts "
        "of x itself; drop only the sub-layer's output before it is added: x = x + dropout1(self_attn(a, a, a, ...)).")),
    (lambda d: dict(dropout=None, inner_dropout=d),
     N_("in training mode dropout1 and dropout2 are never used: apply them to each sub-layer's output before it is added "
        "to x.")),
]


def _extra_norms(name: str, case: Case, mismatch: Mismatch) -> str:
    extra = [n for n in mismatch.unexpected if "norm" in n.split(".")[0]]
    if not extra:
        return ""
    return tr("{name} has parameters the exercise does not ask for ({extra}) on the case {case}: a "
              "pre-norm block has two LayerNorms, norm1 and norm2. The LayerNorm after the last block belongs to the "
              "model (GPT's `norm`), not to every block.").format(name=name, extra=", ".join(extra), case=case.label)


class GPTBlockCheck(Check):
    function = "GPTBlock"
    trained_through = True  # a model learns through it: gradients must reach what it was made from
    oracle = N_("nn.TransformerEncoderLayer(norm_first=True, ReLU) under a causal mask, with the same weights")
    forbidden = ("torch.nn.TransformerEncoderLayer", "torch.nn.TransformerDecoderLayer", "torch.nn.MultiheadAttention",
                 "torch.nn.Transformer", "torch.nn.functional.multi_head_attention_forward")
    forbidden_ops = ("multi_head_attention", "transformer_encoder_layer")  # the fused kernels behind them
    hints = (
        Hint("StateMismatch", lambda name, case, result: tr(
            "{name}'s norm1 and norm2 are one and the same LayerNorm object on the case {case}, so the two "
            "sub-layers share one gamma and one beta. Each sub-layer has its own: self.norm1 = LayerNorm(d_model) and "
            "self.norm2 = LayerNorm(d_model), two objects.").format(name=name, case=case.label),
            when=lambda case, result: any({a, o} == {"norm1", "norm2"} for a, o in state_mismatch(result).shared),
            whole=True),
        Hint("StateMismatch", lambda name, case, result: _extra_norms(name, case, state_mismatch(result)), whole=True),
    )

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)
        out: list[Case] = []

        def case(B, T, d_model, h, d_ff, tag="", dropout=0.1, train=False, x=None, state=None, label=""):
            init = {"d_model": d_model, "h": h, "d_ff": d_ff, "dropout": dropout}
            x = torch.randn(B, T, d_model, generator=g) if x is None else x
            state = oracles.encoder_layer_state(g, d_model, d_ff) if state is None else state
            label = label or (f"x ({B}, {T}, {d_model}), h={h}, d_ff={d_ff}, dropout={dropout}, "
                              + (tr("training mode") if train else tr("eval mode")))
            c = Case(label, (x,), {}, tag, init=init, state=state, collect=("dropout1", "dropout2"), train=train)
            out.append(c)
            return c

        def future_pair(B, T, d_model, h, d_ff, first_changed):
            a = case(B, T, d_model, h, d_ff, "future-a")
            x_b = a.args[0].clone()
            x_b[:, first_changed:] = torch.randn(B, T - first_changed, d_model, generator=g) * 3
            case(B, T, d_model, h, d_ff, "future-b", x=x_b, state=a.state,
                 label=tr("the same block and inputs with other tokens from position {position} on").format(
                     position=first_changed))

        case(2, 5, 16, 4, 32)
        case(1, 1, 16, 4, 32)
        case(3, 7, 8, 2, 16)
        future_pair(2, 6, 16, 4, 32, 3)
        case(2, 5, 16, 4, 32, "train", dropout=0.3, train=True)
        if hidden:
            case(4, 3, 32, 8, 24)
            case(1, 9, 12, 3, 20, dropout=0.5)
            future_pair(3, 8, 16, 2, 32, 5)
            case(3, 6, 24, 3, 48, "train", dropout=0.5, train=True)
        return out

    NAME = N_("`GPTBlock`'s output")

    def stages(self, case: Case) -> list[Stage]:
        """The block's values in eval mode, in the order the computation makes them; in training mode the
        dropout masks are the learner's draw: nothing to locate against."""
        if case.train:
            return []
        state, h = case.state, case.init["h"]
        x = case.args[0].double()
        mask = causal_mask(x.shape[1])  # (T, T), True where a query may attend
        with torch.no_grad():
            a = layer_norm(state, x, prefix="norm1.")
            attended = multi_head_attention(state, a, a, a, h=h, prefix="self_attn.", attn_mask=mask)[0]
            mid = x + attended
            b = layer_norm(state, mid, prefix="norm2.")
            fed = feed_forward(state, b, prefix="feed_forward.")
        return [
            Stage.of(tr("the causal mask subsequent_mask(T), True where a query may attend"), mask),
            Stage.of("norm1(x)", a),
            Stage.of(tr("the attention self_attn(a, a, a, attn_mask=mask) with a = norm1(x)"), attended),
            Stage.of(tr("the first residual sum x + dropout1(self_attn(...))"), mid),
            Stage.of(tr("norm2 of that sum"), b),
            Stage.of(tr("the feed-forward output feed_forward(norm2(x))"), fed),
            Stage.of(tr("the output x + dropout2(feed_forward(norm2(x)))"), mid + fed),
        ]

    @rule("a tensor of x's shape")
    def _shape(self, case: Case, result: Any) -> None:
        expect_shape(module_output(result, self.function, case), case.args[0].shape, tr(self.NAME), case,
                     tr("A block keeps the shape (B, T, d_model) of its input."))

    @rule("finite")
    def _finite(self, case: Case, result: Any) -> None:
        expect_finite(module_output(result, self.function, case), tr(self.NAME), case,
                      tr("No position is fully masked here: every position may attend to itself."))

    @rule("dropout submodules")
    def _dropouts(self, case: Case, result: Any) -> None:
        for attr in ("dropout1", "dropout2"):
            got = result.attributes.get(attr)
            if not (isinstance(got, Opaque) and got.type == "Dropout"):
                raise CheckFailed(tr(
                    "`GPTBlock` has no submodule {attr} of type nn.Dropout on the case {case}: build "
                    "self.{attr} = nn.Dropout(dropout), for the sub-layer's output before the residual sum."
                ).format(attr=attr, case=case.label))

    @rule("values")
    def _values(self, case: Case, result: Any) -> None:
        name = tr(self.NAME)
        (x,) = case.args
        y = module_output(result, self.function, case)
        d_model, h, d_ff, p = (case.init[k] for k in ("d_model", "h", "d_ff", "dropout"))
        xd = x.double()

        def block(stream: oracles.Dropout | None = None, **mistake) -> torch.Tensor:
            with torch.no_grad():
                return gpt_block(case.state, xd, h=h, **({"dropout": stream} | mistake))

        def drops() -> oracles.Dropout:
            return oracles.Dropout(p, x.dtype)

        hint = tr(GPT_BLOCK_RULE)
        if case.train:
            # PyTorch's layer cannot be given the learner's dropout masks; the functional block, held to
            # nn.TransformerEncoderLayer on every eval case, replays them.
            diagnoses = [(lambda f=f: (lambda d: block(**f(d)))(drops()), tr(message))
                         for f, message in GPT_BLOCK_TRAINING_MISTAKES]
            diagnoses.append((lambda: block(None),
                              tr("no dropout was applied at all in training mode. {advice}").format(advice=hint)))
            diagnoses += [(lambda kw=kw: block(drops(), **kw), tr(message)) for kw, message in GPT_BLOCK_MISTAKES]
            expect_close(y, block(drops()), name, case, diagnoses, hint=hint, dtype=x.dtype)
            return
        layer = oracles.torch_encoder_layer(oracles.double_state(case.state), d_model, h, d_ff, norm_first=True)
        with torch.no_grad():
            expected = layer(xd, src_mask=oracles.torch_attn_mask(oracles.causal_mask(x.shape[1]), h))
        if not matches(y, expected, x.dtype):
            # The functional twin that names the mistakes must agree with PyTorch, or its names mean nothing.
            assert matches(block(), expected, torch.float64), tr("grader error: the functional GPT block disagrees")
        diagnoses = [(lambda kw=kw: block(**kw), tr(message)) for kw, message in GPT_BLOCK_MISTAKES]
        if p > 0:
            diagnoses.append((lambda: block(drops(), inner_dropout=None),
                              tr("dropout is active in eval mode: use the submodules dropout1 and dropout2 (nn.Dropout, "
                                 "which follows module.eval()) rather than torch.nn.functional.dropout.")))
        expect_close(y, expected, name, case, diagnoses, hint=hint, dtype=x.dtype)

    rules = (_shape, _finite, _dropouts, _values)

    @rule("a later token changes no earlier position")
    def _causal(self, cases: Sequence[Case], results: Sequence[Any]) -> None:
        pairs = [(c, r) for c, r in zip(cases, results) if c.tag in ("future-a", "future-b")]
        for (case, a), (other, b) in zip(pairs[::2], pairs[1::2]):
            first = int((case.args[0] != other.args[0]).any(dim=(0, 2)).nonzero()[0])
            early_a, early_b = a.output[:, :first], b.output[:, :first]
            if not matches(early_a, early_b):
                raise CheckFailed(tr(
                    "`GPTBlock`: changing the tokens from position {position} on changed the output at an earlier "
                    "position ({case}); {where}. Position t may see positions "
                    "0..t only: give the attention the causal mask subsequent_mask(T)."
                ).format(position=first, case=case.label, where=where_it_differs(early_b, early_a)))

    rules_across = (_causal,)


# What the instructions state, and the visible case that holds a learner to it. The rules every graded
# function keeps (its arguments left unchanged, no view of them returned, the arguments' dtype and
# device followed, gradients reaching them) are the base class's (Check.judge_effects, judge_dtype)
# and are not repeated here.
STATED = {
    "causal_lm_loss": (
        Stated("position t predicts ids[:, t + 1]", "no padding", "there is no shift"),
        Stated("a padding target is left out of the sum", "real lengths [7, 4, 5]", "padding was counted"),
        Stated("a padding target is left out of the count", "real lengths [7, 4, 5]", "not out of the count"),
        Stated("pad_id is the argument, not 0", "pad_id=5", "is not pad_id"),
        Stated("a target is kept by its own id, not its input's", "real lengths [7, 4, 5]",
               "instead of their target"),
        Stated("every real target of the batch weighs the same", "real lengths [7, 4, 5]",
               "mean of per-sequence means"),
        Stated("when every target is padding the result is NaN", "every target is padding", "nothing to average"),
        Stated("the loss is a 0-dimensional tensor, not a Python number", "no padding", "no .item()"),
        Stated("large logits do not give log(0)", "large", "underflows to log(0)"),
    ),
    "GPTBlock": (
        Stated("pre-norm: x + Sublayer(LayerNorm(x))", "x (2, 5, 16), h=4, d_ff=32, dropout=0.1, eval",
               "post-norm wiring"),
        Stated("the block makes its own causal mask", "future-", "there is no causal mask"),
        Stated("the mask is True where a query may attend", "future-", "the causal mask is flipped"),
        Stated("norm2 has its own gamma and beta", "x (2, 5, 16), h=4, d_ff=32, dropout=0.1, eval",
               "one and the same LayerNorm"),
        Stated("dropout acts on each sub-layer's output before it is added", "train",
               "dropout was applied to the residual sum"),
        Stated("in eval mode the block is deterministic", "x (2, 5, 16), h=4, d_ff=32, dropout=0.1, eval",
               "dropout is active in eval mode"),
        Stated("the final LayerNorm belongs to the model, not the block", "x (2, 5, 16), h=4, d_ff=32, dropout=0.1, eval",
               "belongs to the model"),
    ),
}
