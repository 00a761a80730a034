"""A workload's timing reply from its worker, read into its result: the official latency (mean of the trials'
medians), the kernel figure where a setup ran outside the timed call, the clock-truth audit on the same calls,
and the GPU's state (throttling) around them. Pure: tested on CPU with recorded replies."""

from __future__ import annotations

from typing import Any

from ..audits.verdicts import AuditConfig, clock_truth_verdict
from .gpu_state import throttled
from ..data.results import WorkloadResult
from ..data.schema import EvaluationStatus
from .timing_records import aggregate_timing


def apply_timing_reply(wr: WorkloadResult, header: dict[str, Any], cfg: AuditConfig) -> None:
    if not header.get("ok"):
        wr.status = EvaluationStatus.RUNTIME_ERROR.value
        wr.message = f"timing: {header.get('error')}"
        return
    wr.timing = header["trials"]
    wr.latency_ms, wr.aligned, backend = aggregate_timing(header["trials"])
    clock_trials = header.get("kernel_trials") or header["trials"]  # wall times were taken on this callable
    walls = [w for t in clock_trials for w in t.get("wall_ms", [])]
    traced = [w for t in clock_trials for w in t.get("traced_wall_ms", [])]
    launches = max((len(set(t.get("kernel_names") or [])) for t in clock_trials), default=1)
    clock = clock_truth_verdict(walls, [t["median_ms"] for t in clock_trials], cfg, launches, traced)
    if clock is not None:
        wr.audits.append(clock)
    wr.kernel_latency_ms = wr.latency_ms
    if header.get("kernel_trials"):
        wr.timing_kernel = header["kernel_trials"]
        wr.kernel_latency_ms = aggregate_timing(header["kernel_trials"])[0]
    wr.timing_note = header["trials"][0].get("note", "") or ("" if wr.aligned else f"{backend}: not aligned")
    wr.gpu_state = {"before": header.get("gpu_state_before"), "after": header.get("gpu_state_after")}
    wr.throttled, reasons = throttled(header.get("gpu_state_before") or {}, header.get("gpu_state_after") or {})
    if wr.throttled:
        wr.timing_note = (wr.timing_note + "; " if wr.timing_note else "") + "GPU throttled: " + ", ".join(reasons)
