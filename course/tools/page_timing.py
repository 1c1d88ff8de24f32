"""The timings the website's pages measure, and hold their text to.

A page that says "the prefix passes lose at every length" asserts it of the figures it has just
measured, on whatever machine builds the site, and that machine may be busy. Another program can
only slow a run down, never speed it up, so the fastest of several runs is the one nearest the
run's undisturbed cost, and more runs can only bring it nearer. `fastest` therefore takes the runs
in turns (a busy moment then hurts them alike), keeps each one's fastest time, and, when it is told
the claim the page makes, adds rounds while the claim is false of the times so far. A claim that is
true of a quiet machine is not refused for one busy minute; a false one stays false, since no number
of rounds makes a run faster than its undisturbed cost.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping
from typing import TypeVar

import torch

K = TypeVar("K", bound=Hashable)


def fastest(runs: Mapping[K, Callable[[], object]],
            holds: Callable[[dict[K, float]], bool] | None = None, *,
            rounds: int = 3, most_rounds: int = 30, threads: int | None = 1, warm_up: bool = True,
            clock: Callable[[], float] = time.perf_counter) -> dict[K, float]:
    """Each run's fastest time in seconds, over `rounds` rounds or, while `holds` is false, up to
    `most_rounds`.

    Every run is called once untimed first (the first call pays for allocations and caches);
    warm_up=False skips that, for runs the page has just called itself.
    threads: torch's thread count while timing (one by default: a fair comparison, and one that
    other programs disturb less); None leaves it as it is. It is restored afterwards.
    """
    if not runs:
        raise ValueError("fastest needs at least one run to time")
    if not 1 <= rounds <= most_rounds:
        raise ValueError(f"need 1 <= rounds <= most_rounds, got {rounds} and {most_rounds}")
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        for run in runs.values() if warm_up else ():
            run()
        best = {key: float("inf") for key in runs}
        for done in range(1, most_rounds + 1):
            for key, run in runs.items():
                start = clock()
                run()
                best[key] = min(best[key], clock() - start)
            if done >= rounds and (holds is None or holds(best)):
                break
        return best
    finally:
        torch.set_num_threads(before)
