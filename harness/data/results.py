"""What an evaluation returns: per workload (WorkloadResult) and per submission (SubmissionResult).

Data only, below the Session (harness/pipeline/evaluate.py) and its audit steps (harness/audits/session_audits.py),
which both
fill them in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ..audits.model import Audit, audits_json
from ..audits.verdicts import is_fallback
from .statuses import EvaluationStatus, SubmissionStatus


@dataclass
class WorkloadResult:
    workload: str
    label: str
    status: str
    max_absolute_error: Optional[float] = None
    max_relative_error: Optional[float] = None
    matched_ratio: Optional[float] = None
    latency_ms: Optional[float] = None
    reference_latency_ms: Optional[float] = None
    speedup_factor: Optional[float] = None
    kernel_latency_ms: Optional[float] = None  # setup outside the timed call (= latency_ms without setup)
    # GPU time of the official call's kernels, copies and memsets (harness.measure.timing_records.busy_per_call_ms);
    # far below latency_ms, the span holds host work between kernels
    gpu_busy_ms: Optional[float] = None
    fi_busy_ms: Optional[float] = None  # the same for the baseline whose official figure is used
    fi_official_ms: Optional[float] = None  # the faster FlashInfer baseline, plan() inside the timed call
    fi_kernel_ms: Optional[float] = None  # the faster FlashInfer baseline, plan() in setup
    speedup_vs_fi_official: Optional[float] = None
    speedup_vs_fi_kernel: Optional[float] = None
    floor_ms: Optional[float] = None
    fraction_of_floor: Optional[float] = None
    bytes_moved: Optional[int] = None  # the workload's minimum traffic and work (harness.measure.roofline)
    flops: Optional[int] = None
    throttled: Optional[bool] = None
    aligned: Optional[bool] = None
    timing_note: str = ""
    message: str = ""
    log: str = ""
    audits: list[Audit] = field(default_factory=list)  # harness.audits.model; archived as their JSON
    timing: list[dict[str, Any]] = field(default_factory=list)
    timing_kernel: list[dict[str, Any]] = field(default_factory=list)
    gpu_state: dict[str, Any] = field(default_factory=dict)
    # Triton kernels its worker compiled from files outside the solution (a library's): never the candidate's own,
    # whatever names its functions carry (harness.sandbox.triton_cache; read by the attribution audit)
    triton_kernels_elsewhere: list[str] = field(default_factory=list, repr=False)
    # whether the reference's output on any checked trial's inputs (the inputs the timer then draws) holds a value
    # that takes computing (harness.pipeline.workload_evaluation.has_work); None: not known. False excuses a call
    # that launched no kernel of its own (an MoE rank no token routes to) from the attribution audit
    has_work: Optional[bool] = field(default=None, repr=False)
    memory: dict[str, Any] = field(default_factory=dict)  # harness.measure.memory.memory_record
    baseline_failures: list[str] = field(default_factory=list)  # "name: STATUS message" of failed baselines
    # where this workload's wall time went (harness.pipeline.phases: worker start, build, reference, correctness,
    # timing, audits, baselines...), seconds; a submission's phases_s is their sum plus what lies between workloads
    phases_s: dict[str, float] = field(default_factory=dict)
    evaluation_id: Optional[int] = None
    # on a host without a GPU, the ATen compute of every checked call (harness.sandbox.messages.LibraryCompute): the
    # evidence the CPU's attribution audit is judged from (harness.audits.cpu_attribution); the audit is archived,
    # this is not
    library_compute: list[Any] = field(default_factory=list, repr=False)

    @property
    def evaluated(self) -> bool:
        return self.status != SubmissionStatus.SKIPPED


@dataclass
class SubmissionResult:
    submission_id: int
    solution: str
    definition: str
    status: str
    workloads: list[WorkloadResult]
    notices: list[str] = field(default_factory=list)
    timing_unavailable_reason: Optional[str] = None
    scores: dict[str, Optional[float]] = field(default_factory=dict)
    scores_partial: dict[str, list[str]] = field(default_factory=dict)  # score -> labels it does not cover
    static_findings: list[dict[str, Any]] = field(default_factory=list)
    promotion_blockers: list[str] = field(default_factory=list)
    audits: list[Audit] = field(default_factory=list)  # of the submission as a whole (instruction proof)
    sandbox: str = ""  # "full" or "reduced (why)": the wall the candidate ran behind
    phases_s: dict[str, float] = field(default_factory=dict)
    # inside the workers (candidate, reference, baselines): "role.op.step" -> seconds in this submission, largest
    # first (inputs, fingerprint, digest, call, timer, clock_truth, release, transfer...): the harness's own costs
    worker_steps_s: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0

    @property
    def all_passed(self) -> bool:
        evaluated = [w for w in self.workloads if w.evaluated]
        return bool(evaluated) and all(w.status == EvaluationStatus.PASSED.value for w in evaluated)

    def to_json(self) -> dict[str, Any]:
        return {
            "submission_id": self.submission_id, "solution": self.solution, "definition": self.definition,
            "status": self.status,
            "workloads": [{"workload": w.workload, "label": w.label, "status": w.status,
                           "max_absolute_error": w.max_absolute_error, "max_relative_error": w.max_relative_error,
                           "latency_ms": w.latency_ms, "kernel_latency_ms": w.kernel_latency_ms,
                           "gpu_busy_ms": w.gpu_busy_ms, "flashinfer_busy_ms": w.fi_busy_ms,
                           "reference_latency_ms": w.reference_latency_ms, "speedup_vs_reference": w.speedup_factor,
                           "flashinfer_official_ms": w.fi_official_ms, "flashinfer_kernel_ms": w.fi_kernel_ms,
                           "speedup_vs_flashinfer_official": w.speedup_vs_fi_official,
                           "speedup_vs_flashinfer_kernel": w.speedup_vs_fi_kernel,
                           "floor_ms": w.floor_ms, "fraction_of_floor": w.fraction_of_floor, "aligned": w.aligned,
                           "throttled": w.throttled, "fallback": is_fallback(w.audits),
                           "audits": audits_json(w.audits),
                           "memory": w.memory or None, "baseline_failures": w.baseline_failures or None,
                           "phases_s": w.phases_s or None, "message": w.message or None}
                          for w in self.workloads],
            "scores": self.scores, "scores_partial": self.scores_partial or None, "audits": audits_json(self.audits),
            "promotable": not self.promotion_blockers, "promotion_blockers": self.promotion_blockers,
            "static_findings": self.static_findings,
            "timing_unavailable_reason": self.timing_unavailable_reason,
            "wall_s": self.wall_s, "phases_s": self.phases_s, "worker_steps_s": self.worker_steps_s or None,
            "sandbox": self.sandbox,
            "notices": self.notices,
        }
