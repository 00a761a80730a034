"""Hostile candidates for the sandbox tests: the honest example kernel with hostile steps before its first call.

Each step prints ``ESCAPED <step>: <what it got>`` when it succeeded and ``BLOCKED <step>: <why>`` when the
wall stopped it, so a test can tell "blocked" from "never ran". Steps run inside ``run`` (not at import),
so what they print lands in the first workload's archived log.
"""

from __future__ import annotations

import json
from pathlib import Path

from support import EXAMPLES, KV8_PS1

HONEST = (EXAMPLES / "triton_gqa_decode" / "kernel.py").read_text()

PRELUDE = r'''
import os as _os, sys as _sys, glob as _glob, signal as _signal, time as _time

_P = __PARAMS__
_DONE = []


def _say(kind, step, what):
    print(f"{kind} {step}: {what}", flush=True)


def _try(step, fn):
    try:
        got = fn()
    except BaseException as err:  # the point is to survive whatever the wall does
        _say("BLOCKED", step, f"{type(err).__name__}: {err}")
        if step in _P["uncaught"]:
            raise
        return
    if got:
        _say("ESCAPED", step, str(got)[:300])
    else:
        _say("BLOCKED", step, "nothing found")


def _environ_secrets():
    found = [f"{k}={v}" for k, v in _os.environ.items() if _P["canary"] in v]
    for path in _glob.glob("/proc/*/environ") + [f"/proc/{p}/environ" for p in (*_harness_pids(), _os.getppid())]:
        try:
            data = open(path, "rb").read()
        except OSError:
            continue
        at = data.find(_P["canary"].encode())
        if at >= 0:
            found.append(path + " " + data[at:at + 60].decode(errors="replace"))
    return found


def _cmdline_archive():
    hits = []
    for path in _glob.glob("/proc/*/cmdline"):
        try:
            parts = open(path, "rb").read().split(b"\0")
        except OSError:
            continue
        if b"--archive" in parts:
            hits.append(parts[parts.index(b"--archive") + 1].decode())
    return hits


def _tamper_archive():
    import sqlite3
    db = _P["archive"] + "/archive.db"
    con = sqlite3.connect(db, timeout=2)
    con.execute("update submissions set status='PASSED' where status != 'PASSED'")
    con.commit()
    return f"rewrote {db}"


def _read_blobs():
    names = _glob.glob(_P["archive"] + "/blobs/*/*")
    return [open(n, "rb").read()[:40] for n in names[:3]]


def _other_candidate():
    found = []
    for path in _glob.glob("/tmp/crucible-*/**/secret.txt", recursive=True) + [_P["other_secret"]]:
        try:
            found.append(open(path).read())
        except OSError:
            pass
    return found


def _harness_pids():
    """Processes whose command line looks like the harness's (found the way an attacker would)."""
    pids = []
    for path in _glob.glob("/proc/[0-9]*/cmdline"):
        try:
            cmd = open(path, "rb").read()
        except OSError:
            continue
        if b"harness" in cmd and b"submit" in cmd:
            pids.append(int(path.split("/")[2]))
    return [p for p in pids if p != _os.getpid()]


def _kill_parent():
    sent = []
    for pid in [_os.getppid(), *_harness_pids()]:
        try:
            _os.kill(pid, _signal.SIGKILL)
            sent.append(pid)
        except OSError:
            pass
    if not sent:
        raise PermissionError("no harness process could be signalled")
    _time.sleep(1)
    return f"sent SIGKILL to {sent}"


def _ptrace():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    for pid in _harness_pids() + [_os.getppid()]:
        if libc.ptrace(16, pid, 0, 0) == 0:  # PTRACE_ATTACH
            return f"attached to {pid}"
    raise OSError(ctypes.get_errno(), "ptrace(PTRACE_ATTACH) failed on every candidate pid")


def _proc_mem():
    for pid in (*_harness_pids(), 1, _os.getppid()):
        try:
            with open(f"/proc/{pid}/mem", "rb") as f:
                f.seek(0x400000)
                return f"read /proc/{pid}/mem: {f.read(16)!r}"
        except OSError:
            continue
    return ""


def _write_escape():
    _os.makedirs(_os.path.dirname(_P["escape"]), exist_ok=True)
    open(_P["escape"], "w").write("out")
    return "wrote " + _P["escape"]


def _poison_bytecode():
    # the harness's bytecode folder (harness.sandbox.bytecode): code written there would run in the next harness
    prefix = _os.environ.get("PYTHONPYCACHEPREFIX")
    if not prefix:
        raise RuntimeError("no bytecode folder in this environment")
    found = _glob.glob(prefix + "/**/*.pyc", recursive=True)
    target = found[0] if found else prefix + "/poison.pyc"
    with open(target, "ab") as f:
        f.write(b"poison")
    return "wrote " + target


def _keyring():
    # The kernel's keyrings are not namespaced by the sandbox: a key whose permissions are opened to all is listed
    # in /proc/keys and readable by any user id, and one added to a persistent keyring outlives its worker.
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    add_key, keyctl = _KEY_CALLS[_os.uname().machine]
    got = []
    for line in open("/proc/keys").read().splitlines():
        if _P["key_marker"] in line:
            buf = ctypes.create_string_buffer(256)
            n = libc.syscall(keyctl, 11, ctypes.c_long(int(line.split()[0], 16)), buf, ctypes.c_long(256))
            if n >= 0:
                got.append("read " + buf.raw[:n].decode(errors="replace"))
    ring = libc.syscall(keyctl, 22, ctypes.c_long(-1), ctypes.c_long(-2))  # its user's persistent keyring
    data = b"for-a-later-candidate"
    key = libc.syscall(add_key, b"user", b"crucible-planted", data, len(data), ctypes.c_long(ring if ring > 0 else -2))
    if key > 0:
        libc.syscall(keyctl, 3, ctypes.c_long(key))  # revoked at once: the test leaves nothing behind
        got.append(f"added key {key}")
    if not got:
        raise OSError(ctypes.get_errno(), "keyctl and add_key refused")
    return got


_KEY_CALLS = {"x86_64": (248, 250), "aarch64": (217, 219)}  # add_key, keyctl


def _sleeper(setsid):
    pid = _os.fork()
    if pid == 0:
        if setsid:
            _os.setsid()
        _os.execv(_sys.executable, [_sys.executable, "-c", "import time; time.sleep(600)", _P["marker"]])
    return f"child {pid} left sleeping"


def _memory():
    blocks = []
    for _ in range(_P["memory_gib"]):
        b = bytearray(1 << 30)
        b[::4096] = b"x" * len(b[::4096])  # touch every page
        blocks.append(b)
    return f"held {len(blocks)} GiB"


def _memory_children():
    # An rlimit bounds each process alone: children that each stay under it must still share the worker's limit.
    kids = []
    for _ in range(_P["children"]):
        r, w = _os.pipe()
        pid = _os.fork()
        if pid == 0:
            try:
                b = bytearray(_P["child_mib"] << 20)
                b[::4096] = b"x" * len(b[::4096])
                _os.write(w, b"1")
                _time.sleep(3)
            finally:
                _os._exit(0)
        _os.close(w)
        kids.append((pid, r))
    held = sum(len(_os.read(r, 1)) for _, r in kids)
    for pid, _ in kids:
        _os.waitpid(pid, 0)
    if held < len(kids):
        raise MemoryError(f"only {held} of {len(kids)} children held {_P['child_mib']} MiB at once")
    return f"{held} children held {_P['child_mib']} MiB each at once"


def _flood():
    line = "y" * 1023 + "\n"
    for _ in range(_P["flood_mib"] * 1024):
        _sys.stdout.write(line)
    _sys.stdout.flush()
    return f"printed {_P['flood_mib']} MiB"


def _fork_bomb():
    children = 0
    try:
        while children < _P["fork_cap"]:
            pid = _os.fork()
            if pid == 0:
                _time.sleep(600)
                _os._exit(0)
            children += 1
    except OSError as err:
        raise OSError(f"fork failed after {children} children: {err}")
    return f"forked {children} children"


_STEPS = {"environ_secrets": _environ_secrets, "cmdline_archive": _cmdline_archive, "tamper_archive": _tamper_archive,
          "read_blobs": _read_blobs, "other_candidate": _other_candidate, "kill_parent": _kill_parent,
          "ptrace": _ptrace, "proc_mem": _proc_mem, "write_escape": _write_escape,
          "poison_bytecode": _poison_bytecode, "keyring": _keyring,
          "fork_sleeper": lambda: _sleeper(False), "setsid_sleeper": lambda: _sleeper(True),
          "memory": _memory, "memory_children": _memory_children, "flood": _flood, "fork_bomb": _fork_bomb}


def _hostile():
    if _DONE:
        return
    _DONE.append(1)
    for step in _P["steps"]:
        _try(step, _STEPS[step])

'''


