"""One workload on a solution's built worker, inside a submission: the evaluation, its place against the
reference, FlashInfer and the floor, the audits that read the timed result, the GPU memory it took, and the
archive row.

Mixed into ``harness.pipeline.evaluate.Session`` (as ``WorkloadEvaluation`` and ``SessionAudits`` are); what it reads
of the session: ``audit_config``, ``dataset``, ``archive``, ``environment``, ``progress``, ``trusted`` and
``baselines`` (their workers' memory), ``candidates`` (harness.pipeline.candidate_workers), and the steps
``_evaluate_workload``, ``_compare``, ``_attribution`` and ``_escalate``.

A submission's wall-time budget (``Session.submit``'s ``budget_s``, kept in ``_budget`` while it runs) is its
candidate worker's deadline (harness.sandbox.runner.WorkerProcess.deadline): the build or the workload running then
is cut, its worker killed with its sandbox, and it ends TIMEOUT saying so; the workloads after it are SKIPPED.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Optional

from ..audits.verdicts import cpu_attribution_audit
from ..data import records
from ..data.dataset import EvalPreset
from ..data.results import SubmissionResult, WorkloadResult
from ..data.schema import Definition, EvaluationStatus, Solution, Workload
from ..data.statuses import SubmissionStatus
from ..families import family_for
from ..measure.correctness import Tolerance
from ..measure.memory import evaluation_processes, memory_record
from ..sandbox.runner import WorkerProcess


class CandidateRun:
    """The per-workload steps of ``Session._submit`` (see the module docstring); not used on its own."""

    _budget: Optional[tuple[float, float]] = None  # the submission's budget: (seconds, time.monotonic() deadline)

    def _start_candidate(self, solution: Solution, definition: Definition, timeout_s: float,
                         role: str = "candidate", deadline: Optional[float] = None,
                         result: Optional[SubmissionResult] = None
                         ) -> tuple[Optional[WorkerProcess], Optional[WorkloadResult]]:
        # A full-audit evaluation (what a promotion rests on) builds afresh: no file the solution wrote in an
        # earlier evaluation reaches it (harness.sandbox.extension_cache); screening and fast runs reuse the build.
        worker, failure = self.candidates.start(solution, definition, timeout_s, role,
                                                reuse_build=self.audit_config.level != "full", deadline=deadline)
        if worker is not None and result is not None:
            self._compiled_into = result  # where _on_candidate puts what the calls compiled
            files, unread = getattr(worker, "compiled_sources", ([], []))
            failure = self._gate_compiled_sources(files, unread, solution, definition, result, role == "baseline")
            if failure is not None:
                worker.stop()
                worker = None
        return worker, failure

    def _gate_compiled_sources(self, files: list[dict[str, Any]], unread: list[str], solution: Solution,
                               definition: Definition, result: SubmissionResult,
                               library_is_own: bool) -> Optional[WorkloadResult]:
        """The static gate's C++ rules on what the build compiled (harness.audits.compiled_gate), in this process
        on the text the worker read back: new findings join the submission's static findings (its promotion
        blockers), and an error one fails the build as the gate's refusal, a COMPILE_ERROR with the findings as its
        log (the archived options' static_gate were written before the build)."""
        from ..audits.compiled_gate import compiled_findings
        from ..audits.static_gate import policy_from_mapping

        if not files and not unread:
            return None
        policy = policy_from_mapping(self._policy_document(), definition=definition.name, op_type=definition.op_type)
        new = [f.model_dump() for f in compiled_findings(files, unread, {s.path: s.content for s in solution.sources},
                                                         policy, result.static_findings, library_is_own)]
        if not new:
            return None
        result.static_findings.extend(new)
        error = next((f for f in new if f["severity"] == "error"), None)
        if error is None:
            return None
        message = (f"static gate on the sources the build compiled: {error['rule']} at {error['path']}:"
                   f"{error['line']}: {error['message']}")
        return WorkloadResult("", "", EvaluationStatus.COMPILE_ERROR.value, message=message,
                              log=json.dumps(new, indent=1))

    def _gate_compiled_by_calls(self, candidate: WorkerProcess, solution: Solution, definition: Definition,
                                wr: WorkloadResult, library_is_own: bool) -> bool:
        """After a workload: what its calls compiled (a load_inline built at the first call, not at import), gated
        as the build's is; False (the worker stopped, the workload failed) where that refused it."""
        from ..sandbox.messages import CompiledRequest
        from ..sandbox.runner import WorkerCrashed, WorkerTimeout

        result = getattr(self, "_compiled_into", None)
        if result is None or candidate.compile_only or not candidate.alive:
            return True
        try:
            reply, _ = candidate.request(CompiledRequest(), timeout_s=120)
        except (WorkerTimeout, WorkerCrashed) as err:
            failure = WorkloadResult("", "", EvaluationStatus.RUNTIME_ERROR.value,
                                     message=f"the worker did not say what its calls compiled: {err}")
        else:
            failure = (WorkloadResult("", "", EvaluationStatus.RUNTIME_ERROR.value, message=reply.error or "")
                       if not reply.ok else self._gate_compiled_sources(
                           [s.model_dump() for s in reply.compiled_sources], list(reply.compiled_unread), solution,
                           definition, result, library_is_own))
        if failure is None:
            return True
        wr.status, wr.message = failure.status, failure.message
        wr.log = (wr.log + "\n" + failure.log).strip() if failure.log else wr.log
        candidate.stop()
        return False

    def _past_budget(self) -> Optional[str]:
        """Why the next workload is not run (the submission's wall-time budget is spent), or None."""
        if self._budget is None or time.monotonic() < self._budget[1]:
            return None
        return f"not run: {budget_spent(self._budget[0])}"

    def _on_candidate(self, candidate: WorkerProcess, solution: Solution, definition: Definition, workload: Workload,
                      label: str, run_preset: EvalPreset, preset: EvalPreset, tol: Tolerance, timeout_s: float,
                      library_is_own: bool) -> tuple[WorkloadResult, Optional[WorkerProcess]]:
        """The workload's result, and the worker for the next workload (None: it broke, start a fresh one)."""
        self._mark_memory(candidate)
        if candidate.compile_only:
            return WorkloadResult(workload.uuid, label, SubmissionStatus.SKIPPED, message=(
                getattr(candidate, "compile_only_note", "") or "compiled with nvcc for "
                + os.environ.get("CRUCIBLE_CUDA_ARCH", "sm_90a")) + "; no GPU on this host to run it"), candidate
        wr = self._evaluate_workload(candidate, definition, workload, label, run_preset, tol, timeout_s,
                                     run_audits=self.audit_config.level != "off")
        if not self._gate_compiled_by_calls(candidate, solution, definition, wr, library_is_own):
            wr.memory = self._memory_record(definition, workload, candidate)
            return wr, None
        if wr.status == EvaluationStatus.PASSED.value and wr.latency_ms is not None:
            self._compare(definition, workload, preset, tol, timeout_s, wr)
            suspicious = (wr.speedup_vs_fi_kernel or 0) > self.audit_config.speedup_bound
            if self.audit_config.level != "off":
                self._attribution(solution, wr, library_is_own)
            if suspicious and self.audit_config.level == "fast":
                self._escalate(candidate, definition, workload, preset, tol, timeout_s, wr, library_is_own)
        elif wr.status == EvaluationStatus.PASSED.value and self.audit_config.level != "off":
            # no timing (a CPU): who did the work, from the worker's count of library compute in every checked call
            verdict = cpu_attribution_audit(wr.library_compute, self.audit_config, library_is_own)
            wr.audits += [verdict] if verdict is not None else []
        wr.memory = self._memory_record(definition, workload, candidate)
        if not candidate.alive or wr.status in (EvaluationStatus.RUNTIME_ERROR.value, EvaluationStatus.TIMEOUT.value):
            candidate.stop()  # a fresh process (and CUDA context) for the next workload
            return wr, None
        return wr, candidate

    def _mark_memory(self, candidate: WorkerProcess) -> None:
        for worker in (candidate, self.trusted.process, *self.baselines.workers.values()):
            if worker is not None:
                worker.mark_memory()

    def _memory_record(self, definition: Definition, workload: Workload, candidate: WorkerProcess) -> dict[str, Any]:
        """The GPU memory of this workload's evaluation, per process and together (harness.measure.memory)."""
        names = {s.content_hash: s.name for s in self.dataset.baselines(definition.name)}
        processes = evaluation_processes(candidate, self.trusted.process, self.baselines.workers, names)
        working = family_for(definition.op_type).reference_working_bytes(definition, workload)
        return memory_record(definition, workload, processes, working)

    def _record(self, result: SubmissionResult, definition: Definition, solution: Solution, workload: Workload,
                wr: WorkloadResult, env_id: str) -> None:
        """The workload's evaluation into the archive (its log as a blob, its official trace) and the result."""
        wr.workload = workload.uuid
        if self._budget is not None and wr.status == EvaluationStatus.TIMEOUT.value and self._past_budget():
            wr.message = f"{budget_spent(self._budget[0])}: its worker was stopped ({wr.message})"
        log_blob = self.archive.put_blob(wr.log, "log") if wr.log else None
        trace = records.official_trace(definition, solution, workload, wr, self.environment)
        wr.evaluation_id = self.archive.add_evaluation(
            records.evaluation_row(result.submission_id, definition, workload, wr, trace, log_blob, env_id),
            records.timing_rows(wr))
        result.workloads.append(wr)
        self.progress("result", {"label": wr.label, "status": wr.status, "message": wr.message})


def budget_spent(budget_s: float) -> str:
    """What a submission cut at its wall-time budget says (a controller's draft: its request's wall time)."""
    return f"the evaluation's wall-time budget ({budget_s:.3g} s left when it started) ran out"
