"""The worker's two descriptors to the harness, kept out of the candidate's reach by the kernel.

Candidate code shares the worker's process. Red team round 12 (a11) redirected the reply descriptor at import
(``os.pipe`` + ``os.dup2`` over it) and ran a thread that rewrote every frame the worker's own loop wrote, nonce and
all: the library count and the thread census emptied, plain PyTorch promoted. The nonce proves a frame was written by
the loop, not that it reached the harness unchanged. So, before any candidate code is imported, the worker:

- moves its request and reply descriptors to fixed high numbers (``BASE``, ``BASE + 1``), marked close-on-exec, so
  nothing the worker starts inherits them and no file a process opens lands on those numbers below a thousand
  descriptors;
- installs a seccomp filter that refuses (EPERM) ``close``, ``dup2``, ``dup3`` and a covering ``close_range`` on
  those two numbers: the channel can no longer be closed, replaced or intercepted. Reads, writes and ``dup`` (a copy
  to write forged frames through: the harness's confirmation after every reply, ``runner.request``, catches those)
  stay allowed, as does everything else. The filter is inherited by every process started after it; there those
  numbers are free, and a process that reached a thousand open files before it closed one would get EPERM on it;
- keeps the reply pipe's identity (device, inode), which ``intact`` compares before each reply where the kernel
  refused the filter.
"""

from __future__ import annotations

import os
import platform
import resource
import sys
from typing import Optional

from . import keyrings

BASE = 1000  # below select()'s 1024
_ALLOW, _DENY = keyrings._ALLOW, keyrings._DENY
_LD_ABS, _JEQ, _JGT, _JGE, _RET = 0x20, 0x15, 0x25, 0x35, 0x06
_NR, _ARCH = 0, 4  # offsets in struct seccomp_data
_ARG = (16, 24)  # low words of args[0] and args[1] (little-endian; a descriptor is an unsigned int)
_X32 = 0x40000000
# audit architecture -> {syscall number: which check}; "arg0": close(fd); "arg1": dup2/dup3(old, new);
# "range": close_range(first, last, flags)
_CALLS = {
    "x86_64": {
        0xC000003E: {3: "arg0", 33: "arg1", 292: "arg1", 436: "range",
                     _X32 | 3: "arg0", _X32 | 33: "arg1", _X32 | 292: "arg1", _X32 | 436: "range"},
        0x40000003: {6: "arg0", 63: "arg1", 330: "arg1", 436: "range"},
    },
    "aarch64": {
        0xC00000B7: {57: "arg0", 24: "arg1", 436: "range"},
        0x40000028: {6: "arg0", 63: "arg1", 358: "arg1", 436: "range"},
    },
}


def program(calls: dict[int, dict[int, str]], fds: tuple[int, ...]) -> list[tuple[int, int, int, int]]:
    """The classic-BPF filter: those calls on ``fds`` denied, everything else allowed. Written with labels, then
    laid out (a jump is an offset from the next instruction)."""
    code: list[tuple[int, object, object, int]] = []  # (op, jt, jf, k); jt/jf an int offset or a label
    labels: dict[str, int] = {}

    def mark(name: str) -> None:
        labels[name] = len(code)

    code.append((_LD_ABS, 0, 0, _ARCH))
    for a, (arch, numbers) in enumerate(calls.items()):
        mark(f"arch{a}")
        code.append((_JEQ, 0, f"arch{a + 1}", arch))
        code.append((_LD_ABS, 0, 0, _NR))
        for number, check in numbers.items():
            code.append((_JEQ, check, 0, number))
        code.append((_RET, 0, 0, _ALLOW))
    mark(f"arch{len(calls)}")
    code.append((_RET, 0, 0, _ALLOW))
    for check, arg in (("arg0", 0), ("arg1", 1)):
        mark(check)
        code.append((_LD_ABS, 0, 0, _ARG[arg]))
        code += [(_JEQ, "deny", 0, fd) for fd in fds]
        code.append((_RET, 0, 0, _ALLOW))
    mark("range")
    for i, fd in enumerate(fds):  # denied where first <= fd <= last
        code.append((_LD_ABS, 0, 0, _ARG[0]))
        code.append((_JGT, f"range{i + 1}", 0, fd))  # first > fd: this one is not covered
        code.append((_LD_ABS, 0, 0, _ARG[1]))
        code.append((_JGE, "deny", 0, fd))
        mark(f"range{i + 1}")
    code.append((_RET, 0, 0, _ALLOW))
    mark("deny")
    code.append((_RET, 0, 0, _DENY))

    def offset(at: int, target: object) -> int:
        if isinstance(target, int):
            return target
        jump = labels[str(target)] - at - 1
        if not 0 <= jump <= 255:
            raise ValueError(f"jump to {target} out of range")
        return jump

    return [(op, offset(i, jt), offset(i, jf), k) for i, (op, jt, jf, k) in enumerate(code)]


def move_high(rfd: int, wfd: int) -> tuple[int, int]:
    """The two descriptors at ``BASE`` and ``BASE + 1``, close-on-exec; the old numbers closed. Where the process may
    not hold that many descriptors, they stay where they are (unguarded: ``guard`` says so)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < BASE + 2:
        return rfd, wfd
    moved = []
    for fd, to in ((rfd, BASE), (wfd, BASE + 1)):
        if fd != to:
            os.dup2(fd, to, inheritable=False)
            os.close(fd)
        else:
            os.set_inheritable(fd, False)
        moved.append(to)
    return moved[0], moved[1]


def guard(fds: tuple[int, ...]) -> str:
    """Install the filter on this process (and on everything it starts); "" or why it could not be."""
    calls = _CALLS.get(platform.machine())
    if calls is None:
        return f"no filter for {platform.machine()}"
    if not all(fd >= BASE for fd in fds):
        return f"the channel could not be moved to descriptor {BASE} (the descriptor limit is lower)"
    return keyrings.install(program(calls, fds))


class Identity:
    """The reply pipe as it was when the worker started: a descriptor that names another file now was replaced."""

    def __init__(self, fd: int):
        self.fd = fd
        self.key = self._key()

    def _key(self) -> Optional[tuple[int, int]]:
        try:
            st = os.fstat(self.fd)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def intact(self) -> bool:
        return self.key is not None and self._key() == self.key

    def require_intact(self) -> None:
        """Before a reply: a descriptor that names another file now reaches someone else, never the harness; the
        worker stops (the harness then reports it as dead) rather than write there."""
        if not self.intact():
            print("crucible-worker: the reply descriptor was replaced; stopping", file=sys.stderr, flush=True)
            os._exit(3)