def hostile_source(steps: list[str], **params) -> str:
    """The honest kernel whose ``run`` first performs ``steps``."""
    defaults = {"canary": "", "archive": "/nonexistent", "other_secret": "/nonexistent",
                "escape": "/nonexistent/escape.txt", "marker": "crucible-test-marker", "memory_gib": 1,
                "flood_mib": 1, "fork_cap": 300, "uncaught": [], "key_marker": "crucible-key-none", "children": 6,
                "child_mib": 300}
    prelude = PRELUDE.replace("__PARAMS__", json.dumps({**defaults, **params, "steps": steps}))
    kernel = HONEST.replace("def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):\n",
                            "def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):\n"
                            "    _hostile()\n")
    assert "_hostile()" in kernel
    return prelude + kernel


def hostile_solution(name: str, steps: list[str], **params) -> dict:
    return {"name": name, "definition": KV8_PS1, "author": "hostile",
            "spec": {"language": "triton", "target_hardware": ["cpu"], "entry_point": "kernel.py::run",
                     "dependencies": [], "destination_passing_style": True},
            "sources": [{"path": "kernel.py", "content": hostile_source(steps, **params)}]}


def write_solution(folder: Path, name: str, steps: list[str], **params) -> Path:
    path = folder / f"{name}.json"
    path.write_text(json.dumps(hostile_solution(name, steps, **params)))
    return path


