"""The wall around candidate code, built from what Linux and util-linux already provide.

A candidate worker starts as ``setpriv --pdeathsig KILL unshare --pid --fork --kill-child --mount --net --ipc
--uts sh -c INIT ... python -m harness.sandbox.worker``. The ``sh`` is the namespace's first process and stays root
(of the namespace) to the end: it moves itself into the worker's cgroup, builds the file system view with
``mount`` (a tmpfs root holding read-only binds of the system folders, the Python installation, the harness
package and the dataset's blobs; a fresh /proc, /sys and a /dev of null-like nodes plus the GPU's; a private
size-limited /tmp holding the work folder), ``pivot_root``s into it, then runs the worker through ``prlimit``
(rlimits) and ``setpriv`` (an unprivileged user of its own, no capabilities, ``no_new_privs``) and waits.
When the worker exits, or the harness dies (``--pdeathsig``/``--kill-child`` carry SIGKILL down), the first
process ends and the kernel kills every process left in the namespace: nothing a candidate forks, daemonises
or ``setsid()``s outlives its evaluation.

Why util-linux and not bubblewrap: ``unshare``, ``setpriv``, ``prlimit`` and ``mount`` are on every host this
runs on (the H200 hosts have no bubblewrap, nsjail or firejail), and each does one documented thing.

Where the host forbids namespaces, the worker still runs, with the rlimits and a scrubbed environment, and
every result says ``sandbox: reduced (why)``. Everything here but ``probe``, ``Cgroup`` and the cleanup is pure.
"""

from __future__ import annotations

import glob
import itertools
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field

from .cgroups import Cgroup, CgroupV1, worker_cgroup
from .outbox import WORK_INSIDE, outbox_mount_lines, outbox_run_lines

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_POLICY_PATH = PACKAGE_ROOT / "definitions" / "sandbox.yaml"
KEYRINGS = str(Path(__file__).resolve().with_name("keyrings.py"))  # the last wrapper: no kernel keyrings
FULL = "full"
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
DEVICE_NODES = ("null", "zero", "full", "random", "urandom", "tty")
UID_BASE, UID_SPAN = 1_200_000, 100_000  # one user id per worker, far from any real account's
_MiB, _GiB = 1 << 20, 1 << 30


class SandboxPolicy(BaseModel):
    """The limits of one worker (definitions/sandbox.yaml; every key documented there)."""

    model_config = ConfigDict(extra="forbid")
    version: int = 1
    memory_bytes: int = Field(32 * _GiB, gt=0, description="host memory of one worker")
    cpu_time_s: int = Field(3600, gt=0, description="CPU seconds of one candidate worker")
    processes: int = Field(1024, gt=8, description="processes and threads of one worker")
    open_files: int = Field(4096, gt=64, description="open file descriptors per process")
    output_bytes: int = Field(64 * _MiB, gt=0, description="stdout + stderr of one worker")
    folder_bytes: int = Field(4 * _GiB, gt=0, description="bytes a worker may write (its private /tmp)")
    solution_bytes: int = Field(16 * _MiB, gt=0, description="largest solution file `harness submit` accepts")


def load_sandbox_policy(dataset_root: Optional[Path] = None) -> SandboxPolicy:
    """The dataset's sandbox.yaml where it has one, else the shipped one; a malformed file is a ValueError."""
    path = Path(dataset_root) / "sandbox.yaml" if dataset_root is not None else DEFAULT_POLICY_PATH
    if not path.is_file():
        path = DEFAULT_POLICY_PATH
    try:
        data = yaml.safe_load(path.read_text()) or {}
        policy = SandboxPolicy.model_validate(data)
    except (OSError, yaml.YAMLError, ValueError) as err:
        raise ValueError(f"{path}: not a valid sandbox policy: {err}") from None
    policy.memory_bytes = memory_for_host(policy.memory_bytes, host_memory_bytes())
    return policy


