"""A worker process for one submission, walled off from everything it must not touch.

With bubblewrap (Debian package ``bubblewrap``) the worker sees an allow-list, not the host
with a few paths hidden: the Python installation and its packages, the ``harness`` package
(never ``autograder``, whose checks and oracles could compute the answers), the system
libraries, a fresh /dev, and a /tmp of bounded size; every one of them read-only but
/tmp, which each learner process gets new (see :mod:`harness.worker`). Not the course
directory, not any other copy of the course, not /etc, /root or /home. It has no network, its
own user and process namespaces (all its processes end with it) and a cap on how many
processes it may run at once. When the grader runs as root, the worker runs as an
unprivileged user id of its own, because the kernel does not cap root's processes.

Without bubblewrap only the resource limits hold; the grader refuses to grade that way unless
the instructor asks for it (``--no-sandbox``).

The grader speaks to the worker over a Unix socket that the worker connects to as it starts,
before any learner code exists; see :mod:`harness.worker` for what happens inside. Limits on
memory, CPU time, file size and processes, a time limit on every request, and a cap on how much
of its output is kept apply either way; every limit is a field of :class:`Limits`.
"""
from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from harness import seccomp, wire

#: the only course code the worker sees: what runs beside the learner's, none of what judges it (the
#: harness package where the import system found it, in a clone or an installed course)
HARNESS = Path(wire.__file__).resolve().parent
#: where the worker finds the grader's socket inside the sandbox
CHANNEL_DIR = "/run/grader"
#: a second, read-only copy of each allowed folder that lives below /tmp, from which every learner
#: process mounts it again on its own fresh /tmp
KEPT_DIR = "/run/kept"
#: what the worker keeps of root's powers inside its own user namespace: mounting, which each learner
#: process needs once, to put a fresh /tmp of its own in place, before it drops every capability
WORKER_CAPABILITIES = ("CAP_SYS_ADMIN",)


@dataclass(frozen=True)
class Limits:
    call_seconds: float = 10.0  # one call of a graded function on one case
    cell_seconds: float = 30.0  # one cell of the submission
    submission_seconds: float = 300.0  # everything for one submission
    startup_seconds: float = 120.0  # the worker's start (an interpreter and torch), before any learner code
    memory_mb: int = 2048  # memory each of the submission's processes may allocate (its data segment)
    output_kb: int = 64  # what is kept of everything it prints
    file_mb: int = 16  # largest file it may write
    scratch_mb: int = 64  # its /tmp, all files together (in memory)
    processes: int = 64  # processes and threads it may run at once
    notebook_mb: int = 64  # largest notebook that is read at all
    source_kb: int = 512  # most code (all code cells together, UTF-8) that is read and graded
    reply_mb: int = 64  # largest message the learner's side may send


class WorkerBroken(Exception):
    """The worker failed before any learner code ran: the grader's set-up, not the learner's doing.

    What the worker printed is kept apart (``printed``), for the instructor's self-check only: once a
    learner's code has run, the worker's output is the learner's, which may hold the hidden cases'
    inputs, and the message goes into that learner's feedback."""

    def __init__(self, message: str, printed: str = ""):
        super().__init__(message)
        self.printed = printed


class WorkerGone(Exception):
    """The worker, or the learner's process, ended (exited, was killed, or closed its side)."""


class WorkerTimeout(Exception):
    """No answer in time."""


# ---------------------------------------------------------------------------------------------
# Is there a sandbox, and which kind
# ---------------------------------------------------------------------------------------------


def bubblewrap() -> str | None:
    return shutil.which("bwrap")


def _as_root() -> bool:
    return os.geteuid() == 0


_STATE: dict[str, bool] = {}


def sandboxed() -> bool:
    """Whether workers run under bubblewrap here (checked once, the way workers are started)."""
    path = bubblewrap()
    if not path:
        return False
    if path not in _STATE:
        _STATE[path] = _probe(path)
    return _STATE[path]


