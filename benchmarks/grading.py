"""Grading at scale, and against `nbgrader autograde`, on chapter 2.

    python benchmarks/grading.py [--class-size 16] [--nbgrader] [--submissions 40] [--jobs 2] [--before PYTHON] [--rounds 1]

``--before`` names the interpreter of a checkout of the code before a change (one whose path
holds that checkout): with ``--nbgrader`` the same class is graded with it too, in rounds
alternating with this code's, and the fastest round of each is compared.

In one run, on copies of one course directory (so that the figures are comparable on a noisy
machine), it grades the same class of ``--class-size`` learners:

- in one process (``grade --jobs 2``);
- in two shards at once (``grade --shard 0/2`` and ``--shard 1/2``, ``--jobs 1`` each, the same
  two cores), into one SQLite gradebook, which must then equal the one-process gradebook;
- in one process with ``--jobs 1`` over four learners, sampling the memory of the grader's whole
  process tree: the grader itself, and the sum over its sandboxed children (bubblewrap, the
  submission's worker, its learner processes) of their resident size (RSS, which counts pages
  the children share once per process) and of their proportional share (PSS, which does not).

It prints the time per submission of each, the peak memory, and the extrapolation to a class of
1,000. With ``--nbgrader`` it also grades ``--submissions`` learners with this engine and with
`nbgrader autograde` and prints both times, their ratio, and whether the two agree on every
learner's score where they should (they differ by design where a wrong softmax also sinks
attention under nbgrader, which charges the mistake twice).
"""
from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import nbformat

# A script run by its path, perhaps by another checkout's interpreter (--before): the packages of
# the checkout it lives in come first; from there on course.layout says where everything is.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from course.layout import REPO, chapter  # noqa: E402
from course.notebook_format import complete, to_nbgrader, write_notebook  # noqa: E402
from course.tools.release import _stage, build  # noqa: E402

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


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    return children


