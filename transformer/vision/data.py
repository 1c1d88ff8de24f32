"""The 8 x 8 handwritten digits of ``data/digits/`` (see its README), read and split.

The file is the test part of UCI's "Optical Recognition of Handwritten Digits" as scikit-learn bundles it:
1,797 rows of 64 pixel counts (0 to 16) and a label. :func:`load` checks its SHA-256, scales the pixels to
[0, 1] and splits the rows by a fixed rule, stratified by digit and drawn from no random generator, so that
no library's version can move an image from one split to another:

    within each digit, number the rows in the file's order 0, 1, 2, ...;
    row n goes to test when n % 10 is 4 or 9, to dev when n % 10 is 7, and to train otherwise.

That is 20 % test, 10 % dev (measured while training, and what the presets were tuned on) and 70 % train.
"""
from __future__ import annotations

import gzip
import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch

from course.layout import DATA

FILE = DATA / "digits" / "digits.csv.gz"
SHA256 = "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22"
SIDE = 8  # pixels
LEVELS = 16  # a pixel counts the ink of a 4 x 4 block of the 32 x 32 scan: 0 to 16
CLASSES = 10
SPLITS = ("train", "dev", "test")
TEST_SLOTS, DEV_SLOTS = (4, 9), (7,)  # of every ten rows of a digit


class DigitsError(RuntimeError):
    """The digits file is missing or is not the one the course ships; the message says what to do."""


@dataclass(frozen=True)
class Split:
    """Some of the digits: images (n, 1, 8, 8) in [0, 1], labels (n,), and their rows in the file (n,)."""

    images: torch.Tensor
    labels: torch.Tensor
    rows: torch.Tensor

    def __len__(self) -> int:
        return len(self.labels)


def split_of(labels: list[int]) -> list[str]:
    """The split of each row, by the rule of the module's docstring."""
    seen = [0] * CLASSES
    names = []
    for label in labels:
        n = seen[label] % 10
        seen[label] += 1
        names.append("test" if n in TEST_SLOTS else "dev" if n in DEV_SLOTS else "train")
    return names


def read(path: Path = FILE) -> tuple[torch.Tensor, torch.Tensor]:
    """Every row of the file: pixels (1797, 1, 8, 8) in [0, 1] and labels (1797,), after checking the file's hash."""
    if not path.is_file():
        raise DigitsError(f"no digits file at {path}: it ships with the course (data/digits/); restore it from git")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != SHA256:
        raise DigitsError(f"{path} is not the file the course ships (SHA-256 {digest}, expected {SHA256}): "
                          "restore it from git")
    with gzip.open(path, "rt", encoding="ascii") as lines:
        rows = [[int(value) for value in line.split(",")] for line in lines if line.strip()]
    table = torch.tensor(rows)  # (n, 65): 64 pixels, then the label
    pixels = table[:, :-1].float().reshape(-1, 1, SIDE, SIDE) / LEVELS  # (n, 1, 8, 8)
    return pixels, table[:, -1]


def load(path: Path = FILE) -> dict[str, Split]:
    """The three splits of the digits, by name."""
    images, labels = read(path)
    names = split_of(labels.tolist())
    splits = {}
    for name in SPLITS:
        rows = torch.tensor([i for i, n in enumerate(names) if n == name])
        splits[name] = Split(images[rows], labels[rows], rows)
    return splits
