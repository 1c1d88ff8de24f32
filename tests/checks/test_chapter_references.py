"""Every "chapter N" the course mentions leads to a chapter that has a page on the site.

The pages in book/ and the instructor notebooks in solutions/ send the reader elsewhere all the
time: "chapter 3's MultiHeadAttention", "chapters 2 to 6", "(ch. 4)" in a figure. A mention of
a chapter that is not on the site (one that is planned but not written, or a number that moved)
leaves the reader looking for a page that does not exist. A chapter is on the site when _toc.yml
lists its page, book/chNN_topic.md, and that page exists. A chapter that is planned may still be
named, as long as the text says so right after the number: "chapter 7 (to come)".

The scan reads every page in book/ whole, and every cell of every instructor notebook, markdown
and code (a comment in an exercise's code is read by the learner too).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from course.layout import BOOK, CHAPTER_NAME, REPO, TOC, chapters, toc_pages
from course.notebook_format import to_nbgrader
from course.tools.tables import PLANNED, page_title

# "chapter 3", "Chapter 3's", "chapters 2 to 6", "chapters 3 and 4", "chapters 2, 3 and 5", "(ch. 4)"
_MENTION = re.compile(r"\b(?:[Cc]hapters?|[Cc]h\.)\s+(\d+(?:\s*(?:,|\band\b|\bor\b|\bto\b|-|–)\s*\d+)*)")
_SEPARATOR = re.compile(r"\s*(,|\band\b|\bor\b|\bto\b|-|–)\s*")
_RANGE = ("to", "-", "–")
_MARKED_PLANNED = re.compile(rf"\s*\(?{re.escape(PLANNED)}\)?")


@dataclass(frozen=True)
class Mention:
    where: str  # the file, and the cell for a notebook
    line: int  # 1-based, inside the page or the cell
    text: str  # as written, on one line
    numbers: tuple[int, ...]  # every chapter it names; a range names each chapter in it
    planned: bool  # followed by "(to come)"


def chapters_on_site(root: Path = REPO) -> dict[int, str]:
    """Chapter number -> its page's title, for every chapter page that _toc.yml lists and that exists."""
    found: dict[int, str] = {}
    for entry in toc_pages(root):
        folder, _, name = entry.rpartition("/")
        match = CHAPTER_NAME.match(name)
        title = page_title(root / f"{entry}.md")
        if folder == BOOK and match and title is not None:
            found[int(match.group(1))] = title
    return found


def _numbers(spec: str) -> tuple[int, ...]:
    """'2 to 4' -> (2, 3, 4); '3 and 5' -> (3, 5); '2, 3' -> (2, 3)."""
    parts = _SEPARATOR.split(spec)  # number, separator, number, ...
    numbers = [int(parts[0])]
    for separator, number in zip(parts[1::2], parts[2::2]):
        if separator in _RANGE:
            numbers.extend(range(numbers[-1] + 1, int(number) + 1))
        else:
            numbers.append(int(number))
    return tuple(numbers)


def mentions(text: str, where: str) -> list[Mention]:
    """Every mention of a chapter by number in ``text``."""
    return [
        Mention(
            where,
            text.count("\n", 0, match.start()) + 1,
            " ".join(match.group(0).split()),
            _numbers(match.group(1)),
            bool(_MARKED_PLANNED.match(text, match.end())),
        )
        for match in _MENTION.finditer(text)
    ]


def broken(found: list[Mention], on_site: dict[int, str]) -> list[str]:
    """One message per mention that names a chapter without a page and does not say it is to come."""
    problems = []
    for mention in found:
        missing = [n for n in mention.numbers if n not in on_site]
        if missing and not mention.planned:
            names = ("chapter " if len(missing) == 1 else "chapters ") + ", ".join(str(n) for n in missing)
            problems.append(
                f"{mention.where}, line {mention.line}: {mention.text!r} names {names}, without a "
                f"page on the site (chapters with a page: {sorted(on_site)}). Point the reader to a chapter "
                f"that exists, or say that it is planned: 'chapter {missing[0]} ({PLANNED})'."
            )
    return problems


