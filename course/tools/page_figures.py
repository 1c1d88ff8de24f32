"""How the pages draw their figures, and what each figure's image says about its own text.

Every page's first cell calls :func:`page_figures`. It sets the resolution the site's layout assumes
(92 dpi: a figure at most 7 inches wide, 644 px, fits the column of a 1280 px window unscaled) and
makes the notebook save each figure as a PNG that carries two facts in its text chunks, measured
when the figure is drawn:

- the height in image pixels of its smallest text (tick labels, annotations, titles, legends), so
  that the browser test can tell, from the scale the image is shown at, how large that text is on a
  phone's screen;
- the pairs of its texts that overlap (two panel titles run together, colour-bar labels on top of
  each other), which no reader can read.

The PNG is what the page shows; nothing else about the figure changes.
"""
from __future__ import annotations

import base64
import io
import itertools
import json
import struct
import zlib
from typing import Any

DPI = 92
TEXT_PX = "Course smallest text px"
OVERLAPS = "Course overlapping texts"
#: two texts overlap when their boxes share more than this many pixels each way (antialiased
#: edges of neighbours touch without hiding anything)
_SLACK_PX = 1.0


def page_figures(**rc: Any) -> None:
    """The pages' figure settings (``rc`` adds to them), and PNGs that carry their text's sizes."""
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    plt.rcParams.update({"figure.dpi": DPI, "axes.titlesize": 11, **rc})
    try:
        from IPython import get_ipython
    except ImportError:  # run as a script: nothing is displayed
        return
    shell = get_ipython()
    if shell is not None:
        # Load the notebook's backend now: loading it registers IPython's own PNG formatter, which
        # would otherwise replace this one at the page's first figure.
        plt.switch_backend(plt.get_backend())
        shell.display_formatter.formatters["image/png"].for_type(Figure, figure_png)


def _drawn_texts(fig) -> list:
    """The figure's non-empty texts that drawing it draws (a tick label outside the view is not),
    with their boxes, recorded while it is drawn."""
    from matplotlib.text import Text

    drawn, draw = [], Text.draw

    def recording(self, renderer):
        draw(self, renderer)
        if self.get_visible() and self.get_text().strip():
            drawn.append(self)

    Text.draw = recording
    try:
        fig.canvas.draw()
    finally:
        Text.draw = draw
    renderer = fig.canvas.get_renderer()
    found = []
    for text in dict.fromkeys(drawn):
        box = text.get_window_extent(renderer)
        if box.width > 0 and box.height > 0 and box.overlaps(fig.bbox):
            found.append((text, box))
    return found


def measure(fig) -> dict[str, Any]:
    """The smallest text's size in image pixels and the overlapping pairs of texts, as drawn."""
    texts = _drawn_texts(fig)
    smallest = min((t.get_fontsize() * fig.dpi / 72 for t, _ in texts), default=None)
    overlaps = []
    # A text turned by other than a right angle (tick labels at 45 degrees) fills only part of its
    # upright box, so two such boxes overlap where their letters do not: they are left out.
    upright = [(t, box) for t, box in texts if t.get_rotation() % 90 == 0]
    for (a, box_a), (b, box_b) in itertools.combinations(upright, 2):
        wide = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
        high = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
        if wide > _SLACK_PX and high > _SLACK_PX:
            overlaps.append([a.get_text()[:40], b.get_text()[:40]])
    return {"smallest_px": smallest, "overlaps": overlaps[:5]}


def figure_png(fig) -> str | None:
    """The figure as IPython's inline backend saves it (tight box, its own dpi), with the measurements."""
    if not fig.axes and not fig.texts:
        return None  # as IPython does: an empty figure shows nothing
    found = measure(fig)
    metadata = {OVERLAPS: json.dumps(found["overlaps"])}
    if found["smallest_px"] is not None:
        metadata[TEXT_PX] = f"{found['smallest_px']:.2f}"
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=fig.dpi, bbox_inches="tight", facecolor=fig.get_facecolor(),
                edgecolor=fig.get_edgecolor(), metadata=metadata)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def png_text(png: bytes) -> dict[str, str]:
    """The tEXt chunks of a PNG file, as key -> value."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    found, at = {}, 8
    while at + 8 <= len(png):
        length, kind = struct.unpack(">I4s", png[at:at + 8])
        body = png[at + 8:at + 8 + length]
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            found[key.decode("latin-1")] = value.decode("latin-1")
        elif kind == b"zTXt":
            key, _, rest = body.partition(b"\0")
            found[key.decode("latin-1")] = zlib.decompress(rest[1:]).decode("latin-1")
        elif kind == b"IEND":
            break
        at += 12 + length
    return found
