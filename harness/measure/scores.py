"""A definition's scores, and when figures measured elsewhere may be trusted here (pure functions).

The official score of a definition is the arithmetic mean of per-workload speedups, 0 when any workload
failed. A baseline can be missing on some workloads (it failed there, or none was measured): the score is
then the mean over the workloads it covers, and says so (``partial``: the labels of the missing ones), never
a silent null. Cached figures from another card of the same model, driver and toolchain are reused only
after a spot check on this card agrees with them, and a baseline's only where they are device time
(``carried_baseline_reusable``).
"""

from __future__ import annotations

import statistics
from typing import Any, Optional, Protocol, Sequence

from ..data.statuses import EvaluationStatus

SCORE_FIELDS = {"vs_reference": "speedup_factor", "vs_flashinfer_official": "speedup_vs_fi_official",
                "vs_flashinfer_kernel": "speedup_vs_fi_kernel"}
SPOT_CHECK_TOLERANCE = 0.10  # a carried figure within 10% of this card's own measurement holds
# A baseline figure that travels between hosts: at least this much kernel time, and at least this share of its
# official figure. Below, the figure is launch gaps and the Python call as much as device time, and those differ
# between hosts of one GPU model: FlashInfer's kernel figure on uniform_b1_kv512 read 10.8-11.5 us on one H200
# host and 13.1 us on another (benchmarks/results/2026-12-03_h200_run9).
DEVICE_BOUND_MS = 0.1
DEVICE_BOUND_SHARE = 0.5


class ScoredWorkload(Protocol):
    label: str
    status: str

    @property
    def evaluated(self) -> bool: ...


def definition_scores(workloads: Sequence[Any]) -> tuple[dict[str, Optional[float]], dict[str, list[str]]]:
    """``(scores, partial)``: one score per baseline (the reference, FlashInfer as the contest times it, and
    FlashInfer's kernels alone), and per score the labels of evaluated workloads it does not cover.

    None only where no workload has that speedup; 0.0 for every score when any workload failed."""
    evaluated = [w for w in workloads if w.evaluated]
    if not evaluated:
        return {k: None for k in SCORE_FIELDS}, {}
    if any(w.status != EvaluationStatus.PASSED for w in evaluated):
        return {k: 0.0 for k in SCORE_FIELDS}, {}
    scores: dict[str, Optional[float]] = {}
    partial: dict[str, list[str]] = {}
    for key, attr in SCORE_FIELDS.items():
        covered = [getattr(w, attr) for w in evaluated if getattr(w, attr) is not None]
        scores[key] = statistics.fmean(covered) if covered else None
        missing = [w.label for w in evaluated if getattr(w, attr) is None]
        if covered and missing:
            partial[key] = missing
    return scores, partial


def partial_notice(partial: dict[str, list[str]], reasons: dict[str, str]) -> list[str]:
    """Notices for scores over part of the workloads; ``reasons`` maps a label to why its baseline is missing."""
    out = []
    for key, labels in partial.items():
        why = "; ".join(f"{lab}: {reasons[lab]}" for lab in labels if lab in reasons)
        out.append(f"score {key} is partial: {len(labels)} workload(s) not covered ({', '.join(labels)})"
                   + (f" — {why}" if why else ""))
    return out


def spot_check_holds(carried_ms: float, measured_ms: float, tolerance: float = SPOT_CHECK_TOLERANCE) -> bool:
    """Does this card reproduce a figure carried from another card of the same model and toolchain?"""
    if carried_ms <= 0 or measured_ms <= 0:
        return False
    return abs(measured_ms - carried_ms) <= tolerance * carried_ms


def carried_baseline_reusable(run: dict[str, Any]) -> bool:
    """May a baseline run measured on another card of this model and toolchain stand for this card's (once a spot
    check holds)? Only a passed run whose kernel figure is device time: ``DEVICE_BOUND_MS`` or more, and at least
    ``DEVICE_BOUND_SHARE`` of its official figure. The others are this host's to measure."""
    kernel, official = run.get("kernel_ms"), run.get("official_ms")
    return (run.get("status") == EvaluationStatus.PASSED.value and bool(kernel) and bool(official)
            and kernel >= DEVICE_BOUND_MS and kernel >= DEVICE_BOUND_SHARE * official)


def baseline_spot_check_holds(carried: dict[str, Any], measured: dict[str, Any]) -> bool:
    """Does this card's run reproduce a carried one, in both figures (official and kernel) the scores use?"""
    return all(spot_check_holds(carried.get(k) or 0.0, measured.get(k) or 0.0) for k in ("official_ms", "kernel_ms"))
