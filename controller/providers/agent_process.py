"""One coding-agent run as a process: started in a session of its own, its output written to files (never pipes, so
no child that keeps them open can hold the controller), and, when it ends or its wall time is up, everything it
started killed with it.

"Everything it started": the agent's session (its process group, and children that moved to another group), and,
read while the agent still lives, every process descended from it (a child that left the session with setsid()
is still its child). A process that left the session and whose parent had already exited can no longer be traced
to the agent: that is the limit of what Linux tells an unprivileged parent without a cgroup or a subreaper.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass
class AgentRun:
    exit: int | None
    timed_out: bool
    stdout: str
    stderr: str
    wall_s: float
    killed: int = 0  # processes it left behind that were killed


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, session id) of a live process, from /proc/PID/stat (its name may hold spaces and parentheses)."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except (OSError, ValueError):
        return None
    fields = text[text.rfind(")") + 2:].split()
    try:
        return int(fields[1]), int(fields[3])
    except (IndexError, ValueError):
        return None


def _processes() -> dict[int, tuple[int, int]]:
    found = {}
    try:
        names = os.listdir(PROC)
    except OSError:
        return found
    for name in names:
        if name.isdigit():
            stat = _stat(int(name))
            if stat is not None:
                found[int(name)] = stat
    return found


def left_behind(root: int, descendants: bool) -> set[int]:
    """The processes of ``root``'s session, and with ``descendants`` (only while ``root`` lives: a reaped pid may
    be someone else's by now) every live descendant of ``root``; never ``root`` itself or this process."""
    table = _processes()
    found = {pid for pid, (_, session) in table.items() if session == root}
    if descendants:
        children: dict[int, list[int]] = {}
        for pid, (parent, _) in table.items():
            children.setdefault(parent, []).append(pid)
        stack = [root]
        while stack:
            for child in children.get(stack.pop(), []):
                if child not in found:
                    found.add(child)
                    stack.append(child)
    found.discard(root)
    found.discard(os.getpid())
    return found


def _signal(pids: set[int], sig: int) -> int:
    sent = 0
    for pid in pids:
        try:
            os.kill(pid, sig)
            sent += 1
        except (ProcessLookupError, PermissionError):
            pass
    return sent


def kill_tree(root: int, alive: bool) -> int:
    """SIGKILL ``root`` (when ``alive``), its process group and what it left behind; how many others were killed.
    Everything is stopped first, so nothing forks a new process between being found and being killed. Once
    ``root`` is reaped its pid may be someone else's: then only its session's members (found by their session id,
    which every process of its groups carries) are touched, never a group or descendants by that pid."""
    def group(sig: int) -> None:
        if alive:  # not yet reaped: the pid, and the group it leads, are still the agent's
            try:
                os.killpg(root, sig)
            except (ProcessLookupError, PermissionError):
                pass
            _signal({root}, sig)

    group(signal.SIGSTOP)
    others = left_behind(root, descendants=alive)
    _signal(others, signal.SIGSTOP)
    others |= left_behind(root, descendants=alive)  # forked before it was stopped
    killed = _signal(others, signal.SIGKILL)
    group(signal.SIGKILL)
    return killed


def _tail(handle, limit: int) -> str:
    handle.flush()
    size = handle.seek(0, os.SEEK_END)
    handle.seek(max(0, size - limit))
    return handle.read().decode("utf-8", errors="replace")


def run_agent(argv: list[str], cwd: Path, env: dict[str, str], wall_s: float, stdout_limit: int = 200_000,
              stderr_limit: int = 20_000) -> AgentRun:
    """Run the agent for at most ``wall_s``; OSError when it cannot be started. The output kept is each stream's
    tail (an agent that prints gigabytes costs disk for the run, never memory)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.monotonic()
        proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True, env=env)
        timed_out = False
        try:
            proc.wait(timeout=max(wall_s, 0.001))
        except subprocess.TimeoutExpired:
            timed_out = True
        # Past its time the agent is killed with everything it started; after a normal exit, what it left running
        # (a build in the background, a daemon) is killed too: nothing of it outlives the run.
        killed = kill_tree(proc.pid, alive=timed_out)
        proc.wait()
        return AgentRun(exit=proc.returncode, timed_out=timed_out, stdout=_tail(out, stdout_limit),
                        stderr=_tail(err, stderr_limit), wall_s=time.monotonic() - started, killed=killed)
