"""The adversarial class: what learners try against the grader, each with the grade and words it must get.

`tests/grader/test_grader.py` hands every entry of :data:`ATTACKS` in as one learner of chapter 2 and
grades them all in one run of `python -m autograder grade`: patching the checks' tools, hiding errors,
looping, exiting, eating memory, reading files that are not theirs (another copy of the course,
/etc/shadow), reaching the network, forging results, answering the grader's requests itself, reaching
through the tripwire for the course's own function, sending replies built to crash the grader, keeping
hidden cases for a later function, leaving huge sparse files, damaging the notebook, names and links
that reach outside.

Each learner is a sandboxed worker and a process per graded function, so attacks that meet the same
defence share a learner (patching the checks' tools and hiding errors; forging output and editing the
test cells; deleting and duplicating cells; two endless functions): one submission that does both
still has to get the one score that neither attack changes.

An entry is built from a solved notebook (:func:`answers` replaces answer cells and puts a cell of
mischief first) or from what :class:`Target` says about the course directory it is graded in. To add
an attack, add an entry; the test picks it up.

Points in chapter 2: softmax 2, scaled_dot_product_attention 4, additive_attention 3,
score_variance 2 (11 in all).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import nbformat

from course.layout import GRADEBOOK, GRADES, SOLUTIONS, SUBMITTED, TIMESTAMP, chapter, submission_folder
from course.notebook_format import complete, to_nbgrader, write_notebook
from tests.grader.small_class import graded_cells_only

ASSIGNMENT, NOTEBOOK = "ch02_attention", "attention"
CHAPTER = chapter(ASSIGNMENT)
POINTS = {"softmax": 2, "scaled_dot_product_attention": 4, "additive_attention": 3, "score_variance": 2}
FULL = float(sum(POINTS.values()))
# Wall-clock: the endless loop costs this much, and every other call must end within it while the other
# test worker keeps the second core busy.
CALL_TIMEOUT = 8

#: what the grader must make of a submission
GRADED = "graded"  # a score, and a feedback page holding the phrase
UNREADABLE = "unreadable"  # no notebook to grade: 0, and the phrase in its status, its page and the run's output
REFUSED = "refused"  # a learner folder the grader will not enter: the run's output says so, with the phrase


def without(*functions: str) -> float:
    """Full marks less the points of ``functions``: the score of a submission that loses exactly those."""
    return FULL - sum(POINTS[f] for f in functions)


@dataclass(frozen=True)
class Target:
    """Where the class is graded: what a submission may aim at."""

    root: Path  # the course directory
    port: int  # a listener on loopback that counts connections
    elsewhere: Path  # another copy of the course's solution on the same machine

    @property
    def secret_paths(self) -> list[str]:
        return [
            str(self.root / SOLUTIONS / ASSIGNMENT / f"{NOTEBOOK}.py"),
            str(self.root / GRADEBOOK),
            str(submission_folder(self.root, "perfect", ASSIGNMENT) / f"{NOTEBOOK}.ipynb"),
            str(CHAPTER.source),
            str(CHAPTER.reference_path),
        ]


Content = nbformat.NotebookNode | bytes


def as_notebook(folder: Path, content: Content, target: Target) -> None:
    """The usual hand-in: submitted/<learner>/<assignment>/<notebook>.ipynb (bytes written as they are)."""
    path = folder / ASSIGNMENT / f"{NOTEBOOK}.ipynb"
    path.parent.mkdir(parents=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(nbformat.writes(content))


@dataclass(frozen=True)
class Attack:
    learner: str  # the learner's folder name
    does: str  # what the learner tries, in a few words
    build: Callable[[Target], Content]  # the submission
    score: float  # what it must be given
    phrase: str  # words its feedback must contain (for REFUSED, the run's output on it)
    verdict: str = GRADED
    hand_in: Callable[[Path, Content, Target], None] = as_notebook  # writes it under submitted/<learner>/


# ----------------------------------------------------------------------------------------
# The notebooks attacks start from
# ----------------------------------------------------------------------------------------


def source():
    return to_nbgrader(CHAPTER.source)


def release():
    # Without the chapter's demonstrations (its plots), which every function's process would run
    # again for every learner: the attacks are in the cells added or replaced, never in those.
    return graded_cells_only(nbformat.read(CHAPTER.release, as_version=4))


def solved():
    return complete(release(), source())


def _answer(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def _with(replaced: dict[str, str] | None = None, before: str | None = None):
    """A solved notebook, with some answers replaced and a cell of mischief inserted first."""
    nb = solved()
    for grade_id, code in (replaced or {}).items():
        _answer(nb, grade_id).source = code
    if before is not None:
        nb.cells.insert(1, nbformat.v4.new_code_cell(before))
    return nb


def answers(replaced: dict[str, str] | None = None, before: str | None = None) -> Callable[[Target], Content]:
    """Build: a solved notebook, with ``replaced`` answers (grade_id -> code) and a cell ``before`` them all."""
    return lambda target: _with(replaced, before)


def release_with(first: str) -> Callable[[Target], Content]:
    """Build: the untouched release, with a cell of mischief first."""
    def build(target: Target) -> Content:
        nb = release()
        nb.cells.insert(1, nbformat.v4.new_code_cell(first))
        return nb
    return build


def raw(data: bytes) -> Callable[[Target], Content]:
    return lambda target: data


# ----------------------------------------------------------------------------------------
# The code attacks run
# ----------------------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------------------
# Submissions that need the target, or a hand-in of their own
# ----------------------------------------------------------------------------------------


def snoops(target: Target) -> Content:
    """It reads files and the network from inside a function, and leaves processes behind. It names
    subprocess and os.fork so that the scan does not follow them (it would charge them, and nothing
    would run): the sandbox must end the processes the scan does not see."""
    score_variance = f'''
import math, socket
def score_variance(q, k, scaled=False):
    stolen = 0
    for path in {target.secret_paths!r}:
        try:
            with open(path, "rb") as f:
                stolen += len(f.read(10)) > 0
        except OSError:
            pass
    try:
        socket.create_connection(("127.0.0.1", {target.port}), timeout=1).close()
        stolen += 1
    except OSError:
        pass
    scores = (q * k).sum(dim=-1)
    if scaled:
        scores = scores / math.sqrt(q.shape[-1])
    return scores.var().item() + 1000.0 * stolen
'''
    return _with({"score_variance": score_variance}, before=(
        "import importlib, time\n"
        "importlib.import_module('sub' + 'process').Popen(['sleep', '3131'], start_new_session=True)\n"
        "if vars(importlib.import_module('o' + 's'))['fork']() == 0:\n    time.sleep(3132)\n"))


def reads_secrets(target: Target) -> Content:
    paths = target.secret_paths + ["/etc/shadow", "/root/.bashrc", str(target.elsewhere)]
    return _with(before=(
        f"import os\nfound = []\nfor path in {paths!r}:\n"
        "    try:\n        with open(path) as f:\n            found.append((path, f.read(100)))\n"
        "    except OSError:\n        pass\nraise RuntimeError(f'FOUND:{found!r}')\n"))


def forges_results(target: Target) -> Content:
    """Test cells come from the instructor's notebook: editing them (while forging results) changes nothing."""
    nb = _with({"softmax": WRONG_SOFTMAX}, before=(
        "import json, os, sys\n"
        f"for d in ({str(target.root)!r}, '.', '/tmp'):\n"
        "    try:\n"
        f"        os.makedirs(os.path.join(d, {GRADES!r}), exist_ok=True)\n"
        f"        open(os.path.join(d, {GRADES!r}, '{ASSIGNMENT}.csv'), 'w').write('forged')\n"
        "        open(os.path.join(d, 'results.json'), 'w').write(json.dumps({'score': 11}))\n"
        "    except OSError:\n        pass\n"
        "print('All tests passed'); print(json.dumps({'result': 11})); sys.stdout.flush()\n"))
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade"):
            cell.source = "print('All tests passed')"
    return nb


