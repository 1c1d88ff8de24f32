"""The checks of ``patchify`` and ``PatchEmbedding``: an image read as a sequence of patches.

Oracles: ``F.unfold`` with kernel and stride equal to the patch (which lays a patch out channel
first, then pixel row, then pixel column, as ``nn.Conv2d`` holds a kernel), and ``nn.Conv2d(C, d_model,
patch, stride=patch)`` holding the projection's weights, with the class token put first and the
learned positions added, in float64.
"""
from __future__ import annotations

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
    rule,
)
from ...messages import N_, tr

#: F.unfold and nn.Unfold run ATen's im2col; Tensor.unfold, a sliding view the answer may use, shares their name
IM2COL = ("im2col",)
UNFOLD_NOTE = N_("im2col is what F.unfold and nn.Unfold run")


def patches(images: torch.Tensor, p: int, *, order: str = "chw", by: str = "rows") -> torch.Tensor:
    """(B, N, C p p) float64; the keywords replay known mistakes: ``order="hwc"`` flattens a patch channel last,
    ``order="cwh"`` pixel column before row, ``by="columns"`` lists the patches column by column."""
    B, C, H, W = images.shape
    grid = images.double().reshape(B, C, H // p, p, W // p, p)  # (B, C, rows, i, cols, j)
    inside = {"chw": (1, 3, 5), "hwc": (3, 5, 1), "cwh": (1, 5, 3)}[order]
    outside = (2, 4) if by == "rows" else (4, 2)
    return grid.permute(0, *outside, *inside).reshape(B, (H // p) * (W // p), C * p * p)


def unfolded(images: torch.Tensor, p: int) -> torch.Tensor:
    """(B, N, C p p) float64 by PyTorch's im2col."""
    return F.unfold(images.double(), kernel_size=p, stride=p).transpose(1, 2)


class PatchifyCheck(Check):
    function = "patchify"
    oracle = N_("F.unfold with kernel and stride equal to the patch, in float64")
    forbidden_ops = IM2COL
    forbidden_note = UNFOLD_NOTE
    trained_through = True
    may_return_view = True  # one patch of one channel is the image itself, reshaped
    invalid_argument = "patch"
    hints = (Hint("RuntimeError", N_("Cut each spatial axis in two first: images.reshape(B, C, H // p, p, W // p, p), "
                                     "then bring the two patch-grid axes forward with permute before flattening."),
                  containing=("shape", "invalid for input")),)

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(B, C, H, W, p, dtype=torch.float32, tag=""):
            images = torch.randn(B, C, H, W, generator=g, dtype=torch.float64).to(dtype)
            kind = str(dtype).replace("torch.", "")
            return Case(f"images ({B}, {C}, {H}, {W}) {kind}, patch={p}", (images, p), {}, tag)

        out = [case(2, 1, 8, 8, 2), case(1, 3, 6, 9, 3), case(2, 2, 4, 8, 4, torch.float64), case(1, 3, 4, 4, 4),
               case(1, 1, 6, 6, 4, tag=INVALID)]
        if hidden:
            p = draw(g, 2, 4)
            out += [case(draw(g, 1, 3), draw(g, 1, 3), p * draw(g, 1, 4), p * draw(g, 2, 4), p),
                    case(2, 3, p * draw(g, 2, 3), p * draw(g, 1, 3), p, torch.float64),
                    case(1, 2, p * 2 + 1, p * 2, p, tag=INVALID)]
        return out

    @rule("(B, N, C * patch * patch)")
    def _shape(self, case: Case, result: Any) -> None:
        images, p = case.args
        B, C, H, W = images.shape
        what = tr("`{function}`'s result").format(function="patchify")
        y = expect_tensor(result, what, case)
        if tuple(y.shape) == (B, H // p, W // p, C * p * p):
            raise CheckFailed(tr("`patchify`'s result has shape {shape} on the case {case}: the grid of "
                                 "patches was left as two axes. Flatten it into one sequence: (B, N, C * p * p).")
                              .format(shape=tuple(y.shape), case=case.label))
        expect_shape(y, (B, (H // p) * (W // p), C * p * p), what, case,
                     tr("One row per patch, (H/p) * (W/p) of them, each of C * p * p numbers."))

    @rule("the patches in reading order, each channel first")
    def _values(self, case: Case, y: torch.Tensor) -> None:
        images, p = case.args
        diagnoses = [
            (lambda: patches(images, p, order="hwc"),
             tr("each patch was flattened channel last (pixel row, pixel column, channel): flatten it channel first, "
                "(C, p, p), the order nn.Conv2d holds a kernel in.")),
            (lambda: patches(images, p, order="cwh"),
             tr("inside each patch, pixel columns came before pixel rows: flatten (C, row, column).")),
            (lambda: patches(images, p, by="columns"),
             tr("the patches were listed column by column: list them in reading order, left to right along the top "
                "row of patches, then the next row.")),
            (lambda: images.double().reshape(y.shape),
             tr("the image was reshaped without being cut: a reshape alone takes runs of pixels along each image "
                "row. Split H and W into (H/p, p) and (W/p, p) and permute the patch-grid axes forward before "
                "flattening.")),
        ]
        expect_close(y, unfolded(images, p), tr("`{function}`'s result").format(function="patchify"), case, diagnoses)

    rules = (_shape, _values)

    def stages(self, case: Case) -> list[Stage]:
        if case.tag == INVALID:
            return []
        images, p = case.args
        B, C, H, W = images.shape
        grid = images.double().reshape(B, C, H // p, p, W // p, p)
        return [Stage.of(tr("the image with each axis cut in two, (B, C, H/p, p, W/p, p)"), grid),
                Stage.of(tr("the patch grid brought forward, (B, H/p, W/p, C, p, p)"), grid.permute(0, 2, 4, 1, 3, 5)),
                Stage.of(tr("the patches, (B, N, C p p)"), unfolded(images, p))]


def embedded(case: Case, *, cls: str = "first", positions: str = "all", order: str = "chw") -> torch.Tensor:
    """(B, N + 1, d) float64 by nn.Conv2d holding the projection; the keywords replay known mistakes: ``cls="last"``
    puts the class token after the patches, ``positions`` "none" adds none, "patches" adds them to the patches
    only (position 0 to the first patch), ``order="hwc"`` flattens a patch channel last against the weights."""
    images, = case.args
    s = {n: t.double() for n, t in case.state.items()}
    C, p, d = case.init["in_channels"], case.init["patch"], case.init["d_model"]
    if order == "chw":
        conv = F.conv2d(images.double(), s["proj.weight"].reshape(d, C, p, p), s["proj.bias"], stride=p)  # (B, d, H/p, W/p)
        tokens = conv.flatten(2).transpose(1, 2)  # (B, N, d)
    else:
        tokens = patches(images, p, order=order) @ s["proj.weight"].T + s["proj.bias"]
    first = s["cls_token"].expand(images.shape[0], 1, d)
    z = torch.cat([first, tokens] if cls == "first" else [tokens, first], dim=1)  # (B, N + 1, d)
    if positions == "all":
        return z + s["positions"]
    if positions == "patches":
        return z + torch.cat([torch.zeros(1, 1, d, dtype=z.dtype), s["positions"][:, :-1]], dim=1)
    return z


class PatchEmbeddingCheck(Check):
    function = "PatchEmbedding"
    oracle = N_("nn.Conv2d with stride equal to its kernel, holding the same weights, the class token first")
    forbidden_ops = IM2COL
    forbidden_note = UNFOLD_NOTE
    trained_through = True
    hints = (Hint("RuntimeError", N_("The class token is (1, 1, d_model): expand it to the batch, "
                                     "self.cls_token.expand(B, -1, -1), before concatenating it with the patches' "
                                     "(B, N, d_model) along axis 1."),
                  containing=("must match", "Sizes of tensors", "size of tensor")),)

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(B, C, H, W, p, d, dtype=torch.float32, tag="", n_patches=None):
            N = n_patches or (H // p) * (W // p)
            init = {"in_channels": C, "patch": p, "d_model": d, "n_patches": N}

            def rand(*shape, scale=1.0):
                return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)

            state = {"proj.weight": rand(d, C * p * p, scale=(C * p * p) ** -0.5), "proj.bias": rand(d, scale=0.1),
                     "cls_token": rand(1, 1, d), "positions": rand(1, N + 1, d, scale=0.5)}
            images = rand(B, C, H, W)
            kind = str(dtype).replace("torch.", "")
            label = f"PatchEmbedding(in_channels={C}, patch={p}, d_model={d}, n_patches={N}), images {(B, C, H, W)} {kind}"
            return Case(label, (images,), {}, tag, init=init, state=state)

        out = [case(2, 1, 8, 8, 2, 8), case(1, 3, 6, 6, 3, 5), case(2, 2, 8, 4, 4, 6, torch.float64),
               case(1, 1, 8, 8, 4, 6, tag=INVALID, n_patches=16)]
        if hidden:
            p = draw(g, 2, 4)
            out += [case(draw(g, 1, 3), draw(g, 1, 3), p * draw(g, 1, 3), p * draw(g, 2, 3), p, draw(g, 4, 12)),
                    case(2, 3, p * 2, p * 2, p, 8, torch.float64),
                    case(1, 1, p * 3, p * 3, p, 4, tag=INVALID, n_patches=4)]
        return out

    def _output(self, case: Case, result: Any) -> torch.Tensor:
        output = result.output if isinstance(result, ModuleResult) else result
        return expect_tensor(output, tr("`{function}`'s output").format(function="PatchEmbedding"), case)

    @rule("(B, n_patches + 1, d_model)")
    def _shape(self, case: Case, result: Any) -> None:
        z = self._output(case, result)
        B, N, d = case.args[0].shape[0], case.init["n_patches"], case.init["d_model"]
        if tuple(z.shape) == (B, N, d):
            raise CheckFailed(tr("`PatchEmbedding`'s output has shape {shape} on the case {case}: one "
                                 "token per patch, and no class token. Put the class token in front of them: "
                                 "(B, n_patches + 1, d_model).").format(shape=tuple(z.shape), case=case.label))
        expect_shape(z, (B, N + 1, d), tr("`{function}`'s output").format(function="PatchEmbedding"), case,
                     tr("The class token, then one token per patch."))

    @rule("the class token first, then each patch projected, positions added")
    def _values(self, case: Case, result: Any) -> None:
        z = self._output(case, result)
        diagnoses = [
            (lambda: embedded(case, cls="last"), tr("the class token was put after the patches: it comes first, "
             "position 0, torch.cat([cls, tokens], dim=1).")),
            (lambda: embedded(case, positions="none"), tr("no position was added: add self.positions to every token, "
             "the class token included.")),
            (lambda: embedded(case, positions="patches"), tr("the positions were added to the patches only: the "
             "class token has position 0 and the patches 1 .. N; add positions to the sequence after the class token "
             "is in.")),
            (lambda: embedded(case, order="hwc"), tr("each patch was flattened channel last before the projection: "
             "flatten (C, p, p), the layout proj.weight.reshape(d_model, C, p, p) gives nn.Conv2d.")),
        ]
        expect_close(z, embedded(case), tr("`{function}`'s output").format(function="PatchEmbedding"), case, diagnoses,
                     hint="z = [cls; patchify(images) @ W_E + b] + positions.")

    rules = (_shape, _values)

    def stages(self, case: Case) -> list[Stage]:
        if case.tag == INVALID:
            return []
        images, = case.args
        s = {n: t.double() for n, t in case.state.items()}
        flat = unfolded(images, case.init["patch"])
        tokens = flat @ s["proj.weight"].T + s["proj.bias"]
        with_cls = torch.cat([s["cls_token"].expand(images.shape[0], 1, -1), tokens], dim=1)
        return [Stage.of(tr("the patches, (B, N, C p p)"), flat),
                Stage.of(tr("the patches projected, (B, N, d_model)"), tokens),
                Stage.of(tr("the class token in front, (B, N + 1, d_model)"), with_cls),
                Stage.of(tr("positions added"), with_cls + s["positions"])]


STATED = {
    "patchify": (
        Stated("a patch is flattened channel first", "(1, 3, 6, 9)", "channel last"),
        Stated("the patches come in reading order", "(1, 3, 6, 9)", "column by column"),
        Stated("an image that does not cut into patches raises ValueError", INVALID, "raise ValueError"),
    ),
    "PatchEmbedding": (
        Stated("the class token comes first", "images (2, 1, 8, 8)", "after the patches"),
        Stated("positions are added to every token", "images (2, 1, 8, 8)", "no position was added"),
        Stated("images giving another number of patches raise ValueError", INVALID, "raise ValueError"),
    ),
}
