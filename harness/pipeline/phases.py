"""Where an evaluation's time goes: named phases (worker start, build, reference, correctness, timing, audits...),
accounted exclusively, so a phase nested in another counts for itself alone and the totals add up to the wall."""

from __future__ import annotations

import contextlib
import time
from typing import Iterator


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
