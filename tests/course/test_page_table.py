"""The HTML tables the pages print (course/tools/page_table.py)."""
from __future__ import annotations

import pytest

from course.tools.page_table import html_table


def test_a_number_keeps_its_unit_on_its_line_and_every_cell_is_escaped():
    html = html_table(["model", "WER", "memory"], [["<b>x</b>", "25.10 %", "3.2 MiB"], ["y", "5 s", "40 ms"]]).data
    assert "25.10\u00a0%" in html and "3.2\u00a0MiB" in html and "5\u00a0s" in html and "40\u00a0ms" in html
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>" not in html
    assert html.startswith('<table class="course-table">')
    # a space that is not between a number and its unit stays a space
    assert "a s" in html_table(["a"], [["a s"]]).data


def test_a_row_of_the_wrong_width_or_a_bad_alignment_is_refused():
    with pytest.raises(ValueError, match="every row needs 2 cells"):
        html_table(["a", "b"], [["1"]])
    with pytest.raises(ValueError, match="one letter"):
        html_table(["a", "b"], [["1", "2"]], align="lc")
