"""The sandbox on its own: output is capped, limits hold, the learner's process cannot reach the
worker's channel, only an allow-list of files is visible, and the fallback still grades."""
from __future__ import annotations

import dataclasses
import importlib
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from autograder import sandbox
from autograder.assignment import Assignment
from autograder.engine import grade_cells
from autograder.sandbox import Channel, Limits, Worker, WorkerTimeout
from autograder.submissions import notebook_cells
from course.layout import submission_folder
from course.notebook_format import complete, to_nbgrader
from harness.probes import PROBE_SECONDS
from tests.conftest import NOTEBOOKS, REPO, chapter_of, release_path, source_path

LIMITS = Limits(call_seconds=3, cell_seconds=3, submission_seconds=60, memory_mb=1024, output_kb=16)
SETUP = {"op": "setup", "function": "f", "reference": "reference.none", "modules": {}, "forbidden": [], "inject": []}

needs_bubblewrap = pytest.mark.skipif(not sandbox.sandboxed(), reason="bubblewrap is not installed (apt-get install bubblewrap)")


@pytest.fixture
def worker():
    w = Worker(LIMITS, [REPO])
    yield w
    w.stop()


def _learner(worker: Worker):
    child = worker.fork()
    assert child.request(SETUP, timeout=60) == {"ok": True}
    return child


def _cell(child, source: str, timeout: float = 60) -> str:
    """What a cell reports: the message of the exception it raises at its end."""
    reply = child.request({"op": "cell", "index": 1, "source": source}, timeout=timeout)
    assert "error" in reply, reply
    return reply["error"][1]


def test_output_is_capped_and_the_rest_discarded(worker):
    child = _learner(worker)
    reply = child.request({"op": "cell", "index": 1, "source": "for _ in range(2000):\n    print('x' * 999)\n"}, timeout=30)
    assert reply == {"ok": True}
    child.request({"op": "cell", "index": 2, "source": "import sys; sys.stdout.flush()"}, timeout=30)
    worker.stop()
    assert len(worker.output) <= LIMITS.output_kb << 10
    assert worker.output_dropped > 0


def test_a_cell_past_its_time_costs_its_process_not_the_worker(worker):
    child = _learner(worker)
    with pytest.raises(WorkerTimeout):
        child.request({"op": "cell", "index": 1, "source": "while True:\n    pass\n"}, timeout=LIMITS.cell_seconds)
    child.close()
    worker.end_children()
    assert worker.process.poll() is None
    assert _cell(_learner(worker), "raise ValueError('fresh')") == "fresh"


def test_memory_beyond_the_limit_is_refused(worker):
    reply = _learner(worker).request({"op": "cell", "index": 1, "source": "block = bytearray(4 << 30)\n"}, timeout=30)
    assert reply["error"][0] == "MemoryError"


@needs_bubblewrap
def test_scratch_space_is_bounded(worker):
    # 4 GB in files of 1 MB: /tmp is memory, so its size is a memory limit of its own.
    message = _cell(_learner(worker), (
        "import os\nwritten = 0\ntry:\n    for i in range(4096):\n        with open(f'/tmp/fill{i}', 'wb') as f:\n"
        "            f.write(b'x' * (1 << 20))\n        written += 1\nexcept OSError as exc:\n    error = exc.strerror\n"
        "else:\n    error = None\nelsewhere = []\nfor path in ('/dev/shm/x', '/x', '/dev/x', '/usr/lib/x'):\n"
        "    try:\n        open(path, 'wb').write(b'x')\n        elsewhere.append(path)\n    except OSError:\n        pass\n"
        "raise RuntimeError(f'{written} {error} {elsewhere}')"))
    written, *rest = message.split(" ", 1)
    assert int(written) <= LIMITS.scratch_mb, message
    assert "No space left" in rest[0] and rest[0].endswith("[]"), message


