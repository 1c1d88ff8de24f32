"""benchmarks/feedback_mutants.py and benchmarks/check_time.py, rehearsed in seconds."""
from __future__ import annotations

import ast
import sys

import nbformat

from course.layout import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import check_time  # noqa: E402  (benchmarks/check_time.py)
import feedback_mutants  # noqa: E402  (benchmarks/feedback_mutants.py)


def test_each_mutant_changes_one_line_and_still_parses():
    source = "def f(x, y):\n    z = x + 2 * y\n    return torch.cat([z, -x], 1)\n"
    found = list(feedback_mutants.mutants(source))
    kinds = {description for description, _, _ in found}
    assert {"Add -> Sub", "Mult -> Div", "dropped right operand", "2 -> 3", "dropped unary USub",
            "swapped first two arguments"} <= kinds
    before = [b.strip() for b in ast.unparse(ast.parse(source)).splitlines()]
    for description, line, text in found:
        after = [a.strip() for a in text.splitlines()]
        assert line in after and line not in before, description
        assert sum(a != b for a, b in zip(before, after)) == 1, description


def test_the_mutant_table_counts_every_failing_mutant(capsys):
    feedback_mutants.run(["attention"], 2, show=False)
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("attention"))
    named, located, plain = (int(n) for n in row.split()[1:4])
    assert named + located + plain > 0, out


def test_the_timed_notebooks_are_one_solved_and_one_with_a_wrong_layernorm(tmp_path):
    paths = check_time.notebooks("ch04_encoder", tmp_path)
    solved, wrong = (nbformat.read(paths[k], as_version=4) for k in ("solved", "one wrong"))
    differing = [a.source for a, b in zip(solved.cells, wrong.cells) if a.source != b.source]
    assert len(differing) == 1 and check_time.WRONG[1] in differing[0]
