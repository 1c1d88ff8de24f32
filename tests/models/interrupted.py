"""A training command stopped from outside, as Ctrl-C or a batch system stops it."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

from course.layout import REPO


def stopped_run(command: list[str], run: Path | list[Path], signal: int, timeout: float) -> tuple[int, str]:
    """Start ``command``, which trains into ``run`` (or into each of several run folders), and send it ``signal``
    a second after the first step of each began; its exit code and standard error."""
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    runs = run if isinstance(run, list) else [run]
    # config.json is written just before the first step: on a busy machine one member may start seconds after another
    while not all((r / "config.json").exists() for r in runs) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    process.send_signal(signal)
    _, err = process.communicate(timeout=timeout)
    return process.returncode, err