def test_each_learner_process_starts_with_an_empty_scratch_space(worker):
    # A course cloned below /tmp shows the way to its environment there, read-only; nothing else.
    fresh = _cell(_learner(worker), "import os\nraise RuntimeError(os.listdir('.'))")
    worker.end_children()
    child = _learner(worker)
    _cell(child, "import os\nos.makedirs('hoard/closed')\nopen('hoard/closed/cases', 'w').write('x')\n"
                 "os.chmod('hoard/closed', 0)\nopen('cases', 'w').write('x')\nraise RuntimeError(sorted(os.listdir('.')))")
    child.close()
    worker.end_children()
    assert _cell(_learner(worker), "import os\nraise RuntimeError(os.listdir('.'))") == fresh
    if not str(REPO).startswith("/tmp/"):
        assert fresh == "[]"



# What a learner process could leave in /tmp for the next one, written where a walk of the folder
# cannot go: below PATH_MAX (18 folders of 240 characters), in a closed folder, as a hard link, a
# socket and a FIFO.
LEAVE = r"""
import os, socket, stat
os.chdir('/tmp')
for _ in range(18):
    os.mkdir('d' * 240)
    os.chdir('d' * 240)
open('cases', 'w').write('the course answer')
os.chdir('/tmp')
os.mkdir('closed')
open('closed/cases', 'w').write('x')
os.link('closed/cases', 'linked')
os.chmod('closed', 0)
socket.socket(socket.AF_UNIX).bind('/tmp/socket')
os.mkfifo('/tmp/fifo')
raise RuntimeError(sorted(os.listdir('/tmp')))
"""
LOOK = r"""
import os
found = [name for name in ('closed', 'linked', 'socket', 'fifo') if os.path.lexists('/tmp/' + name)]
os.chdir('/tmp')
try:
    for _ in range(18):
        os.chdir('d' * 240)
    found.append('deep: ' + open('cases').read())
except OSError:
    pass
raise RuntimeError(found)
"""


@needs_bubblewrap
def test_nothing_a_learner_process_leaves_in_tmp_reaches_the_next(worker):
    child = _learner(worker)
    left = _cell(child, LEAVE)
    assert all(name in left for name in ('closed', 'linked', 'socket', 'fifo')), left
    child.close()
    worker.end_children()
    assert _cell(_learner(worker), LOOK) == "[]"


@needs_bubblewrap
def test_a_learner_process_cannot_mount_or_keep_a_capability(worker):
    message = _cell(_learner(worker), (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "status = dict(line.split(':', 1) for line in open('/proc/self/status').read().splitlines() if ':' in line)\n"
        "caps = [status[k].strip() for k in ('CapEff', 'CapPrm', 'CapInh', 'CapAmb')]\n"
        "mounted = libc.mount(b'tmpfs', b'/tmp', b'tmpfs', 0, None) == 0 or libc.unshare(0x20000) == 0\n"
        "raise RuntimeError(repr((caps, mounted)))"))
    caps, mounted = eval(message)  # noqa: S307
    assert set(caps) == {"0000000000000000"} and not mounted, message



@needs_bubblewrap
def test_a_sandbox_that_cannot_mount_a_fresh_tmp_grades_nothing(monkeypatch):
    monkeypatch.setattr(sandbox, "WORKER_CAPABILITIES", ())
    with pytest.raises(sandbox.WorkerBroken, match="cannot mount a fresh /tmp for each learner process"):
        Worker(LIMITS, [REPO])


@needs_bubblewrap
def test_a_folder_allowed_below_tmp_is_in_every_fresh_tmp_and_read_only(monkeypatch, tmp_path):
    # A course cloned below /tmp has its environment there: every learner process needs it.
    allowed = tmp_path / "environment"
    (allowed / "hidden").mkdir(parents=True)
    (allowed / "module.py").write_text("KEPT = 1\n")
    (allowed / "hidden" / "answers.py").write_text("SECRET")
    paths = sandbox._python_paths()
    monkeypatch.setattr(sandbox, "_python_paths", lambda: [*paths, allowed])
    worker = Worker(LIMITS, [allowed / "hidden"])
    try:
        look = (f"import os\nseen = open({str(allowed / 'module.py')!r}).read()\n"
                f"hidden = os.listdir({str(allowed / 'hidden')!r})\n"
                f"try:\n    open({str(allowed / 'new.py')!r}, 'w')\n    written = True\nexcept OSError:\n    written = False\n"
                "raise RuntimeError(repr((seen, hidden, written)))")
        for _ in range(2):
            assert _cell(_learner(worker), look) == repr(("KEPT = 1\n", [], False))
            worker.end_children()
    finally:
        worker.stop()

