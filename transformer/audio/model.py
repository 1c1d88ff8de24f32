"""A speech classifier: the course's encoder over log-mel frames, reading which digit was said.

From the wave to the digit, each step a part of the course:

* chapter 10's ``frame_signal`` cuts the wave into 25 ms Hann-windowed frames, one every 10 ms, and
  ``log_mel`` turns each frame into 40 log-mel energies (with ``--parts mine``, the learner's);
* each utterance's energies are centred and scaled over its own frames: a louder recording is the
  same log-mel picture shifted up, and this takes the shift (and the gain) away;
* one linear map takes a frame's 40 numbers to ``d_model``, as an embedding takes a token to it;
* a learned class token goes in front (as BERT's [CLS] and chapter 10's vision Transformer do), and
  chapter 6's sinusoidal positions are added: a frame's place in time matters (the "s" of "six" comes
  before its vowel), and the sinusoids need no training on a few hundred clips;
* chapter 4's ``Encoder`` (post-norm layers of chapter 3's multi-head attention and the feed-forward
  network), with the padding after a short clip's last frame masked as keys;
* one linear layer from the class token's final state to the ten digits.

Pooling by a class token rather than by the mean over frames: a digit is decided by a few frames (the
vowel and the consonants around it), and the class token's attention can weigh those and skip the
silence and noise at either end, where a mean counts every frame alike. Its attention in the last layer
is also a picture of which frames the decision read.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from ..model import ModelShape, positive_integers
from ..parts import course_part
from .data import SAMPLE_RATE, WORDS

#: the parts the classifier is made of, by name: with --parts mine each is the learner's where written
PART_NAMES = ("frame_signal", "log_mel", "Encoder", "sinusoidal_encoding")
#: keeps the scale of a silent utterance (all of whose energies are equal) finite
NORM_EPS = 1e-5


@dataclass(frozen=True)
class AudioConfig(ModelShape):
    d_model: int = 64
    h: int = 4
    N: int = 2
    d_ff: int = 128
    dropout: float = 0.1
    sample_rate: int = SAMPLE_RATE
    frame_length: int = 200  # samples per frame: 25 ms at 8 kHz
    hop: int = 80  # samples between frame starts: 10 ms
    n_mels: int = 40  # mel filters per frame
    max_frames: int = 160  # the longest clip, in frames (1.6 s at 10 ms a frame)
    classes: int = len(WORDS)

    def __post_init__(self) -> None:
        super().__post_init__()
        positive_integers(self, ("sample_rate", "frame_length", "hop", "n_mels", "max_frames", "classes"))

    def frames(self, samples: torch.Tensor) -> torch.Tensor:
        """The number of whole frames in clips of ``samples`` samples (frame_signal's count)."""
        return 1 + (samples - self.frame_length).div(self.hop, rounding_mode="floor")


def course_parts() -> dict[str, Callable]:
    return {name: course_part(name) for name in PART_NAMES}


class SpeechClassifier(nn.Module):
    """Waves (B, S), zero after each clip's length -> digit logits (B, classes).

    Submodules ``proj`` (n_mels -> d_model), ``encoder`` (chapter 4's) and ``head`` (d_model -> classes);
    parameter ``cls_token`` (1, 1, d_model); buffer ``pe``, chapter 6's table for the class token and
    ``max_frames`` frames.
    """

    def __init__(self, config: AudioConfig, parts: Mapping[str, Callable] | None = None) -> None:
        super().__init__()
        self.config = c = config
        self.parts = {**course_parts(), **(parts or {})}
        self.proj = nn.Linear(c.n_mels, c.d_model)
        self.cls_token = nn.Parameter(torch.randn(1, 1, c.d_model) * 0.02)
        self.dropout = nn.Dropout(c.dropout)
        self.encoder = self.parts["Encoder"](c.d_model, c.h, c.d_ff, c.N, c.dropout)
        self.head = nn.Linear(c.d_model, c.classes)
        # Fixed, like chapter 6's: made again on construction, so not saved.
        self.register_buffer("pe", self.parts["sinusoidal_encoding"](c.max_frames + 1, c.d_model), persistent=False)

    def features(self, waves: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(normalised log-mel frames (B, T, n_mels), zero on padding; which frames are real (B, T))."""
        c = self.config
        frames = self.parts["frame_signal"](waves, c.frame_length, c.hop)  # (B, T, frame_length)
        energies = self.parts["log_mel"](frames, c.sample_rate, c.n_mels)  # (B, T, n_mels)
        T = energies.shape[1]
        if T > c.max_frames:
            raise ValueError(f"a clip of {T} frames is longer than the model's max_frames={c.max_frames}")
        real = torch.arange(T, device=waves.device) < c.frames(lengths)[:, None]  # (B, T)
        weight = real[..., None].to(energies.dtype)  # (B, T, 1)
        count = weight.sum(dim=(1, 2), keepdim=True) * c.n_mels  # (B, 1, 1) real energies per clip
        mean = (energies * weight).sum(dim=(1, 2), keepdim=True) / count  # (B, 1, 1)
        variance = ((energies - mean) ** 2 * weight).sum(dim=(1, 2), keepdim=True) / count  # (B, 1, 1)
        return (energies - mean) / torch.sqrt(variance + NORM_EPS) * weight, real

    def encode(self, waves: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The encoder's output (B, 1 + T, d_model), the class token first."""
        features, real = self.features(waves, lengths)  # (B, T, n_mels), (B, T)
        B, T = real.shape
        tokens = torch.cat([self.cls_token.expand(B, -1, -1), self.proj(features)], dim=1)  # (B, 1 + T, d_model)
        x = self.dropout(tokens + self.pe[: T + 1])  # (B, 1 + T, d_model) + (1 + T, d_model)
        padding = torch.cat([real.new_zeros(B, 1), ~real], dim=1)  # (B, 1 + T), True at padding
        return self.encoder(x, key_padding_mask=padding)  # (B, 1 + T, d_model)

    def forward(self, waves: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self.head(self.encode(waves, lengths)[:, 0])  # (B, classes), from the class token


def pad_waves(waves: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Clips of several lengths as one (B, S) batch, zero after each clip, and their lengths (B,)."""
    lengths = torch.tensor([len(w) for w in waves])
    batch = torch.zeros(len(waves), int(lengths.max()))  # (B, S)
    for row, wave in zip(batch, waves):
        row[: len(wave)] = wave
    return batch, lengths


def forward_flops(config: AudioConfig, batch: int, frames: int) -> float:
    """Matrix FLOPs of one forward pass over (batch, frames) clips, two per multiply-add, as the other models
    count them: the projection, the encoder's weights and attention, the head; the log-mel left out."""
    d, N, T = config.d_model, config.N, frames + 1
    weights = T * N * (4 * d * d + 2 * d * config.d_ff) + frames * config.n_mels * d + d * config.classes
    return 2.0 * batch * (weights + 2 * d * N * T * T)
