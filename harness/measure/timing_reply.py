"""A workload's timing reply from its worker, read into its result: the official latency (mean of the trials'
medians), the kernel figure where a setup ran outside the timed call, the clock-truth audit on the same calls,
and the GPU's state (throttling) around them. Pure: tested on CPU with recorded replies."""

from __future__ import annotations

from ..audits.verdicts import AuditConfig, clock_truth_verdict, setup_work_verdict
from .gpu_state import throttled
from ..data.results import WorkloadResult
from ..data.schema import EvaluationStatus
from ..sandbox.messages import TimeReply
from .timing_records import aggregate_timing, busy_per_call_ms


def apply_timing_reply(wr: WorkloadResult, reply: TimeReply, cfg: AuditConfig) -> None:
    if not reply.ok:
        wr.status = EvaluationStatus.RUNTIME_ERROR.value
        wr.message = f"timing: {reply.error}"
        return
    wr.timing = TimeReply.as_dicts(reply.trials)
    wr.latency_ms, wr.aligned, backend = aggregate_timing(wr.timing)
    wr.gpu_busy_ms = busy_per_call_ms(wr.timing)
    # wall times were taken on this callable, in the trials that carry them: their spans are the ones compared
    # (another trial's inputs may ask for other work: MoE routing, a top-k's lengths)
    clock_trials = [t for t in reply.kernel_trials or reply.trials if t.wall_ms]
    walls = [w for t in clock_trials for w in t.wall_ms or []]
    traced = [w for t in clock_trials for w in t.traced_wall_ms or []]
    launches = max((len(set(t.kernel_names)) for t in clock_trials), default=1)
    clock = clock_truth_verdict(walls, [t.median_ms for t in clock_trials], cfg, launches, traced)
    if clock is not None:
        wr.audits.append(clock)
    wr.kernel_latency_ms = wr.latency_ms
    if reply.kernel_trials:
        wr.timing_kernel = TimeReply.as_dicts(reply.kernel_trials)
        wr.kernel_latency_ms = aggregate_timing(wr.timing_kernel)[0]
        setup = setup_work_verdict(wr.gpu_busy_ms, busy_per_call_ms(wr.timing_kernel), cfg)
        if setup is not None:
            wr.audits.append(setup)
    wr.timing_note = reply.trials[0].note or ("" if wr.aligned else f"{backend}: not aligned")
    wr.gpu_state = {"before": reply.gpu_state_before, "after": reply.gpu_state_after}
    wr.triton_kernels_elsewhere = list(reply.triton_kernels_elsewhere)
    wr.throttled, reasons = throttled(reply.gpu_state_before or {}, reply.gpu_state_after or {})
    if wr.throttled:
        wr.timing_note = (wr.timing_note + "; " if wr.timing_note else "") + "GPU throttled: " + ", ".join(reasons)
