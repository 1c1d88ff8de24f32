"""The learner's side of grading: `python -m harness.worker`, run inside the sandbox.

Two kinds of process, so that the learner's code can never speak for the worker:

* **The worker** holds the channel to the grader and never runs learner code. It sets the
  resource limits, connects to the grader's socket, imports torch once, and then only obeys two
  requests: ``fork`` (start a process for the learner's code and hand the grader a socket to it)
  and ``end`` (end that process and everything it started). In the sandbox it keeps one
  capability, inside its own user namespace: to mount, which each learner process needs once.
  It is not dumpable, so no process of the same user may trace it or open its descriptors; in
  the sandbox it is the first process of its own process namespace, which no process inside
  may signal, and whose exit ends them all.
* **A learner process**, one per graded function, forked from the warm worker (torch already
  imported, no learner code ever run, no reference code ever loaded). Before anything else it
  mounts a new /tmp in a mount namespace of its own (gone with its last process, so nothing it
  writes there reaches the next one), drops every capability, and installs a system call filter
  (:mod:`harness.seccomp`), so that nothing it leaves in the kernel can reach the next one.
  The grader sends it, over its own socket, the course's reference modules with only the
  helpers its function uses (every other graded function's name, its own included, leads to a
  stub), the names it may not call, the submission's cells, and then the cases; it replies
  with plain data. It never judges anything.

What remains possible in principle: code in the learner's process can answer the cases by any
route it likes, for instance by replying on its own socket itself, or by reaching a forbidden
built-in without passing its tripwire. That is the same as the graded function returning those
answers: the grader judges them in its own process, and the course's answer for the function
being graded is nowhere in the learner's process to be returned. The shortcuts that matter are
judged from the submission's source, in the grader's process (:mod:`autograder.source.shortcuts`).
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib
import importlib.abc
import importlib.util
import os
import signal
import socket
import sys
import time
import traceback

try:
    import resource  # Unix only
except ImportError:  # pragma: no cover - Windows
    resource = None  # type: ignore[assignment]

_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 1, 4, 36
_PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 38, 47, 4
_CLONE_NEWNS, _MS_NOSUID, _MS_NODEV, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x20000, 0x2, 0x4, 0x1000, 0x4000, 0x40000
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: nothing to set
        pass


def _memory_limit() -> int:
    """The limit that caps memory the learner's code allocates: the data segment, which holds every
    heap and anonymous mapping (Linux 4.7 on). Not the address space: a CUDA build of torch reserves
    many GB of it that it never uses, and would fail under any sensible cap."""
    return getattr(resource, "RLIMIT_DATA", resource.RLIMIT_AS)


def _limit(args) -> None:
    """The resource limits of the worker and of every process it starts, before any of them runs."""
    memory, cpu, size = args.memory_mb << 20, args.cpu_seconds, args.file_mb << 20
    if resource is None:  # Windows: no resource limits, only the grader's time limits
        return
    limits = [(_memory_limit(), (memory, memory)), (resource.RLIMIT_CPU, (cpu, cpu + 5)),
              (resource.RLIMIT_FSIZE, (size, size)), (resource.RLIMIT_CORE, (0, 0))]
    if args.processes:  # only in the sandbox's own user namespace, where it counts this submission alone
        limits.append((resource.RLIMIT_NPROC, (args.processes, args.processes)))
    for which, value in limits:
        try:
            resource.setrlimit(which, value)
        except (ValueError, OSError):  # a system that does not offer this limit (macOS and RLIMIT_AS)
            pass


def _quiet_streams() -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # input() meets end of file instead of waiting forever
    os.close(devnull)
    os.dup2(2, 1)  # prints join the output the grader caps and discards
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False, buffering=1)


class _Frames:
    """Length-prefixed JSON messages over a socket (see :mod:`harness.wire`)."""

    def __init__(self, sock: socket.socket, limit: int):
        self.sock, self.limit = sock, limit

    def receive(self) -> dict:
        from . import wire

        return wire.receive(self.sock, self.limit)

    def send(self, message: dict) -> None:
        from . import wire

        self.sock.sendall(wire.frame(message))


# ---------------------------------------------------------------------------------------------
# The worker
# ---------------------------------------------------------------------------------------------


def _end_learner_processes(child: int | None) -> None:
    """SIGKILL the learner's process and all it started; reap them."""
    if os.getpid() == 1:
        # The first process of a namespace reaches every other one of it with -1, itself spared.
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break
            except InterruptedError:
                continue
        _remove_ipc()  # in the sandbox only: without one, these would be the user's own, outside
        return
    if child is not None:  # no sandbox: the learner's process group is all that can be found
        try:
            os.killpg(child, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            os.waitpid(child, 0)
        except ChildProcessError:
            pass
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _remove_ipc() -> None:
    """Remove the System V shared memory, queues and semaphores of this (the sandbox's own) IPC
    namespace: they outlive their processes, so they could carry data, or hold memory, from one
    learner process to the next."""
    libc = ctypes.CDLL(None, use_errno=True)
    for kind, remove in (("shm", lambda i: libc.shmctl(i, 0, None)), ("msg", lambda i: libc.msgctl(i, 0, None)),
                         ("sem", lambda i: libc.semctl(i, 0, 0))):  # 0 is IPC_RMID
        try:
            with open(f"/proc/sysvipc/{kind}") as table:
                rows = table.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            try:
                remove(int(row.split()[1]))
            except (ValueError, IndexError):
                pass


class _CapabilityHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


def _libc_call(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def _drop_privileges() -> None:
    """No capability, and none to be had again: the worker keeps the power to mount, which the
    learner's code must never have. Fails, and so ends the process, rather than go on with one."""
    if not sys.platform.startswith("linux"):  # capabilities are Linux's; elsewhere there is no sandbox either
        return
    libc = ctypes.CDLL(None, use_errno=True)
    header = _CapabilityHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    _libc_call(libc.capset(ctypes.byref(header), (ctypes.c_uint32 * 6)()), "capset")  # effective, permitted, inheritable: none
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)  # before Linux 4.3 there are none to clear
    # No program it starts (a set-user-id one, one with file capabilities) can gain any back.
    _libc_call(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


class _FreshScratch:
    """A new, empty file system at the scratch folder for one learner process and all it starts.

    Emptying one folder for the next process would leave what a walk cannot reach (a path past
    PATH_MAX, a closed folder); a file system that ends with the last process that could see it
    leaves nothing. Each learner process makes a mount namespace of its own, mounts a tmpfs there
    and mounts again in it the read-only folders that live below the scratch folder (a course
    cloned below /tmp), from the copies ``kept`` names; the worker's own view never changes."""

    def __init__(self, path: str, size_mb: int, kept: list[tuple[str, str]]):
        self.path, self.size, self.kept = path, size_mb << 20, kept

    def mount(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        _libc_call(libc.unshare(_CLONE_NEWNS), "a mount namespace of its own")
        # What it mounts stays in its namespace: nothing reaches the worker's.
        _libc_call(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "private mounts")
        _libc_call(libc.mount(b"tmpfs", self.path.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV,
                              f"size={self.size},mode=1777".encode()), f"a tmpfs at {self.path}")
        for source, target in self.kept:
            os.makedirs(target if os.path.isdir(source) else os.path.dirname(target), exist_ok=True)
            if os.path.islink(source):  # the way from sys.executable to the interpreter
                os.symlink(os.readlink(source), target)
                continue
            if not os.path.isdir(source):
                open(target, "x").close()  # what a file is mounted on
            _libc_call(libc.mount(source.encode(), target.encode(), None, _MS_BIND | _MS_REC, None), f"{target} again")
        os.chdir(self.path)  # the worker's folder of the same name is the one now covered

    def check(self) -> None:
        """Mount one in a throw-away process, so that a sandbox that cannot stops the worker at once,
        with the reason, instead of each learner process in turn."""
        pid = os.fork()
        if pid == 0:
            try:
                self.mount()
                os._exit(0)
            except BaseException as exc:
                os.write(2, f"the sandboxed worker cannot mount a fresh /tmp for each learner process ({exc})\n".encode())
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            raise SystemExit(1)


def _empty(scratch: str | None) -> None:
    """Empty the scratch folder, so that no learner process finds what an earlier one left there
    (the inputs of another function's hidden tests, say). Without a sandbox only: there each
    learner process mounts a new one of its own, which leaves nothing behind at all.

    A course that lives below /tmp has its environment mounted, read-only, inside the scratch
    folder: the walk stays on the scratch folder's own file system and never descends into it.
    """
    if not scratch:
        return
    device = os.lstat(scratch).st_dev
    folders: list[str] = []
    for folder, names, files in os.walk(scratch, topdown=True):
        kept = []
        for name in names:
            path = os.path.join(folder, name)
            try:
                info = os.lstat(path)
                if info.st_dev != device:
                    continue  # a mount: read-only, and not the learner's
                if not os.path.islink(path):  # the learner's processes are gone: nothing changes it now
                    # Open it first: the learner may have closed it, to its owner, who is also this process.
                    os.chmod(path, 0o700)
            except OSError:
                pass
            kept.append(name)
        names[:] = [n for n in kept if not os.path.islink(os.path.join(folder, n))]
        for name in files + [n for n in kept if os.path.islink(os.path.join(folder, n))]:
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass
        folders.append(folder)
    for folder in reversed(folders[1:]):  # deepest first; one that holds a mount stays
        try:
            os.rmdir(folder)
        except OSError:
            pass


def serve(control: socket.socket, request_limit: int, scratch: str | None = None,
          fresh: _FreshScratch | None = None) -> None:
    frames = _Frames(control, request_limit)
    child: int | None = None
    while True:
        try:
            op = frames.receive().get("op")
        except (EOFError, OSError):
            return
        if op == "fork":
            _end_learner_processes(child)
            if fresh is None:
                _empty(scratch)
            ours, theirs = socket.socketpair()
            try:
                child = os.fork()
            except OSError:
                ours.close()
                theirs.close()
                control.sendall(b"E")
                continue
            if child == 0:
                status = 0
                try:
                    control.close()
                    ours.close()
                    if fresh is not None:
                        fresh.mount()
                    learner(theirs, request_limit)
                except BaseException:
                    traceback.print_exc()
                    status = 1
                finally:
                    os._exit(status)
            theirs.close()
            socket.send_fds(control, [b"F"], [ours.fileno()])
            ours.close()
        elif op == "end":
            _end_learner_processes(child)
            if fresh is None:
                _empty(scratch)
            child = None
            control.sendall(b"K")
        else:
            return


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m harness.worker")
    parser.add_argument("--channel", required=True)
    parser.add_argument("--memory-mb", type=int, required=True)
    parser.add_argument("--cpu-seconds", type=int, required=True)
    parser.add_argument("--file-mb", type=int, required=True)
    parser.add_argument("--request-mb", type=int, required=True)
    parser.add_argument("--processes", type=int, default=0)
    parser.add_argument("--preload", default="", help="modules the notebook imports, comma-separated")
    parser.add_argument("--scratch", default="", help="the learner's scratch folder, emptied between learner processes")
    parser.add_argument("--scratch-mb", type=int, default=0,
                        help="mount a fresh scratch folder of this size for each learner process instead")
    parser.add_argument("--keep", nargs=2, action="append", default=[], metavar=("COPY", "FOLDER"),
                        help="a read-only folder below the scratch folder, mounted again from COPY in each fresh one")
    args = parser.parse_args(argv)
    if args.scratch_mb and not args.scratch:
        parser.error("--scratch-mb needs --scratch")
    fresh = _FreshScratch(args.scratch, args.scratch_mb, [tuple(k) for k in args.keep]) if args.scratch_mb else None

    _prctl(_PR_SET_DUMPABLE, 0)  # nobody of the same user may trace it or open its descriptors
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _limit(args)
    control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    control.connect(args.channel)
    _quiet_streams()
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)  # what the learner's processes leave behind comes back here
    if fresh is not None:
        fresh.check()

    import torch

    from . import calls, toys, wire  # noqa: F401  (imported once, here, for every fork)

    torch.set_num_threads(1)
    # What the notebook imports (matplotlib, say) is imported once here rather than in every
    # learner process: the instructor's notebook names them, and importing runs no learner code.
    for name in filter(None, args.preload.split(",")):
        try:
            importlib.import_module(name)
        except Exception:  # the learner's process will meet the same error, where it belongs
            pass
    if fresh is None:
        _empty(args.scratch)  # what importing left there (matplotlib's font cache) is not the learner's
    control.sendall(b"R")
    serve(control, args.request_mb << 20, args.scratch, fresh)


# ---------------------------------------------------------------------------------------------
# A learner process
# ---------------------------------------------------------------------------------------------


class _InMemory(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the course's reference modules from text the grader sent: no file of them is
    visible in the sandbox, and once loaded, the text is dropped."""

    def __init__(self, sources: dict[str, str]):
        self.sources = sources

    def find_spec(self, name, path=None, target=None):
        if name not in self.sources:
            return None
        package = name.count(".") == 0
        return importlib.util.spec_from_loader(name, self, is_package=package)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        source = self.sources[module.__name__]
        exec(compile(source, f"<{module.__name__}>", "exec"), module.__dict__)  # noqa: S102


def _load_reference(sources: dict[str, str]) -> None:
    finder = _InMemory(dict(sources))
    sys.meta_path.insert(0, finder)
    try:
        for name in sorted(sources, key=lambda n: n.count(".")):
            try:
                importlib.import_module(name)
            except Exception:  # a module that needs what is withheld stays unloaded
                traceback.print_exc()
    finally:
        sys.meta_path.remove(finder)
        finder.sources.clear()


def _stand_ins() -> None:
    """The two names of the grader's package that the notebooks themselves import: ``check`` (the
    notebook's own test runner, which the grader replaces by judging in its own process) and the
    toy models. Nothing else of :mod:`autograder` exists here."""
    import types

    from . import toys

    package = types.ModuleType("autograder", "Stand-in: the checks run in the grader's process, not here.")
    package.check = lambda *args, **kwargs: None
    package.toys = toys
    sys.modules.update({"autograder": package, "autograder.toys": toys})


def learner(channel: socket.socket, request_limit: int) -> None:
    """Serve one graded function: its setup, the submission's cells, then its cases."""
    import torch

    from . import seccomp, wire
    from .call_limit import call_time_limit
    from .calls import Raised, Tripwires, UsedForbidden, call_learner, follow_threads, raised, remember_cell
    from .observe import Observed, Observer
    from .probes import PROBES, probe

    # Its own group: without a sandbox, that is how its processes are found and ended. Its own
    # session too, the last one it may make: the kernel shares the CPU between sessions first, so
    # everything the submission runs from here on gets one share, beside each neighbour's.
    os.setsid()
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    _drop_privileges()
    # Before anything of the learner's: nothing the kernel keeps past this process (keys, message
    # queues, shared memory) can be made or read, so no later process of the submission finds it.
    seccomp.install()
    follow_threads()  # a thread the learner's code starts is watched as this one is
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    frames = _Frames(channel, request_limit)
    namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__}
    function, inject, module = "", [], None
    wires: Tripwires | None = None
    injected = False

    while True:
        try:
            request = frames.receive()
        except (EOFError, OSError):
            return
        op = request.get("op")
        try:
            if op == "setup":
                function, inject = request["function"], request["inject"]
                _stand_ins()
                # In the notebook the first test cell imports `check`; the grader runs none of
                # them, so an answer cell that calls it too runs on past the call, as it does there.
                namespace["check"] = sys.modules["autograder"].check
                _load_reference(request["modules"])
                module = sys.modules.get(request["reference"])
                wires = Tripwires(request["forbidden"], request.get("ops", ()))
                torch.manual_seed(0)
                reply = {"ok": True}
            elif op == "cell":
                filename = f"<cell {request['index']}>"
                try:
                    remember_cell(filename, request["source"])  # feedback quotes the learner's line
                    exec(compile(request["source"], filename, "exec"), namespace)  # noqa: S102
                    reply = {"ok": True}
                except BaseException as exc:  # SystemExit included: a cell may not end the process
                    reply = {"error": [type(exc).__name__, str(exc)[:1000], _where(exc)]}
            elif op == "call":
                fn = namespace.get(function)
                if fn is None:
                    reply = {"missing": True}
                else:
                    if not injected:
                        # The course's versions of the other graded functions, so that one mistake
                        # is charged once: a wrong softmax does not also sink attention.
                        namespace.update({n: getattr(module, n) for n in inject if hasattr(module, n)})
                        injected = True
                    torch.manual_seed(0)
                    observer = Observer(trace=request.get("trace") is True, source=request.get("source") is True)
                    asked = request.get("probe", [])
                    asked = tuple(p for p in PROBES if p in asked) if type(asked) is list else ()
                    try:
                        case = wire.decode(request["case"], wire.REQUEST_TAGS)
                        start = time.monotonic()
                        seconds = request.get("seconds")
                        # stopped here, the call says where it was running; the grader's own limit follows
                        with call_time_limit(seconds) if type(seconds) in (int, float) and seconds > 0 \
                                else contextlib.nullcontext():
                            result = call_learner(fn, case, wires, observer)
                        if asked and not isinstance(result, (Raised, UsedForbidden)):
                            frames.send(wire.CALLED)
                            observer.findings = probe(fn, case, asked, time.monotonic() - start)
                        seen = wire.encode_observed(observer.observed())
                    except BaseException as exc:
                        result, seen = raised(exc), wire.encode_observed(Observed())
                    reply = {"result": wire.encode(result), "observed": seen}
            else:
                return
        except BaseException as exc:  # the process must answer, whatever happened
            reply = {"error": [type(exc).__name__, str(exc)[:1000], ""]}
        try:
            frames.send(reply)
        except BaseException:
            return


def _where(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith("<cell")]
    return f"{frames[-1].filename} line {frames[-1].lineno}: {frames[-1].line}" if frames else ""


if __name__ == "__main__":
    main()
