"""``digest_kernel`` / ``digest_summary``: one ``KernelDigest`` per kernel of a ``ProfileSummary`` (harness.profiling).

Duration, SOL compute / memory / DRAM, DRAM bytes, achieved vs theoretical occupancy and its limiter,
registers, shared memory, spills, L1/L2 hit rates, tensor pipe, waves, top warp stalls; three significant
digits with units; metrics ncu did not return are listed as missing and left ``None``. Then the
classification and the limiter (evidence.diagnosis). Launches of one kernel are merged into one digest.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from harness.profiling import KernelProfile, ProfileSummary

from .diagnosis import classify, name_limiter, occupancy_limiter
from .kernel_digest import KernelDigest
from .ncu_metrics import FIELD_UNITS, metric_table, ncu_config, stall_metrics
from .quantities import sig


def _merge_launches(kernels: Sequence[KernelProfile]) -> KernelProfile:
    """Launches of one kernel as one: ``.sum`` metrics add up, the rest is a duration-weighted mean."""
    if len(kernels) == 1:
        return kernels[0]
    weights = [k.value("gpu__time_duration.sum") or 0.0 for k in kernels]
    if not any(weights):
        weights = [1.0] * len(kernels)
    names = list(dict.fromkeys(m for k in kernels for m in k.metrics))
    merged: dict[str, tuple[Optional[float], str]] = {}
    for m in names:
        known = [(k.value(m), w) for k, w in zip(kernels, weights) if k.value(m) is not None]
        unit = next((k.unit(m) for k in kernels if m in k.metrics), "")
        if not known:
            merged[m] = (None, unit)
        elif m.endswith(".sum"):
            merged[m] = (sum(x for x, _ in known), unit)
        else:
            wsum = sum(w for _, w in known)
            merged[m] = ((sum(x * w for x, w in known) / wsum) if wsum > 0 else known[0][0], unit)
    first = kernels[0]
    return KernelProfile(id=first.id, name=first.name, metrics=merged, block_size=first.block_size,
                         grid_size=first.grid_size, device=first.device, cc=first.cc)


def digest_kernel(kernel: KernelProfile, arch: Optional[str] = None, *, fraction_of_floor: Optional[float] = None,
                  config: Optional[Mapping[str, Any]] = None, span_ns: Optional[float] = None,
                  roofline_bytes: Optional[float] = None, launches: int = 1) -> KernelDigest:
    """Reduce one kernel's metrics to the digest fields of its architecture's table."""
    config = config or ncu_config()
    digits = int(config.get("digest_significant_digits", 3))
    table = metric_table(arch, config)
    values: dict[str, Optional[float]] = {}
    missing: list[str] = []
    for fld, metric in table.items():
        x = kernel.value(metric)
        values[fld] = sig(x, digits)
        if x is None:
            missing.append(metric)
    by_reason = stall_metrics(arch, config)
    stalls_all = {r: kernel.value(m) for r, m in by_reason.items()}
    missing += [by_reason[r] for r, x in stalls_all.items() if x is None]
    stalls = {r: x for r, x in stalls_all.items() if x is not None}
    top_n = int(config.get("digest_top_stalls", 3))
    top = sorted(((r, x) for r, x in stalls.items() if x > 0), key=lambda rx: -rx[1])[:top_n]
    units = {f: FIELD_UNITS.get(f, "") for f in values}
    sol_memory = values.get("sol_memory_pct") if values.get("sol_memory_pct") is not None else values.get("dram_pct")
    d = KernelDigest(kernel=kernel.name, arch=arch, values=values, units=units,
                     top_stalls=[(r, sig(x, digits)) for r, x in top], missing=missing, launches=launches)
    d.occupancy_limiter, d.occupancy_limit_blocks_per_sm = occupancy_limiter(values)
    d.classification = classify(values.get("sol_compute_pct"), sol_memory, fraction_of_floor,
                                config["classification"])
    d.limiter = name_limiter(d, stalls, config, span_ns, roofline_bytes)
    return d


def digest_summary(summary: ProfileSummary, *, fraction_of_floor: Optional[float] = None,
                   config: Optional[Mapping[str, Any]] = None, span_ns: Optional[float] = None,
                   roofline_bytes: Optional[float] = None) -> list[KernelDigest]:
    """One digest per distinct kernel of a profile (launches of the same kernel merged), longest first."""
    groups: dict[str, list[KernelProfile]] = {}
    for k in summary.kernels:
        groups.setdefault(k.name, []).append(k)
    out = [digest_kernel(_merge_launches(ks), summary.arch, fraction_of_floor=fraction_of_floor, config=config,
                         span_ns=span_ns, roofline_bytes=roofline_bytes, launches=len(ks))
           for ks in groups.values()]
    return sorted(out, key=lambda d: -(d.get("duration_ns") or 0.0))
