"""The checks of ``frame_signal`` and ``log_mel``: a waveform read as a sequence of frames.

Oracles: the frames indexed sample by sample and multiplied by the periodic Hann window written from
its formula, in float64, and ``torch.stft`` (``center=False``), whose power spectrum the frames' must
give; the power spectrum by ``torch.fft.rfft`` and the mel filter bank built filter by filter from its
formula (HTK's mel scale, triangles of height 1 evaluated at the bins' frequencies).
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
    Stage,
    Stated,
    draw,
    expect_close,
    expect_finite,
    expect_shape,
    expect_tensor,
    rule,
)
from ...messages import N_, tr

STFT = ("torch.stft", "torch.istft")


def hann(L: int, periodic: bool = True, a: float = 0.5) -> torch.Tensor:
    """(L,) float64: a - (1 - a) cos(2 pi n / L) (periodic) or / (L - 1) (symmetric); a = 0.54 is Hamming's."""
    n = torch.arange(L, dtype=torch.float64)
    return a - (1 - a) * torch.cos(2 * math.pi * n / (L if periodic else max(L - 1, 1)))


def frames_of(wave: torch.Tensor, L: int, hop: int, window: torch.Tensor | None = None) -> torch.Tensor:
    """(..., n_frames, L) float64, frame t = window * wave[t hop : t hop + L], indexed sample by sample."""
    n = 1 + (wave.shape[-1] - L) // hop
    index = torch.arange(n)[:, None] * hop + torch.arange(L)[None, :]  # (n_frames, L)
    return wave.double()[..., index] * (hann(L) if window is None else window)


class FrameSignalCheck(Check):
    function = "frame_signal"
    oracle = N_("the frames indexed sample by sample times the periodic Hann window, and torch.stft's power spectrum")
    forbidden = STFT
    forbidden_ops = ("stft",)
    trained_through = True
    hints = (Hint("RuntimeError", N_("wave.unfold(-1, frame_length, hop) gives (..., n_frames, frame_length); the "
                                     "window, (frame_length,), then broadcasts over the frames."),
                  containing=("shape", "must match the size")),)

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(shape, L, hop, dtype=torch.float32, tag=""):
            wave = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
            kind = str(dtype).replace("torch.", "")
            return Case(f"wave {tuple(shape)} {kind}, frame_length={L}, hop={hop}", (wave, L, hop), {}, tag)

        out = [case((1000,), 200, 80), case((2, 3, 500), 64, 64), case((777,), 100, 33, torch.float64),
               case((2, 256), 256, 10), case((50,), 64, 16, tag=INVALID), case((100,), 10, 0, tag=INVALID)]
        if hidden:
            L = draw(g, 16, 120)
            out += [case((draw(g, 1, 3), L * draw(g, 2, 6) + draw(g, 0, L)), L, draw(g, 5, L)),
                    case((draw(g, 200, 900),), L, draw(g, 1, 40), torch.float64),
                    case((L - draw(g, 1, 10),), L, 4, tag=INVALID)]
        return out

    def wrong_argument(self, case: Case) -> str:
        return "hop" if case.args[2] < 1 else "frame_length"

    @rule("(..., n_frames, frame_length)")
    def _shape(self, case: Case, result: Any) -> None:
        wave, L, hop = case.args
        S = wave.shape[-1]
        n = 1 + (S - L) // hop
        frames = expect_tensor(result, tr("`frame_signal`'s result"), case)
        got = tuple(frames.shape)
        if got[:-2] == tuple(wave.shape[:-1]) and len(got) == wave.dim() + 1 and got[-1] == L and got[-2] != n:
            why = (tr("one frame short: the last frame that fits whole starts at (n_frames - 1) * hop, "
                      "n_frames = 1 + (S - frame_length) // hop") if got[-2] == n - 1 else
                   tr("frames past the end of the wave, padded: keep only the frames that fit whole, "
                      "n_frames = 1 + (S - frame_length) // hop") if got[-2] > n else
                   "n_frames = 1 + (S - frame_length) // hop")
            raise CheckFailed(tr("`frame_signal` returned {count} frames on the case {case}, not {n}: {why}.").format(
                count=got[-2], case=case.label, n=n, why=why))
        expect_shape(frames, (*wave.shape[:-1], n, L), tr("`frame_signal`'s result"), case,
                     tr("Every whole frame, one every hop samples: (..., 1 + (S - frame_length) // hop, "
                        "frame_length)."))

    @rule("each frame times the periodic Hann window")
    def _values(self, case: Case, frames: torch.Tensor) -> None:
        wave, L, hop = case.args
        diagnoses = [
            (lambda: frames_of(wave, L, hop, torch.ones(L, dtype=torch.float64)),
             tr("the frames were not windowed: multiply each by the Hann window, torch.hann_window(frame_length).")),
            (lambda: frames_of(wave, L, hop, hann(L, periodic=False)),
             tr("the window is the symmetric Hann window, cos(2 pi n / (L - 1)): the exercise's is the periodic "
                "one, cos(2 pi n / L), torch.hann_window(L) with its default periodic=True.")),
            (lambda: frames_of(wave, L, hop, hann(L, a=0.54)),
             tr("the window is Hamming's, 0.54 - 0.46 cos(2 pi n / L): Hann's is 0.5 - 0.5 cos(2 pi n / L).")),
        ]
        expect_close(frames, frames_of(wave, L, hop), tr("`frame_signal`'s result"), case, diagnoses,
                     hint=tr("Frame t holds the samples t * hop .. t * hop + frame_length - 1, times the window."))
        spectrum = torch.stft(wave.double().reshape(-1, wave.shape[-1]), L, hop, window=hann(L), center=False,
                              return_complex=True).abs() ** 2  # (batch, L // 2 + 1, n_frames)
        mine = torch.fft.rfft(frames.double(), dim=-1).abs() ** 2  # (..., n_frames, L // 2 + 1)
        expect_close(mine.reshape(-1, *mine.shape[-2:]), spectrum.transpose(1, 2), tr("the power spectrum of "
                     "`frame_signal`'s frames"), case, hint=tr("It should be torch.stft's with the same window."),
                     dtype=wave.dtype, scale=float(spectrum.max()))

    rules = (_shape, _values)

    def stages(self, case: Case) -> list[Stage]:
        if case.tag == INVALID:
            return []
        wave, L, hop = case.args
        plain = frames_of(wave, L, hop, torch.ones(L, dtype=torch.float64))
        return [Stage.of(tr("the frames before the window, (..., n_frames, frame_length)"), plain),
                Stage.of(tr("the Hann window, (frame_length,)"), hann(L)),
                Stage.of(tr("the windowed frames"), plain * hann(L))]