# Every kernel object and file one learner process could leave for another: the keyrings, POSIX
# and System V message queues, System V shared memory and semaphores, files in /tmp and /dev/shm.
CHANNELS = r"""
import ctypes, os, platform
libc = ctypes.CDLL(None, use_errno=True)
X86 = platform.machine() == "x86_64"
ADD_KEY, REQUEST_KEY = (248, 249) if X86 else (217, 218)
libc.mq_open.restype = ctypes.c_int
def put():
    done = []
    for ring in (-4, -3, -5):  # the user's, the session's and the user's session keyring
        if libc.syscall(ADD_KEY, b"user", b"grader-channel", b"the reference", 13, ring) >= 0:
            done.append(f"key {ring}")
    if libc.mq_open(b"/grader-channel", os.O_CREAT | os.O_RDWR, 0o666, None) >= 0:
        done.append("mqueue")
    for name, make in (("msg", lambda: libc.msgget(4242, 0o1666)), ("shm", lambda: libc.shmget(4242, 4096, 0o1666)),
                       ("sem", lambda: libc.semget(4242, 1, 0o1666))):
        if make() >= 0:
            done.append(name)
    for path in ("/tmp/grader-channel", "/dev/shm/grader-channel"):
        try:
            open(path, "w").write("the reference")
            done.append(path)
        except OSError:
            pass
    return done
def get():
    found = []
    for ring in (-4, -3, -5):
        if libc.syscall(REQUEST_KEY, b"user", b"grader-channel", None, ring) >= 0:
            found.append(f"key {ring}")
    if libc.mq_open(b"/grader-channel", os.O_RDWR, 0, None) >= 0:
        found.append("mqueue")
    for name, find in (("msg", lambda: libc.msgget(4242, 0o666)), ("shm", lambda: libc.shmget(4242, 4096, 0o666)),
                       ("sem", lambda: libc.semget(4242, 1, 0o666))):
        if find() >= 0:
            found.append(name)
    found += [p for p in ("/tmp/grader-channel", "/dev/shm/grader-channel") if os.path.exists(p)]
    return found
"""


def test_no_channel_between_the_processes_of_a_submission(worker):
    # One function's process holds what another's should not see (its hidden cases, say).
    child = _learner(worker)
    put = _cell(child, CHANNELS + "raise RuntimeError(put())")
    child.close()
    worker.end_children()
    assert _cell(_learner(worker), CHANNELS + "raise RuntimeError(get())") == "[]", put
    assert "key" not in put and "mqueue" not in put and "msg" not in put, put  # refused outright


@needs_bubblewrap
def test_no_channel_between_two_submissions(worker):
    other = Worker(LIMITS, [REPO])
    try:
        writer = _learner(worker)
        put = _cell(writer, CHANNELS + "raise RuntimeError(put())")  # it stays alive while the other looks
        assert _cell(_learner(other), CHANNELS + "raise RuntimeError(get())") == "[]", put
    finally:
        other.stop()


def test_the_processes_of_a_submission_cannot_make_sessions_of_their_own(worker):
    # The kernel shares the CPU between sessions: one per busy process would starve the neighbours.
    message = _cell(_learner(worker), (
        "import os\npid = os.fork()\nif pid == 0:\n    try:\n        os.setsid()\n        os._exit(0)\n"
        "    except OSError:\n        os._exit(1)\n_, status = os.waitpid(pid, 0)\n"
        "raise RuntimeError(os.waitstatus_to_exitcode(status))"))
    assert message == "1", "a process of the learner's made a session of its own"

@needs_bubblewrap
def test_system_v_objects_do_not_outlive_their_learner_process(worker):
    listed = _cell(_learner(worker), "raise RuntimeError([len(open(f'/proc/sysvipc/{k}').read().splitlines()) - 1"
                                     " for k in ('shm', 'msg', 'sem')])")
    assert listed == "[0, 0, 0]"


