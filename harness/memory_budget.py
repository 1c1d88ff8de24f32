"""The memory one call of the learner's code may allocate, for a case whose point is its memory.

A case that asks for tiled attention on a long sequence must fail an answer that builds the whole
score matrix. What makes that sure is the worker's limit on each learner process (its data segment,
set before any learner code runs, so enforced by the kernel): the case is sized to need more than
that limit when the matrix is built. This budget lowers the soft limit for the call alone, to what
the process holds plus the case's budget, so that a notebook, which has no worker's limit, fails
the same answer as the grader does, and says so at once instead of filling the machine's memory.
Inside the learner's process it is advisory: code there can raise a soft limit back up to the hard one.

The limit counts what the process has mapped, not what it uses, so for the call the C allocator maps
every allocation of 1 MiB or more on its own and unmaps it when it is freed (:func:`mapped_alone`).
Left to itself, glibc raises its threshold for that as blocks are freed and may then keep freed blocks of
tens of megabytes in its heap without reusing them: a right answer that makes a fresh 32 MB block of
scores for each of 128 query blocks was measured holding 5 GB at its end. With the fixed threshold the
same answer held 0.4 GB, whatever ran before it, at the cost of the page faults of fresh memory.
"""
from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator

try:
    import resource
except ImportError:  # Windows: no limits to lower
    resource = None


#: glibc's mallopt parameter for the size from which an allocation is mapped on its own; its value during a
#: budgeted call, and afterwards: glibc's own threshold can no longer grow once set, so it is set where glibc's growth
#: stops (32 MiB on 64-bit), as a process that has freed large blocks has it, keeping later work as fast as before
_M_MMAP_THRESHOLD, _DURING, _AFTER = -3, 1 << 20, 32 << 20


@contextlib.contextmanager
def mapped_alone() -> Iterator[None]:
    """While the body runs, every allocation of 1 MiB or more is mapped on its own (glibc only)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library, as the worker's prctl is reached
    except (OSError, AttributeError):  # not glibc: nothing to set
        yield
        return
    mallopt(_M_MMAP_THRESHOLD, _DURING)
    try:
        yield
    finally:
        mallopt(_M_MMAP_THRESHOLD, _AFTER)


def _data_bytes() -> int | None:
    """The process's data segment now (VmData), which the data limit is compared with; None off Linux."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) << 10
    except OSError:
        pass
    return None


@contextlib.contextmanager
def memory_budget(mb: int | None) -> Iterator[None]:
    """While the body runs, the process may allocate at most ``mb`` MiB beyond what it holds now."""
    which = getattr(resource, "RLIMIT_DATA", None)
    held = _data_bytes() if mb and which is not None else None
    if held is None:
        yield
        return
    soft, hard = resource.getrlimit(which)
    budget = held + (mb << 20)
    if hard != resource.RLIM_INFINITY:
        budget = min(budget, hard)
    try:
        resource.setrlimit(which, (budget, hard))
    except (ValueError, OSError):
        yield
        return
    try:
        with mapped_alone():
            yield
    finally:
        resource.setrlimit(which, (soft, hard))
