"""A training command stopped from outside, as Ctrl-C or a batch system stops it."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

from course.layout import REPO


def stopped_run(command: list[str], run: Path, signal: int, timeout: float) -> tuple[int, str]:
    """Start ``command``, which trains into ``run``, and send it ``signal`` a second after its first step
    began; its exit code and standard error."""
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while not (run / "config.json").exists() and time.monotonic() < deadline:  # written just before the first step
        time.sleep(0.1)
    time.sleep(1.0)
    process.send_signal(signal)
    _, err = process.communicate(timeout=timeout)
    return process.returncode, err
