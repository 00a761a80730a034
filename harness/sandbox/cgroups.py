"""One worker's cgroup: its host memory bounded for everything it starts together (an rlimit bounds each process
alone: six children of 30 GiB each pass a 32 GiB ``RLIMIT_DATA``), and where the hierarchy allows, its processes.

cgroup v2 (``Cgroup``): ``/sys/fs/cgroup/crucible/<name>``, ``memory.max`` with swap off and the OOM killer taking
the whole group, ``pids.max``. cgroup v1 (``CgroupV1``, hosts and containers that mount the legacy hierarchies):
the memory controller only, under the harness's own memory cgroup (whose limits still hold over its workers'):
``memory.limit_in_bytes`` and, where swap is accounted, ``memory.memsw.limit_in_bytes``; processes stay bounded
by ``RLIMIT_NPROC`` of the worker's own user id. ``worker_cgroup`` tries them in that order.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional, Union


class Cgroup:
    """One worker's cgroup v2 under /sys/fs/cgroup/crucible: memory (swap off, OOM kills the group) and pids."""

    BASE = Path("/sys/fs/cgroup")
    bounds_processes = True  # pids.max: the rlimit on processes is not needed

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def parent(cls) -> tuple[Optional[Path], str]:
        """The folder workers' cgroups go in, with memory and pids delegated, or None and why not."""
        try:
            if "cgroup2" not in Path("/proc/self/mounts").read_text().split(f" {cls.BASE} ")[1].split()[0]:
                return None, "no cgroup v2 at /sys/fs/cgroup"
        except (OSError, IndexError):
            return None, "no cgroup v2 at /sys/fs/cgroup"
        parent = cls.BASE / "crucible"
        try:
            available = (cls.BASE / "cgroup.controllers").read_text().split()
            if not {"memory", "pids"} <= set(available):
                return None, "cgroup v2 without the memory and pids controllers"
            if not {"memory", "pids"} <= set((cls.BASE / "cgroup.subtree_control").read_text().split()):
                (cls.BASE / "cgroup.subtree_control").write_text("+memory +pids")
            parent.mkdir(exist_ok=True)
            if not {"memory", "pids"} <= set((parent / "cgroup.subtree_control").read_text().split()):
                (parent / "cgroup.subtree_control").write_text("+memory +pids")
        except OSError as err:
            return None, f"cgroup v2 not writable here ({err.strerror or err})"
        return parent, ""

    @classmethod
    def create(cls, parent: Path, name: str, policy: Any) -> "Cgroup":
        path = parent / name
        path.mkdir()
        (path / "memory.max").write_text(str(policy.memory_bytes))
        for knob, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
            try:
                (path / knob).write_text(value)
            except OSError:
                pass  # no swap accounting on this kernel: memory.max still holds
        (path / "pids.max").write_text(str(policy.processes))
        return cls(path)

    def _events(self, name: str) -> dict[str, int]:
        try:
            return {k: int(v) for k, v in (line.split() for line in (self.path / name).read_text().splitlines())}
        except (OSError, ValueError):
            return {}

    @property
    def oom_killed(self) -> bool:
        return self._events("memory.events").get("oom_kill", 0) > 0

    @property
    def pids_limited(self) -> bool:
        return self._events("pids.events").get("max", 0) > 0

    def remove(self) -> None:
        try:
            (self.path / "cgroup.kill").write_text("1")  # a straggler would keep rmdir from succeeding
        except OSError:
            pass
        _rmdir_waiting(self.path)


class CgroupV1:
    """One worker's memory cgroup in a cgroup v1 hierarchy, under the harness's own: ``memory.limit_in_bytes``
    (and ``memory.memsw.limit_in_bytes``: no swap past it) over every process of the worker together."""

    BASE = Path("/sys/fs/cgroup/memory")
    bounds_processes = False  # v1's pids controller is left alone: RLIMIT_NPROC of the worker's own user id

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def parent(cls) -> tuple[Optional[Path], str]:
        """``crucible`` inside the harness's own memory cgroup, or None and why not."""
        if not (cls.BASE / "memory.limit_in_bytes").is_file():
            return None, "no cgroup v1 memory controller at /sys/fs/cgroup/memory"
        try:
            own = next(line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().splitlines()
                       if "memory" in line.split(":", 2)[1].split(","))
            parent = cls.BASE / own.strip().lstrip("/") / "crucible"
            parent.mkdir(exist_ok=True)
        except (OSError, StopIteration, IndexError) as err:
            return None, f"cgroup v1 memory controller not writable here ({getattr(err, 'strerror', None) or err})"
        return parent, ""

    @classmethod
    def create(cls, parent: Path, name: str, policy: Any) -> "CgroupV1":
        path = parent / name
        path.mkdir()
        try:
            (path / "memory.limit_in_bytes").write_text(str(policy.memory_bytes))
        except OSError:
            path.rmdir()  # no limit this cgroup could hold: none is left behind
            raise
        try:  # after memory.limit_in_bytes (it may not be below it); without swap accounting the file is absent
            (path / "memory.memsw.limit_in_bytes").write_text(str(policy.memory_bytes))
        except OSError:
            pass
        return cls(path)

    @property
    def oom_killed(self) -> bool:
        try:
            fields = dict(line.split() for line in (self.path / "memory.oom_control").read_text().splitlines())
            return int(fields.get("oom_kill", 0)) > 0
        except (OSError, ValueError):
            return False

    @property
    def pids_limited(self) -> bool:
        return False

    def remove(self) -> None:
        """Its processes are gone with their namespace; an empty v1 cgroup is removed by rmdir."""
        _rmdir_waiting(self.path)


def _rmdir_waiting(path: Path) -> None:
    """rmdir a cgroup, waiting up to a second for the kernel to let its last processes go."""
    for _ in range(50):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)


def worker_cgroup(name: str, policy: Any) -> tuple[Optional[Union[Cgroup, CgroupV1]], str]:
    """A new cgroup for one worker (v2, else v1's memory controller), or None and why there is none."""
    notes = []
    for kind in (Cgroup, CgroupV1):
        parent, why = kind.parent()
        if parent is None:
            notes.append(why)
            continue
        try:
            return kind.create(parent, name, policy), ""
        except OSError as err:
            notes.append(f"cgroup not created ({err.strerror or err})")
    return None, "; ".join(notes)


def stale_parents() -> list[Path]:
    """Where a harness killed outright may have left its workers' cgroups (harness.sandbox.stale)."""
    parents = [Cgroup.BASE / "crucible"]
    v1, _ = (CgroupV1.parent() if (CgroupV1.BASE / "memory.limit_in_bytes").is_file() else (None, ""))
    return parents + ([v1] if v1 is not None else [])
