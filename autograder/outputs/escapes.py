"""Text that came from a learner (or a roster), shown and never acted on.

A learner's message, a broken notebook's error or a name may hold a terminal's escape sequences
or the bidirectional controls; wherever the grader prints or writes such text (the run's summary,
the feedback pages, the CSVs, the autograded copy) it goes through :func:`visible` first.
"""
from __future__ import annotations

import re

#: C0 and C1 control characters, the bidirectional controls and the line separators: in a
#: learner's text they would move a terminal's cursor, set its title, erase lines, or reorder
#: what a terminal or a spreadsheet shows
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def visible(text: str, keep: str = "") -> str:
    """``text`` with each control character written as its escape (ESC as ``\\x1b``), so that it
    is shown and never acted on; the characters of ``keep`` stay as they are."""
    return _CONTROLS.sub(lambda m: m[0] if m[0] in keep else m[0].encode("unicode_escape").decode("ascii"), text)
