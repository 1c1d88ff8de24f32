"""`make test` runs the suite in two workers: a module's items, and the modules that read one session
build, must run in one worker, or the module fixtures and the builds are made twice."""
from __future__ import annotations

from tests.conftest import SHARED_BUILDS, work_unit


def test_every_module_that_reads_a_shared_build_is_listed_with_it(request):
    readers: dict[str, set[str]] = {}
    for item in request.session.items:
        for build in SHARED_BUILDS:
            if build in getattr(item, "fixturenames", ()):
                readers.setdefault(build, set()).add(item.nodeid.split("::")[0])
    for build, modules in readers.items():
        missing = modules - set(SHARED_BUILDS[build])
        assert not missing, f"add {sorted(missing)} to SHARED_BUILDS[{build!r}] in tests/conftest.py"


def test_a_module_is_one_unit_and_the_readers_of_a_build_are_one_unit():
    assert work_unit("tests/grader/test_grader.py::test_x[a]") == work_unit("tests/grader/test_grader.py::test_y")
    assert work_unit("tests/grader/test_grader.py::test_x") != work_unit("tests/grader/test_exchange.py::test_x")
    for build, (first, *others) in SHARED_BUILDS.items():
        assert {work_unit(f"{m}::t") for m in (first, *others)} == {build}
