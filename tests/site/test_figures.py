"""Every plot on the website has a caption, alt text that describes it, and a size that reads.

The pages are read with jupytext, as the site build reads them, so a cell's options are the
metadata myst-nb will see: `mystnb.figure.caption` becomes the figure's caption and
`mystnb.image.alt` the image's alt text. Without them a reader gets an uncaptioned plot and a
screen reader announces a file name. No build is needed.
"""
from __future__ import annotations

import json
import re

import jupytext
import pytest

from course.layout import REPO, markdown_pages
from course.tools import page_figures

# Matplotlib figures are drawn at 92 dpi; at most this wide (644 px), a figure fits the page's
# column (660 px in a 1280 px window, measured in Chromium) without being scaled down.
MAX_WIDTH_IN = 7.0
#: A figure of several panels is drawn at most this wide (460 px), so that on a 390 px phone,
#: shrunk to the column, it keeps three quarters of its size (tests/site/test_site_browser.py measures
#: it); where panels side by side would then be too narrow, they are stacked.
PANELS_MAX_WIDTH_IN = 5.0
DPI = 92
DRAWS = re.compile(r"\bplt\.(show|subplots|figure|imshow|plot)\(|\bfig\.savefig\(")
FIGSIZE = re.compile(r"figsize=\(\s*([0-9.]+)\s*,")
_ARG = r"((?:[^,()=]|\([^()]*\))+?)"  # a positional argument, such as 2 or len(columns)
SUBPLOTS = re.compile(rf"plt\.subplots\(\s*{_ARG}\s*,\s*{_ARG}\s*[,)]")
PATHLIKE = re.compile(r"(^|\s)(\S*[/\\]\S*|\S+\.(png|svg|jpe?g))(\s|$)", re.I)


def figure_cells(page: str):
    nb = jupytext.read(REPO / f"{page}.md")
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and DRAWS.search(cell.source):
            yield index, cell


def panels(cell) -> bool:
    """Whether the cell draws a figure of several panels (plt.subplots with a grid bigger than 1)."""
    for rows, cols in SUBPLOTS.findall(cell.source):
        if not (rows.strip() == "1" and cols.strip() == "1"):
            return True
    return False


def multi_panel_figures() -> list[str]:
    """The names of the site's figures with several panels."""
    return sorted(cell.metadata["mystnb"]["figure"]["name"] for page in markdown_pages()
                  for _, cell in figure_cells(page) if panels(cell))


def problems(page: str, cell) -> list[str]:
    options = cell.metadata.get("mystnb", {})
    caption = str(options.get("figure", {}).get("caption", "")).strip()
    alt = str(options.get("image", {}).get("alt", "")).strip()
    found = []
    if len(caption.split()) < 5:
        found.append("no caption (mystnb: figure: caption)")
    if PATHLIKE.search(alt):
        found.append(f"alt text looks like a file name: {alt!r}")
    elif len(alt.split()) < 5:
        found.append("no alt text that describes the plot (mystnb: image: alt)")
    if not options.get("figure", {}).get("name"):
        found.append("no figure name to refer to it by (mystnb: figure: name)")
    for width in FIGSIZE.findall(cell.source):
        if float(width) > MAX_WIDTH_IN:
            found.append(f"figsize width {width} in is scaled down in the page's column (at most {MAX_WIDTH_IN})")
        elif panels(cell) and float(width) > PANELS_MAX_WIDTH_IN:
            found.append(f"figsize width {width} in: a figure of several panels is too small on a phone "
                         f"(at most {PANELS_MAX_WIDTH_IN}; stack its panels)")
    return found


@pytest.mark.parametrize("page", markdown_pages())
def test_every_figure_has_a_caption_alt_text_and_a_readable_size(page):
    failures = [
        f"{page} cell {index} ({cell.source.strip().splitlines()[-1][:60]!r}): {problem}"
        for index, cell in figure_cells(page) for problem in problems(page, cell)
    ]
    assert not failures, "\n".join(failures)


def test_figure_names_are_unique_across_the_site():
    seen: dict[str, str] = {}
    for page in markdown_pages():
        for _, cell in figure_cells(page):
            name = cell.metadata.get("mystnb", {}).get("figure", {}).get("name")
            if name:
                assert name not in seen, f"figure name {name!r} is used by {seen[name]} and {page}"
                seen[name] = page
    assert seen, "no captioned figure was found on any page"


def test_the_pages_draw_at_the_resolution_the_width_limit_assumes():
    """page_setup() sets the dpi (course.tools.page_figures) and makes each figure's image record its smallest
    text and its overlapping texts, which the browser test reads."""
    assert page_figures.DPI == DPI
    for page in markdown_pages():
        if any(True for _ in figure_cells(page)):
            first = jupytext.read(REPO / f"{page}.md").cells
            setup = next(c.source for c in first if c.cell_type == "code")
            assert "page_setup(" in setup, f"{page}'s first code cell does not call page_setup()"
            assert "figure.dpi" not in (REPO / f"{page}.md").read_text(), f"{page} sets its own dpi"


def test_a_figures_image_records_its_smallest_text_and_its_overlapping_texts():
    import base64

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(3, 2), dpi=DPI)
    left.set_title("a long title for the left panel")
    right.set_title("another long title on the right")
    left.text(0.5, 0.5, "small", fontsize=6)
    left.set_xlim(0, 1)
    found = page_figures.png_text(base64.b64decode(page_figures.figure_png(fig)))
    assert float(found[page_figures.TEXT_PX]) == pytest.approx(6 * DPI / 72, abs=0.01)
    assert json.loads(found[page_figures.OVERLAPS]) == [["a long title for the left panel",
                                                         "another long title on the right"]]
    right.set_title("")
    left.set_title("short")
    found = page_figures.png_text(base64.b64decode(page_figures.figure_png(fig)))
    assert json.loads(found[page_figures.OVERLAPS]) == []
    plt.close(fig)


def test_a_bare_figure_cell_is_caught():
    bare = jupytext.reads("```{code-cell} ipython3\nfig, ax = plt.subplots(figsize=(9, 3))\nplt.show()\n```\n",
                          fmt="md:myst").cells[0]
    assert len(problems("x", bare)) == 4
    assert any("several panels" in p for p in problems("x", jupytext.reads(
        "```{code-cell} ipython3\nfig, axes = plt.subplots(1, 3, figsize=(7, 3))\n```\n", fmt="md:myst").cells[0]))
    bare.metadata["mystnb"] = {"figure": {"caption": "A plot of the loss against the step.", "name": "f"},
                               "image": {"alt": "_build/jupyter_execute/book/x_1_0.png"}}
    assert any("file name" in p for p in problems("x", bare))
