"""Chapter 10's vision Transformer, and the small convolutional network it is measured against.

:class:`VisionTransformer` is the encoder of chapter 4 reading an image instead of a sentence (Dosovitskiy et
al., 2021): chapter 10's ``PatchEmbedding`` cuts the image into patches, projects each to ``d_model``, puts
a learned class token in front and adds learned positions; the course's ``Encoder`` (post-norm, as in the
paper) reads those tokens; a LayerNorm and one linear layer turn the class token's final state into the
logits of the ten digits. With ``--parts mine`` the embedding, the encoder and the norm are the learner's.

:class:`SmallCNN` is the baseline: three 3 x 3 convolutions, the image halved twice by max pooling, and one
linear layer, as wide as makes its parameter count close to the ViT's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from reference.encoder import Encoder, LayerNorm
from reference.one_block import PatchEmbedding

from ..model import ModelShape, positive_integers
from .data import CLASSES, SIDE


@dataclass(frozen=True)
class ViTConfig(ModelShape):
    image_size: int = SIDE  # pixels on a side
    channels: int = 1
    patch: int = 2  # pixels on a side of a patch
    classes: int = CLASSES
    d_model: int = 64
    h: int = 4
    N: int = 3
    d_ff: int = 128
    dropout: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        positive_integers(self, ("image_size", "channels", "patch", "classes"))
        if self.image_size % self.patch:
            raise ValueError(f"patch={self.patch} does not divide an image of {self.image_size} pixels")

    @property
    def grid(self) -> int:
        """Patches on a side."""
        return self.image_size // self.patch


class VisionTransformer(nn.Module):
    """Images (B, channels, image_size, image_size) -> class logits (B, classes).

    Submodules ``embed`` (the PatchEmbedding), ``dropout``, ``encoder``, ``norm`` and ``head``; ``embedding``,
    ``encoder`` and ``norm`` are the classes to build them from (the learner's, with --parts mine).
    """

    def __init__(self, config: ViTConfig, embedding: type[nn.Module] = PatchEmbedding, encoder: type[nn.Module] = Encoder,
                 norm: type[nn.Module] = LayerNorm) -> None:
        super().__init__()
        self.config = config
        self.embed = embedding(config.channels, config.patch, config.d_model, config.grid**2)
        self.dropout = nn.Dropout(config.dropout)
        self.encoder = encoder(config.d_model, config.h, config.d_ff, config.N, config.dropout)
        # The encoder's last step is already a LayerNorm (post-norm): this one adds a scale and a shift of its own
        # for the class token, where a pre-norm ViT needs it to normalise the residual stream at all.
        self.norm = norm(config.d_model)
        self.head = nn.Linear(config.d_model, config.classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        tokens = self.dropout(self.embed(images))  # (B, 1 + grid^2, d_model), the class token first
        states = self.norm(self.encoder(tokens))  # (B, 1 + grid^2, d_model)
        return self.head(states[:, 0])  # (B, classes): read from the class token alone


class SmallCNN(nn.Module):
    """Images (B, channels, 8, 8) -> class logits (B, classes): conv(width), conv(2 width), pool, conv(2 width),
    pool, dropout, linear. Each convolution is 3 x 3, padded to keep the size, followed by a ReLU."""

    def __init__(self, width: int, channels: int = 1, classes: int = CLASSES, dropout: float = 0.1,
                 image_size: int = SIDE) -> None:
        super().__init__()
        if image_size % 4:
            raise ValueError(f"the network halves the image twice: {image_size} pixels is not a multiple of 4")
        wide = 2 * width
        self.features = nn.Sequential(
            nn.Conv2d(channels, width, 3, padding=1), nn.ReLU(),
            nn.Conv2d(width, wide, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(wide, wide, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(wide * (image_size // 4) ** 2, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        features = self.features(images).flatten(1)  # (B, 2 width * (size / 4)^2)
        return self.head(self.dropout(features))  # (B, classes)


def class_attention(model: VisionTransformer, images: torch.Tensor) -> torch.Tensor:
    """How much the class token attends to each patch in the last layer, averaged over the heads:
    (B, grid, grid), each map summing to 1 minus the class token's attention to itself."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(images)
    finally:
        model.train(was_training)
    weights = model.encoder.layers[-1].self_attn.attn_weights  # (B, h, T, T), T = 1 + grid^2
    to_patches = weights[:, :, 0, 1:].mean(dim=1)  # (B, grid^2): the class token's row, patches only
    grid = model.config.grid
    return to_patches.reshape(-1, grid, grid)  # (B, grid, grid)


def forward_flops(model: nn.Module, example: torch.Tensor) -> float:
    """The matrix FLOPs of one forward pass over ``example``, as PyTorch's counter counts them (matrix products and
    convolutions, two per multiply-add), the model in eval mode and the random state left as it was."""
    from torch.utils.flop_counter import FlopCounterMode

    was_training = model.training
    counter: Any = FlopCounterMode(display=False)
    model.eval()
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad(), counter:
            model(example)
    finally:
        model.train(was_training)
    return float(counter.get_total_flops())
