"""What a harness killed outright (kill -9) leaves behind, found and removed by the next session: its workers'
private folders and cgroups (the archive closes its RUNNING rows by the same test of its process id)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from .cgroups import Cgroup, CgroupV1, stale_parents


def process_alive(pid: int) -> bool:
    """Does a process with this id run on this host (another user's counts)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def remove_stale(tmp: Optional[Path] = None) -> list[str]:
    """Remove the private folders and cgroups of harness processes on this host that no longer run.

    Their workers died with them (the namespaces' first processes get SIGKILL), but a process killed with
    ``kill -9`` cannot remove its folders; the next session does, as it closes their RUNNING rows."""
    removed = []
    tmp = Path(tmp or tempfile.gettempdir())
    for path in tmp.glob("crucible-*-*-*"):
        m = re.match(r"crucible-[a-z_]+-(\d+)-", path.name)
        if m and int(m.group(1)) != os.getpid() and not process_alive(int(m.group(1))) and path.is_dir():
            for inner in (path / "root",):  # a mount left by a host without namespaces? never: all are private
                if os.path.ismount(inner):
                    break
            else:
                shutil.rmtree(path, ignore_errors=True)
                removed.append(str(path))
    for parent in stale_parents():
        if not parent.is_dir():
            continue
        for path in parent.iterdir():
            m = re.match(r"(\d+)-", path.name)
            if path.is_dir() and m and not process_alive(int(m.group(1))):
                (Cgroup(path) if parent == Cgroup.BASE / "crucible" else CgroupV1(path)).remove()
                removed.append(str(path))
    return removed
