"""Spread evaluations over every GPU of a host: one Session per GPU, one evaluation per GPU at a time.

The per-GPU lock is a file lock, so it also holds between separate harness processes on one host (two
people, or the controller and a person, submitting at once). Each thread has its own archive connection;
SQLite's WAL mode and busy timeout serialise the writes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import queue
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Optional, Sequence, TypeVar

from ..archive.database import Archive
from ..data.dataset import Dataset
from .evaluate import Progress, Session, SubmissionResult, SubmitOptions
from .phases import timeline
from .worker_options import one_lane_certain
from ..data.schema import Solution

LOCK_DIR = Path(os.environ.get("CRUCIBLE_LOCK_DIR", tempfile.gettempdir()))


# Longest wait in one blocking call of this module. The main thread runs a Python signal handler only between
# bytecodes: a wait with no timeout that a signal does not cut short (one that landed just before the wait
# began, or one the kernel delivered to another thread) would hold the handler back until the wait ends.
# A lane blocked in C (flock) cannot take the exception run_lanes raises in it either, until the call returns.
_SLICE_S = 0.2


@contextlib.contextmanager
def gpu_lock(key: str):
    """Hold the host-wide lock of one GPU (keyed by its UUID, or its index when the UUID is unknown)."""
    path = LOCK_DIR / f"crucible-gpu-{key.replace('/', '_')}.lock"
    with open(path, "a") as f:
        while True:  # polled, not a blocking flock: a lane told to stop (run_lanes) stops within a slice
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                time.sleep(_SLICE_S)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def visible_gpu_count(dataset: Dataset, archive: Archive, options: SubmitOptions) -> int:
    """Asked of a worker, so this process never initialises CUDA."""
    with Session(dataset, archive, options) as probe:
        probe.reference_worker()
        return int(probe.environment.get("device_count") or 0) if probe.environment.get("cuda_available") else 0


T = TypeVar("T")
Take = Callable[[], Optional[tuple[int, T]]]


def run_lanes(items: Sequence[T], lanes: int, serve: Callable[[int, "Take[T]"], None]) -> None:
    """``serve(lane, take)`` on ``lanes`` threads (in this thread when there is one lane); ``take()`` hands out
    the next ``(index, item)``, or None when the work is done or a lane has failed. The first error is raised
    here, after every lane has stopped."""
    work: "queue.Queue[tuple[int, T]]" = queue.Queue()
    for item in enumerate(items):
        work.put(item)
    errors: list[BaseException] = []

    def take() -> Optional[tuple[int, T]]:
        if errors:
            return None
        try:
            return work.get_nowait()
        except queue.Empty:
            return None

    finished = [threading.Event() for _ in range(max(lanes, 1))]
    guard = threading.Lock()
    stopping = threading.Event()
    entered: list[int] = []  # lanes that began serving: each gets the stop, and is waited for

    def lane(index: int) -> None:
        try:
            with guard:  # a lane that starts after the stop was broadcast serves nothing: it would miss the stop
                if stopping.is_set():
                    return
                entered.append(index)
            serve(index, take)
        except BaseException as err:  # surfaced in the caller's thread
            errors.append(err)
        finally:
            finished[index].set()

    if lanes <= 1:
        lane(0)
    else:
        threads = [threading.Thread(target=lane, args=(g,), name=f"lane{g}") for g in range(lanes)]
        # Waits on events, not Thread.join: a join cut short by a signal can leave the thread marked as
        # stopped while it still runs (CPython 3.11), and then nothing would stop it.
        try:
            for t in threads:
                t.start()
            for done in finished:
                _wait(done)
        except BaseException as err:  # SIGTERM or Ctrl-C reached this thread: end every lane the same way
            errors.append(err)  # take() hands out nothing more
            with guard:
                stopping.set()
                stopped = [(threads[i], finished[i]) for i in entered]
            for t, done in stopped:
                if not done.is_set():
                    _raise_in(t, type(err))
            for t, done in stopped:  # their finally blocks run: workers stop, cut-short records are closed
                _wait(done, t)
            raise
        for t in threads:
            t.join()
    if errors:
        raise errors[0]


def _wait(done: threading.Event, thread: Optional[threading.Thread] = None) -> None:
    """Wait for ``done`` in slices (see _SLICE_S), so a signal's handler runs within one slice; with ``thread``,
    also stop waiting once it has ended: the stop raised in a lane can land in lane()'s own finally, before
    ``done`` is set."""
    while not done.wait(_SLICE_S):
        if thread is not None and not thread.is_alive():
            return


def _raise_in(thread: threading.Thread, exc_type: type[BaseException]) -> None:
    """Raise ``exc_type`` in another thread at its next Python instruction. Without it, an interrupted process
    would wait for every lane to finish its work (a whole controller run) before it could exit; the lanes'
    waits return to Python often (protocol reads and gpu_lock poll), so it lands within a fraction of a second."""
    import ctypes

    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exc_type))


def submit_all(solutions: list[Solution], dataset: Dataset, archive_path: Path, options: SubmitOptions,
               progress: Optional[Progress] = None, gpus: Optional[int] = None,
               on_result: Optional[Callable[[SubmissionResult], None]] = None) -> list[SubmissionResult]:
    """Evaluate ``solutions`` on all visible GPUs (or sequentially on CPU / one GPU); results in input order."""
    if gpus is None:  # no probe (a worker's start, seconds) where one lane is certain
        gpus = 1 if one_lane_certain(len(solutions)) else visible_gpu_count(dataset, Archive(archive_path), options)
    lanes = max(1, min(gpus, len(solutions)))
    results: list[Optional[SubmissionResult]] = [None] * len(solutions)

    def serve(lane: int, take: "Take[Solution]") -> None:
        index = options.device_index if lanes == 1 else lane
        lane_options = SubmitOptions(**{**options.__dict__, "device_index": index})
        with Session(dataset, Archive(archive_path), lane_options, progress=progress) as session:
            while (item := take()) is not None:
                i, solution = item
                started = time.perf_counter()
                session.reference_worker()  # the first time: the session's start (the reference's process)
                start_s = time.perf_counter() - started
                timeline(f"lane{lane}_reference_ready")
                key = session.environment.get("gpu_uuid") or session.environment.get("uuid") or f"index{index}"
                with gpu_lock(key) if session.has_gpu else contextlib.nullcontext():
                    results[i] = session.submit(solution)
                timeline(f"lane{lane}_submission_evaluated")
                if start_s >= 0.001:  # where the time went before the submission began
                    results[i].phases_s = {"session_start": round(start_s, 3), **results[i].phases_s}
                if on_result is not None:
                    on_result(results[i])
        timeline(f"lane{lane}_session_closed")

    run_lanes(solutions, lanes, serve)
    return [r for r in results if r is not None]
