"""The chapter tables of README.md and book/intro.md, made from what the course holds.

    python -m course.tools tables           rewrite the rows of both tables
    python -m course.tools tables --check   fail if either disagrees with the course

One row per chapter, in order: its number, its title (the first heading of its page), whether
the page is on the site (listed in _toc.yml) and, in the README, the functions its exercise
grades (the check(...) calls of its test cells). What a row says about its chapter in words
belongs to the author and is kept. A chapter not written yet may keep a row marked "to come";
when the chapter appears, its row takes over that row's words. Rows without a number (the full
Transformer) stay where they are.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from course.layout import BOOK, REPO, chapters, toc_pages
from course.notebook_format import check_calls, graded_cells, to_nbgrader

README = "README.md"
INTRO = f"{BOOK}/intro.md"
README_HEADER = "| # | chapter | on the site | exercise |"
INTRO_HEADER = "| # | Chapter | What it covers |"
PLANNED = "to come"
_LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+\.md)\)")


@dataclass(frozen=True)
class ChapterFacts:
    """What the tables say about a chapter, read from the course itself."""

    number: int
    title: str | None  # the page's heading; None while the chapter has no page
    exercise_title: str  # from the notebook's heading, for a chapter without a page
    page: str  # the page's file name inside book/, as the intro links it
    on_site: bool
    functions: tuple[str, ...]


@dataclass
class Row:
    number: int | None
    cells: list[str]


def page_title(path: Path) -> str | None:
    """The first top-level heading of a markdown page, after its front matter."""
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    if text.startswith("---\n"):
        text = text.split("\n---\n", 1)[-1]
    return next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), None)


def graded_functions(nb) -> tuple[str, ...]:
    """The functions an instructor notebook grades, in the order of its test cells."""
    names = [fn for cell in graded_cells(nb, "test") for _, fn, _ in check_calls(cell.source) if fn]
    return tuple(dict.fromkeys(names))


def exercise_title(nb, fallback: str) -> str:
    """"Chapter 8 exercises: training, ..." gives "Training, ..."."""
    heading = next(
        (c.source.splitlines()[0].lstrip("# ").strip() for c in nb.cells if c.cell_type == "markdown" and c.source), ""
    )
    topic = heading.split(": ", 1)[-1].strip()
    return topic[:1].upper() + topic[1:] if topic else fallback


def chapter_facts(root: Path = REPO) -> list[ChapterFacts]:
    pages = toc_pages(root)
    facts = []
    for c in chapters(root):
        if c.number is None:
            raise ValueError(f"{c.assignment} has no chapter number: name its folder chNN_topic, such as ch07_bert_gpt")
        nb = to_nbgrader(c.source)
        facts.append(ChapterFacts(
            c.number, page_title(c.page), exercise_title(nb, c.assignment), c.page.name,
            c.toc_entry in pages, graded_functions(nb),
        ))
    return sorted(facts, key=lambda f: f.number)


# ----------------------------------------------------------------------------------------
# reading and writing a markdown table
# ----------------------------------------------------------------------------------------


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _row_line(cells: list[str]) -> str:
    line = "| " + " | ".join(cells) + " |"
    while "|  |" in line:  # an empty cell is written "| |"
        line = line.replace("|  |", "| |")
    return line


def _find(text: str, header: str, where: str) -> tuple[list[str], int, int]:
    """The file's lines and the [start, end) range of the table's rows below the header."""
    lines = text.split("\n")
    try:
        head = next(i for i, line in enumerate(lines) if line.strip() == header)
    except StopIteration:
        raise ValueError(f"{where} has no chapter table: a line {header!r} starts it") from None
    start = head + 2  # below the header and its |---| line
    end = start
    while end < len(lines) and lines[end].lstrip().startswith("|"):
        end += 1
    return lines, start, end


def _parse(line: str, width: int, where: str) -> Row:
    cells = _cells(line)
    if len(cells) != width:
        raise ValueError(f"{where}: the row {line!r} has {len(cells)} cells, the table {width}")
    number = cells[0]
    if re.fullmatch(r"\d+", number):
        return Row(int(number), cells)
    if number in ("–", "-", ""):
        return Row(None, cells)
    raise ValueError(f"{where}: the row {line!r} needs one chapter number, or '–' for a page that is not a chapter")


def _merge(rows: list[Row], facts: list[ChapterFacts], make, planned) -> list[Row]:
    """The table's rows with every chapter's row remade, planned rows kept, new chapters in order."""
    by_number = {f.number: f for f in facts}
    out: list[Row] = []
    for row in rows:
        if row.number is None:
            out.append(row)
        elif row.number in by_number and all(r.number != row.number for r in out):
            out.append(Row(row.number, make(by_number[row.number], row)))
        elif row.number not in by_number and planned(row):
            out.append(row)
        # otherwise: a row for a chapter that no longer exists, or a second row for one
    for f in facts:
        if any(r.number == f.number for r in out):
            continue
        later = next((i for i, r in enumerate(out) if r.number is not None and r.number > f.number), len(out))
        out.insert(later, Row(f.number, make(f, None)))
    return out


def _details(old: str, title: str) -> str:
    """What the README adds after a chapter's title, "Attention: weights, ...", kept from the old row."""
    if old == title:
        return ""
    if old.startswith(title + ": "):
        return old[len(title) + 2 :]
    return old.split(": ", 1)[1] if ": " in old else ""