def mel(f: torch.Tensor | float) -> torch.Tensor | float:
    return 2595 * (torch.log10(1 + f / 700) if isinstance(f, torch.Tensor) else math.log10(1 + f / 700))


def filter_bank(L: int, sample_rate: int, n_mels: int, *, scale: str = "mel", inverse: str = "10",
                area: bool = False, bins: str = "rfft") -> torch.Tensor:
    """(n_mels, L // 2 + 1) float64, filter by filter; the keywords replay known mistakes: ``scale="hz"`` spaces the
    points evenly in hertz, ``inverse="e"`` turns mels back into hertz with exp, ``area=True`` scales each
    triangle to unit area, ``bins="linspace"`` puts the bins
    at linspace(0, s/2, L // 2 + 1)."""
    F_ = L // 2 + 1
    freqs = (torch.arange(F_, dtype=torch.float64) * sample_rate / L if bins == "rfft"
             else torch.linspace(0, sample_rate / 2, F_, dtype=torch.float64))
    count = n_mels + 2
    if scale == "hz":
        edges = torch.linspace(0, sample_rate / 2, count, dtype=torch.float64)
    else:
        marks = torch.linspace(0, mel(sample_rate / 2), count, dtype=torch.float64)
        edges = 700 * ((10 ** (marks / 2595) if inverse == "10" else torch.exp(marks / 2595)) - 1)
    bank = torch.zeros(n_mels, F_, dtype=torch.float64)
    for m in range(1, n_mels + 1):
        lo, mid, hi = float(edges[m - 1]), float(edges[m]), float(edges[m + 1])
        up, down = (freqs > lo) & (freqs <= mid), (freqs > mid) & (freqs < hi)
        bank[m - 1, up] = (freqs[up] - lo) / (mid - lo)
        bank[m - 1, down] = (hi - freqs[down]) / (hi - mid)
        if area:
            bank[m - 1] *= 2 / (hi - lo)
    return bank


