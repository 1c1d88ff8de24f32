"""What the first code cell of every page of the website runs: ``page_setup()``.

It draws the figures as the site's layout needs them (:mod:`course.tools.page_figures`) and has the
page report its long cells while the build executes it (:mod:`course.tools.page_progress`).
"""
from __future__ import annotations

from typing import Any

from course.tools.page_figures import page_figures
from course.tools.page_progress import report_progress


def page_setup(**rc: Any) -> None:
    """Figures at the site's resolution (``rc`` adds matplotlib settings) and progress in the build's log."""
    page_figures(**rc)
    report_progress()
