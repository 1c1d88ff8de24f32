"""Make chapter 10's spoken digits with espeak-ng: ``python -m course.tools spoken-digits [--check]``.

Every clip is one digit word said by one voice, from a plan that a fixed seed draws: which accent each
of espeak-ng's voice variants speaks with, the speed and pitch of each clip, its noise, and which voices
are held out. Each clip is synthesised at 22,050 Hz, resampled to 8 kHz, trimmed of its silence, given
white noise at its signal-to-noise ratio and stored as 8-bit mu-law (the format is
:mod:`transformer.audio.data`'s). The course runs this once; learners read the files it wrote, and
nothing is synthesised or downloaded at run time.

The same espeak-ng and numpy give the same bytes: ``--check`` makes the set again in memory and compares
it with the shipped files, and a test rebuilds one voice. Another espeak-ng version speaks differently,
so the tool says which one it has before it starts.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from transformer.audio.data import (
    CLIPS,
    FOLDER,
    INDEX,
    SAMPLE_RATE,
    WORDS,
    Clip,
    gzip_bytes,
    index_text,
    mu_law_encode,
    read_index,
)

#: the espeak-ng the shipped set was made with (Debian 12's package 1.51+dfsg-10+deb12u2)
ESPEAK_VERSION = "1.51"
ESPEAK_RATE = 22_050
#: espeak-ng's English accents that its own formant synthesiser speaks (the mbrola voices need mbrola)
ACCENTS = ("en-gb", "en-us", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-rp", "en-gb-x-gbcwmd", "en-029", "en-us-nyc")
#: every voice variant of `espeak-ng --voices=variant` but two: "Mr serious", whose file name has a space
#: that -v cannot take, and "fast", a setting of the synthesiser's speed-up rather than a voice
VARIANTS = (
    "Alex", "Alicia", "Andrea", "Andy", "Annie", "AnxiousAndy", "Demonic", "Denis", "Diogo", "Gene", "Gene2", "Henrique",
    "Hugo", "Jacky", "Lee", "Marco", "Mario", "Michael", "Mike", "Nguyen", "RicishayMax", "RicishayMax2", "RicishayMax3",
    "Storm", "Tweaky", "UniRobot", "adam", "anika", "anikaRobot", "announcer", "antonio", "aunty", "belinda", "benjamin",
    "boris", "caleb", "croak", "david", "ed", "edward", "edward2", "f1", "f2", "f3", "f4", "f5", "grandma", "grandpa",
    "gustave", "iven", "iven2", "iven3", "iven4", "john", "kaukovalta", "klatt", "klatt2", "klatt3", "klatt4", "klatt5",
    "klatt6", "linda", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "marcelo", "max", "michel", "miguel", "norbert",
    "pablo", "paul", "pedro", "quincy", "rob", "robert", "robosoft", "robosoft2", "robosoft3", "robosoft4", "robosoft5",
    "robosoft6", "robosoft7", "robosoft8", "sandro", "shelby", "steph", "steph2", "steph3", "travis", "victor", "whisper",
    "whisperf", "zac",
)
SEED = 2017  # the year of the paper
TEST_VOICES, DEV_VOICES = 20, 10  # at least: families are held out whole; the rest train
SPEEDS = (120, 240)  # words per minute, both ends drawn (espeak-ng's default is 175)
PITCHES = (20, 80)  # espeak-ng's -p, both ends drawn (50 is the voice's own pitch)
SNRS_DB = (30.0, 20.0, 10.0)  # the noise of each clip, one of these drawn
PEAK = 0.95  # each clip's loudest sample after the noise: mu-law's range is used, never clipped


class EspeakError(RuntimeError):
    """espeak-ng is missing, or said something this tool cannot read."""


#: variants whose names do not show their family: each is another setting of the named voice
SIBLINGS = {"whisperf": "whisper", "anikarobot": "anika", "anxiousandy": "andy"}


def family(variant: str) -> str:
    """The family of a variant: klatt2 and klatt5 are one synthesiser's settings, m1 to m8 one set of men's
    voices. A held-out family is held out whole, so that no test voice has a sibling in training."""
    name = variant.lower().rstrip("0123456789")
    return SIBLINGS.get(name, name)


@dataclass(frozen=True)
class Voice:
    name: str  # accent+variant, espeak-ng's -v argument
    number: int  # its place in the plan: seeds its clips' draws
    split: str


def voices() -> list[Voice]:
    """Each variant with one accent, as a person speaks with one. The families go in a seeded order, and the
    first are held out: whole families for the test until it has TEST_VOICES voices, then for dev. The
    accents are dealt in turn along that order, so every split hears every accent."""
    families: dict[str, list[str]] = {}
    for variant in VARIANTS:
        families.setdefault(family(variant), []).append(variant)
    names = sorted(families)
    order = [families[names[k]] for k in np.random.default_rng(SEED).permutation(len(names)).tolist()]
    found: list[Voice] = []
    for members in order:
        held = Counter(v.split for v in found)
        split = "test" if held["test"] < TEST_VOICES else "dev" if held["dev"] < DEV_VOICES else "train"
        for variant in members:
            number = len(found)
            found.append(Voice(f"{ACCENTS[number % len(ACCENTS)]}+{variant}", number, split))
    return found


def clip_generator(voice: Voice, digit: int) -> np.random.Generator:
    """The draws of one clip (speed, pitch, noise), from its own seed: any clip can be made again alone."""
    return np.random.default_rng([SEED, voice.number, digit])


# ---------------------------------------------------------------------------------------------
# espeak-ng
# ---------------------------------------------------------------------------------------------


def espeak_version() -> str:
    """The version espeak-ng reports, such as "1.51"."""
    if shutil.which("espeak-ng") is None:
        raise EspeakError("espeak-ng is not installed: apt-get install espeak-ng (make setup does, as root)")
    said = subprocess.run(["espeak-ng", "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"text-to-speech:\s*(\S+)", said)
    if found is None:
        raise EspeakError(f"cannot read espeak-ng's version from {said.strip()!r}")
    return found.group(1)


def wav_samples(wav: bytes) -> np.ndarray:
    """The 16-bit mono samples of espeak-ng's WAV, as floats in [-1, 1). Written to a pipe, its header
    cannot know the length and says 2 GB: the samples are whatever follows the data chunk's header."""
    if wav[:4] != b"RIFF" or wav[8:12] != b"WAVE":
        raise EspeakError("espeak-ng's output is not a WAV file")
    fmt = wav.index(b"fmt ") + 8
    channels, rate, bits = (int.from_bytes(wav[fmt + a : fmt + b], "little") for a, b in ((2, 4), (4, 8), (14, 16)))
    if (channels, rate, bits) != (1, ESPEAK_RATE, 16):
        raise EspeakError(f"espeak-ng wrote {channels} channel(s), {rate} Hz, {bits} bits; expected 1, {ESPEAK_RATE}, 16")
    data = wav.index(b"data") + 8
    end = data + (len(wav) - data) // 2 * 2
    return np.frombuffer(wav[data:end], dtype="<i2").astype(np.float64) / 32768


