"""The batch-system examples in deploy/ grade a class in shards that together cover it once.

The Slurm script runs for real, under a one-node Slurm cluster on this machine (tests/grader/slurm.py):
an array of two tasks grades a small class into one gradebook, which then holds every learner exactly once
with the right score; every file they write is the one a single run writes, but for the times; and one task
submitted again alone is still its shard. The Kubernetes Job's command is the grade command's, and its indices cover the class.
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
from tests.grader.slurm import slurm_cluster, wait_for

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
def test_the_slurm_array_grades_the_class_once_and_a_task_run_again_is_its_own_shard(tmp_path):
    root = sc.course(tmp_path / "course")
    for learner, kind in CLASS.items():
        sc.hand_in(root, learner, kind)
    url = gradebook_url(root)
    script = REPO / "deploy" / "grade.sbatch"
    assert os.access(script, os.X_OK)
    with slurm_cluster() as cluster:
        env = dict(sc.ENV, SLURM_CONF=cluster["SLURM_CONF"], GRADEBOOK_URL=url, PYTHON=sys.executable, SHARDS="2")

        def sbatch(array: str) -> list[str]:
            """The array run as a cluster runs it, from the course directory; its tasks' logs, read."""
            before = set(root.glob("grade-*.log"))
            submitted = subprocess.run(["sbatch", "--parsable", f"--array={array}", "--cpus-per-task=1",
                                        "--export=ALL", str(script), sc.ASSIGNMENT], cwd=root, env=env,
                                       capture_output=True, text=True, timeout=60)
            assert submitted.returncode == 0, submitted.stderr
            states = wait_for(submitted.stdout.strip().split(";")[0], env)
            logs = sorted(set(root.glob("grade-*.log")) - before)
            assert set(states) == {"COMPLETED"}, (states, "".join(p.read_text() for p in logs))
            return [p.read_text() for p in logs]

        outputs = sbatch("0-1")
        assert len(outputs) == 2 and all("shard" in out for out in outputs), outputs
        # the task that ends last finds every learner graded, and says so
        assert any(f"{len(CLASS)} learners submitted, {len(CLASS)} graded, 0 not graded (the class is complete)"
                   in out for out in outputs), outputs
        # it says which gradebook nbgrader's own commands read, and how
        assert all("formgrader and generate_feedback read the same gradebook through nbgrader_config.py" in out
                   for out in outputs)
        with open_gradebook(url) as gradebook:
            scores = {r.learner: r.result.score for r in gradebook.records(sc.ASSIGNMENT)}
        assert scores == {learner: sc.SCORES[kind] for learner, kind in CLASS.items()}
        # one task run again alone is still its shard of the class, and finds its learners graded
        (again,) = sbatch("1")
        assert "shard 1/2:" in again and "graded already and unchanged since: skipped" in again, again

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
