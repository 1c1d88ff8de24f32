"""Every chapter page ends with three to five questions to test oneself, each answer folded away.

The questions are the page's last section: a heading, then admonitions of class ``dropdown``
(sphinx-togglebutton folds their body under their title), numbered 1., 2., ... in their titles, each
with an answer. The Chinese twins end the same way. Read from the sources; the browser test opens one.
"""
from __future__ import annotations

import re

import pytest

from course.layout import REPO, toc_pages

QUESTION = re.compile(r"^:::\{admonition\} (?P<title>[^\n]+)\n:class: dropdown\n\n(?P<answer>.*?)\n:::$", re.M | re.S)


def chapter_pages() -> list[str]:
    return [p for p in toc_pages() if p.startswith("book/ch") or p == "book/transformer"]


def questions(text: str) -> tuple[str, list[tuple[str, str]]]:
    """The last section's heading and its (question, answer) pairs; raises if anything else is in it."""
    last = text.rindex("\n## ")
    heading, _, body = text[last + 4:].partition("\n")
    found = [(m["title"], m["answer"].strip()) for m in QUESTION.finditer(body)]
    rest = QUESTION.sub("", body).strip()
    assert not rest, f"the last section ({heading}) holds more than its questions: {rest[:120]!r}"
    return heading, found


@pytest.mark.parametrize("page", chapter_pages())
def test_a_chapter_page_ends_with_three_to_five_folded_questions(page):
    heading, found = questions((REPO / f"{page}.md").read_text())
    assert heading == "Check yourself", f"{page}'s last section is {heading!r}"
    assert 3 <= len(found) <= 5, f"{page} has {len(found)} questions"
    for number, (title, answer) in enumerate(found, 1):
        assert title.startswith(f"{number}. "), f"{page}: question {number} is titled {title!r}"
        assert len(answer.split()) >= 15, f"{page}: question {number} has almost no answer"


def test_the_parser_sees_a_question_without_answer_and_stray_text():
    good = ":::{admonition} 1. Why?\n:class: dropdown\n\nBecause the scores grow with d_k, and so on.\n:::"
    assert questions(f"# T\n\n## Check yourself\n\n{good}\n")[1] == [("1. Why?", "Because the scores grow with d_k, and so on.")]
    with pytest.raises(AssertionError, match="more than its questions"):
        questions(f"# T\n\n## Check yourself\n\n{good}\n\nA stray paragraph.\n")
    with pytest.raises(AssertionError, match="more than its questions"):
        questions("# T\n\n## Check yourself\n\n:::{admonition} 1. Why?\n:::\n")  # not folded
