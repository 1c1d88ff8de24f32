"""A kernel filter for each learner process: no object that could outlive it or reach another.

The processes of one submission run one after another, each serving one graded function. What
the kernel keeps beyond a process's end could carry data from one to the next: the user's
keyring (keys are kept per user, not per process), POSIX message queues and System V message
queues, semaphores and shared memory. The filter denies every system call that makes or reads
them (``add_key``, ``request_key``, ``keyctl``, ``mq_*``, ``msg*``, ``sem*``, ``shm*``), and
those that read or write another process's memory or descriptors (``ptrace``, ``process_vm_*``,
``pidfd_getfd``), as Docker's default profile does, and ``setsid``: the kernel shares the CPU
between sessions (its autogroups) before it shares it between processes, so a submission that
gave each of its busy processes a session of its own would take the CPU from its neighbours'
calls and from their workers' start. It is a classic BPF program, built here byte by byte (no
library is needed), installed with ``prctl`` after ``no_new_privs``, and inherited by every
process the learner's starts; it cannot be removed. Calls from another ABI (32-bit ``int 0x80``,
x32) are refused altogether, so that no other numbering slips past it.

Files are the other channel: in the sandbox each learner process mounts a new /tmp of its own
(:mod:`harness.worker`), and every other path the sandbox shows is read-only.
"""
from __future__ import annotations

import ctypes
import errno
import platform
import struct

#: per architecture: its audit number and the numbers of the calls denied
_DENIED_NAMES = ("add_key", "request_key", "keyctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
                 "mq_notify", "mq_getsetattr", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semctl",
                 "semtimedop", "shmget", "shmat", "shmctl", "ptrace", "process_vm_readv", "process_vm_writev",
                 "pidfd_getfd", "setsid")
_ARCHITECTURES = {
    "x86_64": (0xC000003E, dict(zip(_DENIED_NAMES, (
        248, 249, 250, 240, 241, 242, 243, 244, 245, 68, 69, 70, 71, 64, 65, 66, 220, 29, 30, 31, 101, 310, 311, 438,
        112))),
        0x40000000),  # x32 calls carry this bit
    "aarch64": (0xC00000B7, dict(zip(_DENIED_NAMES, (
        217, 218, 219, 180, 181, 182, 183, 184, 185, 186, 189, 188, 187, 190, 193, 191, 192, 194, 196, 195, 117, 270, 271,
        438, 157))), None),
}

_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_NR, _ARCH = 0, 4  # offsets in struct seccomp_data


def _instruction(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes | None:
    """The filter for ``machine`` (this one by default) as struct sock_filter[]; None when unknown."""
    known = _ARCHITECTURES.get(machine or platform.machine())
    if known is None:
        return None
    arch, numbers, foreign_bit = known
    deny = _instruction(_RET_K, 0, 0, _ERRNO | errno.EPERM)
    code = [_instruction(_LD_W_ABS, 0, 0, _ARCH), _instruction(_JEQ_K, 1, 0, arch), deny,
            _instruction(_LD_W_ABS, 0, 0, _NR)]
    if foreign_bit is not None:
        code += [_instruction(_JGE_K, 0, 1, foreign_bit), deny]
    for number in sorted(set(numbers.values())):
        code += [_instruction(_JEQ_K, 0, 1, number), deny]
    code.append(_instruction(_RET_K, 0, 0, _ALLOW))
    return b"".join(code)


def supported() -> bool:
    return program() is not None


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install() -> bool:
    """Filter this process and all it will start; False where the filter is unknown or refused."""
    code = program()
    if code is None:
        return False
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = _Program(len(code) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        return libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) == 0
    except (OSError, AttributeError):
        return False
