"""Shared fixtures: where things are, and the notebooks every test reads."""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest
import torch

from coursetools.notebooks import to_nbgrader
from coursetools.release import sources

# The checks run on small tensors: a second thread only contends with the other processes.
torch.set_num_threads(1)

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
SOURCES = sources(REPO)
NOTEBOOKS = [p.stem for p in SOURCES]


def source_path(notebook: str) -> Path:
    return next(p for p in SOURCES if p.stem == notebook)


def release_path(notebook: str) -> Path:
    src = source_path(notebook)
    return REPO / "exercises" / src.parent.name / f"{notebook}.ipynb"


@pytest.fixture(scope="session")
def source_nb():
    cache = {}

    def load(notebook: str):
        if notebook not in cache:
            cache[notebook] = to_nbgrader(source_path(notebook))
        return cache[notebook]

    return load


@pytest.fixture(scope="session")
def release_nb():
    cache = {}

    def load(notebook: str):
        if notebook not in cache:
            cache[notebook] = nbformat.read(release_path(notebook), as_version=4)
        return cache[notebook]

    return load
