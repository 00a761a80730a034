"""Every thread's Python stack, written every N seconds: where a slow or stuck process spends its time.

faulthandler's ``dump_traceback_later`` does this from a C watchdog thread that walks the other threads' frames
without the GIL; a dump that lands while the main thread is building or freeing frames (an import, a dataclass
being made) reads freed memory and kills the process with SIGSEGV. This thread takes the GIL like any other, so
it reads only whole frames. What it cannot show is a thread that holds the GIL for the whole interval (a C call
that never releases it): the dump then comes when the call returns.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

_NAME = "crucible-stack-dumps"


def _stack(frame: Any) -> list[str]:
    lines = []
    while frame is not None:
        code = frame.f_code
        lines.append(f'  File "{code.co_filename}", line {frame.f_lineno} in {code.co_name}\n')
        frame = frame.f_back
    return lines


def format_stacks(skip: int | None = None) -> str:
    """Each thread with a Python state (but `skip`), innermost call first, in faulthandler's layout."""
    names = {t.ident: t.name for t in threading.enumerate()}
    out: list[str] = []
    for ident, frame in sys._current_frames().items():
        if ident == skip:
            continue
        out.append(f"Thread 0x{ident:016x} [{names.get(ident, '?')}] (most recent call first):\n")
        out.extend(_stack(frame))
        out.append("\n")
    return "".join(out)


def start(seconds: float, fd: int = 2) -> threading.Thread:
    """Dump every thread's stack to file descriptor `fd` every `seconds`, until the process ends (a daemon thread;
    the descriptor is held from now, so a later ``sys.stderr = ...`` does not move the dumps)."""
    if not seconds > 0:
        raise ValueError(f"stack dumps need an interval above 0 seconds, not {seconds!r}")
    out = os.dup(fd)

    def loop() -> None:
        me = threading.get_ident()
        while True:
            time.sleep(seconds)
            try:
                os.write(out, format_stacks(skip=me).encode("utf-8", "replace"))
            except OSError:  # the log was closed: nothing left to tell
                return

    thread = threading.Thread(target=loop, daemon=True, name=_NAME)
    thread.start()
    return thread
