"""Worker processes launched before the harness imports torch, for the session to adopt.

``harness submit`` spends a second or two importing torch (through the pipeline's modules) before its Session
launches the reference worker, whose own imports take as long again. Launched first (``launch_for_submit``), the
reference worker and the first spare candidate import torch while the harness does; the Session then takes them
(``take``) where their options are exactly the ones it computes (harness.pipeline.worker_options), and launches its
own otherwise: an optimisation only. Processes nobody took are stopped at the end of the command (``stop_all``),
with an ``atexit`` as a safety net (and the workers die with their parent in any case).

This module and what it imports stay torch-free. The early workers' private folders and cgroups carry this process's
id, as the Session's own do, so ``harness.sandbox.stale.remove_stale`` (which removes those of processes that no
longer run) never removes theirs.
"""

from __future__ import annotations

import atexit
import threading
from pathlib import Path
from typing import Callable, Optional

from ..data.options import SubmitOptions
from ..sandbox.isolation import load_sandbox_policy
from ..sandbox.runner import WorkerOptions, WorkerProcess
from .worker_options import gpu_visible, worker_options_for

_lock = threading.Lock()
_launched: list[WorkerProcess] = []  # launched early, not taken yet
_atexit_registered = False


def launch(options_for_role: Callable[[str, bool], WorkerOptions]) -> list[WorkerProcess]:
    """Launch the reference worker and the first spare candidate with ``options_for_role(role, cpu_only)``: the
    arguments ``TrustedReference.worker`` and ``CandidateWorkers.launch_first_spare`` use. A launch that fails is
    left to the session."""
    global _atexit_registered
    started = []
    for role, cpu_only in (("reference", False), ("candidate", not gpu_visible())):
        worker = WorkerProcess(options_for_role(role, cpu_only))
        try:
            worker.launch()
        except OSError:
            worker.stop(graceful=False)
            continue
        started.append(worker)
    with _lock:
        _launched.extend(started)
        if not _atexit_registered:
            atexit.register(stop_all)
            _atexit_registered = True
    return started


def launch_for_submit(options: SubmitOptions, dataset_root: Path | str, archive_folder: Path | str) -> None:
    """``launch`` with the options a Session of ``options`` on this dataset and archive will compute."""
    policy = options.sandbox_policy or load_sandbox_policy(Path(dataset_root))
    launch(lambda role, cpu_only: worker_options_for(role, options, policy, dataset_root, archive_folder, cpu_only))


def take(options: WorkerOptions) -> Optional[WorkerProcess]:
    """A launched, running process whose options equal ``options`` (``spent`` is not compared), now with
    ``options`` (so its time counts in the taker's accounting); None if there is none."""
    with _lock:
        for worker in _launched:
            if worker.options == options and worker.alive:
                _launched.remove(worker)
                worker.options = options
                return worker
    return None


def pending() -> list[WorkerProcess]:
    """The processes launched early and not taken (yet)."""
    with _lock:
        return list(_launched)


def stop_all() -> None:
    """Stop every process launched early and never taken (it never ran anything: nothing to wind down)."""
    with _lock:
        left = list(_launched)
        _launched.clear()
    for worker in left:
        worker.stop(graceful=False)
