"""What bounds a kernel: its classification (skill section 4: at-roofline, latency-bound, memory-bound,
compute-bound), the limiter of its occupancy, and the limiter id (skill ``limiters``, first match in order)."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .kernel_digest import KernelDigest

OCCUPANCY_LIMITS = ("registers", "shared_mem", "warps", "blocks")  # tie order for the limiter
CLASSES = ("at-roofline", "latency-bound", "memory-bound", "compute-bound", "unknown")


def classify(sol_compute_pct: Optional[float], sol_memory_pct: Optional[float],
             fraction_of_floor: Optional[float], thresholds: Mapping[str, Any]) -> str:
    """Skill section 4, in order: at-roofline, latency-bound, memory-bound, compute-bound (else unknown)."""
    if fraction_of_floor is not None and fraction_of_floor >= float(thresholds["at_roofline_fraction_of_floor"]):
        return "at-roofline"
    if sol_compute_pct is None or sol_memory_pct is None:
        return "unknown"
    below = float(thresholds["latency_bound_below_sol_pct"])
    if sol_compute_pct < below and sol_memory_pct < below:
        return "latency-bound"
    return "memory-bound" if sol_memory_pct >= sol_compute_pct else "compute-bound"


def occupancy_limiter(values: Mapping[str, Optional[float]]) -> tuple[Optional[str], Optional[float]]:
    """The smallest of launch__occupancy_limit_{registers,shared_mem,warps,blocks} (blocks per SM)."""
    known = [(n, values.get(f"occupancy_limit_{n}")) for n in OCCUPANCY_LIMITS]
    known = [(n, v) for n, v in known if v is not None]
    if not known:
        return None, None
    smallest = min(v for _, v in known)
    return next(n for n, v in known if v == smallest), smallest


def _limiter_rules(d: KernelDigest, stalls: Mapping[str, float], t: Mapping[str, Any],
                   span_ns: Optional[float], roofline_bytes: Optional[float]) -> dict[str, Optional[bool]]:
    """Each limiter id of the skill -> does it hold (None: not decidable from the data at hand)."""
    v = d.values
    top = d.top_stalls[0][0] if d.top_stalls else None
    top_ratio = d.top_stalls[0][1] if d.top_stalls else None
    significant = float(t["stall_ratio_significant"])
    tensor = v.get("tensor_pipe_pct") if v.get("tensor_pipe_pct") is not None else v.get("tcgen05_pipe_pct")
    achieved, theoretical = v.get("occupancy_achieved_pct"), v.get("occupancy_theoretical_pct")
    waves, duration, spills = v.get("waves_per_sm"), v.get("duration_ns"), d.spills
    return {
        "spills": None if spills is None else spills > float(t["spills_when_local_ops_above"]),
        "grid-too-small": None if waves is None else (waves < float(t["small_grid_below_waves"])
                                                      and d.classification == "latency-bound"),
        "launch-gaps": None if span_ns is None or not duration else span_ns > 1.2 * duration,
        "extra-dram-traffic": (None if roofline_bytes is None or v.get("dram_read_bytes") is None
                               else v["dram_read_bytes"] > 1.2 * roofline_bytes),
        "register-occupancy": d.occupancy_limiter == "registers" and top == "long_scoreboard",
        "shared-memory-occupancy": d.occupancy_limiter == "shared_mem" and top == "long_scoreboard",
        "tail-imbalance": (None if achieved is None or theoretical is None
                           else theoretical - achieved > float(t["occupancy_gap_pct_points"])),
        "dependent-loads": top == "long_scoreboard" and top_ratio is not None and top_ratio > significant,
        "cuda-core-compute": (stalls.get("math_pipe_throttle", 0.0) > significant
                              and (tensor or 0.0) < float(t["tensor_pipe_in_use_pct"])),
        # "the tensor pipe is the busiest pipe": the digest holds no other pipe, so compute-bound with the
        # tensor pipe in use stands in for it.
        "tensor-pipe": d.classification == "compute-bound" and (tensor or 0.0) >= float(t["tensor_pipe_in_use_pct"]),
        "shared-memory-stalls": top in ("short_scoreboard", "mio_throttle"),
        "memory-bandwidth": d.classification == "memory-bound",
    }


def name_limiter(d: KernelDigest, stalls: Mapping[str, float], config: Mapping[str, Any],
                 span_ns: Optional[float] = None, roofline_bytes: Optional[float] = None) -> Optional[str]:
    """The first limiter of the skill's list (in its order) that holds; None at the roofline or if none does."""
    if d.classification == "at-roofline":
        return None
    rules = _limiter_rules(d, stalls, config["classification"], span_ns, roofline_bytes)
    return next((lid for lid in config.get("limiters", {}) if rules.get(lid)), None)
