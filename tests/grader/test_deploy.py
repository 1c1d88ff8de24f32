"""The batch-system examples in deploy/ grade a class in shards that together cover it once.

The Slurm script runs for real: two array tasks at once, as Slurm would start them, grade a
small class into one gradebook, which then holds every learner exactly once with the right
score, and every file they write is the one a single run writes, but for the times. The Kubernetes Job's command is the grade command's, and its indices cover the class.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autograder import __main__ as cli
from autograder.outputs.gradebook import open_gradebook
from autograder.sandbox import sandboxed
from autograder.shards import parse_shard, select
from course.layout import AUTOGRADED, FEEDBACK, GRADES, SUBMITTED, gradebook_url
from tests.conftest import REPO
from tests.grader import small_class as sc

CLASS = {"alice": "solved", "bob": "untouched", "carol": "wrong_softmax", "dave": "solved"}


def test_the_kubernetes_job_runs_the_grade_command_over_every_index():
    job = yaml.safe_load((REPO / "deploy" / "grade-job.yaml").read_text())
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    container = spec["template"]["spec"]["containers"][0]
    command = container["command"]
    assert command[1:4] == ["-m", "autograder", "grade"]
    assert any(e["name"] == "GRADEBOOK_URL" for e in container["env"])
    assert not any("GRADEBOOK_URL" in a for a in command)  # never on a command line: read from the environment
    args = cli.parser().parse_args(command[3:])
    learners = [f"learner{i:03d}" for i in range(100)]
    shards = [parse_shard(args.shard, {"JOB_COMPLETION_INDEX": str(i)}) for i in range(spec["completions"])]
    assert sorted(sum((select(learners, shard=s) for s in shards), [])) == learners


@pytest.mark.skipif(not sandboxed(), reason="bubblewrap is not installed (apt-get install bubblewrap)")
def test_two_slurm_array_tasks_grade_the_class_once(tmp_path):
    root = sc.course(tmp_path / "course")
    for learner, kind in CLASS.items():
        sc.hand_in(root, learner, kind)
    url = gradebook_url(root)
    tasks = []
    for task in (0, 1):
        env = dict(sc.ENV, SLURM_ARRAY_TASK_ID=str(task), SLURM_ARRAY_TASK_MIN="0", SLURM_ARRAY_TASK_COUNT="2",
                   SLURM_CPUS_PER_TASK="1", COURSE_DIR=str(root), GRADEBOOK_URL=url, PYTHON=sys.executable, SHARDS="2")
        tasks.append(subprocess.Popen(["bash", str(REPO / "deploy" / "grade.sbatch"), sc.ASSIGNMENT], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [t.communicate(timeout=900) for t in tasks]
    assert [t.returncode for t in tasks] == [0, 0], outputs
    assert all("shard" in err for _, err in outputs)
    # the task that ends last finds every learner graded, and says so
    assert any(f"{len(CLASS)} learners submitted, {len(CLASS)} graded, 0 not graded (the class is complete)" in out
               for out, _ in outputs), outputs
    # After a run with --db, it says which gradebook nbgrader's own commands read, and how to change it.
    assert all("formgrader and generate_feedback read the same gradebook through nbgrader_config.py" in out
               for out, _ in outputs)
    with open_gradebook(url) as gradebook:
        scores = {r.learner: r.result.score for r in gradebook.records(sc.ASSIGNMENT)}
    assert scores == {learner: sc.SCORES[kind] for learner, kind in CLASS.items()}
    assert os.access(REPO / "deploy" / "grade.sbatch", os.X_OK)

    # Every file the shards wrote is the one a single run writes from the same submissions, but for the times.
    one = sc.course(tmp_path / "one run")
    shutil.copytree(root / SUBMITTED, one / SUBMITTED)
    done = sc.grade(one)
    assert done.returncode == 0, done.stderr
    assert _written(root) == _written(one)


def _written(root: Path) -> dict[str, str]:
    """Every file of the class's data a run writes (feedback pages, autograded copies, the CSV), times left out."""
    out = {}
    for folder in (FEEDBACK, AUTOGRADED, GRADES):
        for path in sorted((root / folder).rglob("*")):
            if path.is_file():
                text = re.sub(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d(\.\d+)?)?( UTC)?", "<time>", path.read_text())
                out[str(path.relative_to(root))] = text
    assert out, f"nothing written under {root}"
    return out


def test_the_slurm_scripts_shard_count_is_its_arrays_size():
    # the count is the script's own, so that one task run again alone is still its shard of the class
    script = (REPO / "deploy" / "grade.sbatch").read_text()
    first, last = (int(n) for n in script.split("#SBATCH --array=")[1].split()[0].split("-"))
    assert first == 0 and f'--shard "${{SHARDS:-{last + 1}}}"' in script
