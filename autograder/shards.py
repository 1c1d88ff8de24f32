"""Which learners one grading run takes: named ones, or a stable share of the class.

``--shard K/N`` takes the learners whose id hashes to K modulo N (K from 0 to N-1), so N runs,
on as many machines, grade every learner exactly once, whatever order they start in and however
the class grows (a new learner joins one shard; nobody moves). The batch system that starts the
runs may give the index instead: a Kubernetes Indexed Job sets ``JOB_COMPLETION_INDEX``, a Slurm
job array ``SLURM_ARRAY_TASK_ID`` and ``SLURM_ARRAY_TASK_COUNT``. ``--shard N`` takes the index from
there, as it is (the array counted from 0, ``--array=0-7`` for 8 shards), so that one task run again
alone (``sbatch --array=3``) is still shard 3 of 8; ``--shard env`` takes the count from Slurm too, and
counts the index from ``SLURM_ARRAY_TASK_MIN``: right for a whole array only, as an array of one task
is a class of one shard.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass


class ShardError(ValueError):
    """A shard or learner selection that cannot be honoured; the message says why."""


def shard_of(learner: str, count: int) -> int:
    """The shard (0 to count-1) a learner belongs to: the same on every machine and in every run."""
    return int.from_bytes(hashlib.sha256(learner.encode()).digest()[:8], "big") % count


@dataclass(frozen=True)
class Shard:
    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def __contains__(self, learner: str) -> bool:
        return shard_of(learner, self.count) == self.index


def _integer(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ShardError(f"{what} must be a whole number, not {text!r}") from None


def _index_from(env: Mapping[str, str], from_first: bool = False) -> tuple[int, str]:
    """The shard index the batch system gives; a Slurm task's counted from the array's first with ``from_first``."""
    if "JOB_COMPLETION_INDEX" in env:
        return _integer(env["JOB_COMPLETION_INDEX"], "JOB_COMPLETION_INDEX"), "JOB_COMPLETION_INDEX"
    if "SLURM_ARRAY_TASK_ID" in env:
        first = _integer(env.get("SLURM_ARRAY_TASK_MIN", "0"), "SLURM_ARRAY_TASK_MIN") if from_first else 0
        return _integer(env["SLURM_ARRAY_TASK_ID"], "SLURM_ARRAY_TASK_ID") - first, "SLURM_ARRAY_TASK_ID"
    raise ShardError("no shard index in the environment: neither JOB_COMPLETION_INDEX (a Kubernetes Indexed "
                     "Job) nor SLURM_ARRAY_TASK_ID (a Slurm job array) is set; give it as --shard K/N")


def parse_shard(spec: str, env: Mapping[str, str] | None = None) -> Shard:
    """``K/N``, ``N`` (the index from the batch system) or ``env`` (both from a Slurm array)."""
    env = os.environ if env is None else env
    spec = spec.strip()
    if "/" in spec:
        index_text, count_text = spec.split("/", 1)
        index, source = _integer(index_text, "the shard index"), "--shard"
        count = _integer(count_text, "the number of shards")
    elif spec == "env":
        index, source = _index_from(env, from_first=True)
        if "SLURM_ARRAY_TASK_COUNT" not in env:
            raise ShardError("--shard env takes the number of shards from SLURM_ARRAY_TASK_COUNT, which is not set; "
                             "give it as --shard N (a Kubernetes Job's completions)")
        count = _integer(env["SLURM_ARRAY_TASK_COUNT"], "SLURM_ARRAY_TASK_COUNT")
    else:
        count = _integer(spec, "the number of shards")
        index, source = _index_from(env)
    if count < 1:
        raise ShardError(f"the number of shards must be at least 1, not {count}")
    if not 0 <= index < count:
        raise ShardError(f"shard index {index} (from {source}) is outside 0..{count - 1}: shards are counted from 0")
    return Shard(index, count)


def parse_learners(spec: str) -> list[str]:
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if not names:
        raise ShardError("--learners needs at least one learner id, e.g. --learners alice,bob")
    return list(dict.fromkeys(names))


def select(learners: list[str], named: list[str] | None = None, shard: Shard | None = None) -> list[str]:
    """The learners a run grades, in the order given. A named learner with no submission is an error,
    so that a typo is not taken for a learner who handed nothing in."""
    chosen = list(learners)
    if named is not None:
        missing = [n for n in named if n not in learners]
        if missing:
            raise ShardError(f"no submission from {', '.join(missing)} (known: {len(learners)} learners)")
        chosen = [n for n in chosen if n in set(named)]
    if shard is not None:
        chosen = [n for n in chosen if n in shard]
    return chosen