def tests_deleted(target: Target) -> Content:
    """Its test cells deleted and every other cell duplicated."""
    nb = solved()
    nb.cells = [c for c in nb.cells if not c.metadata.get("nbgrader", {}).get("grade") for _ in (0, 1)]
    return nb


def duplicate_ids(target: Target) -> Content:
    nb = solved()
    for cell in nb.cells:
        cell.id = "same"
    return nb


def huge(target: Target) -> Content:
    nb = solved()
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", name="stdout", text="x" * (200 << 20))]
    return nb


def nbformat3(target: Target) -> Content:
    v3 = {
        "nbformat": 3, "nbformat_minor": 0, "metadata": {"name": ""},
        "worksheets": [{"cells": [
            {"cell_type": "code", "input": c.source, "language": "python", "outputs": [], "metadata": {}}
            for c in solved().cells if c.cell_type == "code"
        ], "metadata": {}}],
    }
    return json.dumps(v3).encode()


def without_ids(folder: Path, content: Content, target: Target) -> None:
    """nbformat 4.4, whose cells have no ids."""
    data = json.loads(nbformat.writes(content))
    for cell in data["cells"]:
        cell.pop("id", None)
    data["nbformat_minor"] = 4
    as_notebook(folder, json.dumps(data).encode(), target)