def plant_key(description: str, data: bytes) -> int:
    """A key in this process's session keyring, its permissions opened to every user id (what an earlier candidate
    could have left); its id, or 0 where this host gives no keyrings. ``revoke_key`` removes it."""
    import ctypes
    import os

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    add_key, keyctl = {"x86_64": (248, 250), "aarch64": (217, 219)}.get(os.uname().machine, (0, 0))
    if not add_key:
        return 0
    key = libc.syscall(add_key, b"user", description.encode(), data, len(data), ctypes.c_long(-3))
    if key <= 0 or libc.syscall(keyctl, 5, ctypes.c_long(key), ctypes.c_long(0x3F3F3F3F)) != 0:  # KEYCTL_SETPERM
        return 0
    return key


def revoke_key(key: int) -> None:
    import ctypes
    import os

    if key:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall(dict(x86_64=250, aarch64=219)[os.uname().machine], 3, ctypes.c_long(key))  # KEYCTL_REVOKE


def outcomes(log: str) -> dict[str, str]:
    """step -> "ESCAPED ..." / "BLOCKED ..." from a hostile candidate's log."""
    out = {}
    for line in log.splitlines():
        for kind in ("ESCAPED", "BLOCKED"):
            if line.startswith(kind + " "):
                step = line[len(kind) + 1:].split(":", 1)[0]
                out.setdefault(step, line)
    return out
