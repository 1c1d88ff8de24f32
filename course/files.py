"""Writing a file so that no reader ever sees half of it.

A grade file, a checkpoint or a figure is written beside its place under a name of its own (this
process's, so that two runs writing the same file at once never share one) and then renamed into
place, which replaces the old file in one step: a reader, or a run that crashed half-way, leaves
either the old file or the new one.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: how the name of a file still being written ends
PARTIAL = ".partial"


def atomic_write(path: Path, write: Callable[[Path], Any]) -> None:
    """``write(partial)`` fills a file beside ``path``, which then replaces ``path``.

    ``write`` is given a path, so that any writer fits: ``p.write_text``, ``torch.save(obj, p)``,
    ``fig.savefig(p, format="png")`` (name the format: the partial file's suffix is not the real one).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}{PARTIAL}")
    write(partial)
    partial.replace(path)


def leftovers(folder: Path) -> list[Path]:
    """The partial files in ``folder``: only a write that crashed half-way leaves one."""
    return sorted(Path(folder).glob(f".*{PARTIAL}"))