def log_mel_of(frames: torch.Tensor, sample_rate: int, n_mels: int, *, power: float = 2.0, log=torch.log,
               eps: float = 1e-6, order: str = "filter_then_log", **bank) -> torch.Tensor:
    spectrum = torch.fft.rfft(frames.double(), dim=-1).abs() ** power  # (..., n_frames, F)
    fb = filter_bank(frames.shape[-1], sample_rate, n_mels, **bank)
    if order == "log_then_filter":
        return log(spectrum + eps) @ fb.T
    return log(spectrum @ fb.T + eps)


class LogMelCheck(Check):
    function = "log_mel"
    oracle = N_("torch.fft.rfft's power spectrum through the mel filter bank built filter by filter, in float64")
    forbidden = STFT
    forbidden_ops = ("stft",)
    trained_through = True
    # The device rule runs a call on the meta device, where PyTorch's FFT first imports its Python meta kernels
    # (sympy among them): seconds in every grading process, for the one rule the filter bank's device could break.
    follows_device = False
    invalid_argument = "n_mels"
    hints = (Hint("RuntimeError", N_("The power spectrum is (..., n_frames, L // 2 + 1) and the bank "
                                     "(n_mels, L // 2 + 1): multiply by the bank's transpose, power @ bank.T."),
                  containing=("shape", "must match the size", "cannot be multiplied")),)

    def cases(self, hidden: bool) -> list[Case]:
        g = self.generator(hidden)

        def case(lead, L, sample_rate, n_mels, dtype=torch.float32, tag="", about=""):
            frames = (torch.randn(*lead, L, generator=g, dtype=torch.float64) * hann(L)).to(dtype)
            kind = str(dtype).replace("torch.", "")
            return Case(f"frames {(*lead, L)} {kind}, sample_rate={sample_rate}, n_mels={n_mels}{about}",
                        (frames, sample_rate, n_mels), {}, tag)

        silent = Case(tr("frames (2, 64) of silence (zeros), sample_rate=8000, n_mels=8"),
                      (torch.zeros(2, 64), 8000, 8), {}, "silence")
        out = [case((3,), 200, 8000, 40), case((2, 5), 256, 16000, 20), case((4,), 64, 8000, 8, torch.float64),
               case((2,), 255, 8000, 10, about=tr(" (an odd frame length)")), silent,
               case((1,), 400, 16000, 80, about=tr(" (some filters narrower than a bin)")),
               case((2,), 64, 8000, 0, tag=INVALID)]
        if hidden:
            L = 2 * draw(g, 32, 160) + draw(g, 0, 1)
            out += [case((draw(g, 1, 4),), L, 8000 * draw(g, 1, 2), draw(g, 8, 40)),
                    case((2, draw(g, 2, 5)), L, 16000, draw(g, 10, 30), torch.float64)]
        return out

    @rule("(..., n_frames, n_mels)")
    def _shape(self, case: Case, result: Any) -> None:
        frames, _, n_mels = case.args
        y = expect_tensor(result, tr("`log_mel`'s result"), case)
        F_ = frames.shape[-1] // 2 + 1
        if tuple(y.shape) == (*frames.shape[:-1], F_) and F_ != n_mels:
            raise CheckFailed(tr("`log_mel`'s result has shape {shape} on the case {case}: one number per "
                                 "frequency bin. Pass the power spectrum through the n_mels filters: power @ bank.T.")
                              .format(shape=tuple(y.shape), case=case.label))
        expect_shape(y, (*frames.shape[:-1], n_mels), tr("`log_mel`'s result"), case,
                     tr("One number per frame and filter."))

    @rule("finite")
    def _finite(self, case: Case, y: torch.Tensor) -> None:
        expect_finite(y, tr("`log_mel`'s result"), case, tr("A filter that gathers no power (silence, or a filter "
                      "narrower than a frequency bin) gives log(0) = -inf: add 1e-6 inside the log, log(mel + 1e-6)."))

    @rule("log of the mel filters' power")
    def _values(self, case: Case, y: torch.Tensor) -> None:
        frames, sr, n_mels = case.args

        def wrong(advice: str, **how) -> tuple:
            return (lambda: log_mel_of(frames, sr, n_mels, **how), advice)

        diagnoses = [
            wrong(tr("the magnitude |X| was filtered, not the power |X|^2: square it, rfft(frames).abs() ** 2."),
                  power=1.0),
            wrong(tr("the log is base 10: take the natural log, torch.log."), log=torch.log10),
            wrong(tr("the filters' points are spaced evenly in hertz: space them evenly on the mel scale, "
                     "2595 log10(1 + f / 700), then turn them back into hertz."), scale="hz"),
            wrong(tr("the points were turned back into hertz with exp, which undoes ln: the mel scale uses log10, so "
                     "f = 700 (10 ** (m / 2595) - 1)."), inverse="e"),
            wrong(tr("nothing was added inside the log: add 1e-6, log(mel + 1e-6), which keeps silence finite."),
                  eps=0.0),
            wrong(tr("the triangles were scaled to unit area: each filter rises to 1 at its centre, unscaled."),
                  area=True),
            wrong(tr("the log was taken before the filter bank: filter the power, then take the log."),
                  order="log_then_filter"),
            wrong(tr("the bins' frequencies were spread from 0 to sample_rate / 2 with linspace: bin f of an rfft of "
                     "L samples is at f * sample_rate / L, which for an odd L stops short of sample_rate / 2."),
                  bins="linspace"),
        ]
        expect_close(y, log_mel_of(frames, sr, n_mels), tr("`log_mel`'s result"), case, diagnoses,
                     hint=tr("log(power @ bank.T + 1e-6) with the filters of the formula."),
                     scale=float(log_mel_of(frames, sr, n_mels).abs().max()))

    rules = (_shape, _finite, _values)

    def stages(self, case: Case) -> list[Stage]:
        if case.tag == INVALID:
            return []
        frames, sr, n_mels = case.args
        L = frames.shape[-1]
        power = torch.fft.rfft(frames.double(), dim=-1).abs() ** 2
        fb = filter_bank(L, sr, n_mels)
        freqs = torch.arange(L // 2 + 1, dtype=torch.float64) * sr / L
        marks = torch.linspace(0, mel(sr / 2), n_mels + 2, dtype=torch.float64)
        hertz = 700 * (10 ** (marks / 2595) - 1)
        edges = (hertz[:-2, None], hertz[1:-1, None], hertz[2:, None])  # (n_mels, 1) each
        rising = (freqs - edges[0]) / (edges[1] - edges[0])  # (n_mels, F)
        falling = (edges[2] - freqs) / (edges[2] - edges[1])  # (n_mels, F)
        return [Stage.of(tr("the power spectrum |rfft|^2, (..., n_frames, L // 2 + 1)"), power),
                Stage.of(tr("the bins' frequencies f * s / L"), freqs), Stage.of(tr("the points on the mel scale"), marks),
                Stage.of(tr("the points in hertz"), hertz),
                # the solution's own way to the bank, by whole rows: a learner's loop over filters skips these
                Stage.of(tr("each filter's lower edge, centre and upper edge"), *edges, *(e[:, 0] for e in edges)),
                Stage.of(tr("the rising sides (f - lower) / (centre - lower), (n_mels, L // 2 + 1)"), rising),
                Stage.of(tr("the falling sides (upper - f) / (upper - centre), (n_mels, L // 2 + 1)"), falling),
                Stage.of(tr("the filter bank, (n_mels, L // 2 + 1)"), fb, fb.T),
                Stage.of(tr("the filters' power, (..., n_frames, n_mels)"), power @ fb.T),
                Stage.of(tr("the log-mel spectrogram"), torch.log(power @ fb.T + 1e-6))]


STATED = {
    "frame_signal": (
        Stated("every frame that fits whole, none padded", "wave (777,)", "n_frames = 1 + (S - frame_length) // hop"),
        Stated("the window is the periodic Hann window", "wave (1000,)", "periodic"),
        Stated("a wave shorter than a frame raises ValueError", INVALID, "raise ValueError"),
    ),
    "log_mel": (
        Stated("the power spectrum, |X|^2", "frames (3, 200)", "the power |X|^2"),
        Stated("points evenly spaced on the mel scale", "frames (3, 200)", "evenly in hertz"),
        Stated("the bins are at f * s / L", "odd frame length", "f * sample_rate / L"),
        Stated("1e-6 keeps silence finite", "silence", "add 1e-6"),
        Stated("the natural log", "frames (3, 200)", "natural log"),
        Stated("n_mels below 1 raises ValueError", INVALID, "raise ValueError"),
    ),
}
