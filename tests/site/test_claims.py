"""A page's claim about a trend in what its code printed ("grows", "faster", "falls") is held to the
numbers: the cell that prints them asserts the trend, as the pages' other computed claims are.

The rule is read from the sources: a paragraph that follows a code cell which prints, displays,
glues or plots, and which speaks of a trend, needs an ``assert`` in that cell. A paragraph whose
trend word is not about those numbers (a decoder's input that "grows" by one token) is listed in
NOT_ABOUT_THE_NUMBERS with the reason.
"""
from __future__ import annotations

import re

import pytest

from course.layout import REPO, markdown_pages
from course.tools.editions import CODE_CELL

TREND = re.compile(r"\b(grows?|growing|faster|slower|rises?|rising|falls?|falling|shrinks?|increases?|decreases?|"
                   r"speed-up|halves|climbs?|drops?)\b", re.I)
SHOWS = re.compile(r"print\(|display\(|html_table|glue\(|plt\.show")
#: (page, the paragraph's first words): why its trend word is not a claim about the cell's numbers
NOT_ABOUT_THE_NUMBERS = {
    ("book/ch01_prerequisites", "Read the figure from top to bottom"): "the decoder's input grows by one token a step",
    ("book/ch03_multihead", "With two heads, every seed solves"): "the two halves of the task, not a halving",
    ("book/ch05_decoder", "The two agree to rounding error"): "a recurrent decoder's growing prefix, in words",
    ("book/ch08_capstone", "After ten minutes of training"): "a slower day of the machine, in words",
    ("book/transformer", "A forward pass takes a batch"): "what the model returns, no measured trend",
}


def trend_paragraphs(text: str):
    """(the paragraph's first words, its trend word, whether the cell before it asserts) for each
    paragraph right after a code cell that shows numbers."""
    cells = list(CODE_CELL.finditer(text))
    for i, cell in enumerate(cells):
        if not SHOWS.search(cell["body"]):
            continue
        prose = text[cell.end():cells[i + 1].start() if i + 1 < len(cells) else len(text)].strip()
        paragraph = prose.split("\n\n")[0]
        if paragraph and not paragraph.startswith(("#", ":::", "```")):
            found = TREND.search(paragraph)
            if found:
                yield " ".join(paragraph.split()[:6]), found.group(0), "assert" in cell["body"]


@pytest.mark.parametrize("page", markdown_pages())
def test_a_trend_the_text_claims_is_asserted_against_the_printed_numbers(page):
    unchecked = [f"{page}: {words!r}... says {word!r} of numbers its cell does not assert"
                 for words, word, asserted in trend_paragraphs((REPO / f"{page}.md").read_text())
                 if not asserted and not any(where == page and (start.startswith(words) or words.startswith(start))
                                             for where, start in NOT_ABOUT_THE_NUMBERS)]
    assert not unchecked, "\n".join(unchecked)


def test_the_rule_sees_a_trend_without_an_assert():
    page = ("```{code-cell} ipython3\nprint(times)\n```\n\nThe time grows with the length.\n\n"
            "```{code-cell} ipython3\nprint(t)\nassert t[1] > t[0]\n```\n\nThe gap rises.\n")
    assert [(w, a) for _, w, a in trend_paragraphs(page)] == [("grows", False), ("rises", True)]


#: the cells that read a clock and assert something else: (page, a line of the cell) -> why
NOT_A_TIMING_CLAIM = {
    ("book/ch09_hardware", "assert torch.equal(*same)"): "the tokens written, not the seconds taken",
}


def cells_that_time_and_assert(text: str, page: str):
    """The code cells that read time.perf_counter themselves, when they or the cell after them (a
    figure of the times, as a rule) assert, unless listed above."""
    bodies = [cell["body"] for cell in CODE_CELL.finditer(text)] + [""]
    for body, after in zip(bodies, bodies[1:]):
        asserting = [cell for cell in (body, after) if re.search(r"^\s*assert\b", cell, re.M)]
        if "perf_counter" in body and asserting and not any(
                where == page and line in cell for where, line in NOT_A_TIMING_CLAIM for cell in asserting):
            yield body.strip().splitlines()[0]


@pytest.mark.parametrize("page", markdown_pages())
def test_a_claim_about_timings_is_measured_through_fastest(page):
    """A page asserts a timing claim on the machine that builds the site, busy or not: a cell that
    clocks its own runs and asserts fails the build when another program takes a core for a moment.
    course.tools.page_timing.fastest takes the runs in turns and adds rounds while the claim is false."""
    own_clocks = list(cells_that_time_and_assert((REPO / f"{page}.md").read_text(), page))
    assert not own_clocks, f"{page}: time these cells' runs with fastest(runs, claim): {own_clocks}"


def test_the_rule_sees_a_cell_that_clocks_its_own_runs_and_asserts():
    own = ("```{code-cell} ipython3\nstart = time.perf_counter()\nf()\nt = time.perf_counter() - start\n"
           "assert t < 1\n```\n")
    through = "```{code-cell} ipython3\nbest = fastest(runs, claim)\nassert claim(best)\n```\n"
    figure_after = own.replace("assert t < 1\n", "") + "\n```{code-cell} ipython3\nplot(t)\nassert t < 1\n```\n"
    assert list(cells_that_time_and_assert(own, "book/x")) == ["start = time.perf_counter()"]
    assert list(cells_that_time_and_assert(figure_after, "book/x")) == ["start = time.perf_counter()"]
    assert not list(cells_that_time_and_assert(through, "book/x"))
