"""Evidence for a request from archived evaluations alone: per-workload status, latency, speedup, roofline.

The loop uses this when no profile is at hand: latency-only where the harness timed, correctness-only
where it could not (no GPU). The ncu digests and regime tables live in the rest of this package; where
the loop could profile its incumbent (evidence.incumbent) their Markdown replaces this one in the
request (controller/plan.py, ``request_evidence``). Pure functions.
"""

from __future__ import annotations

import statistics
from typing import Optional

from harness.data.statuses import EvaluationStatus
from harness.families import family_for
from harness.data.generation_request import Evidence

from ..promote import EvalRecord
from .workloads import DEFAULT_OP_TYPE


def regime_of(axes: dict[str, int], const_axes: dict[str, int], target_hardware: str = "H200",
              label: str = "", lengths: Optional[list[int]] = None, op_type: str = DEFAULT_OP_TYPE) -> str:
    """The regime of a workload before it is measured, by its operator family (``OperatorFamily.regime``;
    for GQA decode: skewed, latency-bound or memory-bound)."""
    return family_for(op_type).regime({**axes, **const_axes}, label=label, lengths=lengths,
                                      target_hardware=target_hardware)


def timing_available(records: list[EvalRecord]) -> bool:
    return any(r.latency_ms is not None for r in records)


def mean_latency(records: list[EvalRecord]) -> Optional[float]:
    """Mean over workloads when every workload PASSED with a latency; None otherwise (never a guess)."""
    if not records or any(r.status != EvaluationStatus.PASSED or r.latency_ms is None for r in records):
        return None
    return statistics.fmean(r.latency_ms for r in records)  # type: ignore[misc]


def mean_speedup_vs_fi(records: list[EvalRecord]) -> Optional[float]:
    values = [r.speedup_vs_fi for r in records]
    if not values or any(v is None for v in values) or any(r.status != EvaluationStatus.PASSED for r in records):
        return None
    return statistics.fmean(values)  # type: ignore[arg-type]


def _fmt(x: Optional[float], unit: str = "") -> str:
    return "-" if x is None else f"{x:.4g}{unit}"


def build_latency_evidence(records: list[EvalRecord], why_no_timing: str = "no GPU on this host") -> Evidence:
    if not records:
        return Evidence(kind="correctness-only", markdown="The incumbent has not been evaluated.")
    timed = timing_available(records)
    rows = ["| workload | regime | status | latency ms | speedup vs FlashInfer | fraction of floor | note |",
            "|---|---|---|---|---|---|---|"]
    for r in records:
        note = (r.message or "").replace("|", "/").replace("\n", " ")[:120]
        rows.append(f"| {r.label or r.workload[:8]} | {r.regime or '-'} | {r.status} | {_fmt(r.latency_ms)} | "
                    f"{_fmt(r.speedup_vs_fi, 'x')} | {_fmt(r.fraction_of_floor)} | {note} |")
    if timed:
        head = "Latency-only evidence (no profiler digest): official timer, per workload."
        kind = "latency-only"
    else:
        head = f"Correctness-only evidence: timing unavailable ({why_no_timing}); latencies are not known."
        kind = "correctness-only"
    return Evidence(kind=kind, markdown=head + "\n\n" + "\n".join(rows))
