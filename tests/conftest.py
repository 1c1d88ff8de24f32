"""Shared fixtures: where things are, and the notebooks every test reads."""
from __future__ import annotations

import os
import shutil
import socket
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from autograder.course_secret import ENV as SECRET_ENV
from course.layout import REPO, Chapter, chapters
from course.notebook_format import to_nbgrader

# The hidden cases are drawn from the course secret: the suite holds its own, public like the suite, and
# every process it starts (grading runs, kernels, shards) inherits it.
os.environ[SECRET_ENV] = "c0" * 32

# The checks run on small tensors: a second thread only contends with the other processes. The processes
# the suite starts (kernels, the website's build, grading runs, training commands) inherit one thread too:
# beside the other test worker, a second thread of theirs would only wait for a core.
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")

# The messages the suite reads are the English ones, whatever language the machine speaks (the tests of
# the Chinese messages choose it themselves).
os.environ["COURSE_LANG"] = "en"

PYTHON = sys.executable
CHAPTERS = chapters(REPO)
NOTEBOOKS = [c.stem for c in CHAPTERS]


def chapter_of(notebook: str) -> Chapter:
    return next(c for c in CHAPTERS if c.stem == notebook)


def free_port() -> int:
    """A TCP port on localhost that no one listens on now (for a server a test starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def source_path(notebook: str) -> Path:
    return chapter_of(notebook).source


def release_path(notebook: str) -> Path:
    return chapter_of(notebook).release


@pytest.fixture(autouse=True)
def _no_secret_fixed_by_an_earlier_test(monkeypatch):
    """A grading run started in this process fixes the course secret for the rest of it
    (course_secret.use); each test starts from the environment again, as a new process would."""
    import autograder.course_secret

    monkeypatch.setattr(autograder.course_secret, "_chosen", None)


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


#: the session builds that several modules read, and those modules: `make test`'s workers
#: (pytest-xdist) run them in one process, so that each build is made once
SHARED_BUILDS = {
    "site": ("tests/site/test_site.py", "tests/site/test_site_browser.py"),
    "fresh_release": ("tests/course/test_release.py", "tests/grader/test_nbgrader.py"),
}


#: the folders whose modules share no fixture wider than a test: each test function is a unit of its own,
#: so that a long module (the catalogue of mistakes runs for minutes) is spread over the workers instead of
#: ending the run on one of them while the other waits (tests/test_workers.py keeps them so)
SPLIT_FOLDERS = ("tests/checks/",)


def work_unit(nodeid: str) -> str:
    """What one worker runs together: a module, whose module fixtures then run once, or every module
    that reads the same session build; in :data:`SPLIT_FOLDERS`, a test function with its parameters."""
    module = nodeid.split("::")[0]
    if module.startswith(SPLIT_FOLDERS):
        return nodeid.split("[")[0]
    return next((build for build, modules in SHARED_BUILDS.items() if module in modules), module)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's --dist loadscope, by work unit rather than by module alone."""
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return ByWorkUnit(config, log)


def pytest_collection_modifyitems(config, items):
    """Whatever reads the built website is slow (the build executes every page): `-m "not slow"`
    leaves it out together with the items marked slow by hand.

    The work units that hold a slow item go first: the workers start on the long ones, and the many
    short units fill in behind them (`make test` keeps this order: --no-loadscope-reorder)."""
    for item in items:
        if "site" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    units: dict[str, list] = {}
    for item in items:
        units.setdefault(work_unit(item.nodeid), []).append(item)
    ordered = sorted(units.values(), key=lambda unit: not any(i.get_closest_marker("slow") for i in unit))
    items[:] = [item for unit in ordered for item in unit]


@pytest.fixture(scope="session")
def fresh_release() -> Path:
    """A scratch copy of the course with its release generated afresh (nbgrader's sources, exercises/,
    reference/ and the gradebook generate_assignment fills), made once for every test that needs one:
    the release check compares it with what is committed, and stock nbgrader grades a class in it."""
    from course.tools.release import fresh_build

    root = fresh_build(REPO)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    """The built website (its _build/html), built once for every test that reads it."""
    from tests.site.site_build import build_site

    return build_site(tmp_path_factory.mktemp("site"))
