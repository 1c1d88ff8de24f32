"""Which CPU a figure was measured on: every benchmark prints it beside its figures."""
from __future__ import annotations

import platform
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")


def cpu() -> tuple[str, int]:
    """The CPU's model name and its number of logical CPUs, as Linux reports them; elsewhere, the
    platform's name for the processor and 0."""
    names = ([line.split(":", 1)[1].strip() for line in CPUINFO.read_text().splitlines() if line.startswith("model name")]
             if CPUINFO.is_file() else [])
    if not names:
        return platform.processor() or platform.machine(), 0
    return names[0], len(names)


def cpu_line() -> str:
    """'AMD EPYC 9B14 (2 logical CPUs)'."""
    name, logical = cpu()
    return f"{name} ({logical} logical CPUs)" if logical else name
