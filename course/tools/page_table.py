"""The tables the website's pages print, built as HTML.

myst-nb renders a cell's `display(Markdown(...))` as CommonMark, which has no tables: a pipe table
comes out as one paragraph of bars and dashes. A page therefore displays `html_table(...)`.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from html import escape

from IPython.display import HTML

#: a number and the unit after it (25.10 %, 3.2 MiB, 40 ms) are joined by a no-break space, so that a
#: narrow column never sends the unit to a line of its own
_UNIT = re.compile(r"(?<=\d) (?=%|[KMGT]i?B\b|ms\b|s\b|x\b)")


def html_table(header: Sequence[str], rows: Sequence[Sequence[object]], *, align: str = "",
               code: Sequence[int] = (), total: bool = False) -> HTML:
    """A table with a header row; every cell is escaped, so a value is shown as it is written.

    align: one letter per column, "l" or "r"; by default the first column is left-aligned and
    the others, which hold numbers, right-aligned. code: the columns whose cells are symbols
    (phonemes, identifiers), shown in monospace on one line. total: the last row is a total, in bold.
    """
    width = len(header)
    if any(len(row) != width for row in rows):
        raise ValueError(f"every row needs {width} cells, one per column of {list(header)}")
    align = align or "l" + "r" * (width - 1)
    if len(align) != width or set(align) - {"l", "r"}:
        raise ValueError(f"align needs one letter, l or r, per column: got {align!r} for {width} columns")
    side = ["left" if a == "l" else "right" for a in align]

    def cell(tag: str, column: int, value: object) -> str:
        text = escape(_UNIT.sub("\u00a0", str(value)))
        if tag == "td" and column in code:
            text = f'<code class="symbols">{text}</code>'
        return f'<{tag} style="text-align:{side[column]}">{text}</{tag}>'

    def row_html(tag: str, row: Sequence[object], bold: bool = False) -> str:
        start = '<tr style="font-weight:bold">' if bold else "<tr>"
        return start + "".join(cell(tag, i, v) for i, v in enumerate(row)) + "</tr>"

    body = "".join(row_html("td", row, total and i == len(rows) - 1) for i, row in enumerate(rows))
    return HTML(f"<table class=\"course-table\"><thead>{row_html('th', header)}</thead><tbody>{body}</tbody></table>")
