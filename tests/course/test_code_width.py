"""No code line a reader can see is wider than the page's text column.

course.css sets code cells at 0.78rem; at that size a line of 88 characters fits the column of a
1280 px window, and a longer one makes the reader scroll sideways. Cells a reader can unfold
(hide-input, hide-cell, hide-output) count as much as visible ones; only remove-input and
remove-cell cells never reach the page. The pages are read as text, not through jupytext, so a
failure can name the line of the page to fix.
"""
from __future__ import annotations

import pytest
import yaml

from course.layout import REPO, markdown_pages

MAX_CHARS = 88
NEVER_SHOWN = {"remove-input", "remove-cell"}


def _tags(option_lines: list[str]) -> set[str]:
    """Tags of a cell from its `---` YAML header or its `:tags:` lines."""
    if option_lines and option_lines[0].strip() == "---":
        header = yaml.safe_load("\n".join(option_lines[1:-1])) or {}
        return set(header.get("tags") or [])
    for line in option_lines:
        if line.startswith(":tags:"):
            return set(yaml.safe_load(line[len(":tags:"):]) or [])
    return set()


def code_cells(text: str):
    """Yield (tags, [(line number, line)]) for each code cell of a MyST page."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = lines[i]
        if not opening.lstrip().startswith("```{code-cell}"):
            i += 1
            continue
        fence = opening[: len(opening) - len(opening.lstrip("`"))]
        i += 1
        options: list[str] = []
        if i < len(lines) and lines[i].strip() == "---":
            options.append(lines[i])
            i += 1
            while i < len(lines) and lines[i].strip() != "---":
                options.append(lines[i])
                i += 1
            options.append("---")
            i += 1
        while i < len(lines) and lines[i].startswith(":"):
            options.append(lines[i])
            i += 1
        body = []
        while i < len(lines) and lines[i].strip() != fence:
            body.append((i + 1, lines[i]))
            i += 1
        i += 1
        yield _tags(options), body


def too_wide(page: str, text: str) -> list[str]:
    return [
        f"{page}.md:{number}: {len(line)} characters"
        for tags, body in code_cells(text)
        if not tags & NEVER_SHOWN
        for number, line in body
        if len(line) > MAX_CHARS
    ]


@pytest.mark.parametrize("page", markdown_pages())
def test_no_visible_code_line_is_wider_than_the_column(page):
    failures = too_wide(page, (REPO / f"{page}.md").read_text(encoding="utf-8"))
    assert not failures, (
        f"{len(failures)} code line(s) longer than {MAX_CHARS} characters scroll sideways:\n"
        + "\n".join(failures)
    )


def test_the_parser_sees_folded_cells_and_skips_removed_ones():
    long = "x = " + "1 + " * 30 + "1"
    page = (
        "```{code-cell} ipython3\n---\ntags:\n- hide-input\n---\n" + long + "\n```\n\n"
        "```{code-cell} ipython3\n:tags: [remove-input]\n\n" + long + "\n```\n\n"
        "```{code-cell} ipython3\nshort = 1\n```\n"
    )
    assert too_wide("p", page) == [f"p.md:6: {len(long)} characters"]
