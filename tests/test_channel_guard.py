"""The worker's channel to the harness under the kernel's guard (harness.sandbox.channel_guard; red team round 12, a11:
the reply descriptor redirected at import and every frame of the worker's loop rewritten by a thread of the
candidate's).

The filter is checked twice: its program run by a small classic-BPF interpreter over a table of system calls (every
architecture), and installed for real in a child process that then tries what the attack did."""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap

import pytest

from harness.sandbox import channel_guard
from harness.sandbox.channel_guard import BASE, program
from harness.sandbox.keyrings import _ALLOW, _DENY
from support import ROOT

FDS = (BASE, BASE + 1)


def run_filter(code, arch: int, nr: int, args: tuple[int, ...] = ()) -> int:
    """What the kernel would return for one system call: classic BPF over struct seccomp_data (little-endian)."""
    args = tuple(args) + (0,) * (6 - len(args))
    data = struct.pack("<iIQ6Q", nr, arch, 0, *args)
    acc, pc = 0, 0
    while True:
        op, jt, jf, k = code[pc]
        if op == 0x20:
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif op in (0x15, 0x25, 0x35):
            taken = {0x15: acc == k, 0x25: acc > k, 0x35: acc >= k}[op]
            pc += 1 + (jt if taken else jf)
        elif op == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected instruction {op:#x}")


X86_64, I386, AARCH64, ARM = 0xC000003E, 0x40000003, 0xC00000B7, 0x40000028
X32 = 0x40000000


@pytest.mark.parametrize("arch, nr, args, verdict", [
    (X86_64, 3, (BASE + 1,), _DENY),  # close(reply)
    (X86_64, 3, (BASE,), _DENY),  # close(request)
    (X86_64, 3, (5,), _ALLOW),  # close of anything else
    (X86_64, 3, (BASE + 1 + (1 << 32),), _DENY),  # the kernel reads an unsigned int: the high word is no way round
    (X86_64, 33, (7, BASE + 1), _DENY),  # dup2(pipe, reply): a11
    (X86_64, 33, (BASE + 1, 7), _ALLOW),  # dup2(reply, 7): a copy, as dup
    (X86_64, 292, (7, BASE, 0), _DENY),  # dup3
    (X86_64, 32, (BASE + 1,), _ALLOW),  # dup(reply)
    (X86_64, 436, (3, 0xFFFFFFFF, 0), _DENY),  # close_range over everything
    (X86_64, 436, (BASE + 2, 0xFFFFFFFF, 0), _ALLOW),  # above the channel
    (X86_64, 436, (3, BASE - 1, 0), _ALLOW),  # below it
    (X86_64, 436, (BASE + 1, BASE + 1, 0), _DENY),
    (X86_64, X32 | 33, (7, BASE + 1), _DENY),  # the x32 entry point
    (X86_64, 1, (BASE + 1, 0, 0), _ALLOW),  # write(reply): the loop's own replies
    (I386, 63, (7, BASE + 1), _DENY),
    (I386, 6, (BASE,), _DENY),
    (AARCH64, 24, (7, BASE + 1, 0), _DENY),  # aarch64 has dup3 only
    (AARCH64, 57, (BASE + 1,), _DENY),
    (AARCH64, 57, (9,), _ALLOW),
    (ARM, 63, (7, BASE), _DENY),
    (0x12345678, 3, (BASE,), _ALLOW),  # an architecture the filter does not know: left alone
])
def test_the_filter_refuses_closing_or_replacing_the_channel_only(arch, nr, args, verdict):
    calls = {**channel_guard._CALLS["x86_64"], **channel_guard._CALLS["aarch64"]}
    assert run_filter(program(calls, FDS), arch, nr, args) == verdict


GUARDED = textwrap.dedent(f"""
    import os, subprocess, sys
    sys.path.insert(0, {str(ROOT)!r})
    from harness.sandbox import channel_guard
    r, w = os.pipe()
    r, w = channel_guard.move_high(r, w)
    print("guard", repr(channel_guard.guard((r, w))))
    a, b = os.pipe()
    for name, attempt in [("dup2", lambda: os.dup2(b, w)), ("close", lambda: os.close(w)),
                          ("close_request", lambda: os.close(r)), ("dup2_request", lambda: os.dup2(a, r))]:
        try:
            attempt()
            print(name, "allowed")
        except PermissionError:
            print(name, "refused")
    os.closerange(3, 2000)  # a candidate's sweep: the channel survives it
    identity = channel_guard.Identity(w)
    os.write(w, b"ok")
    print("channel", os.read(r, 2).decode(), "intact", identity.intact())
    child = subprocess.run(["sh", "-c", "ls /proc/self/fd"], capture_output=True, text=True)
    print("child", child.returncode, sorted(int(x) for x in child.stdout.split()))
""")


def test_a_guarded_process_keeps_its_channel_and_still_starts_programs():
    out = subprocess.run([sys.executable, "-c", GUARDED], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    if lines["guard"] != "''":
        pytest.skip(f"this kernel refuses seccomp filters: {lines['guard']}")
    assert [lines[k] for k in ("dup2", "close", "close_request", "dup2_request")] == ["refused"] * 4, out.stdout
    assert lines["channel"] == "ok intact True", out.stdout
    code, fds = lines["child"].split(" ", 1)
    assert code == "0" and not set(eval(fds)) & set(FDS), out.stdout  # close-on-exec: nothing it starts holds them
