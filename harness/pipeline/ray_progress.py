"""The whole cluster's progress in the terminal for `harness submit --executor ray`: one line per lane (where it
runs, what it evaluates), the queue and what is finished. It reads harness/pipeline/ray_executor.py's events and imports
rich only, so it costs nothing to the local executor."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table


class ClusterProgress:
    """A ``Live`` table redrawn on every event; lines about lost lanes are printed above it and stay."""

    def __init__(self, console: Console):
        self.console = console
        self.lanes: dict[str, dict[str, Any]] = {}
        self.queued = self.done = self.total = 0
        self.started = time.monotonic()
        self.live = Live(self._render(), console=console, transient=True, refresh_per_second=2)

    def __enter__(self) -> "ClusterProgress":
        self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.live.__exit__(*exc)

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "lanes":
            self.queued = self.total = data["queued"]
            kind_of = "GPU" if data["gpu"] else "CPU"
            self.console.print(f"ray: {data['lanes']} {kind_of} lane(s) for {self.total} solution(s)", highlight=False)
        elif kind == "lane_ready":
            self.lanes[data["lane"]] = {"host": data.get("host"), "hardware": data.get("hardware"), "doing": "idle"}
        elif kind == "assigned":
            self.queued = data["queued"]
            retry = f" (attempt {data['attempt']})" if data["attempt"] > 1 else ""
            self.lanes.setdefault(data["lane"], {})["doing"] = f"{data['solution']}{retry}"
        elif kind == "finished":
            self.done, self.queued = data["done"], data["queued"]
            if data.get("lane") in self.lanes:
                self.lanes[data["lane"]]["doing"] = "idle"
        elif kind == "lane_lost":
            lane = self.lanes.pop(data["lane"], {})
            again = f"; {data['requeued']} queued again" if data.get("requeued") else ""
            self.console.print(f"[yellow]ray: {data['lane']} on {lane.get('host') or data.get('host') or '?'} lost "
                               f"({escape(data['reason'])}){again}; a replacement lane is starting[/]",
                               highlight=False)
        self.live.update(self._render())

    def _render(self) -> Group:
        busy = sum(1 for lane in self.lanes.values() if lane.get("doing") not in (None, "idle"))
        table = Table(show_header=True, header_style="bold", box=None)
        for col in ("lane", "host", "hardware", "evaluating"):
            table.add_column(col, no_wrap=True, overflow="ellipsis", max_width=48)
        for name, lane in sorted(self.lanes.items()):
            table.add_row(name, str(lane.get("host") or "-"), str(lane.get("hardware") or "-"),
                          escape(str(lane.get("doing") or "idle")))
        elapsed = time.monotonic() - self.started
        summary = (f"lanes busy {busy}/{len(self.lanes)}, queued {self.queued}, finished {self.done}/{self.total}, "
                   f"{elapsed:.0f} s")
        return Group(summary, table)
