"""A solution's worker process: a fresh one for every candidate, launched ahead where that helps, then built.

Every candidate gets its own process (isolation); starting one costs seconds (importing torch, Triton, CUPTI), so a
``Session`` keeps one spare launched in the background: the first while the reference worker imports, and (with
``SubmitOptions.spare_worker``) the next candidate's while the current one is evaluated. Baseline workers are
launched and built the same way, without a spare; a submission whose baselines will have to run launches their
processes ahead (``launch_ahead``), so their imports overlap the candidate's first workload.
"""

from __future__ import annotations

from typing import Any, Callable, ContextManager, Optional

from ..data.options import SubmitOptions
from ..data.results import WorkloadResult
from ..sandbox.extension_cache import ExtensionCache, as_bytes, as_tensor
from ..sandbox.messages import BuildRequest
from ..sandbox.runner import WorkerCrashed, WorkerOptions, WorkerProcess, WorkerTimeout
from ..data.schema import Definition, EvaluationStatus, Solution
from . import early_workers
from .worker_options import gpu_visible


class CandidateWorkers:
    """The session's spare candidate process, and the start (launch, ready, build) of a solution's worker.

    ``options``: the session's (read for ``spare_worker``); ``worker_options(role, cpu_only=None)``: the session's
    options for a worker of that role; ``phase(name)``: the session's time accounting; ``extensions``: where the
    torch/TVM-FFI extensions a solution built are kept for its next worker (harness.sandbox.extension_cache), or None.
    """

    def __init__(self, options: SubmitOptions, worker_options: Callable[..., WorkerOptions],
                 phase: Callable[[str], ContextManager[Any]], extensions: Optional[ExtensionCache] = None):
        self.options = options
        self._worker_options, self._phase = worker_options, phase
        self.extensions = extensions
        self.spare: Optional[WorkerProcess] = None  # a launched, unused candidate process
        self.ahead: dict[str, WorkerProcess] = {}  # key (a baseline's content hash) -> its launched, unused process

    def launch_first_spare(self) -> None:
        """While the reference imports, the first candidate's process starts (imports torch, Triton) too."""
        if self.spare is None:
            options = self._worker_options("candidate", cpu_only=not gpu_visible())
            self.spare = early_workers.take(options)  # launched before the harness imported torch (harness submit)
            if self.spare is not None:
                return
            self.spare = WorkerProcess(options)
            try:
                self.spare.launch()
            except OSError:
                self.spare = None

    def fresh(self) -> WorkerProcess:
        """A candidate process that has never run any code but ours: the spare started earlier, or a new one."""
        spare, self.spare = self.spare, None
        if spare is not None and spare.alive and spare.options == self._worker_options("candidate"):
            return spare
        if spare is not None:
            spare.stop(graceful=False)  # it never ran anything: nothing to wind down
        worker = WorkerProcess(self._worker_options("candidate"))
        worker.launch()
        return worker

    def launch_spare(self) -> None:
        if self.spare is None:
            self.spare = WorkerProcess(self._worker_options("candidate"))
            try:
                self.spare.launch()
            except OSError:
                self.spare = None

    def launch_ahead(self, key: str, role: str) -> None:
        """Start the process a later ``start`` of this solution (``key``: its content hash) in ``role`` will use."""
        if key in self.ahead:
            return
        worker = WorkerProcess(self._worker_options(role))
        try:
            worker.launch()
        except OSError:
            return
        self.ahead[key] = worker

    def process_for(self, solution: Solution, role: str = "candidate") -> WorkerProcess:
        """A launched process for ``solution`` in ``role``: the spare (a candidate), the one launched ahead for it (a
        baseline), or a new one."""
        if role == "candidate":
            return self.fresh()
        worker = self.ahead.pop(solution.content_hash, None)
        if worker is None or not worker.alive or worker.options != self._worker_options(role):
            if worker is not None:
                worker.stop(graceful=False)
            worker = WorkerProcess(self._worker_options(role))
            worker.launch()
        return worker

    def start(self, solution: Solution, definition: Definition, timeout_s: float, role: str = "candidate",
              worker: Optional[WorkerProcess] = None, phase: Optional[Callable[[str], ContextManager[Any]]] = None,
              reuse_build: bool = True, deadline: Optional[float] = None
              ) -> tuple[Optional[WorkerProcess], Optional[WorkloadResult]]:
        """A built worker for ``solution``, or None and the failed start as a WorkloadResult. ``worker``: a process
        from ``process_for`` (default: taken now); ``phase``: where the waits are counted (default: the session's
        clock; a thread beside the session's work passes its own); ``reuse_build``: False compiles its torch
        extensions afresh (the new build replaces the kept one); ``deadline``: the worker's (WorkerProcess.deadline),
        from its wait for the hello on."""
        worker = worker or self.process_for(solution, role)
        worker.deadline = deadline
        phase = phase or self._phase
        try:
            with phase("worker_start"):
                worker.wait_ready()
            if self.options.spare_worker and role == "candidate":
                self.launch_spare()  # the next candidate's process starts while this one is evaluated
            key, seed = self._extension_seed(solution, worker, reuse_build)
            with phase("build"):
                reply, built = worker.request(BuildRequest(solution=solution, definition=definition),
                                              timeout_s=timeout_s, **({"tensors": seed} if seed else {}))
        except WorkerTimeout as err:
            log = worker.log_text()
            worker.stop()
            return None, WorkloadResult("", "", EvaluationStatus.TIMEOUT.value, message=f"build: {err}", log=log)
        except WorkerCrashed as err:
            log = worker.log_text()
            worker.stop()
            return None, WorkloadResult("", "", EvaluationStatus.COMPILE_ERROR.value, message=f"build: {err}", log=log)
        if not reply.ok:
            log = reply.log + "\n" + worker.log_text()
            worker.stop()
            return None, WorkloadResult("", "", reply.status or EvaluationStatus.COMPILE_ERROR.value,
                                        message=reply.error or "", log=log.strip())
        if key is not None and "extension_build" in built:  # built here: no copy given, or one that did not unpack
            self.extensions.put(key, as_bytes(built["extension_build"]))
        worker.compiled_sources = ([s.model_dump() for s in getattr(reply, "compiled_sources", [])],
                                   list(getattr(reply, "compiled_unread", [])))  # for the compiled-sources gate
        worker.compile_only = reply.compile_only
        worker.compile_only_note = reply.note
        reused = getattr(reply, "extensions", "")
        worker.build_log = reply.log + (f"\n[crucible] torch/TVM-FFI extensions put back before the import: {reused}"
                                        if reused else "")
        return worker, None

    def _extension_seed(self, solution: Solution, worker: WorkerProcess,
                        reuse: bool) -> tuple[Optional[str], Optional[dict[str, Any]]]:
        """The cache key of ``solution``'s torch extensions on this worker's toolchain (from its hello, before it ran
        any candidate code), and (``reuse``) what an earlier worker of it built there, as the build request's
        tensors."""
        if self.extensions is None:
            return None, None
        environment = getattr(worker, "environment", None) or {}
        toolchain = " ".join(f"{k} {environment.get(k)}" for k in ("python", "torch", "cuda", "capability",
                                                                    "device_name"))
        key = ExtensionCache.key(solution.content_hash, toolchain)
        data = self.extensions.get(key) if reuse else None
        return key, None if data is None else {"extension_seed": as_tensor(data)}

    def close(self) -> None:
        """Stop the unused processes (they never ran anything: nothing to wind down)."""
        for worker in (self.spare, *self.ahead.values()):
            if worker is not None:
                worker.stop(graceful=False)
        self.spare, self.ahead = None, {}
