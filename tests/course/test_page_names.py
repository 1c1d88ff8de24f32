"""Every name a page's code uses is defined by the page's cells before it, or imported there.

A page runs only when the website is built, minutes into the suite, so a cell that still calls a helper
an earlier cell no longer defines fails the whole build, and every test that reads the site with it. The
page's code cells are read here in order, as the kernel runs them, and handed to ruff's undefined-name
rule (F821): the page's line numbers are kept, so a failure names the line of the page to fix.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from course.layout import REPO, markdown_pages
from tests.course.test_code_width import code_cells

#: what a Jupyter kernel defines that plain Python does not
KERNEL_BUILTINS = '["display", "get_ipython"]'
RUFF = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")


def as_one_module(text: str) -> str:
    """The page's code cells in order, each line where the page has it, every other line left blank."""
    lines = [""] * len(text.splitlines())
    for _tags, body in code_cells(text):
        for number, line in body:
            lines[number - 1] = line
    return "\n".join(lines) + "\n"


def undefined_names(page: str, text: str) -> list[str]:
    done = subprocess.run(
        [RUFF, "check", "--isolated", "--select", "F821", "--config", f"builtins = {KERNEL_BUILTINS}",
         "--output-format", "concise", "--no-cache", "--stdin-filename", f"{page}.md", "-"],
        input=as_one_module(text), capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1), done.stderr  # 1: found something; anything else: ruff itself failed
    return [line for line in done.stdout.splitlines() if "F821" in line]


@pytest.mark.parametrize("page", markdown_pages())
def test_every_name_a_page_uses_is_defined_before_it(page):
    found = undefined_names(page, (REPO / f"{page}.md").read_text(encoding="utf-8"))
    assert not found, "the page's code uses names no earlier cell defines:\n" + "\n".join(found)


def test_the_rule_sees_a_helper_that_an_earlier_cell_no_longer_defines():
    page = "\n".join([
        "# A page", "", "```{code-cell} ipython3", "import time", "start = time.perf_counter()", "```", "",
        "Some text.", "", "```{code-cell} ipython3", ":tags: [remove-cell]", "elapsed = timed(start)",
        "display(elapsed)", "```", ""])
    found = undefined_names("book/a_page", page)
    assert len(found) == 1 and "book/a_page.md:12:" in found[0] and "`timed`" in found[0], found