def synthesise(voice: str, word: str, speed: int, pitch: int) -> np.ndarray:
    """``word`` said by ``voice`` at ESPEAK_RATE."""
    command = ["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "--stdout", word]
    done = subprocess.run(command, capture_output=True, check=False)
    if done.returncode or not done.stdout:
        raise EspeakError(f"{' '.join(command)} failed: {done.stderr.decode(errors='replace').strip()}")
    return wav_samples(done.stdout)


# ---------------------------------------------------------------------------------------------
# from espeak-ng's 22,050 Hz to 8 kHz
# ---------------------------------------------------------------------------------------------

#: 8,000 / 22,050 in lowest terms: an output sample every 441 / 160 input samples
UP, DOWN = 160, 441
#: the low-pass filter's cut-off, a little below the new Nyquist frequency (4 kHz), so that what would
#: fold back is already attenuated by the Hann window's transition band
CUTOFF_HZ = 3_600
#: the windowed sinc's half-width, in zero crossings of the cut-off's sinc
ZERO_CROSSINGS = 16


def sinc_table() -> tuple[np.ndarray, int]:
    """(UP, 2 * half) filter taps and half: row p weighs the input samples around an output that falls p/UP
    of the way past an input sample. The filter is a sinc at the cut-off (an ideal low-pass) under a Hann window."""
    fc = CUTOFF_HZ / ESPEAK_RATE  # cycles per input sample
    half = int(np.ceil(ZERO_CROSSINGS / (2 * fc)))
    phase = np.arange(UP)[:, None] / UP  # (UP, 1)
    offset = np.arange(-half + 1, half + 1)[None, :] - phase  # (UP, 2 half): each tap's distance, in input samples
    window = 0.5 + 0.5 * np.cos(np.pi * offset / half)  # (UP, 2 half), zero at |offset| = half
    return 2 * fc * np.sinc(2 * fc * offset) * window, half


TABLE, HALF = sinc_table()


def resample(wave: np.ndarray) -> np.ndarray:
    """(S,) at ESPEAK_RATE -> (S * UP // DOWN,) at SAMPLE_RATE: each output sample the filtered input at its
    time, read from the row of the table for its phase (a polyphase filter: no upsampled signal is built)."""
    n_out = len(wave) * UP // DOWN
    position = np.arange(n_out) * DOWN  # (n_out,) in units of 1/UP input samples
    base, phase = position // UP, position % UP  # (n_out,) each
    padded = np.concatenate([np.zeros(HALF), wave, np.zeros(HALF + 1)])
    taps = base[:, None] + np.arange(1, 2 * HALF + 1)[None, :]  # (n_out, 2 half) indices into padded
    return (padded[taps] * TABLE[phase]).sum(axis=1)  # (n_out,)


# ---------------------------------------------------------------------------------------------
# one clip
# ---------------------------------------------------------------------------------------------

FRAME = SAMPLE_RATE // 100  # 10 ms
SILENCE_DB = 40.0  # a 10 ms frame this far below the loudest is silence
MARGIN = 3 * FRAME  # kept on either side of the speech, so that no soft onset or release is cut


def trim(wave: np.ndarray) -> np.ndarray:
    """``wave`` without the silence before and after the speech (30 ms of margin left on each side)."""
    frames = len(wave) // FRAME
    rms = np.sqrt((wave[: frames * FRAME].reshape(frames, FRAME) ** 2).mean(axis=1))  # (frames,)
    loud = np.flatnonzero(rms > rms.max() * 10 ** (-SILENCE_DB / 20))
    start = max(0, loud[0] * FRAME - MARGIN)
    return wave[start : min(len(wave), (loud[-1] + 1) * FRAME + MARGIN)]


def add_noise(wave: np.ndarray, snr_db: float, generator: np.random.Generator) -> np.ndarray:
    """``wave`` plus white Gaussian noise whose power is the speech's mean power over 10^(snr/10)."""
    noise = generator.standard_normal(len(wave))
    noise *= np.sqrt(np.mean(wave**2) / 10 ** (snr_db / 10) / np.mean(noise**2))
    return wave + noise


def make_clip(voice: Voice, digit: int) -> tuple[Clip, bytes]:
    """One clip's index line and its mu-law codes."""
    generator = clip_generator(voice, digit)
    speed = int(generator.integers(SPEEDS[0], SPEEDS[1] + 1))
    pitch = int(generator.integers(PITCHES[0], PITCHES[1] + 1))
    snr = float(generator.choice(SNRS_DB))
    wave = trim(resample(synthesise(voice.name, WORDS[digit], speed, pitch)))
    noisy = add_noise(wave, snr, generator)
    codes = mu_law_encode(noisy * (PEAK / np.abs(noisy).max()))
    return Clip(digit, voice.name, speed, pitch, snr, len(codes), voice.split), codes.tobytes()


def make_clips(chosen: list[Voice], progress: bool = False) -> Iterator[tuple[Clip, bytes]]:
    """Every clip of ``chosen``, voice by voice, digit by digit; espeak-ng runs two at a time."""
    from tqdm import tqdm

    jobs = [(v, d) for v in chosen for d in range(len(WORDS))]
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield from tqdm(pool.map(lambda job: make_clip(*job), jobs), total=len(jobs), desc="spoken digits",
                        unit="clip", disable=not progress)


def build(chosen: list[Voice] | None = None, progress: bool = False) -> tuple[list[Clip], bytes]:
    """The index and the (uncompressed) mu-law codes of ``chosen`` voices (all of them by default)."""
    clips, codes = [], []
    for clip, data in make_clips(voices() if chosen is None else chosen, progress):
        clips.append(clip)
        codes.append(data)
    return clips, b"".join(codes)


def files(clips: list[Clip], codes: bytes) -> dict[str, bytes]:
    """The data set's files, as bytes, by name."""
    return {INDEX: index_text(clips).encode("utf-8"), CLIPS: gzip_bytes(codes)}


# ---------------------------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------------------------


def version_note(found: str) -> str | None:
    """What to say when this espeak-ng is not the one the shipped set was made with."""
    if found == ESPEAK_VERSION:
        return None
    return (f"espeak-ng {found} is installed; the shipped set was made with {ESPEAK_VERSION}, and another version "
            "speaks differently: the files will not be byte-identical to the shipped ones")


def main(check: bool = False, out: Path | None = None) -> int:
    out = out or FOLDER
    try:
        found = espeak_version()
    except EspeakError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"espeak-ng {found}")
    note = version_note(found)
    if note:
        print(f"warning: {note}", file=sys.stderr)
    clips, codes = build(progress=True)
    made = files(clips, codes)
    if check:
        differ = [name for name, data in made.items() if not (out / name).is_file() or (out / name).read_bytes() != data]
        print(f"{out}: " + (f"{', '.join(differ)} differ from what this machine makes" if differ
                            else "byte-identical to what this machine makes"))
        return 1 if differ else 0
    out.mkdir(parents=True, exist_ok=True)
    for name, data in made.items():
        (out / name).write_bytes(data)
    seconds = len(codes) / SAMPLE_RATE
    print(f"wrote {len(clips):,} clips ({seconds / 60:.1f} minutes of speech) to {out}: "
          + ", ".join(f"{name} {len(data):,} bytes" for name, data in made.items()))
    read_index(out / INDEX)  # the reader takes what was written
    return 0