def course_texts(root: Path = REPO) -> dict[str, str]:
    """What the scan reads: each page of book/, and each cell of each instructor notebook."""
    texts = {
        str(page.relative_to(root)): page.read_text(encoding="utf-8")
        for page in sorted((root / BOOK).glob("*.md"))
    }
    for chapter in chapters(root):
        for index, cell in enumerate(to_nbgrader(chapter.source).cells):
            texts[f"{chapter.source.relative_to(root)}, cell {index} ({cell.cell_type})"] = cell.source
    return texts


# ----------------------------------------------------------------------------------------
# the course itself
# ----------------------------------------------------------------------------------------


def test_every_chapter_mentioned_has_a_page():
    on_site = chapters_on_site()
    found = [m for where, text in course_texts().items() for m in mentions(text, where)]
    assert len(found) > 50, f"the scan found only {len(found)} chapter mentions: is the pattern still right?"
    problems = broken(found, on_site)
    assert not problems, "\n".join(problems)


def test_the_chapters_with_pages_are_found():
    """Every chapter whose page _toc.yml lists counts as on the site, under its page's title."""
    pages = toc_pages(REPO)
    on_site = chapters_on_site()
    listed = [c for c in chapters(REPO) if c.toc_entry in pages]
    assert listed, f"no chapter page found in {TOC}"
    for c in listed:
        assert on_site.get(c.number) == page_title(c.page), f"{c.toc_entry} is listed in {TOC} but not found"


# ----------------------------------------------------------------------------------------
# proof that the check can fail
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "numbers"),
    [
        ("as chapter 3 showed", (3,)),
        ("Chapter 3's `MultiHeadAttention`", (3,)),
        ("the parts of chapters 2 to 6", (2, 3, 4, 5, 6)),
        ("Chapters 2 and 3 built attention", (2, 3)),
        ("chapters 2, 3 and 5", (2, 3, 5)),
        ("built in\nchapter\n6", (6,)),
        ('"multi-head self-attention  (ch. 2, 3)"', (2, 3)),
    ],
)
def test_every_way_of_naming_a_chapter_is_read(text, numbers):
    found = mentions(text, "example")
    assert [m.numbers for m in found] == [numbers]


def test_words_that_are_not_chapter_mentions_are_ignored():
    assert mentions("section 3.4 of the paper; Table 3, rows A; the 8 heads", "example") == []


@pytest.mark.parametrize(
    ("text", "missing"),
    [
        ("Speech is the subject of chapter 11.", "11"),
        ("The vision models of Chapter 14 reuse this layer.", "14"),
        ("Chapters 12 to 13 use the embedding.", "12, 13"),
        ("see chapters 5 and 13", "13"),
        ("drawn as a box labelled (ch. 12)", "12"),
    ],
)
def test_a_chapter_without_a_page_is_reported(text, missing):
    on_site = chapters_on_site()
    assert not {int(n) for n in missing.split(", ")} & set(on_site), f"chapter {missing} now has a page: pick another"
    problems = broken(mentions(text, "example.md"), on_site)
    assert len(problems) == 1, problems
    assert f"names chapter{'s' if ',' in missing else ''} {missing}," in problems[0], problems
    assert "example.md, line 1" in problems[0]


def test_a_chapter_marked_to_come_may_be_named():
    on_site = chapters_on_site()
    assert 11 not in on_site, "chapter 11 now has a page: pick another example"
    assert broken(mentions(f"Speech, chapter 11 ({PLANNED}), builds on this.", "example.md"), on_site) == []
    assert broken(mentions("Speech, chapter 11, builds on this.", "example.md"), on_site) != []


def test_a_page_missing_from_the_toc_does_not_count(tmp_path):
    (tmp_path / BOOK).mkdir()
    for name in ("ch01_start", "ch02_middle", "ch03_draft"):
        (tmp_path / BOOK / f"{name}.md").write_text(f"# {name}\n", encoding="utf-8")
    (tmp_path / TOC).write_text(
        "format: jb-book\nroot: book/ch01_start\nchapters:\n  - file: book/ch02_middle\n  - file: book/ch04_gone\n",
        encoding="utf-8",
    )
    on_site = chapters_on_site(tmp_path)
    assert on_site == {1: "ch01_start", 2: "ch02_middle"}  # ch03: not listed; ch04: listed, no page
    problems = broken(mentions("chapters 1 to 4", "example.md"), on_site)
    assert len(problems) == 1 and "names chapters 3, 4," in problems[0]
