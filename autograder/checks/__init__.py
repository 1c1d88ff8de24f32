"""The checks of every chapter, by id: "<notebook>.<function>" such as "attention.softmax"."""
from __future__ import annotations

import importlib

from ..framework import Check

#: notebook name -> module holding that notebook's checks
MODULES = {
    "prerequisites": "autograder.checks.prerequisites",
    "attention": "autograder.checks.attention",
}


def chapter_checks(notebook: str) -> dict[str, Check]:
    if notebook not in MODULES:
        raise KeyError(f"no checks for a notebook named {notebook!r}; known: {sorted(MODULES)}")
    module = importlib.import_module(MODULES[notebook])
    return {cls.function: cls() for cls in module.CHECKS}


def get(check_id: str) -> Check:
    notebook, _, function = check_id.partition(".")
    checks = chapter_checks(notebook)
    if function not in checks:
        raise KeyError(f"no check {check_id!r}; {notebook} has {sorted(checks)}")
    return checks[function]
