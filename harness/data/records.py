"""One evaluation as the archive keeps it: its row, its timing samples and, where it can be one, the official
FlashInfer-Bench Trace. Pure: the session passes what it measured; harness/archive/database.py writes it."""

from __future__ import annotations

import datetime as dt
from typing import Any, Optional

from ..audits.model import audits_json
from ..audits.verdicts import is_fallback
from .results import WorkloadResult
from .schema import (Correctness, Definition, Environment, Evaluation, EvaluationStatus, Performance, Solution,
                     Trace, Workload, dump_json)


def official_trace(definition: Definition, solution: Solution, workload: Workload, wr: WorkloadResult,
                   environment: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The FlashInfer Trace for this evaluation, or None when it cannot be one (skipped; untimed PASS)."""
    if not wr.evaluated:
        return None
    status = EvaluationStatus(wr.status)
    correctness = performance = None
    if status in (EvaluationStatus.PASSED, EvaluationStatus.INCORRECT_NUMERICAL):
        correctness = Correctness(max_relative_error=wr.max_relative_error or 0.0,
                                  max_absolute_error=wr.max_absolute_error or 0.0,
                                  extra={"matched_ratio": wr.matched_ratio})
    if status == EvaluationStatus.PASSED:
        if wr.latency_ms is None or wr.reference_latency_ms is None or not wr.aligned:
            return None  # an official PASSED trace needs official (aligned) performance
        performance = Performance(latency_ms=wr.latency_ms, reference_latency_ms=wr.reference_latency_ms,
                                  speedup_factor=wr.speedup_factor or 0.0)
    libs = {k: str(environment[k]) for k in ("torch", "triton", "cuda") if environment.get(k)}
    evaluation = Evaluation(status=status, environment=Environment(hardware=str(environment.get("hardware", "")),
                                                                   libs=libs),
                            timestamp=dt.datetime.now(dt.timezone.utc).isoformat(), log=wr.log,
                            correctness=correctness, performance=performance)
    return dump_json(Trace(definition=definition.name, workload=workload, solution=solution.name,
                           evaluation=evaluation))


def evaluation_row(submission_id: int, definition: Definition, workload: Workload, wr: WorkloadResult,
                   trace: Optional[dict[str, Any]], log_blob: Optional[str], environment_id: str) -> dict[str, Any]:
    """The ``evaluations`` row: the columns people query, and everything else measured in ``extra``."""
    return {
        "submission_id": submission_id, "definition": definition.name, "workload_uuid": workload.uuid,
        "workload_label": wr.label, "status": wr.status, "max_absolute_error": wr.max_absolute_error,
        "max_relative_error": wr.max_relative_error, "matched_ratio": wr.matched_ratio,
        "latency_ms": wr.latency_ms, "reference_latency_ms": wr.reference_latency_ms,
        "speedup_factor": wr.speedup_factor, "aligned": None if wr.aligned is None else int(wr.aligned),
        "timing_note": wr.timing_note, "message": wr.message, "log_blob": log_blob, "trace": trace,
        "extra": {"audits": audits_json(wr.audits), "kernel_latency_ms": wr.kernel_latency_ms,
                  "gpu_busy_ms": wr.gpu_busy_ms, "flashinfer_busy_ms": wr.fi_busy_ms,
                  "flashinfer_official_ms": wr.fi_official_ms, "flashinfer_kernel_ms": wr.fi_kernel_ms,
                  "speedup_vs_flashinfer_official": wr.speedup_vs_fi_official,
                  "speedup_vs_flashinfer_kernel": wr.speedup_vs_fi_kernel, "floor_ms": wr.floor_ms,
                  "fraction_of_floor": wr.fraction_of_floor, "bytes_moved": wr.bytes_moved, "flops": wr.flops,
                  "throttled": wr.throttled, "fallback": is_fallback(wr.audits), "gpu_state": wr.gpu_state,
                  "memory": wr.memory or None, "baseline_failures": wr.baseline_failures or None,
                  "phases_s": wr.phases_s or None},
        "environment_id": environment_id,
        "started_at": None, "finished_at": dt.datetime.now(dt.timezone.utc).isoformat()}


def timing_rows(wr: WorkloadResult) -> list[dict[str, Any]]:
    """Every timed sample of the candidate, per trial: the official figure's and the kernel figure's."""
    return [{"role": role, "trial": i, "backend": t.get("backend"), "aligned": int(bool(t.get("aligned"))),
             "median_ms": t.get("median_ms"), "samples": t.get("samples_ms", [])}
            for role, trials in (("candidate", wr.timing), ("candidate_kernel", wr.timing_kernel))
            for i, t in enumerate(trials or [])]
