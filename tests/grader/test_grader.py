"""The grader cannot be fooled: a class of adversarial submissions, graded end to end.

One run of `python -m autograder grade ch02_attention` over a course directory in which every
learner tries something: patching the checks' tools, hiding errors, looping, exiting, eating
memory, reading files that are not theirs (another copy of the course, /etc/shadow), reaching
the network, forging results, answering the grader's requests itself, reaching through the
tripwire for the course's own function, sending replies built to crash the grader, keeping
hidden cases for a later function, leaving huge sparse files, damaging the notebook. For each,
the expected score and message are asserted; the honest learners in the same run are graded
normally; no submitted file changes.

Each learner is a sandboxed worker and a process per graded function, so attacks that meet the
same defence share a learner (patching the checks' tools and hiding errors; forging output and
editing the test cells; deleting and duplicating cells; two endless functions): one submission
that does both still has to get the one score that neither attack changes. That grading the same
class again gives the same grades is the determinism test's (tests/grader/test_determinism.py).

Points in chapter 2: softmax 2, scaled_dot_product_attention 4, additive_attention 3,
score_variance 2 (11 in all).
"""
from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import nbformat
import pytest

from autograder.assignment import Assignment
from autograder.outputs.gradebook import open_gradebook
from autograder.sandbox import sandboxed
from course.layout import NBGRADER_CONFIG, REPO, chapter
from course.notebook_format import complete, secret_lines, to_nbgrader, write_notebook
from tests.grader.small_class import graded_cells_only, without_demonstrations

ASSIGNMENT, NOTEBOOK = "ch02_attention", "attention"
CHAPTER = chapter(ASSIGNMENT)
FULL = 11.0
POINTS = {"softmax": 2, "scaled_dot_product_attention": 4, "additive_attention": 3, "score_variance": 2}
# Wall-clock: the endless loop costs this much, and every other call must end within it while the other
# test worker keeps the second core busy.
CALL_TIMEOUT = 8
LIMITS = ["--call-timeout", str(CALL_TIMEOUT), "--submission-timeout", "90", "--memory-mb", "1536"]

WRONG_SOFTMAX = "def softmax(x, dim=-1):\n    return x * 0\n"

# A cell that takes over whatever channel to the grader its process can find (pipes and sockets
# among its descriptors), reading requests and writing replies itself.
TAKEOVER = r'''
import fcntl, json, os, select, stat, struct, sys
def _channels():
    found = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            continue
        if fd > 2 and (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
            found.append((fd, fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE))
    return [f for f, m in found if m != os.O_WRONLY], [f for f, m in found if m != os.O_RDONLY]
_readers, _writers = _channels()
def _send_raw(data):
    for fd in _writers:
        try:
            os.write(fd, data)
        except OSError:
            pass
def _send(message):
    data = json.dumps(message).encode()
    _send_raw(struct.pack(">Q", len(data)) + data)
def _exactly(fd, n):
    out = b""
    while len(out) < n:
        chunk = os.read(fd, n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return out
def _requests():
    while True:
        ready, _, _ = select.select(_readers, [], [], 60)
        if not ready:
            return
        (size,) = struct.unpack(">Q", _exactly(ready[0], 8))
        yield json.loads(_exactly(ready[0], size))
'''

# Every function raises NotImplementedError, but the first cell answers every case itself, with
# the course's own function of that name wherever it can find one (through any wrapper).
FORGE = TAKEOVER + r'''
def _answer(request):
    from harness import wire
    from autograder.framework import call_learner
    if request.get("op") != "call":
        return {"ok": True}
    try:
        case = wire.decode(request["case"], wire.REQUEST_TAGS)
    except AttributeError:
        case = wire.decode(request["case"])
    name, frame = request.get("function"), sys._getframe()
    while name is None and frame is not None:  # whatever serves the requests knows the function's name
        name = frame.f_locals.get("function") if isinstance(frame.f_locals.get("function"), str) else None
        frame = frame.f_back
    fn = getattr(sys.modules["reference.attention"], name)
    while getattr(fn, "__closure__", None):
        inner = [c.cell_contents for c in fn.__closure__ if callable(c.cell_contents)]
        if not inner:
            break
        fn = inner[0]
    return {"result": wire.encode(call_learner(fn, case))}
_send({"ok": True})  # the reply to this very cell
for _request in _requests():
    try:
        _send(_answer(_request))
    except BaseException as exc:
        _send({"error": [type(exc).__name__, str(exc), ""]})
'''

