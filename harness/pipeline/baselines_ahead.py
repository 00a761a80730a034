"""The baselines a submission will run, started, built and called once beside the candidate's first workload.

A library baseline's first call can cost more than everything else of a cold submission: FlashInfer compiles its
modules on first use (on an H200 host the decode module about 13 s, the prefill module of the tensor-core mode about
21 s; GDN's CuTe-DSL kernels likewise). In line, the two GQA baselines paid that one after the other inside the first
workload's comparison: 26 s of a 64 s cold submission. Here each baseline's process is started, built and called
once on the definition's smallest workload (seed 0: nothing of it is a measurement) in a thread of its own, so the
compiles run side by side and beside the candidate's build and first correctness trials.

No compile competes with a measurement: ``wait`` is called before anything is timed (the candidate's official
timing and its audits, the reference's and the baselines' own), and returns once every thread has ended.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Optional

from ..data.dataset import Dataset
from ..measure.memory import tensor_bytes
from ..data.results import WorkloadResult
from ..data.schema import Definition, EvaluationStatus, Solution
from ..sandbox.messages import RunRequest
from ..sandbox.runner import WorkerCrashed, WorkerProcess, WorkerTimeout
from .candidate_workers import CandidateWorkers

# Built worker (None: its start failed) and the failed start as a WorkloadResult
Started = tuple[Optional[WorkerProcess], Optional[WorkloadResult]]


def _uncounted(_name: str) -> contextlib.AbstractContextManager[Any]:
    """A thread beside the session's work keeps off its clock (the session counts its own wait in ``take``)."""
    return contextlib.nullcontext()


class BaselinesAhead:
    """``begin`` the baselines of a submission in threads; ``take`` one (joined) when its figures are needed;
    ``wait`` for all before anything is timed; ``close`` ends what is still running."""

    def __init__(self, workers: CandidateWorkers, dataset: Dataset):
        self.workers, self.dataset = workers, dataset
        self._threads: dict[str, threading.Thread] = {}  # solution hash -> its thread
        self._processes: dict[str, WorkerProcess] = {}  # solution hash -> its process, while its thread runs
        self._done: dict[str, Started] = {}
        self._closing = False

    @property
    def pending(self) -> bool:
        return bool(self._threads)

    def begin(self, solutions: list[Solution], definition: Definition, timeout_s: float) -> None:
        """Start each of ``solutions`` (the dataset's baselines that will run) in a thread of its own."""
        workloads = self.dataset.workloads_for(definition.name, None)
        if not workloads or not solutions:
            return
        smallest = min(workloads, key=lambda w: tensor_bytes(definition, definition.inputs, w))
        for sol in solutions:
            key = sol.content_hash
            if key in self._threads or key in self._done:
                continue
            process = self.workers.process_for(sol, "baseline")
            self._processes[key] = process
            thread = threading.Thread(target=self._start, args=(key, process, sol, definition, smallest, timeout_s),
                                      name=f"baseline-ahead-{sol.name}", daemon=True)
            self._threads[key] = thread
            thread.start()

    def _start(self, key: str, process: WorkerProcess, sol: Solution, definition: Definition, workload: Any,
               timeout_s: float) -> None:
        started: Started = (None, None)
        try:
            started = self.workers.start(sol, definition, timeout_s, role="baseline", worker=process,
                                         phase=_uncounted)
            worker = started[0]
            if worker is not None and not self._closing:
                started = self._first_call(worker, workload, timeout_s)
        except Exception as err:  # noqa: BLE001 - a thread's failure must reach the session, not stderr
            process.kill(wait=False)
            started = (None, WorkloadResult("", "", EvaluationStatus.RUNTIME_ERROR.value,
                                            message=f"start: {type(err).__name__}: {err}"))
        finally:
            self._done[key] = started

    def _first_call(self, worker: WorkerProcess, workload: Any, timeout_s: float) -> Started:
        label = self.dataset.label(workload)
        try:
            worker.request(RunRequest(workload=workload, seed=0, dataset_root=str(self.dataset.root)),
                           timeout_s=timeout_s)
        except WorkerTimeout as err:
            # As a first call in line would have: this baseline is not run in this session (Baselines.given_up).
            log = worker.log_text()
            worker.stop()
            return None, WorkloadResult("", "", EvaluationStatus.TIMEOUT.value, log=log, message=(
                f"first call on {label} (the library compiles its modules on it): {err} ({timeout_s:.0f} s limit)"))
        except WorkerCrashed:
            worker.stop()
            return None, None  # started afresh where it is measured, and its failure recorded there
        # A failed reply is no start failure: the measurement on each workload records what the call does.
        return worker, None

    def take(self, key: str) -> Optional[Started]:
        """The started baseline (its thread joined), or None where none was begun for ``key``."""
        thread = self._threads.pop(key, None)
        if thread is None:
            return None
        thread.join()
        self._processes.pop(key, None)
        return self._done.pop(key, (None, None))

    def wait(self) -> None:
        """Every thread ended (their baselines kept for ``take``): nothing compiles while a measurement runs."""
        for thread in list(self._threads.values()):
            thread.join()

    def close(self) -> None:
        """End the threads (their processes killed) and stop what they started and nobody took."""
        self._closing = True
        for process in list(self._processes.values()):
            process.kill(wait=False)  # its thread's request ends at once; the thread stops it
        self.wait()
        for worker, _ in self._done.values():
            if worker is not None:
                worker.stop(graceful=False)
        self._threads, self._processes, self._done = {}, {}, {}
        self._closing = False