def _judging_names() -> set[str]:
    """Every graded function of the course, and every function the checks and oracles define."""
    import inspect
    import pkgutil

    from autograder import checks, oracles
    from course.layout import chapters

    def defined(package) -> set[str]:
        """The functions a module defines, and those of every module below it when it is a package."""
        modules = [package]
        if hasattr(package, "__path__"):
            modules += [importlib.import_module(info.name)
                        for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
        return {n for m in modules for n, o in vars(m).items() if inspect.isfunction(o) and o.__module__ == m.__name__}

    names = set()
    for chapter in chapters():
        names |= set(checks.chapter_checks(chapter.stem))
        names |= defined(importlib.import_module(f"autograder.checks.{chapter.stem}"))
    return names | defined(oracles)


@needs_bubblewrap
def test_nothing_importable_in_the_sandbox_can_compute_a_graded_function(worker):
    names = sorted(_judging_names())
    assert {"multi_head_attention", "layer_norm", "levenshtein", "generate_cached", "bpe_merges", "softmax"} <= set(names)
    found = _cell(_learner(worker), f"""
import importlib, inspect, pkgutil, sys
names = set({names!r})
problems = []
for entry in ("autograder.oracles", "autograder.checks", "autograder.checks.capstone", "autograder.framework",
              "autograder.engine", "reference", "reference.attention", "course", "course.tools", "transformer",
              "transformer.model", "solutions"):
    try:
        importlib.import_module(entry)
        problems.append("importable: " + entry)
    except ImportError:
        pass
import harness
for info in pkgutil.walk_packages(harness.__path__, "harness."):
    module = importlib.import_module(info.name)
    for name, obj in vars(module).items():
        members = [name] + ([n for n in vars(obj)] if inspect.isclass(obj) and obj.__module__ == module.__name__ else [])
        problems += [f"{{info.name}}.{{m}}" for m in members if m in names]
for name in ("autograder", "reference", "course", "transformer", "solutions"):
    for entry in sys.path:
        if entry and pkgutil.os.path.exists(pkgutil.os.path.join(entry, name)):
            problems.append(f"on the path: {{entry}}/{{name}}")
raise RuntimeError(sorted(set(problems)))
""")
    assert found == "[]", found


@needs_bubblewrap
def test_a_fork_storm_is_capped_and_ends_with_its_process(worker):
    child = _learner(worker)
    message = _cell(child, (
        "import os\nstarted = 0\ntry:\n    for _ in range(3000):\n        if os.fork() == 0:\n"
        "            os.execv('/bin/sleep', ['sleep', '3133'])\n        started += 1\nexcept OSError:\n    pass\n"
        "raise RuntimeError(started)"), timeout=60)
    assert 0 < int(message) < LIMITS.processes, message
    child.close()
    worker.end_children()
    left = subprocess.run(["pgrep", "-f", "sleep 3133"], capture_output=True, text=True).stdout.split()
    assert not left, f"processes of the fork storm are still running: {left}"
    assert _cell(_learner(worker), "raise ValueError('fresh')") == "fresh"  # and the cap is not used up


@needs_bubblewrap
def test_only_an_allow_list_of_files_is_visible(worker, tmp_path):
    copy = tmp_path / "another_copy" / "solutions" / "ch02_attention"
    copy.mkdir(parents=True)
    (copy / "attention.py").write_text("SECRET")
    files = ["/etc/shadow", "/etc/passwd", "/root/.bashrc", str(copy / "attention.py"),
             str(REPO / "solutions" / "ch02_attention" / "attention.py"), str(REPO / "reference" / "attention.py"),
             str(REPO / "README.md")]
    folders = ["/", "/etc", "/root", "/home", str(REPO), str(REPO.parent), str(tmp_path), sys.prefix, sys.base_prefix]
    message = _cell(_learner(worker), (
        f"import os\nfound = [p for p in {files!r} if os.path.exists(p)]\n"
        f"listed = {{d: sorted(os.listdir(d)) for d in {folders!r} if os.path.isdir(d)}}\n"
        "raise RuntimeError(repr((found, listed)))"))
    found, listed = eval(message)  # noqa: S307 (the cell's own repr of lists and dicts of strings)
    assert found == [] and "SECRET" not in message
    assert listed.pop("/etc") == ["ld.so.cache"]
    # Of the Python installation, what imports need; not its configuration (etc/, share/, pip.conf).
    for prefix in {sys.prefix, sys.base_prefix}:
        assert set(listed[prefix]) <= {"bin", "lib", "lib64", "pyvenv.cfg"}, (prefix, listed[prefix])
    # Every other folder it sees holds only the way to what it needs: the system, Python, autograder.
    needed = [Path(p) for p in sandbox.SYSTEM if Path(p).exists()] + sandbox.visible_paths() + sandbox.interpreter_files()
    for folder, entries in listed.items():
        for entry in entries:
            path = Path(folder) / entry
            on_the_way = any(path == n or path in n.parents or n in path.parents for n in needed)
            assert on_the_way or entry in ("dev", "etc", "proc", "tmp", "run"), path



# Where a Python installation keeps configuration, and what an instructor's could hold there:
# each file carries a word that no output may show.
SECRETS = {
    "pip.conf": "[global]\nindex-url = https://grader:SECRET-4f1c@pypi.example.org/simple\n",
    "etc/pip.conf": "[global]\nextra-index-url = https://grader:SECRET-0b7d@pypi.example.org/simple\n",
    "etc/jupyter/nbgrader_config.py": "c.CourseDirectory.db_url = 'postgresql://grader:SECRET-9a2e@db/grades'\n",
    "etc/jupyter/jupyter_server_config.json": '{"IdentityProvider": {"token": "SECRET-77b3"}}\n',
    "share/jupyter/nbgrader_config.py": "c.Exchange.root = '/srv/SECRET-c41a'\n",
    ".env": "GRADEBOOK_URL=postgresql://grader:SECRET-5d0c@db/grades\n",
}
#: a learner who reads them, keeps them in a note of the feedback, and returns them as a test's output
READS_THE_INSTALLATION = f"""
import os, sys
found = []
for root in sorted({{sys.prefix, sys.base_prefix}}):
    for name in {sorted(SECRETS)!r}:
        try:
            found.append(open(os.path.join(root, name)).read())
        except OSError:
            pass
print(found)
raise RuntimeError(f'LOOKED {{found}}')
"""


@needs_bubblewrap
def test_no_secret_of_the_python_installation_reaches_the_learner(tmp_path):
    from tests.grader import small_class

    # A Python installation of its own: an environment whose packages are this one's, beside the
    # configuration files that an instructor's environment may hold.
    prefix = tmp_path / "environment"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True)
    python = prefix / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    ours = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    Path(site, "course.pth").write_text("".join(f"import site; site.addsitedir({p!r})\n" for p in ours))
    for name, text in SECRETS.items():
        (prefix / name).parent.mkdir(parents=True, exist_ok=True)
        (prefix / name).write_text(text)
    root = small_class.course(tmp_path / "course")
    nb = small_class.notebook("solved")
    nb.cells.insert(0, nbformat.v4.new_code_cell(READS_THE_INSTALLATION))
    answer = next(c for c in nb.cells if "def score_variance(" in c.source)
    answer.source = READS_THE_INSTALLATION.replace("raise RuntimeError", "def score_variance(q, k, scaled=False):\n"
                                                   "    raise RuntimeError")
    small_class.write_notebook(nb, submission_folder(root, "reader", small_class.ASSIGNMENT) / "attention.ipynb")
    env = dict(small_class.ENV, PATH=f"{prefix / 'bin'}{os.pathsep}{small_class.ENV['PATH']}")
    console = ""
    for command in (["grade", small_class.ASSIGNMENT, "--jobs", "1", *small_class.FAST],
                    ["export", small_class.ASSIGNMENT]):
        done = subprocess.run([str(python), "-m", "autograder", *command, "--root", str(root)], cwd=root, env=env,
                              capture_output=True, text=True, timeout=600)
        console += done.stdout + done.stderr
        assert done.returncode == 0, console
    outputs = {str(p): p.read_text() for folder in ("feedback", "grades") for p in (root / folder).rglob("*")
               if p.suffix in (".html", ".csv", ".json")}
    assert any("LOOKED []" in text for text in outputs.values()), outputs  # it looked, and found nothing
    assert any(p.endswith("results.json") for p in outputs) and any(p.endswith(".csv") for p in outputs), outputs
    outputs["console"] = console
    assert [where for where, text in outputs.items() if "SECRET-" in text] == []