# Replies to the first case with something that is not a reply: each once crashed the grader.
_MALFORMED = TAKEOVER + r'''
_send({"ok": True})  # the reply to this very cell
for _request in _requests():
    if _request.get("op") == "call":
        _send_raw(PAYLOAD)
        break
    _send({"ok": True})
'''
_FRAME = "(lambda d: struct.pack('>Q', len(d)) + d)"
REPLIES_NESTED = _MALFORMED.replace("PAYLOAD", _FRAME + "(b'{\"result\":' + b'[' * 200000 + b']' * 200000 + b'}')")
REPLIES_HUGE = _MALFORMED.replace("PAYLOAD", "struct.pack('>Q', 2 ** 62) + b'{}'")
REPLIES_WRONG_TYPES = _MALFORMED.replace(
    "PAYLOAD", _FRAME + "(json.dumps({'error': 7, 'result': {'$tensor': ['float32', [0, 10 ** 30], 5]}}).encode())")

# A softmax that reaches through the tripwire, or anywhere in memory, for the course's own.
UNWRAP = r'''
import gc, types
_found = []
def softmax(x, dim=-1):
    if not _found:
        import reference.attention as ref
        candidates = [getattr(ref, "softmax", None)] + [
            o for o in gc.get_objects() if isinstance(o, types.FunctionType) and o.__name__ == "softmax"
            and str(o.__module__).startswith("reference")]
        for fn in candidates:
            while getattr(fn, "__closure__", None):  # a wrapper: look inside
                inner = [c.cell_contents for c in fn.__closure__ if isinstance(c.cell_contents, types.FunctionType)]
                if not inner:
                    break
                fn = inner[0]
            if fn is not None and "amax" in fn.__code__.co_names:
                _found.append(fn)
                break
        else:
            raise LookupError("the course's softmax is nowhere to be found")
    return _found[0](x, dim)
'''


def _source():
    return to_nbgrader(CHAPTER.source)


def _release():
    # Without the chapter's demonstrations (its plots), which every function's process would run
    # again for every learner: the attacks are in the cells added or replaced, never in those.
    return graded_cells_only(nbformat.read(CHAPTER.release, as_version=4))


def _solved():
    return complete(_release(), _source())