def _readme_row(f: ChapterFacts, old: Row | None) -> list[str]:
    # Until the chapter has a page, the title the row already gives it stands.
    title = f.title or (old.cells[1].split(": ", 1)[0] if old else f.exercise_title)
    details = _details(old.cells[1], title) if old else ""
    return [
        str(f.number),
        f"{title}: {details}" if details else title,
        "✓" if f.on_site else "not yet",
        ", ".join(f"`{fn}`" for fn in f.functions),
    ]


def _intro_row(f: ChapterFacts, old: Row | None) -> list[str]:
    return [str(f.number), f"[{f.title or f.exercise_title}]({f.page})", old.cells[2] if old else ""]


def _relink(row: Row, root: Path) -> Row:
    """A link to a page of the book shows that page's title."""
    def title(match: re.Match) -> str:
        return f"[{page_title(root / BOOK / match.group(2)) or match.group(1)}]({match.group(2)})"

    return Row(row.number, [row.cells[0], _LINK.sub(title, row.cells[1]), *row.cells[2:]])


def _rewrite(text: str, header: str, width: int, where: str, rows_of) -> str:
    lines, start, end = _find(text, header, where)
    rows = [_parse(line, width, where) for line in lines[start:end]]
    lines[start:end] = [_row_line(r.cells) for r in rows_of(rows)]
    return "\n".join(lines)


def render(root: Path = REPO) -> dict[str, str]:
    """README.md and book/intro.md as they should read, by their path from the root."""
    facts = chapter_facts(root)
    readme = (root / README).read_text(encoding="utf-8")
    intro = (root / INTRO).read_text(encoding="utf-8")
    return {
        README: _rewrite(
            readme, README_HEADER, 4, README,
            lambda rows: _merge(rows, facts, _readme_row, lambda r: r.cells[2] == PLANNED),
        ),
        INTRO: _rewrite(
            intro, INTRO_HEADER, 3, INTRO,
            # The site's own table lists a chapter once its page is on the site.
            lambda rows: [_relink(r, root) for r in _merge(
                rows, [f for f in facts if f.on_site], _intro_row,
                lambda r: PLANNED in r.cells[1] and not _LINK.search(r.cells[1]),
            )],
        ),
    }


def problems(root: Path = REPO) -> list[str]:
    """Where the tables disagree with the course, or say too little: empty when they are right."""
    try:
        rendered = render(root)
    except ValueError as exc:  # a table that cannot be read, or a chapter without a number
        return [str(exc)]
    found = []
    for name, text in rendered.items():
        current = (root / name).read_text(encoding="utf-8")
        if text != current:
            diff = difflib.unified_diff(
                current.splitlines(), text.splitlines(), f"{name} (now)", f"{name} (from the course)", lineterm="", n=0
            )
            found.append(f"{name}: the chapter table disagrees with the course:\n" + "\n".join(diff))
    pages = toc_pages(root)
    intro = (root / INTRO).read_text(encoding="utf-8")
    lines, start, end = _find(intro, INTRO_HEADER, INTRO)
    for row in (_parse(line, 3, INTRO) for line in lines[start:end]):
        for _, target in _LINK.findall(row.cells[1]):
            if f"{BOOK}/{target.removesuffix('.md')}" not in pages:
                found.append(f"{INTRO}: the row {row.cells[0]} links to {target}, which _toc.yml does not list")
        if row.number is not None and _LINK.search(row.cells[1]) and not row.cells[2]:
            found.append(f"{INTRO}: say in the row of chapter {row.number} what the chapter covers")
    return found


def write(root: Path = REPO) -> list[str]:
    """Rewrite the tables; the files that changed."""
    changed = []
    for name, text in render(root).items():
        path = root / name
        if path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed.append(name)
    return changed