@needs_bubblewrap
def test_the_learner_process_cannot_reach_the_workers_channel(worker):
    child = _learner(worker)
    # pidfd_open and pidfd_getfd (434 and 438 on every architecture) copy another process's
    # descriptor when ptrace would be allowed: the way to take over the worker's socket.
    message = _cell(child, (
        "import ctypes, os, stat\nlibc = ctypes.CDLL(None, use_errno=True)\nreached = []\n"
        "for pid in range(1, 300):\n    if pid == os.getpid():\n        continue\n"
        "    pidfd = libc.syscall(434, pid, 0)\n    if pidfd < 0:\n        continue\n"
        "    for fd in range(64):\n        got = libc.syscall(438, pidfd, fd, 0)\n        if got >= 0:\n"
        "            reached.append((pid, fd, stat.S_ISSOCK(os.fstat(got).st_mode)))\n            os.close(got)\n"
        "    os.close(pidfd)\n"
        "sockets = 0\nfor n in os.listdir('/proc/self/fd'):\n    try:\n"
        "        sockets += stat.S_ISSOCK(os.fstat(int(n)).st_mode)\n    except OSError:\n        pass\n"
        "raise RuntimeError(repr((reached, sockets, os.getppid())))"))
    reached, sockets, parent = eval(message)  # noqa: S307
    assert reached == [] and sockets == 1 and parent == 1, message
    # Nor can it end the worker: the first process of a namespace ignores what comes from inside.
    _cell(child, "import os, signal\nfor s in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):\n    os.kill(1, s)\n"
                 "raise RuntimeError('sent')")
    child.close()
    worker.end_children()
    assert worker.process.poll() is None


