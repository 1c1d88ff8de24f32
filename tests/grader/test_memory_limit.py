"""The memory limit caps what learner code allocates, not the address space a torch build reserves."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_DATA counts mappings on Linux")

PROBE = textwrap.dedent("""
    import mmap, types
    from harness import worker
    worker._limit(types.SimpleNamespace(memory_mb=512, cpu_seconds=60, file_mb=16, processes=0))
    # What a CUDA build does as it loads: reserve far more address space than it will use.
    reserved = mmap.mmap(-1, 16 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=0)  # PROT_NONE
    print("reserved", len(reserved) >> 30, "GB")
    import torch  # the worker's own import, under the limit
    small = torch.ones(1 << 20)
    try:
        hog = bytearray(1 << 30)
    except MemoryError:
        print("refused 1 GB")
""")


def test_reserving_address_space_is_allowed_and_allocating_beyond_the_limit_is_not():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "reserved 16 GB" in done.stdout and "refused 1 GB" in done.stdout, done.stdout
