"""Evidence for a request from archived evaluations alone: per-workload status, latency, speedup, roofline.

The loop uses this when no profile is at hand: latency-only where the harness timed, correctness-only
where it could not (no GPU). The ncu digests and regime tables live in controller/evidence.py; where the
loop could profile its incumbent (controller/incumbent_evidence.py) their Markdown replaces this one in the
request (controller/plan.py, ``request_evidence``). Pure functions.
"""

from __future__ import annotations

import statistics
from typing import Optional

from .evidence import WorkloadStat, assign_regime, length_ratio, load_regime_rules
from .promote import EvalRecord
from .request import Evidence

# SMs per target, to tell a grid that cannot fill the GPU (latency-bound) from one that can.
SM_COUNT = {"H200": 132, "H100": 132, "B200": 148, "GB200": 152}


def regime_of(axes: dict[str, int], const_axes: dict[str, int], target_hardware: str = "H200",
              label: str = "", lengths: Optional[list[int]] = None) -> str:
    """skewed when a few long requests dominate the batch (the evidence's own `skewed` rule: by request lengths
    where known, else by label); else latency-bound when batch x KV heads programs cannot fill the SMs, else
    memory-bound (decode)."""
    skewed = [r for r in load_regime_rules() if r["name"] == "skewed"]
    stat = WorkloadStat(uuid="", label=label, axes=dict(axes), length_ratio=length_ratio(lengths))
    if skewed and assign_regime(stat, skewed) == "skewed":
        return "skewed"
    batch = axes.get("batch_size")
    kv_heads = const_axes.get("num_kv_heads") or axes.get("num_kv_heads") or 1
    if batch is None:
        return "all"
    return "latency-bound" if batch * kv_heads < SM_COUNT.get(target_hardware, 132) else "memory-bound"


def timing_available(records: list[EvalRecord]) -> bool:
    return any(r.latency_ms is not None for r in records)


def mean_latency(records: list[EvalRecord]) -> Optional[float]:
    """Mean over workloads when every workload PASSED with a latency; None otherwise (never a guess)."""
    if not records or any(r.status != "PASSED" or r.latency_ms is None for r in records):
        return None
    return statistics.fmean(r.latency_ms for r in records)  # type: ignore[misc]


def mean_speedup_vs_fi(records: list[EvalRecord]) -> Optional[float]:
    values = [r.speedup_vs_fi for r in records]
    if not values or any(v is None for v in values) or any(r.status != "PASSED" for r in records):
        return None
    return statistics.fmean(values)  # type: ignore[arg-type]


def _fmt(x: Optional[float], unit: str = "") -> str:
    return "-" if x is None else f"{x:.4g}{unit}"


def build_evidence(records: list[EvalRecord], why_no_timing: str = "no GPU on this host") -> Evidence:
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
