"""The checks of every chapter, by id: "<notebook>.<function>" such as "attention.softmax".

The checks of the notebook ``<name>.ipynb`` live in ``autograder/checks/<name>.py``, which
lists its check classes in ``CHECKS``.
"""
from __future__ import annotations

import importlib

from ..framework import Check


def chapter_checks(notebook: str) -> dict[str, Check]:
    if not notebook.isidentifier():
        raise KeyError(f"{notebook!r} is not a notebook name")
    try:
        module = importlib.import_module(f"{__name__}.{notebook}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{notebook}":
            raise
        raise KeyError(f"no checks for a notebook named {notebook!r}") from None
    return {cls.function: cls() for cls in module.CHECKS}


def get(check_id: str) -> Check:
    notebook, _, function = check_id.partition(".")
    checks = chapter_checks(notebook)
    if function not in checks:
        raise KeyError(f"no check {check_id!r}; {notebook} has {sorted(checks)}")
    return checks[function]