def _probe(bwrap: str) -> bool:
    uid = _UIDS.acquire() if _as_root() else None
    try:
        command = _command(bwrap, ["/bin/true"] if Path("/bin/true").exists() else ["true"], Limits(), [], None, uid)
        done = subprocess.run(command, capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        if uid is not None:
            _UIDS.release(uid)
    return done.returncode == 0


def fallback_warning() -> str:
    return (
        "bubblewrap is not available: submissions run with resource limits only and can read the "
        "files of the user running the grader and reach the network. Install it (apt-get install "
        "bubblewrap) before grading real submissions."
    )


class _UidPool:
    """User ids for workers started by root: one per running worker, so that the process cap of
    one submission is not shared with another's. They lie far above the ids of ordinary accounts."""

    def __init__(self) -> None:
        self.base = 1_000_000_000 + (os.getpid() % 50_000) * 1024
        self.free = list(range(1024))
        self.lock = threading.Lock()

    def acquire(self) -> int:
        with self.lock:
            return self.base + (self.free.pop(0) if self.free else 1023)

    def release(self, uid: int) -> None:
        with self.lock:
            offset = uid - self.base
            if 0 <= offset < 1024 and offset not in self.free:
                self.free.insert(0, offset)


_UIDS = _UidPool()


# ---------------------------------------------------------------------------------------------
# What the worker may see
# ---------------------------------------------------------------------------------------------

#: the system's programs and libraries (on a merged-/usr system the top-level ones are links)
SYSTEM = ("/usr/bin", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libx32", "/bin", "/lib", "/lib32", "/lib64")
#: single files of /etc that the dynamic loader reads
SYSTEM_FILES = ("/etc/ld.so.cache",)
#: the course's packages that hold solutions or tools (course.tools among them); hidden where an installation copied them
HIDDEN_PACKAGES = ("autograder", "reference", "course", "transformer", "solutions")


def _installation() -> list[Path]:
    """The prefixes of the Python installation and of its environment. The system's /usr is mounted
    piece by piece (SYSTEM); as a prefix it would bring all of it."""
    prefixes = {Path(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix) if p}
    return [p for p in prefixes if str(p) not in ("/", "/usr")]


def _python_paths() -> list[Path]:
    """The folders of Python that imports need: the standard library and its extension modules
    (every entry of sys.path inside the installation), every package directory on sys.path, the
    interpreter's own library folder (libpython; in conda, the shared libraries its packages link
    against), and harness. Never a prefix whole: its etc/, share/, pip.conf or .env may hold an
    index token or the gradebook's password, which the learner's code would read and print."""
    prefixes = _installation()
    paths = {HARNESS, Path(sysconfig.get_path("stdlib"))}
    paths |= {Path(libdir)} if (libdir := sysconfig.get_config_var("LIBDIR")) else set()
    for entry in filter(None, sys.path):
        path = Path(entry)
        if "site-packages" in entry or "dist-packages" in entry or any(p in path.parents for p in prefixes):
            paths.add(path)
    return [p for p in paths if p.is_dir() and str(p) not in ("/", "/usr")]


def _chain(path: Path) -> list[Path]:
    """``path``, and each link on the way from it to the file it names."""
    chain: list[Path] = []
    while path not in chain:
        chain.append(path)
        if not path.is_symlink():
            break
        path = Path(os.path.normpath(path.parent / os.readlink(path)))
    return chain


def interpreter_files() -> list[Path]:
    """The single files the worker's interpreter needs outside the folders of :func:`visible_paths`:
    the program and each link to it on the way from ``sys.executable``, and the environment's
    pyvenv.cfg, which makes it that environment's Python."""
    files = _chain(Path(sys.executable)) if sys.executable else []
    files += [Path(p) / "pyvenv.cfg" for p in (sys.prefix,) if (Path(p) / "pyvenv.cfg").is_file()]
    files += [Path(p) for p in sys.path if p.endswith(".zip") and Path(p).is_file()]  # a zipped standard library
    folders = [Path(s) for s in SYSTEM] + visible_paths()
    inside = [f for f in files if not any(d == f or d in f.parents for d in folders)]
    return [f for f in dict.fromkeys(inside) if f.is_symlink() or f.is_file()]


def _place(path: Path, at: str) -> list[str]:
    """bubblewrap's arguments that show ``path`` at ``at``: a link as the same link, anything else read-only."""
    return ["--symlink", os.readlink(path), at] if path.is_symlink() else ["--ro-bind", str(path), at]


def visible_paths() -> list[Path]:
    """The directories the worker sees besides the system's, outermost first; nested ones are
    covered by their parent."""
    chosen = sorted({p.resolve() for p in _python_paths()} | {p for p in _python_paths()}, key=lambda p: len(p.parts))
    kept: list[Path] = [Path(s).resolve() for s in SYSTEM if Path(s).is_dir()]
    system = len(kept)
    for path in chosen:
        if not any(path == k or k in path.parents for k in kept):
            kept.append(path)
    return kept[system:]


def _mounts(hidden: list[Path]) -> list[str]:
    args: list[str] = []
    made: set[str] = set()

    def parents(path: Path) -> None:
        # Directories bubblewrap creates on the way are root's and closed to others; open them.
        for parent in reversed(path.parents):
            if str(parent) != "/" and str(parent) not in made and not any(str(parent) == s for s in SYSTEM):
                made.add(str(parent))
                args.extend(["--perms", "0755", "--dir", str(parent)])

    for entry in SYSTEM:
        path = Path(entry)
        if path.is_symlink():
            args.extend(["--symlink", os.readlink(path), entry])
        elif path.is_dir():
            parents(path)
            args.extend(["--ro-bind", entry, entry])
    for entry in SYSTEM_FILES:
        if Path(entry).is_file():
            parents(Path(entry))
            args.extend(["--ro-bind", entry, entry])
    mounted = visible_paths()
    for path in mounted:
        parents(path)
        args.extend(["--ro-bind", str(path), str(path)])
    for path in _covered(hidden, mounted):
        args.extend(["--tmpfs", str(path)])
    for path in interpreter_files():
        parents(path)
        args.extend(_place(path, str(path)))
    return args


def _covered(hidden: list[Path], mounted: list[Path]) -> list[Path]:
    """What the mounts would bring along that the worker must not see: a course directory below one
    of them, or the course's own packages installed (copied) into a site-packages.

    Only what exists: a path that is not there hides nothing, and bubblewrap cannot make one inside
    a read-only mount (an installed course's REPO/solutions would lie inside site-packages)."""
    covered = [h for h in hidden if h.exists() and any(m in h.parents for m in mounted)]
    covered += [p / name for p in _python_paths() for name in HIDDEN_PACKAGES if (p / name).is_dir()]
    return list(dict.fromkeys(covered))


_OPTIONS: dict[str, frozenset] = {}


def _supports(option: str) -> bool:
    """Whether this bubblewrap knows ``option`` (--size came with 0.6, --disable-userns with 0.8)."""
    path = bubblewrap() or "bwrap"
    if path not in _OPTIONS:
        try:
            text = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.TimeoutExpired):
            text = ""
        _OPTIONS[path] = frozenset(word for word in text.split() if word.startswith("--"))
    return option in _OPTIONS[path]


def sandbox_gaps() -> list[str]:
    """What this bubblewrap cannot enforce, in words for the instructor (empty when it can do all)."""
    gaps = []  # the size of each learner process's /tmp is the worker's to set, whatever the version
    if not seccomp.supported():
        gaps.append("no system call filter is known for this machine's architecture: the processes of one submission "
                    "could pass data to each other through keys and message queues")
    if not _supports("--disable-userns"):
        gaps.append("this bubblewrap cannot stop submitted code from making user namespaces (version 0.8 or later can)")
    return gaps


def shared_by_process() -> str:
    """Why the kernel would share the CPU between processes here rather than between submissions, or "".

    It shares between sessions first (its autogroups) when they are on and the grader runs in the root
    CPU cgroup; each learner process is a session, which none of its processes may leave
    (:mod:`harness.seccomp`). Inside a CPU cgroup of its own (a container's or a batch job's CPU limit)
    it shares by process, and 56 busy processes of one learner would then slow their neighbours' calls."""
    try:
        autogroups = Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        autogroups = False
    if not autogroups:
        return "the kernel does not share the CPU by session (/proc/sys/kernel/sched_autogroup_enabled is not 1)"
    group = _cpu_cgroup()
    if group not in (None, "/"):
        return f"the grader runs in the CPU cgroup {group} (a container's or a batch job's CPU limit)"
    return ""


def _cpu_cgroup() -> str | None:
    try:
        memberships = Path("/proc/self/cgroup").read_text()
    except OSError:
        return None
    try:
        below_root = Path("/sys/fs/cgroup/cgroup.subtree_control").read_text()
    except OSError:
        below_root = ""
    return cpu_cgroup(memberships, below_root)


def cpu_cgroup(memberships: str, below_root: str) -> str | None:
    """The cgroup that holds this process for the CPU controller, from /proc/self/cgroup
    (``memberships``) and the controllers cgroup v2 turns on below its root (``below_root``): the v1
    cpu controller's path, or the unified one where v2 manages the CPU ("/" where it does not)."""
    lines = [line.split(":", 2) for line in memberships.splitlines() if line.count(":") >= 2]
    for _, controllers, path in lines:
        if "cpu" in controllers.split(","):
            return path
    unified = next((path for _, controllers, path in lines if controllers == ""), None)
    if unified is None:
        return None
    return unified if "cpu" in below_root.split() else "/"


def _isolation() -> list[str]:
    """Namespaces and privileges: a user of its own, no network, its own processes, nothing more."""
    return [
        "--unshare-user", "--unshare-ipc", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
        "--unshare-pid", "--as-pid-1", *(["--disable-userns"] if _supports("--disable-userns") else []),
        "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        *[arg for capability in WORKER_CAPABILITIES for arg in ("--cap-add", capability)],
    ]


def _scratch(limits: Limits, hidden: list[Path]) -> list[str]:
    size = ["--size", str(limits.scratch_mb << 20)] if _supports("--size") else []
    return [
        *size, "--perms", "1777", "--tmpfs", "/tmp", *_under_scratch(hidden),
        "--dev", "/dev", "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp",
    ]


def _below_scratch() -> list[Path]:
    """What is allowed below /tmp (a course cloned there, with its environment): folders first."""
    return [path for path in [*visible_paths(), *interpreter_files()] if Path("/tmp") in path.parents]


def _kept(hidden: list[Path]) -> list[str]:
    """The folders below /tmp once more, at KEPT_DIR, with what they must not show covered as before:
    the fresh /tmp of each learner process covers the ones the worker sees, and is given these."""
    below = _below_scratch()
    args: list[str] = ["--perms", "0755", "--dir", KEPT_DIR] if below else []  # bubblewrap would close it to others
    covered = _covered(hidden, visible_paths())
    for index, path in enumerate(below):
        args.extend(_place(path, f"{KEPT_DIR}/{index}"))
        for inside in covered:
            if path in inside.parents:
                args.extend(["--tmpfs", f"{KEPT_DIR}/{index}/{inside.relative_to(path)}"])
    return args


def _scratch_arguments(limits: Limits) -> list[str]:
    """How the worker gives each learner process a fresh /tmp: its size, and the folders to mount in it."""
    kept = [arg for index, path in enumerate(_below_scratch()) for arg in ("--keep", f"{KEPT_DIR}/{index}", str(path))]
    return ["--scratch", "/tmp", "--scratch-mb", str(limits.scratch_mb), *kept]


def _under_scratch(hidden: list[Path]) -> list[str]:
    """The allowed directories that live below /tmp (a course cloned there, with its environment),
    mounted again on top of the scratch space that would otherwise cover them."""
    args: list[str] = []
    for path in _below_scratch():
        args.extend(_place(path, str(path)))
    for path in _covered(hidden, visible_paths()):
        if Path("/tmp") in path.parents:
            args.extend(["--tmpfs", str(path)])
    return args


#: run as root inside the outer sandbox: become the worker's own user, then start the inner one
_BECOME = (
    "import os, sys; uid = int(sys.argv[1]); os.setgroups([]); os.setresgid(uid, uid, uid); "
    "os.setresuid(uid, uid, uid); os.execv(sys.argv[2], sys.argv[2:])"
)


def _command(bwrap: str, program: list[str], limits: Limits, hidden: list[Path], channel: str | None,
             uid: int | None) -> list[str]:
    """bubblewrap around ``program``.

    As an ordinary user one bubblewrap does everything. As root, bubblewrap would keep the
    worker's processes root's, and the kernel never caps root's processes: an outer bubblewrap
    builds the view of the files as root, a short step drops to ``uid``, and an inner one,
    started as that user, makes the namespaces. The inner one sees only what the outer mounted.
    """
    share = ["--ro-bind", channel, CHANNEL_DIR] if channel else []
    if uid is None:
        return [bwrap, *_isolation(), *_mounts(hidden), "--proc", "/proc", *share, *_kept(hidden),
                *_scratch(limits, hidden), *program]
    outer = [
        bwrap, "--unshare-pid", "--die-with-parent", "--cap-drop", "ALL", "--cap-add", "CAP_SETUID",
        "--cap-add", "CAP_SETGID", *_mounts(hidden), "--dev", "/dev", "--proc", "/proc",
        "--perms", "0755", "--dir", "/tmp", "--perms", "0755", "--dir", "/run", *share, *_kept(hidden),
    ]
    become = [sys.executable, "-I", "-S", "-c", _BECOME, str(uid)]
    inner = [bwrap, *_isolation(), "--ro-bind", "/", "/", *_scratch(limits, hidden)]
    return [*outer, *become, *inner, *program]


def worker_program() -> list[str]:
    """The interpreter and module the worker runs."""
    return [sys.executable, "-m", "harness.worker"]


def installed_package() -> Path | None:
    """Where this Python imports ``harness`` (what the worker runs) from when no folder of the course is
    the current one."""
    probe = "import importlib.util as u; s = u.find_spec('harness'); print(s.origin if s and s.origin else '')"
    try:
        done = subprocess.run([sys.executable, "-c", probe], cwd="/", capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    origin = done.stdout.strip()
    return Path(origin).resolve().parent if done.returncode == 0 and origin else None


def _hint(output: str) -> str:
    if "No module named 'harness'" in output or "No module named harness" in output:
        installed = installed_package()
        if installed is not None and installed != HARNESS:
            # Started from another copy of the course: its harness/ shadows the installed one,
            # and the sandbox mounts the copy that runs, which the worker's Python does not look in.
            return (f"the sandboxed worker cannot import harness: the grader runs the course found in the "
                    f"current folder, {HARNESS.parent}, but {sys.executable} has the course installed from "
                    f"{installed.parent}, which the worker needs. Grade from {installed.parent}, or give this copy "
                    f"its own environment (make setup in {HARNESS.parent})")
        return "the sandboxed worker cannot import harness: install the course with make setup"
    fresh = [line for line in output.splitlines() if "cannot mount a fresh /tmp" in line]
    if fresh:
        return fresh[-1].strip()
    if "No module named 'torch'" in output:
        return "the sandboxed worker cannot import torch: install the course with make setup"
    if "Permission denied" in output and _as_root():
        return ("the sandboxed worker, which runs as an unprivileged user, cannot read part of the Python "
                "installation: make it readable by all users")
    return "the sandboxed worker did not start"


# ---------------------------------------------------------------------------------------------
# The worker
# ---------------------------------------------------------------------------------------------


class Channel:
    """A socket to the learner's side, read with a deadline and a size limit."""

    def __init__(self, sock: socket.socket, limit: int):
        self.sock, self.limit = sock, limit

    def send(self, message: dict, timeout: float) -> None:
        self.sock.settimeout(max(timeout, 0.001))
        try:
            self.sock.sendall(wire.frame(message))
        except TimeoutError:
            raise WorkerTimeout() from None
        except OSError as exc:
            raise WorkerGone(str(exc)) from None

    def receive(self, timeout: float) -> dict:
        """One message; WireError when it is malformed, whoever wrote it."""
        try:
            return wire.receive(self.sock, self.limit, time.monotonic() + timeout)
        except TimeoutError:
            raise WorkerTimeout() from None
        except EOFError:
            raise WorkerGone("the other side closed the channel") from None
        except OSError as exc:
            raise WorkerGone(str(exc)) from None

    def request(self, message: dict, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        self.send(message, timeout)
        return self.receive(max(deadline - time.monotonic(), 0.0))

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Worker:
    """One sandboxed `python -m harness.worker`: it runs no learner code itself, and starts a
    fresh process for each graded function (:meth:`fork`), which the grader then speaks to directly."""

    def __init__(self, limits: Limits, hidden: list[Path], preload: tuple[str, ...] = ()):
        self.limits, self.preload = limits, tuple(preload)
        self.output = bytearray()
        self.output_dropped = 0
        self.sandboxed = sandboxed()
        self.uid = _UIDS.acquire() if self.sandboxed and _as_root() else None
        self.control: socket.socket | None = None
        self._folder = tempfile.mkdtemp(prefix="grader-")
        self._scratch = None
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(os.path.join(self._folder, "channel"))
            listener.listen(1)
            if self.uid is not None:  # the worker's own user must reach the socket
                os.chmod(self._folder, 0o711)
                os.chmod(os.path.join(self._folder, "channel"), 0o666)
            self.process = self._start(hidden)
            self._reader = threading.Thread(target=self._read_output, daemon=True)
            self._reader.start()
            self._connect(listener)
        except BaseException:
            listener.close()
            self.stop()
            raise
        listener.close()  # one connection, made before any learner code ran; nobody else may connect
        shutil.rmtree(self._folder, ignore_errors=True)

    def _start(self, hidden: list[Path]) -> subprocess.Popen:
        limits = self.limits
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
        arguments = [
            "--memory-mb", str(limits.memory_mb), "--cpu-seconds", str(int(limits.submission_seconds) + 30),
            "--file-mb", str(limits.file_mb), "--request-mb", str(max(limits.reply_mb, 1)),
            *(["--preload", ",".join(self.preload)] if self.preload else []),
        ]
        if self.sandboxed:
            # Counted per user and per user namespace: here, the worker's own processes only.
            arguments += ["--processes", str(limits.processes), "--channel", f"{CHANNEL_DIR}/channel",
                          *_scratch_arguments(limits)]
            env["HOME"] = env["TMPDIR"] = "/tmp"
            command = _command(bubblewrap(), [*worker_program(), *arguments], limits, hidden, self._folder, self.uid)
            cwd = "/"
        else:
            self._scratch = tempfile.mkdtemp(prefix="grading-")
            arguments += ["--channel", os.path.join(self._folder, "channel"), "--scratch", self._scratch]
            env["HOME"] = env["TMPDIR"] = self._scratch
            command, cwd = [*worker_program(), *arguments], self._scratch
        # start_new_session instead of a preexec_fn: that runs Python in the child between fork
        # and exec, which can deadlock when other threads of the grader hold locks. The worker
        # sets its own resource limits before anything else runs.
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=env, cwd=cwd, close_fds=True, start_new_session=True)

    def _connect(self, listener: socket.socket) -> None:
        deadline = time.monotonic() + self.limits.startup_seconds
        waiting = select.poll()
        waiting.register(listener, select.POLLIN)
        while True:
            if self.process.poll() is not None:
                raise WorkerBroken(self._failure(f"it exited with status {self.process.returncode}"))
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerBroken(self._failure(f"it did not connect within {self.limits.startup_seconds:g} s"))
            if waiting.poll(min(left, 0.1) * 1000):  # checks every 0.1 s whether it died on the way
                self.control, _ = listener.accept()
                break
        while True:  # it says it is ready once torch is imported
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerBroken(self._failure(f"it was not ready within {self.limits.startup_seconds:g} s"))
            self.control.settimeout(min(left, 0.2))
            try:
                ready = self.control.recv(1)
            except TimeoutError:
                continue
            except OSError:
                ready = b""
            if ready == b"R":
                return
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            raise WorkerBroken(self._failure(f"it exited with status {self.process.poll()}"))

    def _failure(self, what: str) -> str:
        self._reader.join(timeout=5)
        output = self.text_output()
        tail = "\n".join(output.strip().splitlines()[-15:])
        return f"{_hint(output)} ({what})" + (f"; its output ends with:\n{tail}" if tail else "")

    def _read_output(self) -> None:
        cap = self.limits.output_kb << 10
        try:
            while chunk := self.process.stdout.read1(65536):
                room = cap - len(self.output)
                self.output += chunk[: max(room, 0)]
                self.output_dropped += max(len(chunk) - max(room, 0), 0)
        except (OSError, ValueError):
            pass

    def text_output(self) -> str:
        return bytes(self.output).decode("utf-8", "replace")

    def _control(self, message: dict, timeout: float, answer: bytes) -> list[int]:
        """Ask the worker for something; it answers with one byte, and with descriptors for a fork."""
        if self.control is None:
            raise WorkerGone("the worker has stopped")
        try:
            self.control.settimeout(max(timeout, 0.001))
            self.control.sendall(wire.frame(message))
            data, fds, _, _ = socket.recv_fds(self.control, 1, 1, socket.MSG_CMSG_CLOEXEC)
        except TimeoutError:
            self.stop()
            raise WorkerTimeout() from None
        except OSError as exc:
            self.stop()
            raise WorkerGone(str(exc)) from None
        if data != answer:
            for fd in fds:
                os.close(fd)
            if not data:
                self.stop()
            raise WorkerGone(f"the worker answered {data!r} to {message['op']}")
        return fds

    def fork(self, timeout: float = 30.0) -> Channel:
        """A fresh process for the learner's code, forked from the warm worker, and the channel to it."""
        fds = self._control({"op": "fork"}, timeout, b"F")
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise WorkerGone("the worker did not hand over the channel")
        return Channel(socket.socket(fileno=fds[0]), self.limits.reply_mb << 20)

    def end_children(self, timeout: float = 10.0) -> None:
        """End the learner's process and every process it started; the worker stays."""
        self._control({"op": "end"}, timeout, b"K")

    def stop(self) -> None:
        """End the worker and every process it started."""
        process = getattr(self, "process", None)
        if process is not None:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    process.kill()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass
            if process.stdout is not None:
                try:
                    process.stdout.close()
                except OSError:
                    pass
        if self.control is not None:
            self.control.close()
            self.control = None
        if self.uid is not None:
            _UIDS.release(self.uid)
            self.uid = None
        for folder in (self._folder, self._scratch):
            if folder:
                shutil.rmtree(folder, ignore_errors=True)
        self._scratch = None

    close = stop