def _memory_kb(pid: int, field: str, source: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/{source}").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


class TreeMemory(threading.Thread):
    """The peak memory of a process and of all its descendants, sampled every 0.2 s."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.done = pid, threading.Event()
        self.grader_rss = self.children_rss = self.children_pss = self.processes = 0

    def run(self) -> None:
        while not self.done.is_set():
            tree, below = _children(), []
            frontier = list(tree.get(self.pid, []))
            while frontier:
                pid = frontier.pop()
                below.append(pid)
                frontier += tree.get(pid, [])
            self.grader_rss = max(self.grader_rss, _memory_kb(self.pid, "VmRSS", "status"))
            self.children_rss = max(self.children_rss, sum(_memory_kb(p, "VmRSS", "status") for p in below))
            self.children_pss = max(self.children_pss, sum(_memory_kb(p, "Pss", "smaps_rollup") for p in below))
            self.processes = max(self.processes, len(below))
            self.done.wait(0.2)


def _env() -> dict:
    return dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))


def _grade(root: Path, *options: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "autograder", "grade", ASSIGNMENT, "--root", str(root), *options],
                            cwd=root, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _finish(*runs: subprocess.Popen) -> None:
    for run in runs:
        if run.wait() != 0:
            raise SystemExit(f"a grading run failed (exit status {run.returncode})")


def gradebook_contents(root: Path) -> dict:
    from autograder.outputs.gradebook import open_gradebook

    with open_gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        records = {r.learner: (r.result.score, [(o.grade_id, o.points) for o in r.result.outcomes])
                   for r in gradebook.records(ASSIGNMENT)}
    return {"records": records, "nbgrader": nbgrader_scores(root)}


def scale(base: Path, size: int) -> None:
    kinds = make_class(base, size)
    one, shards, memory = (Path(tempfile.mkdtemp()) / name for name in ("one", "shards", "memory"))
    for copy in (one, shards, memory):
        shutil.copytree(base, copy)

    start = time.perf_counter()
    _finish(_grade(one, "--jobs", "2"))
    t_one = time.perf_counter() - start
    start = time.perf_counter()
    _finish(_grade(shards, "--jobs", "1", "--shard", "0/2"), _grade(shards, "--jobs", "1", "--shard", "1/2"))
    t_shards = time.perf_counter() - start
    same = gradebook_contents(one) == gradebook_contents(shards)
    graded = len(gradebook_contents(shards)["records"])

    learners = sorted(kinds)[:4]
    run = _grade(memory, "--jobs", "1", "--learners", ",".join(learners))
    sampler = TreeMemory(run.pid)
    sampler.start()
    _finish(run)
    sampler.done.set()
    sampler.join()

    print(f"{size} submissions of {ASSIGNMENT}, {os.cpu_count()} cores (each run includes its self-check)")
    print(f"one process, --jobs 2:           {t_one:7.1f} s  {t_one / size:5.2f} s per submission")
    print(f"two shards at once, --jobs 1 each: {t_shards:5.1f} s  {t_shards / size:5.2f} s per submission")
    print(f"gradebooks identical: {same} ({graded} of {size} learners in the sharded one)")
    print(f"memory, one submission at a time (--jobs 1, {len(learners)} submissions), peaks:")
    print(f"  the grader's own RSS:             {sampler.grader_rss / 1024:7.0f} MB")
    print(f"  its sandboxed children, RSS summed: {sampler.children_rss / 1024:5.0f} MB over up to "
          f"{sampler.processes} processes")
    print(f"  its sandboxed children, PSS summed: {sampler.children_pss / 1024:5.0f} MB (shared pages counted once)")
    per = t_one / size
    print(f"1,000 learners, one chapter: {1000 * per / 60:.0f} min on one such machine; "
          f"8 chapters: {8 * 1000 * per / 3600:.1f} h; in 8 shards on 8 machines: {1000 * per / 8 / 60:.0f} min a chapter")
    for folder in (one.parent, shards.parent, memory.parent):
        shutil.rmtree(folder, ignore_errors=True)


def against_nbgrader(base: Path, submissions: int, jobs: int, before_python: str | None = None, rounds: int = 1) -> None:
    kinds = make_class(base, submissions)
    ours, theirs = Path(tempfile.mkdtemp()) / "ours", Path(tempfile.mkdtemp()) / "nbgrader"
    before = Path(tempfile.mkdtemp()) / "before"
    shutil.copytree(base, theirs)

    grade = ["-m", "autograder", "grade", ASSIGNMENT, "--jobs", str(jobs)]
    times: dict[str, list[float]] = {"ours": [], "before": []}
    for _ in range(max(rounds, 1)):
        for who, python, root in (("ours", sys.executable, ours), ("before", before_python, before)):
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

    print(f"{submissions} submissions of {ASSIGNMENT}, {os.cpu_count()} cores")
    print(f"this engine (--jobs {jobs}, sandboxed): {t_ours:7.1f} s")
    if times["before"]:
        t_before = min(times["before"])
        print(f"the code before (--before):         {t_before:7.1f} s")
        print(f"this engine / the code before: {t_ours / t_before:.2f}x (per submission "
              f"{t_ours / submissions:.2f} s against {t_before / submissions:.2f} s)")
    print(f"nbgrader autograde:                 {t_theirs:7.1f} s")
    print(f"speed-up: {t_theirs / t_ours:.2f}x")
    print(f"scores agree on {agree} of {comparable} comparable submissions")
    wrong = [k for k in kinds if kinds[k] == "wrong_softmax"]
    if wrong:
        k = wrong[0]
        print(f"a wrong softmax: this engine {our_scores[k]:g}, nbgrader {their_scores[k]:g} "
              "(nbgrader also fails the attention that uses it)")
    for folder in (ours.parent, theirs.parent, before.parent):
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--class-size", type=int, default=16, help="learners in the scale benchmark (default 16)")
    parser.add_argument("--nbgrader", action="store_true", help="also compare with nbgrader autograde")
    parser.add_argument("--submissions", type=int, default=40, help="learners in the nbgrader comparison")
    parser.add_argument("--jobs", type=int, default=2, help="--jobs of the nbgrader comparison")
    parser.add_argument("--before", help="the Python of a checkout of the code before a change, to grade with too")
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds of this code and --before")
    args = parser.parse_args()
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")

    base = _stage(REPO)
    build(base, [ASSIGNMENT])
    scale(base, args.class_size)
    if args.nbgrader:
        shutil.rmtree(base / "submitted")
        against_nbgrader(base, args.submissions, args.jobs, args.before, args.rounds)
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
