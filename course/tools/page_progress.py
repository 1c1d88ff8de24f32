"""Progress from a page while the website's build executes it.

The build shows one "Executing notebook" line per page, and a page that trains or measures for
minutes would otherwise sit silent behind it. Once :func:`report_progress` has run in a page's
kernel, a cell that runs longer than ``every`` seconds is reported while it runs, and again when it
ends, on the kernel's own standard error: the build's terminal, not the cell's output, so that the
page shows nothing of it.
"""
from __future__ import annotations

import os
import threading
import time

EVERY_S = 30.0


def _say(text: str) -> None:
    os.write(2, f"    ... {text}\n".encode())  # file descriptor 2 is the build's: sys.stderr is the cell's


def report_progress(every: float = EVERY_S) -> None:
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or getattr(shell, "_course_progress", False):
        return
    shell._course_progress = True
    running = {"since": None, "first": "", "told": 0.0}
    lock = threading.Lock()

    def before(info) -> None:
        with lock:
            # the cell's first line of code names it (its options are not part of what the kernel runs)
            code = [line.strip() for line in (info.raw_cell or "").splitlines()
                    if line.strip() and not line.lstrip().startswith("#")]
            running.update(since=time.monotonic(), told=0.0, first=(code[0] if code else "")[:60])

    def after(result) -> None:
        with lock:
            took = time.monotonic() - running["since"] if running["since"] else 0.0
            if took > every:
                _say(f"the cell `{running['first']}` took {took:.0f} s")
            running["since"] = None

    def watch() -> None:
        while True:
            time.sleep(every / 3)
            with lock:
                if running["since"] is None:
                    continue
                took = time.monotonic() - running["since"]
                if took - running["told"] >= every:
                    running["told"] = took
                    _say(f"the cell `{running['first']}` is still running, {took:.0f} s so far")

    shell.events.register("pre_run_cell", before)
    shell.events.register("post_run_cell", after)
    threading.Thread(target=watch, daemon=True, name="course-page-progress").start()
