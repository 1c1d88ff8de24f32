"""The digits file the course ships, and its fixed split: the figures data/digits/README.md gives are the file's."""
from __future__ import annotations

import gzip
import hashlib
import re
import shutil

import pytest
import torch

from transformer.vision import data

README = data.FILE.parent / "README.md"


@pytest.fixture(scope="module")
def splits():
    return data.load()


def test_the_file_is_the_one_the_readme_describes():
    text = README.read_text(encoding="utf-8")
    raw = data.FILE.read_bytes()
    assert hashlib.sha256(raw).hexdigest() == data.SHA256
    assert f"`{data.SHA256}`" in text
    assert f"{len(raw):,} bytes ({len(gzip.decompress(raw)):,} bytes uncompressed)" in text
    pixels, labels = data.read()
    assert pixels.shape == (1797, 1, 8, 8) and labels.shape == (1797,)
    assert pixels.min() == 0 and pixels.max() == 1, "counts of 0 to 16, scaled to [0, 1]"
    assert torch.equal(pixels * 16, (pixels * 16).round())
    counts = ", ".join(str(int((labels == d).sum())) for d in range(9))
    assert f"{counts} and {int((labels == 9).sum())} of the digits 0 to 9" in text


def test_the_split_is_the_rule_of_the_readme(splits):
    _, labels = data.read()
    seen = {}
    for row, label in enumerate(labels.tolist()):
        n = seen.get(label, 0)
        seen[label] = n + 1
        expected = "test" if n % 10 in (4, 9) else "dev" if n % 10 == 7 else "train"
        assert row in splits[expected].rows.tolist(), (row, expected)


def test_the_splits_are_disjoint_complete_and_stratified(splits):
    pixels, labels = data.read()
    rows = [set(s.rows.tolist()) for s in splits.values()]
    assert sum(map(len, rows)) == len(set().union(*rows)) == len(labels)
    text = README.read_text(encoding="utf-8")
    for name, split in splits.items():
        assert torch.equal(split.images, pixels[split.rows]) and torch.equal(split.labels, labels[split.rows])
        per_digit = [int((split.labels == d).sum()) for d in range(10)]
        share = {"train": 0.7, "dev": 0.1, "test": 0.2}[name]
        for d, count in enumerate(per_digit):
            assert abs(count - share * int((labels == d).sum())) < 2, (name, d)
        assert re.search(rf"\| {name} \| {len(split):,} \| {', '.join(map(str, per_digit))} \|", text), name
    assert data.load()["test"].rows.tolist() == splits["test"].rows.tolist(), "the same split every time"


def test_another_file_is_refused(tmp_path):
    changed = tmp_path / "digits.csv.gz"
    shutil.copyfile(data.FILE, changed)
    changed.write_bytes(gzip.compress(gzip.decompress(changed.read_bytes()).replace(b"0,0,5,13", b"0,0,5,14", 1)))
    with pytest.raises(data.DigitsError, match="not the file the course ships"):
        data.load(changed)
    with pytest.raises(data.DigitsError, match="no digits file"):
        data.load(tmp_path / "missing.csv.gz")
