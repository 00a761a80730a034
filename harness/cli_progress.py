"""What `harness submit` shows while it works, on stderr (`--progress`): a bar per GPU lane on a terminal; with
`lines`, plain timestamped lines (a CI log, a script waiting on a slow solution), so a run that is cut short still
says which workload it was on and for how long. Elsewhere nothing by default: a failure stays one line, and output
piped into another program holds only what it asked for."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Callable, Iterator

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .cli_common import styled
from .data.statuses import EvaluationStatus, SubmissionStatus

Handler = Callable[[str, dict[str, Any]], None]
QUIET = (EvaluationStatus.PASSED, SubmissionStatus.SKIPPED)


def _first_line(data: dict[str, Any]) -> str:
    return escape((data.get("message") or "").split("\n")[0][:300])


@contextlib.contextmanager
def bars(err: Console) -> Iterator[Handler]:
    """A terminal: one transient bar per lane (thread), and a line for each workload that did not pass."""
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True) as progress:
        tasks: dict[str, Any] = {}

        def on_event(kind: str, data: dict[str, Any]) -> None:
            lane = threading.current_thread().name
            if kind == "start":
                tasks[lane] = progress.add_task(escape(f"{data['solution']} [{data['definition']}]"),
                                                total=data["workloads"])
            elif kind == "workload":
                progress.update(tasks[lane], description=escape(f"{data['label']}"))
            elif kind == "result":
                progress.advance(tasks[lane])
                if data["status"] not in QUIET:
                    progress.console.print(f"  {data['label']}: {styled(data['status'])} {_first_line(data)}",
                                           highlight=False)

        yield on_event


@contextlib.contextmanager
def lines(err: Console, clock: Callable[[], float] = time.monotonic) -> Iterator[Handler]:
    """Not a terminal: a line when a solution starts, when each workload starts and when it ends (status and
    seconds), each with the seconds since the run began."""
    began = clock()
    started: dict[str, float] = {}  # lane -> when its current workload began
    lock = threading.Lock()

    def say(text: str) -> None:
        with lock:
            err.print(f"[{clock() - began:7.1f} s] {text}", highlight=False, soft_wrap=True)

    def on_event(kind: str, data: dict[str, Any]) -> None:
        lane = threading.current_thread().name
        if kind == "start":
            say(escape(f"{data['solution']} [{data['definition']}]: {data['workloads']} workload(s)"))
        elif kind == "workload":
            started[lane] = clock()
            say(escape(f"  {data['label']}: started"))
        elif kind == "result":
            took = clock() - started.pop(lane, clock())
            detail = "" if data["status"] == EvaluationStatus.PASSED else f" {_first_line(data)}"
            say(f"  {escape(str(data['label']))}: {styled(data['status'])} after {took:.1f} s{detail}")

    yield on_event


@contextlib.contextmanager
def silent() -> Iterator[Handler]:
    yield lambda kind, data: None


def submit_progress(err: Console, mode: str = "auto") -> contextlib.AbstractContextManager[Handler]:
    """``mode``: auto (bars on a terminal, else nothing), lines, off."""
    if mode == "lines":
        return lines(err)
    return bars(err) if mode == "auto" and err.is_terminal else silent()