# The share of the host's memory one worker may have at most: a limit above the memory there is never meets the
# worker's own cgroup; the kernel's out-of-memory killer meets it first, and may choose another process (a 32 GiB
# policy on a 23 GiB host, red team round 7).
HOST_MEMORY_SHARE = 0.75


def memory_for_host(asked: int, host_total: Optional[int]) -> int:
    """The policy's memory limit, lowered to HOST_MEMORY_SHARE of the host's memory where that is less (unknown: as
    asked)."""
    if not host_total:
        return asked
    return min(asked, int(host_total * HOST_MEMORY_SHARE))


def host_memory_bytes() -> Optional[int]:
    """The host's physical memory (None where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def human_bytes(n: int) -> str:
    return f"{n / _GiB:g} GiB" if n >= _GiB else f"{n / _MiB:g} MiB"


# -- the plan: what the candidate sees ---------------------------------------------------------------------


@dataclass
class MountPlan:
    """Everything the init script needs, decided in the harness process (pure data, testable)."""

    root: str  # host folder the new root is mounted on (empty; the harness's own)
    readonly: list[str] = field(default_factory=list)  # host paths bound read-only at the same path
    submounts: list[str] = field(default_factory=list)  # mounts under those, made read-only too
    symlinks: list[tuple[str, str]] = field(default_factory=list)  # (path, target), e.g. /bin -> usr/bin
    devices: list[str] = field(default_factory=list)  # /dev nodes bound in (null-likes, GPU)
    device_dirs: list[str] = field(default_factory=list)  # /dev folders bound in (nvidia-caps)
    writable: list[str] = field(default_factory=list)  # host folders bound read-write (the baselines' JIT cache)
    outbox: Optional[str] = None  # host folder the init copies the command's files into (harness.sandbox.outbox)
    outbox_patterns: list[str] = field(default_factory=list)  # which files, under the work folder's out/
    outbox_bytes: int = 256 * _MiB  # the most handed back per file
    tmp_bytes: int = 4 * _GiB
    uid: Optional[int] = None  # None: stay the namespace's root, without capabilities (user namespace mode)
    cgroup_procs: Optional[str] = None  # cgroup.procs file the init process moves itself into


def _under(path: str, parents: list[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in parents)


def visible_paths(extra: list[str], hidden: list[str], pythonpath: str = "") -> tuple[list[str], list[str]]:
    """The host paths bound read-only, and notes on those left out because they would show a hidden path.

    System folders, the interpreter's installation (prefixes and site-packages), PYTHONPATH entries and
    ``extra`` (the harness package, the dataset's blobs). Never the working directory, a home folder as a
    whole, or anything holding a ``hidden`` path (the archive)."""
    candidates = [d for d in SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d)]
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                str(Path(os.path.realpath(sys.executable)).parent.parent)}
    candidates += sorted(p for p in prefixes if p and os.path.isdir(p))
    candidates += [p for p in sys.path if p and ("site-packages" in p or "dist-packages" in p) and os.path.exists(p)]
    candidates += [p for p in pythonpath.split(os.pathsep) if p and os.path.exists(p)]
    candidates += [p for p in extra if p and os.path.exists(p)]
    hidden_real = [os.path.realpath(h) for h in hidden]
    chosen: list[str] = []
    notes: list[str] = []
    for raw in candidates:
        for p in dict.fromkeys([os.path.abspath(raw), os.path.realpath(raw)]):
            if p == "/" or p == PACKAGE_ROOT.as_posix():
                continue  # the package root holds the default archive: only its harness/ is bound (extra)
            if any(_under(h, [p]) for h in hidden_real):
                notes.append(f"{p} left out: it holds {next(h for h in hidden_real if _under(h, [p]))}")
                continue
            if not _under(p, chosen):
                chosen = [c for c in chosen if not _under(c, [p])] + [p]
    return sorted(chosen, key=lambda p: (p.count("/"), p)), notes


def submounts_of(paths: list[str], mountinfo: str) -> list[str]:
    """Mount points strictly under ``paths`` (from /proc/self/mountinfo): a recursive bind carries them in
    read-write, so each is remounted read-only (NVIDIA's container runtime binds libcuda.so this way)."""
    points = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4:
            point = fields[4].encode().decode("unicode_escape")
            if any(point.startswith(p.rstrip("/") + "/") for p in paths):
                points.append(point)
    return sorted(set(points), key=lambda p: (p.count("/"), p))


def gpu_device_nodes() -> tuple[list[str], list[str]]:
    nodes = sorted(p for p in glob.glob("/dev/nvidia*") if not os.path.isdir(p))
    dirs = sorted(p for p in glob.glob("/dev/nvidia*") if os.path.isdir(p))
    return nodes, dirs


def init_script(plan: MountPlan) -> str:
    """The namespace's first process: cgroup, file system view, pivot, then the worker ("$@") under its limits.

    Runs as root of fresh mount/PID namespaces; every mount it makes is private to them (unshare's default
    propagation), so the host sees none of it."""
    q = shlex.quote
    r = q(plan.root)
    # The host's OOM killer takes a worker's processes first (root sets it, so the candidate cannot lower it): a
    # candidate under its memory limit can still exhaust a host with less memory than the limit, and the harness
    # (or another session's process) must not be what is killed.
    lines = ["set -eu"]
    if plan.cgroup_procs:
        lines.append(f"echo 0 > {q(plan.cgroup_procs)}")
    lines.append("echo 1000 > /proc/self/oom_score_adj 2>/dev/null || true")
    lines += [f"mount -t tmpfs -o mode=0755,size=16m,nosuid,nodev crucible-root {r}", f"cd {r}"]

    def bind(path: str, writable: bool = False, recursive: bool = True) -> list[str]:
        inside = q("." + path)
        make = (f"mkdir -p {inside}" if os.path.isdir(path)
                else f"mkdir -p {q('.' + os.path.dirname(path))} && touch {inside}")
        flag = "--rbind" if recursive and os.path.isdir(path) else "--bind"
        out = [make, f"mount {flag} {q(path)} {inside}"]
        if not writable:
            out.append(f"mount -o remount,bind,ro,nosuid,nodev {inside}")
        return out

    tmp_done = False
    for path in plan.readonly:
        if path.startswith("/tmp/") and not tmp_done:
            lines += _tmp_lines(plan)
            tmp_done = True
        lines += bind(path)
    for point in plan.submounts:
        lines.append(f"mount -o remount,bind,ro,nosuid,nodev {q('.' + point)} 2>/dev/null || true")
    for path, target in plan.symlinks:
        lines.append(f"ln -s {q(target)} {q('.' + path)}")
    if not tmp_done:
        lines += _tmp_lines(plan)
    for path in plan.writable:
        lines += bind(path, writable=True, recursive=False)
    lines += ["mkdir -p proc sys dev", "mount -t proc -o nosuid,nodev,noexec proc proc",
              "mount -t sysfs -o ro,nosuid,nodev,noexec sysfs sys 2>/dev/null || "
              "{ mount --rbind /sys sys && mount -o remount,bind,ro sys; }",
              "mount -t tmpfs -o mode=0755,size=1m,nosuid crucible-dev dev"]
    for node in plan.devices:
        lines += [f"touch {q('.' + node)}", f"mount --bind {q(node)} {q('.' + node)}"]
    for d in plan.device_dirs:
        lines += [f"mkdir -p {q('.' + d)}", f"mount --rbind {q(d)} {q('.' + d)}"]
    lines += ["ln -s /proc/self/fd dev/fd", "ln -s /proc/self/fd/0 dev/stdin", "ln -s /proc/self/fd/1 dev/stdout",
              "ln -s /proc/self/fd/2 dev/stderr", "mkdir -p dev/shm",
              f"mount -t tmpfs -o mode=1777,size={max(plan.tmp_bytes // 8, 64 * _MiB)},nosuid,nodev "
              "crucible-shm dev/shm", *outbox_mount_lines(plan.outbox, plan.uid),
              "mkdir -p .old", "pivot_root . .old", "cd /", "umount -l /.old", "rmdir /.old",
              "mount -o remount,bind,ro /", f"cd {WORK_INSIDE}",
              *outbox_run_lines(plan.outbox, plan.outbox_patterns, plan.outbox_bytes)]
    return "\n".join(lines) + "\n"


def _tmp_lines(plan: MountPlan) -> list[str]:
    owner = [f"chown {plan.uid}:{plan.uid} .{WORK_INSIDE}"] if plan.uid is not None else []
    return ["mkdir -p tmp", f"mount -t tmpfs -o mode=1777,size={plan.tmp_bytes},nosuid,nodev crucible-tmp tmp",
            f"mkdir -p .{WORK_INSIDE}", *owner, f"chmod 0700 .{WORK_INSIDE}"]


def limits_prefix(policy: SandboxPolicy, role: str, memory_by_cgroup: bool, processes_by_cgroup: bool) -> list[str]:
    """``prlimit`` for what a cgroup does not already bound (the cgroup counts every process together)."""
    cmd = ["prlimit", f"--nofile={policy.open_files}", "--core=0", f"--fsize={policy.folder_bytes}"]
    if role == "candidate":
        cmd.append(f"--cpu={policy.cpu_time_s}:{policy.cpu_time_s + 5}")
    if not memory_by_cgroup:
        cmd.append(f"--data={policy.memory_bytes}")
    if not processes_by_cgroup:
        cmd.append(f"--nproc={policy.processes}")
    return [*cmd, "--"]


def drop_privileges(uid: Optional[int]) -> list[str]:
    """``setpriv``: an unprivileged user of its own (or, in a user namespace, root made powerless by the
    noroot securebits), no capabilities in any set, no_new_privs (setuid binaries grant nothing)."""
    common = ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
    if uid is None:
        return ["setpriv", "--securebits=+noroot,+noroot_locked,+no_setuid_fixup,+no_setuid_fixup_locked",
                *common, "--"]
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *common, "--"]


# -- one worker's sandbox --------------------------------------------------------------------------------


_counter = itertools.count()


def worker_uid(harness_pid: int, serial: int) -> int:
    """The user id of a harness's ``serial``-th worker: derived from the harness's pid, so harnesses side by side on
    one host use different ids (64 per pid before they wrap), and a worker's id says whose it is."""
    return UID_BASE + (harness_pid * 64 + serial) % UID_SPAN


def private_folder(role: str) -> Path:
    """The harness's folder for one worker (its name carries the harness's pid, for cleanup after kill -9)."""
    return Path(tempfile.mkdtemp(prefix=f"crucible-{role}-{os.getpid()}-"))


@dataclass
class Sandbox:
    """How one worker is started and what bounds it. ``level`` is "full" or "reduced (why)"."""

    policy: SandboxPolicy
    role: str
    folder: Path  # the harness's private folder for this worker
    level: str
    mode: str  # "root", "userns" or "" (reduced: no namespaces)
    uid: Optional[int] = None
    cgroup: Optional[Cgroup | CgroupV1] = None
    script: str = ""
    notes: list[str] = field(default_factory=list)
    network: bool = False  # True only with --no-net-isolation: the host's network

    @property
    def full(self) -> bool:
        return self.level == FULL

    @property
    def workdir_inside(self) -> Path:
        return Path(WORK_INSIDE) if self.mode else self.folder / "work"

    def command(self, argv: list[str]) -> list[str]:
        if not self.mode:
            return limits_prefix(self.policy, self.role, False, False) + argv
        unshare = ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--ipc", "--uts"]
        if not self.network:
            unshare.append("--net")
        if self.mode == "userns":
            unshare[1:1] = ["--user", "--map-root-user"]
        inner = limits_prefix(self.policy, self.role, self.cgroup is not None,
                              self.cgroup is not None and self.cgroup.bounds_processes)
        inner += drop_privileges(self.uid if self.mode == "root" else None)
        inner += [sys.executable, "-I", "-S", KEYRINGS, "--"]  # harness.sandbox.keyrings
        return ["setpriv", "--pdeathsig", "KILL", "--", *unshare, "--", "sh", "-c", self.script,
                "crucible-sandbox", *inner, *argv]

    def exit_reason(self, returncode: Optional[int]) -> Optional[str]:
        """The limit a dead worker ran into, where its end says so."""
        if self.cgroup is not None and self.cgroup.oom_killed:
            return f"host memory limit ({human_bytes(self.policy.memory_bytes)}) exceeded"
        sig = -returncode if returncode is not None and returncode < 0 else (
            returncode - 128 if returncode is not None and returncode > 128 else None)
        if sig == signal.SIGXCPU:
            return f"CPU time limit ({self.policy.cpu_time_s} s) exceeded"
        if sig == signal.SIGXFSZ:
            return f"file size limit ({human_bytes(self.policy.folder_bytes)}) exceeded"
        return None

    def annotate(self, error: str) -> str:
        """Name the limit behind an error the candidate's own process reported."""
        checks = [
            (r"No space left on device|Disk quota exceeded",
             f"the private folder limit ({human_bytes(self.policy.folder_bytes)})"),
            (r"MemoryError|can't allocate memory|Cannot allocate memory|std::bad_alloc",
             f"the host memory limit ({human_bytes(self.policy.memory_bytes)})"),
            (r"Resource temporarily unavailable|BlockingIOError|can't start new thread",
             f"the process limit ({self.policy.processes} processes and threads)"),
            (r"Too many open files", f"the open-file limit ({self.policy.open_files})"),
            (r"File too large", f"the file size limit ({human_bytes(self.policy.folder_bytes)})"),
        ]
        for pattern, limit in checks:
            if re.search(pattern, error) and "limit" not in error[-200:]:
                return f"{error} [sandbox: {limit} reached]"
        return error

    def close(self) -> None:
        if self.cgroup is not None:
            self.cgroup.remove()
        shutil.rmtree(self.folder, ignore_errors=True)


def make_sandbox(policy: SandboxPolicy, role: str, extra_readonly: list[str], hidden: list[str], pythonpath: str,
                 gpu: bool, writable: Optional[list[str]] = None, enabled: bool = True,
                 network: bool = False, outbox: Optional[list[str]] = None) -> Sandbox:
    """Plan one worker's sandbox (the folder, cgroup and init script); ``probe`` decides how full it can be.

    ``outbox``: file patterns under the work folder's ``out/`` handed back into ``folder/outbox``
    (harness.sandbox.outbox; a reduced sandbox leaves them in ``folder/work/out``)."""
    folder = private_folder(role)
    mode, why = probe() if enabled else ("", "switched off (--no-sandbox)")
    if not mode:
        (folder / "work" / "out").mkdir(parents=True)
        return Sandbox(policy, role, folder, f"reduced ({why})", "")
    uid = worker_uid(os.getpid(), next(_counter)) if mode == "root" else None
    if uid is not None and writable:
        # Workers sharing a writable folder (the baselines' JIT cache) share one user, so what one compiles
        # the next can extend; no candidate is ever given a writable host folder.
        uid = UID_BASE - 1
        for path in writable:
            hand_over(Path(path), uid)
    cgroup, cgroup_note = None, ""
    if mode == "root":
        cgroup, cgroup_note = worker_cgroup(f"{os.getpid()}-{folder.name.rsplit('-', 1)[-1]}", policy)
    else:
        cgroup_note = "user namespace: no cgroup delegated"
    plan, notes = plan_mounts(folder, extra_readonly, hidden, pythonpath, gpu, writable or [], policy.folder_bytes,
                              uid, str(cgroup.path / "cgroup.procs") if cgroup else None)
    if outbox is not None:
        (folder / "outbox").mkdir(mode=0o700)
        plan.outbox, plan.outbox_patterns = str(folder / "outbox"), list(outbox)
    if cgroup_note:
        notes.append(f"limits by rlimit: {cgroup_note}")
    return Sandbox(policy, role, folder, FULL, mode, uid, cgroup, init_script(plan), notes, network)


def hand_over(folder: Path, uid: int) -> None:
    """Make ``folder`` and everything in it ``uid``'s: a shared writable folder may hold what the host put there
    first (a JIT cache prebuilt by ``scripts/prebuild_flashinfer_moe.py``), where FlashInfer's log and lock files
    would be unwritable to the worker. Links are changed themselves, never followed."""
    entries = [str(folder)]
    for root, dirs, files in os.walk(folder):  # does not descend into linked folders
        entries += [os.path.join(root, name) for name in dirs + files]
    for entry in entries:
        try:
            if os.lstat(entry).st_uid != uid:
                os.chown(entry, uid, uid, follow_symlinks=False)
        except FileNotFoundError:  # removed meanwhile (a lock file)
            continue


def plan_mounts(folder: Path, extra_readonly: list[str], hidden: list[str], pythonpath: str, gpu: bool,
                writable: list[str], tmp_bytes: int, uid: Optional[int],
                cgroup_procs: Optional[str]) -> tuple[MountPlan, list[str]]:
    readonly, notes = visible_paths(extra_readonly, hidden, pythonpath)
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    except OSError:
        mountinfo = ""
    nodes, dirs = gpu_device_nodes() if gpu else ([], [])
    root = folder / "root"
    root.mkdir()
    plan = MountPlan(root=str(root), readonly=readonly, submounts=submounts_of(readonly, mountinfo),
                     symlinks=[(d, os.readlink(d)) for d in SYSTEM_DIRS if os.path.islink(d)],
                     devices=[f"/dev/{n}" for n in DEVICE_NODES if os.path.exists(f"/dev/{n}")] + nodes,
                     device_dirs=dirs, writable=writable, tmp_bytes=tmp_bytes, uid=uid, cgroup_procs=cgroup_procs)
    return plan, notes


@lru_cache(maxsize=1)
def probe() -> tuple[str, str]:
    """How this host lets the harness sandbox a worker: ("root" | "userns", "") or ("", why not).

    Tried for real: a sandboxed Python must start, see itself as the only process besides its init, and not
    be root. Asked once per harness process."""
    missing = [t for t in ("unshare", "setpriv", "prlimit", "mount", "pivot_root", "sh") if not shutil.which(t)]
    if missing:
        return "", f"{', '.join(missing)} not found"
    check = ("import os, sys; pids = [p for p in os.listdir('/proc') if p.isdigit()];"
             "sys.exit(0 if len(pids) <= 3 and not os.path.exists('/proc/1/root/old') else 3)")
    tried = []
    for mode in (("root", "userns") if os.geteuid() == 0 else ("userns",)):
        folder = private_folder("probe")
        try:
            plan, _ = plan_mounts(folder, [str(PACKAGE_ROOT / "harness")], [], os.environ.get("PYTHONPATH", ""),
                                  False, [], 64 * _MiB, UID_BASE if mode == "root" else None, None)
            box = Sandbox(SandboxPolicy(), "probe", folder, FULL, mode, plan.uid, None, init_script(plan))
            proc = subprocess.run(box.command([sys.executable, "-I", "-c", check]), capture_output=True, text=True,
                                  timeout=60, stdin=subprocess.DEVNULL, env={"PATH": os.environ.get("PATH", "")})
            if proc.returncode == 0:
                return mode, ""
            tried.append(f"{mode}: {(proc.stderr.strip().splitlines() or ['exit code %d' % proc.returncode])[-1]}")
        except (OSError, subprocess.TimeoutExpired) as err:
            tried.append(f"{mode}: {err}")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return "", "namespaces unavailable here (" + "; ".join(tried) + ")"
