"""Kernel keyrings closed to everything in the sandbox: a seccomp filter set by the sandbox's last wrapper, just
before it execs the worker (or ncu, or the profiled target), and inherited by everything that starts.

Keyrings are the one kernel store the namespaces leave shared between workers. A key added to a user's persistent
keyring outlives the worker that added it (three days by default), and one whose permissions are opened to "other"
can be read by any later worker, whatever its user id, through ``/proc/keys`` and ``keyctl(KEYCTL_READ)``: a channel
from one submission to the next. Nothing a solution, PyTorch, Triton or the CUDA toolchain does needs them, so
``add_key``, ``request_key`` and ``keyctl`` fail with EPERM through every entry point a process of this
architecture has (x86-64's 32-bit and x32 ones included); every other system call is allowed.

Run as a program, by path and with ``-I -S`` (standard library only: it must not import what the candidate could
shadow, nor depend on the harness being importable): ``python -I -S keyrings.py -- COMMAND ARGS...``. Where the
kernel refuses the filter the command still runs, after a line on stderr that says so.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import sys

_LD_ABS, _JEQ, _RET = 0x20, 0x15, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K
_ALLOW, _DENY = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
_X32 = 0x40000000
# audit architecture -> (add_key, request_key, keyctl) of each ABI a process on this machine can call
ABIS = {
    "x86_64": {0xC000003E: (248, 249, 250, _X32 | 248, _X32 | 249, _X32 | 250), 0x40000003: (286, 287, 288)},
    "aarch64": {0xC00000B7: (217, 218, 219), 0x40000028: (309, 310, 311)},
}


def program(abis: dict[int, tuple[int, ...]]) -> list[tuple[int, int, int, int]]:
    """The classic-BPF filter: per architecture, its key calls denied; everything else allowed."""
    code: list[tuple[int, int, int, int]] = [(_LD_ABS, 0, 0, 4)]  # seccomp_data.arch
    denials: list[int] = []  # indexes of the jumps to the final deny
    for arch, numbers in abis.items():
        code.append((_JEQ, 0, len(numbers) + 2, arch))  # another architecture: past this block
        code.append((_LD_ABS, 0, 0, 0))  # seccomp_data.nr
        for number in numbers:
            denials.append(len(code))
            code.append((_JEQ, 0, 0, number))
        code.append((_RET, 0, 0, _ALLOW))
    code.append((_RET, 0, 0, _ALLOW))
    deny = len(code)
    code.append((_RET, 0, 0, _DENY))
    for i in denials:
        op, _, jf, k = code[i]
        code[i] = (op, deny - i - 1, jf, k)
    return code


def install(code: list[tuple[int, int, int, int]]) -> str:
    """Install a classic-BPF seccomp filter on this process (and so on all it starts); "" or why it could not be.
    Also used by harness.sandbox.channel_guard, in the worker itself."""
    raw = b"".join(struct.pack("=HBBI", *ins) for ins in code)
    buffer = ctypes.create_string_buffer(raw, len(raw))

    class _Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = _Prog(len(code), ctypes.addressof(buffer))
    libc = ctypes.CDLL(None, use_errno=True)
    # PR_SET_NO_NEW_PRIVS (already set by setpriv in the full sandbox), then PR_SET_SECCOMP, SECCOMP_MODE_FILTER
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:
        return os.strerror(ctypes.get_errno())
    return ""


def close_keyrings() -> str:
    """Install the filter on this process (and so on all it execs); "" or why it could not be."""
    abis = ABIS.get(platform.machine())
    if abis is None:
        return f"no filter for {platform.machine()}"
    return install(program(abis))


def main(argv: list[str]) -> None:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    why = close_keyrings()
    if why:
        print(f"crucible-sandbox: kernel keyrings left open ({why})", file=sys.stderr, flush=True)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
