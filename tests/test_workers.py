"""`make test` runs the suite in two workers: a module's items, and the modules that read one session
build, must run in one worker, or the module fixtures and the builds are made twice; a module split
into its test functions must have no such fixture."""
from __future__ import annotations

import pytest

from tests.conftest import SHARED_BUILDS, SPLIT_FOLDERS, work_unit


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


#: session fixtures that only read a file when first asked (tests/conftest.py)
CHEAP_TO_MAKE_TWICE = ("source_nb", "release_nb")


def test_a_split_module_has_no_fixture_wider_than_a_test(request):
    split = [item for item in request.session.items if item.nodeid.startswith(SPLIT_FOLDERS)]
    if not split:
        pytest.skip("run with the tests of the split folders")
    shared = set()
    for item in split:
        for name, definitions in item._fixtureinfo.name2fixturedefs.items():
            fixture = definitions[-1]
            # pytest's own (tmp_path_factory, behind every tmp_path) and the notebooks' lazy caches cost nothing
            # to make in each worker
            cheap = fixture.func.__module__.startswith(("_pytest", "xdist")) or name in CHEAP_TO_MAKE_TWICE
            if fixture.scope != "function" and not cheap:
                shared.add(f"{item.nodeid.split('::')[0]}: {name} ({fixture.scope})")
    assert not shared, f"these would be made once per worker; leave the module out of SPLIT_FOLDERS: {sorted(shared)}"


def test_a_split_module_is_one_unit_per_test_function():
    assert work_unit("tests/checks/test_checks.py::test_x[a]") == work_unit("tests/checks/test_checks.py::test_x[b]")
    assert work_unit("tests/checks/test_checks.py::test_x[a]") != work_unit("tests/checks/test_checks.py::test_y")
