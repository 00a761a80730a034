"""Where an evaluation's time goes: named phases (worker start, build, reference, correctness, timing, audits...),
accounted exclusively, so a phase nested in another counts for itself alone and the totals add up to the wall."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Iterator, Optional


TIMELINE_ENV = "CRUCIBLE_TIMELINE"


def _process_age_s() -> Optional[float]:
    """Seconds since this process started (Linux /proc; None elsewhere): a timeline that begins at the exec, so
    the interpreter's start and the imports before any of our code runs are on it."""
    try:
        with open("/proc/self/stat") as f:
            started_ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime, after (comm)
        with open("/proc/uptime") as f:
            uptime_s = float(f.read().split()[0])
        return uptime_s - started_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


_STARTED = time.perf_counter() - (_process_age_s() or 0.0)


def timeline(event: str) -> None:
    """With CRUCIBLE_TIMELINE=1, one stderr line ``timeline SECONDS EVENT`` (seconds since the process started):
    where a command's wall goes outside the per-workload phases (benchmarks/judge_scale.py reads them)."""
    if os.environ.get(TIMELINE_ENV):
        sys.stderr.write(f"timeline {time.perf_counter() - _STARTED:.3f} {event}\n")
        sys.stderr.flush()


class PhaseClock:
    def __init__(self) -> None:
        self.totals: dict[str, float] = {}  # phase -> seconds
        self._stack: list[tuple[str, float]] = []

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        now = time.perf_counter()
        if self._stack:  # the enclosing phase stops counting here
            outer, since = self._stack[-1]
            self.totals[outer] = self.totals.get(outer, 0.0) + now - since
        self._stack.append((name, now))
        try:
            yield
        finally:
            end = time.perf_counter()
            _, since = self._stack.pop()
            self.totals[name] = self.totals.get(name, 0.0) + end - since
            if self._stack:  # ...and counts again from here
                self._stack[-1] = (self._stack[-1][0], end)

    def since(self, before: dict[str, float]) -> dict[str, float]:
        """Seconds per phase spent since ``before`` (a copy of ``totals`` taken then), phases that took any."""
        spent = {k: round(v - before.get(k, 0.0), 3) for k, v in self.totals.items()}
        return {k: v for k, v in spent.items() if v > 0}
