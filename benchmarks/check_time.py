"""The time of `python -m autograder check` on chapter 4, beside another checkout's in the same run.

    python benchmarks/check_time.py [--before PYTHON] [--rounds 3] [--chapter ch04_encoder]

It writes two notebooks of the chapter: every function solved, and solved but for one wrong
`LayerNorm` (an uncatalogued mistake, so that the feedback looks for where the values part). It
times `check` on each with this checkout's interpreter and, with ``--before``, with the
interpreter of a checkout of the code before a change (run from that checkout), in alternating
rounds so that both see the same machine, and prints the fastest round of each and their ratio.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from course.layout import REPO, chapter  # noqa: E402
from course.notebook_format import complete, to_nbgrader, write_notebook  # noqa: E402

WRONG = ("LayerNorm", "+ self.eps", "+ 10 * self.eps")


def notebooks(assignment: str, folder: Path) -> dict[str, Path]:
    layout = chapter(assignment)
    release = nbformat.read(layout.release, as_version=4)
    solved = complete(release, to_nbgrader(layout.source))
    paths = {"solved": folder / "solved.ipynb", "one wrong": folder / "wrong.ipynb"}
    write_notebook(solved, paths["solved"])
    grade_id, old, new = WRONG
    cell = next(c for c in solved.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    if old not in cell.source:
        raise SystemExit(f"{grade_id}'s solution has no {old!r} to change")
    cell.source = cell.source.replace(old, new)
    write_notebook(solved, paths["one wrong"])
    return paths


def timed(python: str, cwd: Path, notebook: Path) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run([python, "-m", "autograder", "check", str(notebook)], cwd=cwd,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return time.perf_counter() - start, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="the interpreter of a checkout before the change")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chapter", default="ch04_encoder")
    args = parser.parse_args()
    runs = {"this checkout": (sys.executable, REPO)}
    if args.before:
        runs["before"] = (args.before, Path(args.before).resolve().parent.parent.parent)
    with tempfile.TemporaryDirectory() as tmp:
        paths = notebooks(args.chapter, Path(tmp))
        best: dict[tuple[str, str], float] = {}
        for _ in range(args.rounds):
            for name, (python, cwd) in runs.items():
                for kind, path in paths.items():
                    seconds, rc = timed(python, cwd, path)
                    expected = 0 if kind == "solved" else 1
                    if (rc == 0) != (expected == 0):
                        raise SystemExit(f"{name} on the {kind} notebook exited {rc}")
                    best[name, kind] = min(best.get((name, kind), float("inf")), seconds)
    print(f"`autograder check` on {args.chapter}, fastest of {args.rounds} rounds:")
    for kind in paths:
        line = "  ".join(f"{name} {best[name, kind]:6.2f} s" for name in runs)
        ratio = f"  ratio {best['this checkout', kind] / best['before', kind]:.2f}" if args.before else ""
        print(f"  {kind:10s} {line}{ratio}")


if __name__ == "__main__":
    main()
