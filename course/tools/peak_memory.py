"""The peak memory and the time of one call, as the pages and the benchmarks measure them on a CPU.

PyTorch keeps no count of what it allocates on the CPU, so the process's resident memory is sampled
by a thread while the call runs, every half millisecond, and the call's figure is the peak above
what was resident before it. For the count to follow what is live, the C allocator maps every
block of 1 MiB or more on its own and unmaps it when it is freed (:func:`harness.memory_budget.mapped_alone`):
the blocks that matter here (scores, their exponentials) are far larger. The time is taken from a
second call without the sampler beside it.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.memory_budget import mapped_alone

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _resident() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE


@dataclass(frozen=True)
class Measured:
    peak_bytes: int  # resident memory above what was resident before the call, at its highest
    seconds: float  # the call's wall-clock time, measured without the sampler


def measure(fn: Callable[..., Any], *args: Any) -> Measured:
    """Call ``fn(*args)`` twice: once to time it, once to sample its peak memory."""
    with mapped_alone():
        start = time.perf_counter()
        fn(*args)
        seconds = time.perf_counter() - start
        done, peak = threading.Event(), [0]
        baseline = _resident()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], _resident())
                done.wait(0.0005)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            fn(*args)
        finally:
            done.set()
            sampler.join()
        peak[0] = max(peak[0], _resident())
    return Measured(max(0, peak[0] - baseline), seconds)
