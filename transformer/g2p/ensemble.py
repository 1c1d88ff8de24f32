"""Several models trained at once, one process each, and decoded as one: an ensemble.

    python -m transformer.g2p train --preset cpu        the CPU preset trains two (members=2, one thread each)

On a small CPU a second thread speeds one small model up little, while a second process of one
thread runs almost as fast as the first (benchmarks/RESULTS.md: 12.1 steps a second for one model
on two threads, 9.8 for each of two models side by side). So ``members=2`` trains two models from
two seeds in the same ten minutes, each in its own folder (``member-0/``, ``member-1/``: ordinary
runs, which ``--resume`` continues), and the run folder's ``checkpoint.pt`` holds both, decoded
as one: at each step the mean of their next-token probabilities. Beam search and greedy decoding
read an :class:`Ensemble` exactly as they read one model, through ``encode`` and ``decode``.
"""
from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

MEMBER_DIR = "member-{}"


class Ensemble(torch.nn.Module):
    """Models that read the same vocabularies, decoded as one: the mean of their next-token probabilities."""

    def __init__(self, members: Sequence[torch.nn.Module]) -> None:
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one model")
        self.members = torch.nn.ModuleList(members)

    def encode(self, src: torch.Tensor) -> list:
        return [m.encode(src) for m in self.members]

    def decode(self, memories: list, ys: torch.Tensor) -> torch.Tensor:
        """ys (B, T) -> log of the members' mean probabilities (B, T, V), which greedy decoding reads as logits."""
        log_probs = torch.stack([m.decode(memory, ys).float().log_softmax(-1) for m, memory in zip(self.members, memories)])
        return torch.logsumexp(log_probs, dim=0) - math.log(len(self.members))  # (B, T, V)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(src), tgt)


def member_dir(run_dir: str | Path, index: int) -> Path:
    return Path(run_dir) / MEMBER_DIR.format(index)


def member_config(config: Any, index: int) -> Any:
    """The ``index``-th member's own run: one model, the next seed, its own folder inside the run's."""
    return dataclasses.replace(config, members=1, seed=config.seed + index, run_dir=str(member_dir(config.run_dir, index)))


#: one member's training: (the run's settings, the member's index, resume, quiet) -> the exit status
TrainMember = Callable[[dict[str, Any], int, bool, bool], int]


def _member_process(train_member: TrainMember, settings: dict[str, Any], index: int, resume: bool, quiet: bool,
                    log: str) -> None:
    """One member's training, in its own process (started by :class:`Members`)."""
    os.setpgrp()  # the terminal's Ctrl-C reaches the parent alone, which passes on exactly one request
    if log:  # every member but the first writes its output to its folder instead of the terminal
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
    status = train_member(settings, index, resume, quiet)
    sys.stdout.flush()
    sys.exit(status)


class Members:
    """The member processes of one run: started together, told together to stop, waited for together.

    ``train_member`` trains one member in its process: a function of a module (the spawned interpreter imports
    it by name), so that this module needs nothing of the task's."""

    def __init__(self, config: Any, resume: bool, quiet: bool, train_member: TrainMember) -> None:
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no torch state copied by a fork
        self.processes = []
        for i in range(config.members):
            log = "" if i == 0 else str(member_dir(config.run_dir, i) / "train.log")
            self.processes.append(context.Process(
                target=_member_process, args=(train_member, asdict(config), i, resume, quiet or i > 0, log),
                name=MEMBER_DIR.format(i)))

    def _forward(self, signum: int, frame: Any) -> None:
        self.stopped = True
        for process in self.processes:
            if process.pid is not None and process.exitcode is None:
                os.kill(process.pid, signum)

    def run(self) -> list[int | None]:
        """Start every member, pass Ctrl-C and SIGTERM on to them, and wait; their exit codes (None: never
        started, since a stop came first)."""
        self.stopped = False
        previous = {}
        if threading.current_thread() is threading.main_thread():  # only there can signals be caught
            previous = {s: signal.signal(s, self._forward) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            for process in self.processes:
                if not self.stopped:
                    process.start()
            for process in self.processes:
                if process.pid is not None:
                    process.join()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        return [process.exitcode for process in self.processes]
