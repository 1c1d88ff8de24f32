"""A worker process for one submission, walled off from everything it must not touch.

With bubblewrap (Debian package ``bubblewrap``) the worker gets: no network, its own process
tree (all of it ends with the worker), a read-only view of the system in which the course
directory, the home directory and /tmp are replaced by empty scratch space, apart from the
Python environment and the course's checks. Without bubblewrap it falls back to resource
limits only, and says so. Either way there are limits on memory, CPU time and file size, a
time limit on every request, and a cap on how much of its output is kept.
"""
from __future__ import annotations

import os
import queue
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from . import wire

PACKAGE = Path(__file__).resolve().parent
REPO = PACKAGE.parent


@dataclass(frozen=True)
class Limits:
    call_seconds: float = 10.0  # one call of a graded function on one case
    cell_seconds: float = 30.0  # one cell of the submission
    submission_seconds: float = 300.0  # everything for one submission
    memory_mb: int = 2048  # address space of the worker
    output_kb: int = 64  # what is kept of everything it prints
    file_mb: int = 16  # largest file it may write in its scratch space


class WorkerGone(Exception):
    """The worker ended (exited, was killed, or closed its side)."""


class WorkerTimeout(Exception):
    """The worker did not answer in time; it has been stopped."""


def bubblewrap() -> str | None:
    return shutil.which("bwrap")


def _bwrap_works(bwrap: str) -> bool:
    try:
        done = subprocess.run([bwrap, "--ro-bind", "/", "/", "--unshare-all", "true"], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


_BWRAP_STATE: dict[str, bool] = {}


def sandboxed() -> bool:
    """Whether workers run under bubblewrap here (checked once)."""
    path = bubblewrap()
    if not path:
        return False
    if path not in _BWRAP_STATE:
        _BWRAP_STATE[path] = _bwrap_works(path)
    return _BWRAP_STATE[path]


def fallback_warning() -> str:
    return (
        "bubblewrap is not available: submissions run with resource limits only and can read the "
        "files of the user running the grader and reach the network. Install it (apt-get install "
        "bubblewrap) before grading real submissions."
    )


def _visible_paths() -> list[Path]:
    """What the worker needs to see: the Python installation and the course's packages."""
    paths = {Path(sys.prefix), Path(sys.base_prefix), PACKAGE}
    paths |= {Path(p) for p in sys.path if p and Path(p).is_dir() and "site-packages" in p}
    return sorted({p.resolve() for p in paths if p.exists()} | {p for p in paths if p.exists()})


def _bwrap_command(hidden: list[Path]) -> list[str]:
    cmd = [
        bubblewrap(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
        "--tmpfs", "/tmp", "--tmpfs", "/var/tmp", "--tmpfs", "/run",
    ]
    for path in hidden:
        if path.exists() and path != Path("/"):
            cmd += ["--tmpfs", str(path)]
    for path in _visible_paths():
        cmd += ["--ro-bind", str(path), str(path)]
    cmd += [
        "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--chdir", "/tmp", "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp",
    ]
    return cmd


def _limit(limits: Limits):
    def apply() -> None:
        os.setsid()  # its own process group, so that every child can be ended with it
        memory, cpu, size = limits.memory_mb << 20, int(limits.submission_seconds) + 30, limits.file_mb << 20
        for which, value in ((resource.RLIMIT_AS, (memory, memory)), (resource.RLIMIT_CPU, (cpu, cpu + 5)),
                             (resource.RLIMIT_FSIZE, (size, size)), (resource.RLIMIT_CORE, (0, 0))):
            try:
                resource.setrlimit(which, value)
            except (ValueError, OSError):  # a system that does not offer this limit (macOS and RLIMIT_AS)
                pass

    return apply


class Worker:
    """One sandboxed `python -m autograder.worker`, spoken to in requests and replies."""

    def __init__(self, limits: Limits, hidden: list[Path]):
        self.limits = limits
        self.output = bytearray()
        self.output_dropped = 0
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "MPLBACKEND": "Agg",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0",
            "OMP_NUM_THREADS": "1",
            "LANG": "C.UTF-8",
        }
        for key in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # this machine's BLAS needs them
            if key in os.environ:
                env[key] = os.environ[key]
        command = [sys.executable, "-m", "autograder.worker"]
        self._scratch = None
        if sandboxed():
            command = _bwrap_command(hidden) + command
            cwd = "/"
        else:
            self._scratch = tempfile.mkdtemp(prefix="grading-")
            cwd = self._scratch
            env["HOME"] = env["TMPDIR"] = self._scratch
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env, cwd=cwd, preexec_fn=_limit(limits), close_fds=True,
        )
        self._replies: queue.Queue = queue.Queue()
        threading.Thread(target=self._read_replies, daemon=True).start()
        threading.Thread(target=self._read_output, daemon=True).start()

    def _read_replies(self) -> None:
        try:
            while True:
                self._replies.put(wire.receive(self.process.stdout))
        except (EOFError, OSError, ValueError) as exc:
            self._replies.put(exc)

    def _read_output(self) -> None:
        cap = self.limits.output_kb << 10
        try:
            while chunk := self.process.stderr.read1(65536):
                room = cap - len(self.output)
                self.output += chunk[: max(room, 0)]
                self.output_dropped += max(len(chunk) - max(room, 0), 0)
        except (OSError, ValueError):
            pass

    def request(self, message: dict, timeout: float) -> dict:
        try:
            wire.send(self.process.stdin, message)
        except (BrokenPipeError, OSError, ValueError):
            self.stop()
            raise WorkerGone() from None
        try:
            reply = self._replies.get(timeout=timeout)
        except queue.Empty:
            self.stop()
            raise WorkerTimeout() from None
        if isinstance(reply, Exception):
            self.stop()
            raise WorkerGone(str(reply)) from None
        return reply

    def stop(self) -> None:
        """End the worker and every process it started."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.process.kill()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            try:
                stream.close()
            except OSError:
                pass
        if self._scratch:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def close(self) -> None:
        # Nothing of the worker's is worth a clean interpreter shutdown: end it at once.
        self.stop()