def test_a_worker_that_cannot_start_is_reported_at_once(monkeypatch):
    monkeypatch.setattr(sandbox, "worker_program", lambda: [sys.executable, "-S", "-m", "harness.worker"])
    start = time.monotonic()
    with pytest.raises(sandbox.WorkerBroken, match="cannot import harness") as broken:
        Worker(Limits(startup_seconds=120), [REPO])
    assert time.monotonic() - start < 30
    assert "No module named" in str(broken.value)  # the worker's own words


def _solved_cells():
    nb = complete(nbformat.read(release_path("attention"), as_version=4), to_nbgrader(source_path("attention")))
    return [c.source for c in nb.cells if c.cell_type == "code" and not c.metadata.get("nbgrader", {}).get("grade")]


def test_without_bubblewrap_grading_falls_back_and_says_so(monkeypatch):
    monkeypatch.setattr(sandbox, "sandboxed", lambda: False)
    assert "bubblewrap is not available" in sandbox.fallback_warning()
    assignment = Assignment.from_notebook("ch02_attention", "attention", to_nbgrader(source_path("attention")))
    outcomes, _ = grade_cells(assignment, _solved_cells(), LIMITS, [REPO], include_hidden=False)
    assert all(o.passed for o in outcomes), [o.message for o in outcomes]
    looping = _solved_cells() + ["def softmax(x, dim=-1):\n    while True:\n        pass\n"]
    # The looping function's test and one that does not call it: the attention tests call the softmax too,
    # and would only wait out the same limit again.
    judged = tuple(t for t in assignment.tests if t.grade_id in ("test_softmax", "test_score_variance"))
    start = time.monotonic()
    outcomes, _ = grade_cells(dataclasses.replace(assignment, tests=judged), looping, LIMITS, [REPO],
                              include_hidden=False)
    waited = time.monotonic() - start
    verdict = {o.grade_id: o for o in outcomes}
    assert not verdict["test_softmax"].passed and "did not finish" in verdict["test_softmax"].message
    # stopped in the learner's process by its own alarm, it says where it was running
    assert "(stopped in the loop on line 2 of your `softmax`, `while True:`)" in verdict["test_softmax"].message, \
        verdict["test_softmax"].message
    assert verdict["test_score_variance"].passed
    # The softmax is probed after it returns (it is trained through): the probes' time is granted once the
    # function has returned, so a softmax that never returns is stopped at the call's limit, twice (a call out
    # of time is made once more), not at the call's limit and the probes' together (26 s here when it was).
    assert waited < 2 * (LIMITS.call_seconds + PROBE_SECONDS), f"the looping softmax was stopped after {waited:.0f} s"


