"""A timed workload put in context: its speedups over the reference and the FlashInfer baselines, and where it
stands against the hardware floor (harness.measure.roofline).

A pure function of the figures, so that what a speedup and a roofline verdict mean is read in one place; the
``Session`` (harness/pipeline/evaluate.py, ``_compare``) fetches the figures, which needs its workers.
"""

from __future__ import annotations

from typing import Any, Optional

from ..audits.model import Audit
from ..data.results import WorkloadResult
from ..measure.roofline import Ceilings, WorkloadCost, roofline


def place_in_context(wr: WorkloadResult, reference_ms: Optional[float], fi: Optional[dict[str, Any]],
                     cost: WorkloadCost, ceilings: Ceilings, margin: float = 0.2) -> None:
    """Fill in ``wr``'s comparisons from the reference's latency, the baselines' figures (``Baselines.figures``:
    None when not asked for) and the workload's cost on this GPU's ceilings.

    The FlashInfer kernel-only speedup divides by the candidate's kernel latency where it has one, so both sides
    leave setup out; a latency below the floor is an audit failure (roofline_plausibility), since no honest kernel
    beats the hardware (``margin``: the audit's ``roofline_margin``)."""
    wr.reference_latency_ms = reference_ms
    if wr.reference_latency_ms is not None and wr.latency_ms:
        wr.speedup_factor = wr.reference_latency_ms / wr.latency_ms
    if fi:
        wr.baseline_failures = fi["failures"]
    if fi and fi["official_ms"]:
        wr.fi_official_ms, wr.fi_kernel_ms = fi["official_ms"], fi["kernel_ms"]
        wr.fi_busy_ms = fi.get("official_busy_ms")
        wr.speedup_vs_fi_official = fi["official_ms"] / wr.latency_ms
        wr.speedup_vs_fi_kernel = fi["kernel_ms"] / (wr.kernel_latency_ms or wr.latency_ms)
    wr.bytes_moved, wr.flops = cost.bytes_moved, cost.flops
    result = roofline(cost, ceilings, wr.kernel_latency_ms or wr.latency_ms, margin=margin)
    wr.floor_ms, wr.fraction_of_floor = result.floor_ms, result.fraction_of_floor
    wr.audits.append(Audit(name="roofline_plausibility", passed=not result.impossible, detail=result.detail))
    if result.impossible:
        wr.message = f"faster than the hardware allows: {result.detail}"
