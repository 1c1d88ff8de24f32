"""Spoken digits: the words "zero" to "nine" said by espeak-ng's English voices, 8 kHz mono, split by voice.

The data set lives in ``data/spoken_digits/`` and is made once, offline, by ``python -m course.tools
spoken-digits`` (its README says how: voices, speeds, pitches, noise, licence). Two files hold it:

* ``clips.u8.gz``: every clip's samples, one clip after another, as 8-bit mu-law codes, gzip'd;
* ``index.tsv``: one line per clip, in the same order: the digit, the voice, how it was said
  (speed, pitch, signal-to-noise ratio), its length in samples, and its split.

The split is by voice: a voice's ten clips all go to one of train, dev or test, so the test measures
voices the model never heard. This module is the format's one description: the tool writes with
:func:`mu_law_encode` and :func:`write_index`, the models read with :func:`load`.
"""
from __future__ import annotations

import gzip
from collections import Counter
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from course.layout import DATA

FOLDER = DATA / "spoken_digits"
CLIPS = "clips.u8.gz"
INDEX = "index.tsv"
SAMPLE_RATE = 8000
WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
SPLITS = ("train", "dev", "test")
#: mu-law's compression constant: 8-bit telephony's (G.711), which spends the 256 codes evenly on a log scale
MU = 255


class DataError(RuntimeError):
    """The data set's files are missing or not what the reader expects."""


def mu_law_encode(wave: np.ndarray) -> np.ndarray:
    """(S,) samples in [-1, 1] -> (S,) uint8 codes: quiet samples get finer steps than loud ones."""
    clipped = np.clip(wave, -1.0, 1.0)
    companded = np.sign(clipped) * np.log1p(MU * np.abs(clipped)) / np.log1p(MU)  # (S,) in [-1, 1]
    return np.rint((companded + 1.0) * (MU / 2)).astype(np.uint8)


def mu_law_decode(codes: np.ndarray) -> np.ndarray:
    """(S,) uint8 codes -> (S,) float32 samples in [-1, 1], the inverse of :func:`mu_law_encode` up to its step."""
    companded = codes.astype(np.float64) * (2 / MU) - 1.0  # (S,)
    return (np.sign(companded) * np.expm1(np.abs(companded) * np.log1p(MU)) / MU).astype(np.float32)


@dataclass(frozen=True)
class Clip:
    """One line of the index: what was said, by which voice, how, and where it went."""

    digit: int
    voice: str  # espeak-ng's -v argument, accent+variant: "en-gb-scotland+f3"
    speed: int  # espeak-ng's -s, words per minute
    pitch: int  # espeak-ng's -p, 0 to 99 (50 is the voice's own)
    snr_db: float  # the white noise added, as signal-to-noise ratio in decibels
    samples: int  # length at SAMPLE_RATE
    split: str

    @property
    def word(self) -> str:
        return WORDS[self.digit]

    @property
    def accent(self) -> str:
        return self.voice.split("+")[0]


COLUMNS = tuple(f.name for f in fields(Clip))


def index_text(clips: list[Clip]) -> str:
    """The index file's text: a header, then one tab-separated line per clip."""
    lines = ["\t".join(COLUMNS)]
    lines += ["\t".join(str(getattr(c, name)) for name in COLUMNS) for c in clips]
    return "\n".join(lines) + "\n"


def write_index(path: Path, clips: list[Clip]) -> None:
    path.write_text(index_text(clips), encoding="utf-8", newline="\n")


def read_index(path: Path) -> list[Clip]:
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or tuple(lines[0].split("\t")) != COLUMNS:
        raise DataError(f"{path} does not start with the header {' '.join(COLUMNS)}")
    types = [f.type for f in fields(Clip)]
    convert = {"int": int, "float": float, "str": str}
    clips = []
    for number, line in enumerate(lines[1:], start=2):
        values = line.split("\t")
        if len(values) != len(COLUMNS):
            raise DataError(f"{path}, line {number}: {len(values)} columns, expected {len(COLUMNS)}")
        clips.append(Clip(*(convert[t](v) for t, v in zip(types, values))))
    return clips


def gzip_bytes(data: bytes) -> bytes:
    """gzip with no time stamp and no file name in its header, so that the same data gives the same bytes."""
    return gzip.compress(data, compresslevel=9, mtime=0)


@dataclass(frozen=True)
class SpokenDigits:
    """Clips and their waves (float32, in [-1, 1], at SAMPLE_RATE), in the index's order."""

    clips: tuple[Clip, ...]
    waves: tuple[np.ndarray, ...]

    def __len__(self) -> int:
        return len(self.clips)

    @property
    def labels(self) -> list[int]:
        return [c.digit for c in self.clips]

    @property
    def voices(self) -> list[str]:
        """Every voice, once, in the order of its first clip."""
        return list(dict.fromkeys(c.voice for c in self.clips))

    def split(self, name: str) -> SpokenDigits:
        if name not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {name!r}")
        kept = [i for i, c in enumerate(self.clips) if c.split == name]
        return SpokenDigits(tuple(self.clips[i] for i in kept), tuple(self.waves[i] for i in kept))

    def summary(self) -> dict[str, int]:
        """Clips and voices per split: what a run records about its data."""
        clips = Counter(c.split for c in self.clips)
        voices = Counter(c.split for c in {c.voice: c for c in self.clips}.values())
        return {**{f"{s}_clips": clips[s] for s in SPLITS}, **{f"{s}_voices": voices[s] for s in SPLITS}}


def load(folder: Path = FOLDER) -> SpokenDigits:
    """The whole data set, every split, from ``folder``."""
    index, codes = folder / INDEX, folder / CLIPS
    for path in (index, codes):
        if not path.is_file():
            raise DataError(f"{path} is missing: the spoken digits ship with the course (data/spoken_digits/); "
                            "`python -m course.tools spoken-digits` makes them again where espeak-ng is installed")
    clips = read_index(index)
    samples = np.frombuffer(gzip.decompress(codes.read_bytes()), dtype=np.uint8)
    if len(samples) != sum(c.samples for c in clips):
        raise DataError(f"{codes} holds {len(samples):,} samples, the index {sum(c.samples for c in clips):,}")
    ends = np.cumsum([c.samples for c in clips])
    waves = tuple(mu_law_decode(part) for part in np.split(samples, ends[:-1]))
    return SpokenDigits(tuple(clips), waves)