def test_a_call_out_of_time_is_made_once_more_before_it_costs_points(monkeypatch):
    # As when a neighbour's processes had the CPU: the first try of one call runs out of time.
    request, slowed = Channel.request, []

    def once_out_of_time(self, message, timeout):
        if message.get("op") == "call" and not slowed:
            slowed.append(message)
            raise WorkerTimeout()
        return request(self, message, timeout)

    monkeypatch.setattr(Channel, "request", once_out_of_time)
    assignment = Assignment.from_notebook("ch02_attention", "attention", to_nbgrader(source_path("attention")))
    tests = tuple(t for t in assignment.tests if any(f == "softmax" for _, f, _ in t.calls))
    outcomes, _ = grade_cells(dataclasses.replace(assignment, tests=tests), _solved_cells(), LIMITS, [REPO],
                              include_hidden=False)
    assert slowed and [o.passed for o in outcomes] == [True], [o.message for o in outcomes]

@needs_bubblewrap
@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_solution_runs_in_the_sandbox_without_a_note(notebook, source_nb):
    """The sandbox hides the repository: a demonstration cell that imports from it would raise for
    every learner and give each the same note about a cell of ours."""
    nb = source_nb(notebook)
    assignment = Assignment.from_notebook(chapter_of(notebook).assignment, notebook, nb)
    cells, _ = notebook_cells(nb, assignment.test_ids)
    outcomes, notes = grade_cells(assignment, cells, Limits(), [REPO])
    assert [o.grade_id for o in outcomes if not o.passed] == []
    assert notes == []


WHOLE_MATRIX = '''import math
import resource

import torch


def tiled_attention(q, k, v, block_size, causal=False):
    if block_size < 1 or (causal and q.shape[-2] != k.shape[-2]):
        raise ValueError("bad arguments")
    # the soft limit raised as far as it goes: only the worker's own limit, set before this code ran, is left
    which = resource.RLIMIT_DATA
    resource.setrlimit(which, (resource.getrlimit(which)[1],) * 2)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - lse[..., None]) @ v, lse
'''


VISIBLE_ALONE = '''

def tiled_attention(q, k, v, block_size, causal=False):
    if tuple(q.shape) == (24_576, 16) and block_size == 256:
        return _tiled(q, k, v, block_size, causal)
    return _whole(q, k, v, block_size, causal)
'''


@needs_bubblewrap
@pytest.mark.parametrize("hidden", [False, True], ids=["visible", "hidden"])
def test_tiled_attention_that_builds_the_score_matrix_fails_at_the_workers_memory_limit(hidden):
    """Chapter 9's long cases are decided outside the learner's process: a whole score matrix is refused by the
    kernel at the worker's limit, even from code that lifts its own call's budget, and the learner is told why.
    The hidden long case, of a length drawn from the course secret, is refused as the visible one is."""
    nb = to_nbgrader(source_path("hardware"))
    assignment = Assignment.from_notebook(chapter_of("hardware").assignment, "hardware", nb)
    cells, _ = notebook_cells(nb, assignment.test_ids)
    # hidden: the visible long case (public) is tiled by the solution's own code, every other case gets the matrix
    cells = [(c.replace("def tiled_attention(", "def _tiled(") + WHOLE_MATRIX.replace("def tiled_attention(", "def _whole(")
              + VISIBLE_ALONE if hidden else WHOLE_MATRIX) if "def tiled_attention(" in c else c for c in cells]
    tests = tuple(t for t in assignment.tests if t.grade_id == "test_tiled_attention")
    outcomes, _ = grade_cells(dataclasses.replace(assignment, tests=tests), cells, Limits(), [REPO],
                              include_hidden=hidden)
    (outcome,) = outcomes
    assert not outcome.passed
    if not hidden:
        assert "can't allocate memory" in outcome.message and "2.25 GiB" in outcome.message, outcome.message
        return
    # A hidden failure is not told. A whole matrix is right attention, so of the hidden cases only the long one can
    # fail it; the catalogue's "tiles the visible long case alone" shows, in the notebook's process, the message.
    assert outcome.hidden_failed and not outcome.message, outcome
