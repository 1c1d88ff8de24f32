"""Grade 40 submissions of chapter 2 with this course's engine and with `nbgrader autograde`.

    python benchmarks/grading.py [--submissions 40] [--jobs 2] [--before PYTHON] [--rounds 1]

``--before`` names the interpreter of a checkout of the code before a change (one whose path
holds that checkout): the same class is graded with it too, in rounds alternating with this
code's, and the fastest round of each is compared.

Both graders get the same class in the same run (copies of one course directory), so their
wall times are comparable on a noisy machine. Prints both times, their ratio, and whether the
two agree on every learner's score where they should (they differ by design where a wrong
softmax also sinks attention under nbgrader, which charges the mistake twice).
"""
from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from course.layout import chapter  # noqa: E402
from course.notebook_format import complete, to_nbgrader, write_notebook  # noqa: E402
from coursetools.release import _stage, build  # noqa: E402

ASSIGNMENT = "ch02_attention"


def make_class(root: Path, count: int) -> dict[str, str]:
    """Write `count` submissions: solved, untouched, and solved but for one wrong function."""
    layout = chapter(ASSIGNMENT, root)
    release = nbformat.read(layout.release, as_version=4)
    source = to_nbgrader(layout.source)
    kinds = {}
    for i in range(count):
        kind = ("solved", "untouched", "wrong_variance", "wrong_softmax")[i % 4]
        nb = release if kind == "untouched" else complete(release, source)
        if kind.startswith("wrong_"):
            grade_id = {"wrong_variance": "score_variance", "wrong_softmax": "softmax"}[kind]
            cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
            cell.source = cell.source.replace("return ", "return 2 * ", 1)
        learner = f"learner{i:02d}"
        kinds[learner] = kind
        write_notebook(nb, root / "submitted" / learner / ASSIGNMENT / layout.release.name)
    return kinds


def timed(command: list[str], cwd: Path) -> float:
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def nbgrader_scores(root: Path) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        return {s.student.id: s.score for s in gb.assignment_submissions(ASSIGNMENT)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--submissions", type=int, default=40)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--before", help="the Python of a checkout of the code before a change, to grade with too")
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds of this code and --before")
    args = parser.parse_args()
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")

    base = _stage(REPO)
    build(base, [ASSIGNMENT])
    kinds = make_class(base, args.submissions)
    ours, theirs = Path(tempfile.mkdtemp()) / "ours", Path(tempfile.mkdtemp()) / "nbgrader"
    shutil.copytree(base, ours)
    shutil.copytree(base, theirs)

    grade = ["-m", "autograder", "grade", ASSIGNMENT, "--jobs", str(args.jobs)]
    before = Path(tempfile.mkdtemp()) / "before"
    times: dict[str, list[float]] = {"ours": [], "before": []}
    for _ in range(max(args.rounds, 1)):
        for who, python, root in (("ours", sys.executable, ours), ("before", args.before, before)):
            if python is None:
                continue
            shutil.rmtree(root, ignore_errors=True)
            shutil.copytree(base, root)
            times[who].append(timed([python, *grade, "--root", str(root)], root))
    t_ours = min(times["ours"])
    t_theirs = timed([sys.executable, "-m", "nbgrader", "autograde", ASSIGNMENT, "--create", "--force"], theirs)

    with (ours / "grades" / f"{ASSIGNMENT}.csv").open() as f:
        our_scores = {r["learner"]: float(r["score"]) for r in csv.DictReader(f)}
    their_scores = nbgrader_scores(theirs)
    agree = sum(our_scores[k] == their_scores[k] for k in kinds if kinds[k] != "wrong_softmax")
    comparable = sum(1 for k in kinds if kinds[k] != "wrong_softmax")

    print(f"{args.submissions} submissions of {ASSIGNMENT}, {os.cpu_count()} cores")
    print(f"this engine (--jobs {args.jobs}, sandboxed): {t_ours:7.1f} s")
    if times["before"]:
        t_before = min(times["before"])
        print(f"the code before (--before):         {t_before:7.1f} s")
        print(f"this engine / the code before: {t_ours / t_before:.2f}x (per submission "
              f"{t_ours / args.submissions:.2f} s against {t_before / args.submissions:.2f} s)")
    print(f"nbgrader autograde:                 {t_theirs:7.1f} s")
    print(f"speed-up: {t_theirs / t_ours:.2f}x")
    print(f"scores agree on {agree} of {comparable} comparable submissions")
    wrong = [k for k in kinds if kinds[k] == "wrong_softmax"]
    if wrong:
        k = wrong[0]
        print(f"a wrong softmax: this engine {our_scores[k]:g}, nbgrader {their_scores[k]:g} "
              "(nbgrader also fails the attention that uses it)")
    for folder in (base, ours.parent, theirs.parent, before.parent):
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