def _answer(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def _with(answers: dict[str, str] | None = None, before: str | None = None):
    """A solved notebook, with some answers replaced and a cell of mischief inserted first."""
    nb = _solved()
    for grade_id, source in (answers or {}).items():
        _answer(nb, grade_id).source = source
    if before is not None:
        nb.cells.insert(1, nbformat.v4.new_code_cell(before))
    return nb


class Listener:
    """A TCP server on loopback that records whether anyone connected."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while self.running:
            try:
                conn, _ = self.sock.accept()
                self.connections += 1
                conn.close()
            except OSError:
                continue

    def close(self):
        self.running = False
        self.thread.join(timeout=2)
        self.sock.close()


def _release_with(first: str):
    """The untouched release, with a cell of mischief first."""
    nb = _release()
    nb.cells.insert(1, nbformat.v4.new_code_cell(first))
    return nb


def _submissions(root: Path, port: int, elsewhere: Path) -> dict[str, object]:
    """learner -> notebook (or raw bytes / a special marker) to hand in."""
    secret_paths = [
        str(root / "solutions" / ASSIGNMENT / f"{NOTEBOOK}.py"),
        str(root / "gradebook.db"),
        str(root / "submitted" / "perfect" / ASSIGNMENT / f"{NOTEBOOK}.ipynb"),
        str(CHAPTER.source),
        str(CHAPTER.reference_path),
    ]
    snoop = f'''
import math, socket
def score_variance(q, k, scaled=False):
    stolen = 0
    for path in {secret_paths!r}:
        try:
            with open(path, "rb") as f:
                stolen += len(f.read(10)) > 0
        except OSError:
            pass
    try:
        socket.create_connection(("127.0.0.1", {port}), timeout=1).close()
        stolen += 1
    except OSError:
        pass
    scores = (q * k).sum(dim=-1)
    if scaled:
        scores = scores / math.sqrt(q.shape[-1])
    return scores.var().item() + 1000.0 * stolen
'''
    v3 = {
        "nbformat": 3, "nbformat_minor": 0, "metadata": {"name": ""},
        "worksheets": [{"cells": [
            {"cell_type": "code", "input": c.source, "language": "python", "outputs": [], "metadata": {}}
            for c in _solved().cells if c.cell_type == "code"
        ], "metadata": {}}],
    }
    no_ids = _solved()
    duplicate_ids = _solved()
    for cell in duplicate_ids.cells:
        cell.id = "same"
    # Test cells come from the instructor's notebook: editing them (while forging results, below),
    # or deleting them and duplicating every other cell, changes nothing.
    forges_results = _with({"softmax": WRONG_SOFTMAX}, before=(
        "import json, os, sys\n"
        f"for d in ({str(root)!r}, '.', '/tmp'):\n"
        "    try:\n"
        "        os.makedirs(os.path.join(d, 'grades'), exist_ok=True)\n"
        "        open(os.path.join(d, 'grades', 'ch02_attention.csv'), 'w').write('forged')\n"
        "        open(os.path.join(d, 'results.json'), 'w').write(json.dumps({'score': 11}))\n"
        "    except OSError:\n        pass\n"
        "print('All tests passed'); print(json.dumps({'result': 11})); sys.stdout.flush()\n"))
    for cell in forges_results.cells:
        if cell.metadata.get("nbgrader", {}).get("grade"):
            cell.source = "print('All tests passed')"
    tests_deleted = _solved()
    tests_deleted.cells = [c for c in tests_deleted.cells if not c.metadata.get("nbgrader", {}).get("grade") for _ in (0, 1)]
    huge = _solved()
    huge.cells[2].outputs = [nbformat.v4.new_output("stream", name="stdout", text="x" * (200 << 20))]
    return {
        "perfect": _solved(),
        "untouched": _release(),
        "always_equal": _with({"softmax": (
            "class Anything:\n    def __eq__(self, other): return True\n    def __getattr__(self, name): return self\n"
            "    def __call__(self, *a, **k): return self\n"
            "def softmax(x, dim=-1):\n    return Anything()\n")}),
        # The checks' tools patched and the errors hidden: the verdict is made in the grader's process.
        "patches_allclose": _with({"softmax": WRONG_SOFTMAX}, before=(
            "import torch, numpy, builtins\n"
            "torch.allclose = lambda *a, **k: True\nnumpy.allclose = lambda *a, **k: True\n"
            "torch.isclose = lambda a, b, **k: torch.ones_like(a, dtype=torch.bool)\n"
            "builtins.AssertionError = type('AssertionError', (Exception,), {})\n"
            "import sys, os, traceback\nsys.stderr = open(os.devnull, 'w')\nsys.excepthook = lambda *a: None\n"
            "traceback.print_exc = lambda *a, **k: None\n")),
        "patches_matmul": _with(before=(
            "import torch\ntorch.Tensor.__matmul__ = lambda a, b: torch.zeros(a.shape[:-1] + b.shape[-1:], dtype=a.dtype)\n")),
        "forbidden_builtin": _with({"softmax": "import torch\ndef softmax(x, dim=-1):\n    return torch.softmax(x, dim=dim)\n"}),
        "forbidden_reference": _with({"softmax": (
            "from reference.attention import softmax as _theirs\n"
            "def softmax(x, dim=-1):\n    return _theirs(x, dim)\n")}),
        # Two functions that never return, one of them printing without end: each costs its own points.
        "endless_loop": _with({"score_variance": "def score_variance(q, k, scaled=False):\n    while True:\n        pass\n",
                               "scaled_dot_product_attention": (
            "def scaled_dot_product_attention(q, k, v, mask=None):\n"
            "    while True:\n        print('All tests passed ' * 100)\n")}),
        # It asks for more memory than the limit allows (4 GB against 1.5 GB), which the machine would grant: only
        # the limit makes it a MemoryError. Asked for at once, so that the limit answers at once: a bomb growing by
        # 64 MB wrote 1.3 GB before its MemoryError, which on a loaded machine once took more than CALL_TIMEOUT.
        "memory_bomb": _with({"additive_attention": (
            "def additive_attention(q, k, v, W_q, W_k, w_v, mask=None):\n    hog = bytearray(4 << 30)\n"
            "    return hog\n")}),
        "exits_in_a_cell": _with(before="import sys\nsys.exit('bye')\n"),
        "os_exit_in_softmax": _with({"softmax": "import os\ndef softmax(x, dim=-1):\n    os._exit(0)\n"}),
        "kills_itself_in_a_cell": _with(before="import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"),
        "loops_in_a_cell": _with(before="while True:\n    pass\n"),
        # It reads files and the network from inside a function, and leaves processes behind. It
        # names subprocess and os.fork so that the scan does not follow them (it would charge them,
        # and nothing would run): the sandbox must end the processes the scan does not see.
        "snoops": _with({"score_variance": snoop}, before=(
            "import importlib, time\n"
            "importlib.import_module('sub' + 'process').Popen(['sleep', '3131'], start_new_session=True)\n"
            "if vars(importlib.import_module('o' + 's'))['fork']() == 0:\n    time.sleep(3132)\n")),
        "forges_results": forges_results,
        "tests_deleted": tests_deleted,
        # Warnings, stderr and another default dtype: none of them costs a point.
        "warns": _with(before="import torch\ntorch.set_default_dtype(torch.float64)\n", answers={"softmax": (
            "import sys, warnings\nimport torch\n"
            "def softmax(x, dim=-1):\n    warnings.warn('this is only a warning')\n    print('to stderr', file=sys.stderr)\n"
            "    shifted = x - x.amax(dim=dim, keepdim=True)\n    e = torch.exp(shifted)\n"
            "    return e / e.sum(dim=dim, keepdim=True)\n")}),
        "asks_for_input": _with({"softmax": "def softmax(x, dim=-1):\n    return x * float(input('scale? '))\n"},
                                before="name = input('your name: ')\n"),
        "hidden_only_mistake": _with({"softmax": (  # right for dim 0 and -1, the only ones the visible cases try
            "import torch\ndef softmax(x, dim=-1):\n    dim = 0 if dim == 0 else -1\n"
            "    e = torch.exp(x - x.amax(dim=dim, keepdim=True))\n    return e / e.sum(dim=dim, keepdim=True)\n")}),
        "invalid_json": b'{"cells": [ {"cell_type": "code", "sou',
        "empty": b"",
        "nbformat3": json.dumps(v3).encode(),
        "missing_ids": ("strip-ids", no_ids),
        "duplicate_ids": duplicate_ids,
        "renamed": ("rename", _solved()),
        "huge": huge,
        "forges_replies": _release_with(FORGE),
        "unwraps_tripwire": _with({"softmax": UNWRAP}),
        "replies_nested": _with(before=REPLIES_NESTED),
        "replies_huge": _with(before=REPLIES_HUGE),
        "replies_wrong_types": _with(before=REPLIES_WRONG_TYPES),
        "reads_secrets": _with(before=(
            f"import os\nfound = []\nfor path in {secret_paths + ['/etc/shadow', '/root/.bashrc', str(elsewhere)]!r}:\n"
            "    try:\n        with open(path) as f:\n            found.append((path, f.read(100)))\n"
            "    except OSError:\n        pass\nraise RuntimeError(f'FOUND:{found!r}')\n")),
        "sparse_files": ("sparse", _solved()),
        "hoards_hidden_cases": _with({
            # Only a hidden case of softmax has every entry equal: its process writes that down.
            "softmax": ("import torch\ndef softmax(x, dim=-1):\n    if x.numel() > 1 and bool((x == x.flatten()[0]).all()):\n"
                        "        open('/tmp/hoard', 'a').write('a hidden case of softmax')\n"
                        "    e = torch.exp(x - x.amax(dim=dim, keepdim=True))\n    return e / e.sum(dim=dim, keepdim=True)\n"),
            "scaled_dot_product_attention": (
                "def scaled_dot_product_attention(q, k, v, mask=None):\n    try:\n        seen = open('/tmp/hoard').read()\n"
                "    except OSError:\n        seen = 'none'\n    raise RuntimeError('HOARD:' + seen)\n"),
        }),
    }


def _digest(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.sha256(f.read(1 << 20)).hexdigest() + str(path.stat().st_size)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    if not sandboxed():
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap); .ci/run installs it")
    root = tmp_path_factory.mktemp("course")
    (root / "solutions" / ASSIGNMENT).mkdir(parents=True)
    (root / "solutions" / ASSIGNMENT / CHAPTER.source.name).write_text(without_demonstrations(CHAPTER.source.read_text()))
    shutil.copy(REPO / NBGRADER_CONFIG, root)
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    # A gradebook already there, as in a real course, so that snooping has a target.
    with open_gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        gradebook.prepare(Assignment.from_notebook(ASSIGNMENT, NOTEBOOK, _source()), _source())
    # Another copy of the course on the same machine, which no submission may read.
    elsewhere = tmp_path_factory.mktemp("another_copy") / "solutions" / ASSIGNMENT / f"{NOTEBOOK}.py"
    elsewhere.parent.mkdir(parents=True)
    shutil.copy(CHAPTER.source, elsewhere)
    listener = Listener()
    for learner, content in _submissions(root, listener.port, elsewhere).items():
        folder = root / "submitted" / learner / ASSIGNMENT
        folder.mkdir(parents=True)
        path = folder / f"{NOTEBOOK}.ipynb"
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, tuple) and content[0] == "rename":
            write_notebook(content[1], folder / "my attention (copy).ipynb")
        elif isinstance(content, tuple) and content[0] == "sparse":
            write_notebook(content[1], path)
            for name in ("timestamp.txt", "scratch.bin"):  # 256 MB each, none of it on disk
                with (folder / name).open("wb") as f:
                    f.truncate(256 << 20)
        elif isinstance(content, tuple) and content[0] == "strip-ids":
            data = json.loads(nbformat.writes(content[1]))
            for cell in data["cells"]:
                cell.pop("id", None)
            data["nbformat_minor"] = 4
            path.write_text(json.dumps(data))
        else:
            path.write_text(nbformat.writes(content))
    # Names that try to escape, and links to what is not theirs.
    weird = root / "submitted" / "x; rm -rf ~" / ASSIGNMENT
    weird.mkdir(parents=True)
    write_notebook(_solved(), weird / f"{NOTEBOOK}.ipynb")
    (root / "submitted" / "linked_folder").symlink_to(root / "solutions")
    linked = root / "submitted" / "linked_notebook" / ASSIGNMENT
    linked.mkdir(parents=True)
    (linked / f"{NOTEBOOK}.ipynb").symlink_to(root / "solutions" / ASSIGNMENT / f"{NOTEBOOK}.py")

    before = {p: _digest(p) for p in (root / "submitted").rglob("*") if p.is_file() and not p.is_symlink()}
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", ASSIGNMENT, "--jobs", "2", "--root", str(root), *LIMITS],
        capture_output=True, text=True, timeout=1200, env=env, cwd=root,
    )
    listener.close()
    assert done.returncode == 0, done.stdout + done.stderr
    after = {p: _digest(p) for p in before}
    with (root / "grades" / f"{ASSIGNMENT}.csv").open() as f:
        rows = {r["learner"]: r for r in csv.DictReader(f)}
    return {"root": root, "rows": rows, "stdout": done.stdout, "stderr": done.stderr, "before": before,
            "after": after, "connections": listener.connections}


def feedback(graded, learner) -> str:
    return (graded["root"] / "feedback" / learner / ASSIGNMENT / f"{NOTEBOOK}.html").read_text()


def score(graded, learner) -> float:
    return float(graded["rows"][learner]["score"])


EXPECTED = {
    # learner: (score, phrase the feedback must contain)
    "perfect": (FULL, "passed"),
    "untouched": (0, "not implemented yet"),
    "always_equal": (FULL - 2, "not a torch.Tensor"),
    "patches_allclose": (FULL - 2, "`softmax`&#x27;s result is wrong"),
    "patches_matmul": (POINTS["softmax"] + POINTS["score_variance"], "scaled_dot_product_attention"),
    "forbidden_builtin": (FULL - 2, "calls torch.softmax, which this exercise asks you to build yourself"),
    "forbidden_reference": (FULL - 2, "calls reference.attention.softmax"),
    "endless_loop": (FULL - 2 - 4, f"did not finish within {CALL_TIMEOUT} s"),
    "memory_bomb": (FULL - 3, "MemoryError"),
    "exits_in_a_cell": (FULL, "raised SystemExit"),
    "os_exit_in_softmax": (FULL - 2, "ended the Python process"),
    "kills_itself_in_a_cell": (FULL, "ended the Python process (exit, kill or crash) and was skipped"),
    "loops_in_a_cell": (FULL, "ran longer than"),
    "snoops": (FULL, "passed"),
    "forges_results": (FULL - 2, "`softmax`&#x27;s result is wrong"),
    "tests_deleted": (FULL, "passed"),
    "warns": (FULL, "passed"),
    "asks_for_input": (FULL - 2, "EOFError"),
    "hidden_only_mistake": (FULL - 2, "passes the visible tests but not the hidden ones"),
    "nbformat3": (FULL, "nbformat 3"),
    "missing_ids": (FULL, "passed"),
    "duplicate_ids": (FULL, "passed"),
    "renamed": (FULL, "in place of attention.ipynb"),
    # Replies written by learner code: the course's answer is nowhere in its process to forge one.
    # Both read the source of the scan before anything runs: the frames and closures they reach into.
    "forges_replies": (0, "own packages hold its checks and oracles"),
    "unwraps_tripwire": (FULL - 2, "calls reference.attention.softmax"),
    # Malformed replies cost their own submission, with a note; the rest of the class is graded.
    "replies_nested": (0, "a reply it cannot read"),
    "replies_huge": (0, "a reply it cannot read"),
    "replies_wrong_types": (0, "a reply it cannot read"),
    "reads_secrets": (FULL, "FOUND:[]"),
    "sparse_files": (FULL, "passed"),
    # What one function's process saw (hidden cases among it) is gone before the next one starts.
    "hoards_hidden_cases": (FULL - 4, "HOARD:none"),
}

NOT_GRADED = {
    "invalid_json": "not valid JSON",
    "empty": "empty",
    "huge": "over the 64 MB limit",
}


@pytest.mark.parametrize("learner", sorted(EXPECTED))
def test_each_submission_gets_the_expected_score_and_message(graded, learner):
    expected_score, phrase = EXPECTED[learner]
    assert score(graded, learner) == pytest.approx(expected_score), graded["rows"][learner]
    assert phrase in feedback(graded, learner)


@pytest.mark.parametrize("learner", sorted(NOT_GRADED))
def test_a_broken_notebook_scores_zero_with_the_reason(graded, learner):
    assert score(graded, learner) == 0
    assert NOT_GRADED[learner] in graded["rows"][learner]["status"]
    assert NOT_GRADED[learner] in feedback(graded, learner)
    assert f"failed to grade {learner!r}" in graded["stdout"]


def test_names_and_links_that_reach_outside_are_refused(graded):
    for learner, reason in [("x; rm -rf ~", "not a plain name"), ("linked_folder", "link"), ("linked_notebook", "link")]:
        assert f"failed to grade {learner!r}" in graded["stdout"]
        assert reason in graded["stdout"].split(f"failed to grade {learner!r}")[1].splitlines()[0]
        assert learner not in graded["rows"] or float(graded["rows"][learner]["score"]) == 0
    assert not (graded["root"] / "feedback" / "x; rm -rf ~").exists()


def test_no_network_and_no_foreign_files_from_the_sandbox(graded):
    assert graded["connections"] == 0
    assert score(graded, "snoops") == FULL  # its answer would be off by 1000 for each file it could read


def test_no_process_outlives_its_submission(graded):
    left = subprocess.run(["pgrep", "-f", "sleep 313[12]"], capture_output=True, text=True).stdout.split()
    assert not left, f"processes started by a submission are still running: {left}"


def test_submitted_files_are_unchanged(graded):
    assert graded["before"] == graded["after"]


def test_only_the_notebook_is_copied_to_autograded(graded):
    folder = graded["root"] / "autograded" / "sparse_files" / ASSIGNMENT
    assert sorted(p.name for p in folder.iterdir()) == [f"{NOTEBOOK}.ipynb"]  # the sparse timestamp is no timestamp
    on_disk = sum(p.stat().st_blocks * 512 for p in (graded["root"] / "autograded").rglob("*") if p.is_file())
    assert on_disk < 64 << 20, on_disk
    assert not (graded["root"] / "autograded" / "huge" / ASSIGNMENT / f"{NOTEBOOK}.ipynb").read_text().count("x" * 1000)


def test_the_set_up_is_checked_before_grading(graded):
    assert "grading the instructor's solution" in graded["stderr"]


def test_forged_files_do_not_touch_the_real_grades(graded):
    assert "forged" not in (graded["root"] / "grades" / f"{ASSIGNMENT}.csv").read_text()
    assert not (graded["root"] / "results.json").exists()


def test_feedback_never_shows_hidden_tests(graded):
    secrets = secret_lines(_source())
    hidden_labels = ["rows sit near +2000", "every entry equal", "(2, 2, 3, 7, 32)"]
    for path in (graded["root"] / "feedback").rglob("*.html"):
        text = path.read_text()
        assert "hidden=True" not in text
        # Feedback may quote a learner's own line; a solution line they did not write is a leak.
        learner = path.relative_to(graded["root"] / "feedback").parts[0]
        written = "".join(p.read_text() for p in (graded["root"] / "submitted" / learner).rglob("*.ipynb"))
        assert not [s for s in secrets if s in text and json.dumps(s)[1:-1] not in written], path
        assert not [s for s in hidden_labels if s in text], path


def test_the_gradebook_holds_every_graded_learner(graded):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{graded['root'] / 'gradebook.db'}") as gb:
        scores = {s.student.id: s.score for s in gb.assignment_submissions(ASSIGNMENT)}
    for learner, (expected_score, _) in EXPECTED.items():
        assert scores[learner] == pytest.approx(expected_score), learner
    assert "x; rm -rf ~" not in scores


def test_what_cannot_be_judged_from_the_source_is_flagged_for_review(graded):
    assert "gc" in graded["rows"]["unwraps_tripwire"]["flags"]  # it searched memory with gc.get_objects
    assert graded["rows"]["perfect"]["flags"] == ""
    assert "For the instructor to review" in feedback(graded, "unwraps_tripwire")
    assert "to review in 'unwraps_tripwire'" in graded["stdout"]


def test_the_run_ends_with_a_summary(graded):
    assert "graded" in graded["stdout"] and "mean score" in graded["stdout"]
    assert "grading ch02_attention" in graded["stderr"]  # the progress bar
