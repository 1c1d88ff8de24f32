"""Chapter 10's spoken digits: the files read back, the split by voice, and one voice made again by the tool."""
from __future__ import annotations

import gzip
import re
from collections import Counter

import numpy as np
import pytest

from course.tools import spoken_digits as tool
from transformer.audio import data as spoken


@pytest.fixture(scope="module")
def digits():
    return spoken.load()


def test_every_voice_says_every_digit_once(digits):
    assert len(digits) == len(tool.VARIANTS) * len(spoken.WORDS) == 990
    said = Counter((c.voice, c.digit) for c in digits.clips)
    assert set(said.values()) == {1} and len(digits.voices) == len(tool.VARIANTS)
    assert [c.voice for c in digits.clips] == [v.name for v in tool.voices() for _ in spoken.WORDS], "the plan's order"
    assert all(len(w) == c.samples and w.dtype == np.float32 and np.abs(w).max() <= 1 for c, w in zip(digits.clips,
                                                                                                   digits.waves))


def test_the_splits_share_no_voice_and_no_family(digits):
    voices = {name: set(digits.split(name).voices) for name in spoken.SPLITS}
    families = {name: {tool.family(v.split("+")[1]) for v in found} for name, found in voices.items()}
    for a, b in (("train", "dev"), ("train", "test"), ("dev", "test")):
        assert not voices[a] & voices[b], (a, b)
        assert not families[a] & families[b], (a, b)
    assert digits.summary() == {"train_clips": 690, "dev_clips": 100, "test_clips": 200, "train_voices": 69,
                                "dev_voices": 10, "test_voices": 20}
    for name in spoken.SPLITS:  # every accent is heard in every split
        assert {c.accent for c in digits.split(name).clips} == set(tool.ACCENTS), name
    with pytest.raises(ValueError, match="split must be one of"):
        digits.split("validation")


def test_the_readme_gives_the_files_as_they_are():
    readme = (spoken.FOLDER / "README.md").read_text(encoding="utf-8")
    for name in (spoken.CLIPS, spoken.INDEX):
        assert f"`{name}` | {(spoken.FOLDER / name).stat().st_size:,} |" in readme, name
    assert f"espeak-ng {tool.ESPEAK_VERSION}" in readme.replace("espeak-ng is not version", "espeak-ng")
    assert "GPL-3.0-or-later" in readme


def test_mu_law_keeps_quiet_samples_fine_and_loud_ones_coarse():
    wave = np.linspace(-1, 1, 20001)
    back = spoken.mu_law_decode(spoken.mu_law_encode(wave))
    error = np.abs(back - wave)
    assert error[np.abs(wave) < 0.01].max() < 5e-4 and error.max() < 0.025
    assert spoken.mu_law_encode(np.array([-1.0, 0.0, 1.0])).tolist() == [0, 128, 255]


def test_the_resampler_keeps_speech_frequencies_and_stops_what_would_fold_back():
    t = np.arange(tool.ESPEAK_RATE) / tool.ESPEAK_RATE  # one second
    kept = tool.resample(np.sin(2 * np.pi * 1000 * t))
    assert len(kept) == spoken.SAMPLE_RATE
    middle = kept[500:-500]  # away from the zeros the filter reads past either end
    expected = np.sin(2 * np.pi * 1000 * np.arange(500, spoken.SAMPLE_RATE - 500) / spoken.SAMPLE_RATE)
    assert np.abs(middle - expected).max() < 5e-3
    folded = tool.resample(np.sin(2 * np.pi * 6000 * t))  # would alias to 2 kHz
    assert np.sqrt(np.mean(folded[500:-500] ** 2)) < 1e-3


def test_trimming_cuts_the_silence_and_keeps_a_margin():
    quiet, loud = np.zeros(4000), np.full(2000, 0.5)
    trimmed = tool.trim(np.concatenate([quiet, loud, quiet]))
    assert len(trimmed) == 2000 + 2 * tool.MARGIN


def test_a_voice_is_made_again_byte_identical(digits):
    """The tool's rebuild of one voice (its whole command makes all 99; `--check` compares them all)."""
    try:
        found = tool.espeak_version()
    except tool.EspeakError as exc:
        pytest.skip(str(exc))
    if tool.version_note(found):
        pytest.skip(tool.version_note(found))
    voice = next(v for v in tool.voices() if v.split == "test")
    clips, codes = tool.build([voice])
    shipped = gzip.decompress((spoken.FOLDER / spoken.CLIPS).read_bytes())
    rows = [i for i, c in enumerate(digits.clips) if c.voice == voice.name]
    start = sum(c.samples for c in digits.clips[: rows[0]])
    assert clips == [digits.clips[i] for i in rows]
    assert codes == shipped[start : start + len(codes)]
    assert re.fullmatch(r"\d+\.\d+\S*", found)