def renamed(folder: Path, content: Content, target: Target) -> None:
    write_notebook(content, folder / ASSIGNMENT / "my attention (copy).ipynb")


def with_sparse_files(folder: Path, content: Content, target: Target) -> None:
    as_notebook(folder, content, target)
    for name in (TIMESTAMP, "scratch.bin"):  # 256 MB each, none of it on disk
        with (folder / ASSIGNMENT / name).open("wb") as f:
            f.truncate(256 << 20)


def linked_folder(folder: Path, content: Content, target: Target) -> None:
    folder.symlink_to(target.root / SOLUTIONS)


def linked_notebook(folder: Path, content: Content, target: Target) -> None:
    (folder / ASSIGNMENT).mkdir(parents=True)
    (folder / ASSIGNMENT / f"{NOTEBOOK}.ipynb").symlink_to(target.root / SOLUTIONS / ASSIGNMENT / f"{NOTEBOOK}.py")


def as_given(target: Target) -> Content:
    return solved()


# ----------------------------------------------------------------------------------------
# The class
# ----------------------------------------------------------------------------------------

ATTACKS = (
    Attack("perfect", "nothing: the honest learner", as_given, FULL, "passed"),
    Attack("untouched", "hands in the release", lambda target: release(), 0, "not implemented yet"),
    Attack("always_equal", "returns an object equal to anything", answers({"softmax": (
        "class Anything:\n    def __eq__(self, other): return True\n    def __getattr__(self, name): return self\n"
        "    def __call__(self, *a, **k): return self\n"
        "def softmax(x, dim=-1):\n    return Anything()\n")}), without("softmax"), "not a torch.Tensor"),
    # The verdict is made in the grader's process.
    Attack("patches_allclose", "patches the checks' tools and hides its errors", answers(
        {"softmax": WRONG_SOFTMAX}, before=(
            "import torch, numpy, builtins\n"
            "torch.allclose = lambda *a, **k: True\nnumpy.allclose = lambda *a, **k: True\n"
            "torch.isclose = lambda a, b, **k: torch.ones_like(a, dtype=torch.bool)\n"
            "builtins.AssertionError = type('AssertionError', (Exception,), {})\n"
            "import sys, os, traceback\nsys.stderr = open(os.devnull, 'w')\nsys.excepthook = lambda *a: None\n"
            "traceback.print_exc = lambda *a, **k: None\n")),
           without("softmax"), "`softmax`&#x27;s result is wrong"),
    Attack("patches_matmul", "replaces the tensor's matrix product", answers(before=(
        "import torch\ntorch.Tensor.__matmul__ = lambda a, b: torch.zeros(a.shape[:-1] + b.shape[-1:], dtype=a.dtype)\n")),
           without("scaled_dot_product_attention", "additive_attention"), "scaled_dot_product_attention"),
    Attack("forbidden_builtin", "calls torch.softmax", answers(
        {"softmax": "import torch\ndef softmax(x, dim=-1):\n    return torch.softmax(x, dim=dim)\n"}),
           without("softmax"), "calls torch.softmax, which this exercise asks you to build yourself"),
    Attack("forbidden_reference", "imports the course's own softmax", answers({"softmax": (
        "from reference.attention import softmax as _theirs\n"
        "def softmax(x, dim=-1):\n    return _theirs(x, dim)\n")}), without("softmax"), "calls reference.attention.softmax"),
    # Each endless function costs its own points.
    Attack("endless_loop", "two functions that never return, one printing without end", answers({
        "score_variance": "def score_variance(q, k, scaled=False):\n    while True:\n        pass\n",
        "scaled_dot_product_attention": (
            "def scaled_dot_product_attention(q, k, v, mask=None):\n"
            "    while True:\n        print('All tests passed ' * 100)\n")}),
           without("score_variance", "scaled_dot_product_attention"), f"did not finish within {CALL_TIMEOUT} s"),
    # It asks for more memory than the limit allows (4 GB against 1.5 GB), which the machine would grant: only
    # the limit makes it a MemoryError. Asked for at once, so that the limit answers at once: a bomb growing by
    # 64 MB wrote 1.3 GB before its MemoryError, which on a loaded machine once took more than CALL_TIMEOUT.
    Attack("memory_bomb", "asks for more memory than the limit", answers({"additive_attention": (
        "def additive_attention(q, k, v, W_q, W_k, w_v, mask=None):\n    hog = bytearray(4 << 30)\n"
        "    return hog\n")}), without("additive_attention"), "MemoryError"),
    Attack("exits_in_a_cell", "calls sys.exit in a cell", answers(before="import sys\nsys.exit('bye')\n"),
           FULL, "raised SystemExit"),
    Attack("os_exit_in_softmax", "ends its process from a graded function",
           answers({"softmax": "import os\ndef softmax(x, dim=-1):\n    os._exit(0)\n"}),
           without("softmax"), "ended the Python process"),
    Attack("kills_itself_in_a_cell", "kills its own process in a cell",
           answers(before="import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"),
           FULL, "ended the Python process (exit, kill or crash) and was skipped"),
    Attack("loops_in_a_cell", "loops for ever in a cell", answers(before="while True:\n    pass\n"),
           FULL, "ran longer than"),
    Attack("snoops", "reads files and the network, leaves processes behind", snoops, FULL, "passed"),
    Attack("forges_results", "forges grade files and output, and edits the test cells", forges_results,
           without("softmax"), "`softmax`&#x27;s result is wrong"),
    Attack("tests_deleted", "deletes the test cells and duplicates the others", tests_deleted, FULL, "passed"),
    # Warnings, stderr and another default dtype: none of them costs a point.
    Attack("warns", "warns, writes to stderr, changes the default dtype", answers(
        before="import torch\ntorch.set_default_dtype(torch.float64)\n", replaced={"softmax": (
            "import sys, warnings\nimport torch\n"
            "def softmax(x, dim=-1):\n    warnings.warn('this is only a warning')\n    print('to stderr', file=sys.stderr)\n"
            "    shifted = x - x.amax(dim=dim, keepdim=True)\n    e = torch.exp(shifted)\n"
            "    return e / e.sum(dim=dim, keepdim=True)\n")}), FULL, "passed"),
    Attack("asks_for_input", "asks for input", answers(
        {"softmax": "def softmax(x, dim=-1):\n    return x * float(input('scale? '))\n"},
        before="name = input('your name: ')\n"), without("softmax"), "EOFError"),
    Attack("hidden_only_mistake", "is right only where the visible cases look", answers({"softmax": (
        # right for dim 0 and -1, the only ones the visible cases try
        "import torch\ndef softmax(x, dim=-1):\n    dim = 0 if dim == 0 else -1\n"
        "    e = torch.exp(x - x.amax(dim=dim, keepdim=True))\n    return e / e.sum(dim=dim, keepdim=True)\n")}),
           without("softmax"), "passes the visible tests but not the hidden ones"),
    Attack("invalid_json", "hands in a notebook cut short", raw(b'{"cells": [ {"cell_type": "code", "sou'),
           0, "not valid JSON", verdict=UNREADABLE),
    Attack("empty", "hands in an empty file", raw(b""), 0, "empty", verdict=UNREADABLE),
    Attack("huge", "hands in a notebook of 200 MB", huge, 0, "over the 64 MB limit", verdict=UNREADABLE),
    Attack("nbformat3", "hands in an nbformat 3 notebook", nbformat3, FULL, "nbformat 3"),
    Attack("missing_ids", "hands in cells without ids", as_given, FULL, "passed", hand_in=without_ids),
    Attack("duplicate_ids", "gives every cell the same id", duplicate_ids, FULL, "passed"),
    Attack("renamed", "hands in its notebook under another name", as_given, FULL, "in place of attention.ipynb",
           hand_in=renamed),
    # Replies written by learner code: the course's answer is nowhere in its process to forge one.
    # Both read the source of the scan before anything runs: the frames and closures they reach into.
    Attack("forges_replies", "answers the grader's requests itself", release_with(FORGE),
           0, "own packages hold its checks and oracles"),
    Attack("unwraps_tripwire", "reaches through the tripwire, or memory, for the course's softmax",
           answers({"softmax": UNWRAP}), without("softmax"), "calls reference.attention.softmax"),
    # Malformed replies cost their own submission, with a note; the rest of the class is graded.
    Attack("replies_nested", "replies with JSON nested 200,000 deep", answers(before=REPLIES_NESTED),
           0, "a reply it cannot read"),
    Attack("replies_huge", "replies with a frame that claims 2**62 bytes", answers(before=REPLIES_HUGE),
           0, "a reply it cannot read"),
    Attack("replies_wrong_types", "replies with fields of the wrong types", answers(before=REPLIES_WRONG_TYPES),
           0, "a reply it cannot read"),
    Attack("reads_secrets", "reads the solutions, the gradebook, another copy of the course, /etc/shadow",
           reads_secrets, FULL, "FOUND:[]"),
    Attack("sparse_files", "leaves two sparse files of 256 MB beside its notebook", as_given, FULL, "passed",
           hand_in=with_sparse_files),
    # What one function's process saw (hidden cases among it) is gone before the next one starts.
    Attack("hoards_hidden_cases", "keeps a hidden case for a later function", answers({
        # Only a hidden case of softmax has every entry equal: its process writes that down.
        "softmax": ("import torch\ndef softmax(x, dim=-1):\n    if x.numel() > 1 and bool((x == x.flatten()[0]).all()):\n"
                    "        open('/tmp/hoard', 'a').write('a hidden case of softmax')\n"
                    "    e = torch.exp(x - x.amax(dim=dim, keepdim=True))\n    return e / e.sum(dim=dim, keepdim=True)\n"),
        "scaled_dot_product_attention": (
            "def scaled_dot_product_attention(q, k, v, mask=None):\n    try:\n        seen = open('/tmp/hoard').read()\n"
            "    except OSError:\n        seen = 'none'\n    raise RuntimeError('HOARD:' + seen)\n"),
    }), without("scaled_dot_product_attention"), "HOARD:none"),
    # Names that try to escape, and links to what is not theirs.
    Attack("x; rm -rf ~", "names its folder as a shell command", as_given, 0, "not a plain name", verdict=REFUSED),
    Attack("linked_folder", "hands in a link to the solutions as its folder", as_given, 0, "link", verdict=REFUSED,
           hand_in=linked_folder),
    Attack("linked_notebook", "hands in a link to the solution as its notebook", as_given, 0, "link",
           verdict=REFUSED, hand_in=linked_notebook),
)


def hand_in_all(target: Target) -> None:
    """Every attack under ``target.root``/submitted/."""
    for attack in ATTACKS:
        attack.hand_in(target.root / SUBMITTED / attack.learner, attack.build(target), target)
