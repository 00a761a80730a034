"""Promotion as pure functions over archived evaluations (skills/promotion-rules).

Rules, checked in order; the first that fails is the recorded reason:
  1. every workload PASSED;          2. every audit clean;
  3. timing exists (on a host without a GPU it does not: "no timing: correctness only, nothing promoted");
     screen: a candidate whose own evaluation is already slower than the incumbent's (beyond
     ``screen_slack_rel``) is refused before any paired measurement is spent on it;
  4. at least ``min_repeats`` paired repeats, each in ``paired_order`` (ABBA: incumbent, candidate,
     candidate, incumbent, measured back to back by the harness);
  5. mean latency over workloads below the incumbent's by more than ``noise_floor_rel``;
  6. no regime more than ``max_regime_regression_rel`` slower than the incumbent.
Nothing here measures or re-times anything: the measurement is an input, produced by the harness.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Optional

from .skills import PromotionThresholds

NO_TIMING = "no timing: correctness only, nothing promoted"
PROMOTED, REJECTED = "PROMOTED", "REJECTED"


@dataclass(frozen=True)
class EvalRecord:
    """One archived evaluation (one workload of one harness submission)."""

    workload: str
    status: str
    latency_ms: Optional[float] = None
    audits: tuple[dict[str, Any], ...] = ()
    label: str = ""
    regime: str = ""
    speedup_vs_fi: Optional[float] = None
    fraction_of_floor: Optional[float] = None
    message: str = ""
    log_blob: Optional[str] = None


@dataclass(frozen=True)
class PairedSample:
    role: str  # "A": the incumbent, "B": the candidate
    repeat: int
    latencies: dict[str, float]  # workload -> latency_ms of one full harness submission
    submission_id: Optional[int] = None


@dataclass(frozen=True)
class PairedMeasurement:
    order: str
    samples: tuple[PairedSample, ...]

    def to_json(self) -> dict[str, Any]:
        return {"order": self.order, "samples": [s.__dict__ for s in self.samples]}


@dataclass(frozen=True)
class Decision:
    verdict: str
    rule: str  # the rule that failed, or "promoted"
    reasons: tuple[str, ...]
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def promoted(self) -> bool:
        return self.verdict == PROMOTED


def _reject(rule: str, *reasons: str, **details: Any) -> Decision:
    return Decision(REJECTED, rule, tuple(reasons), details)


def gate_failure(records: list[EvalRecord], thresholds: PromotionThresholds) -> Optional[Decision]:
    """Rules 1 and 2: what no measurement can override."""
    if not records:
        return _reject("all_workloads_passed", "no workload was evaluated")
    failed = [r for r in records if r.status != "PASSED"]
    if thresholds.require_all_workloads_passed and failed:
        listed = ", ".join(f"{r.label or r.workload[:8]} {r.status}" for r in failed[:5])
        return _reject("all_workloads_passed", f"{len(failed)} of {len(records)} workloads not PASSED: {listed}")
    dirty = [(r, a) for r in records for a in r.audits if not a.get("passed", False)]
    if thresholds.require_clean_audits and dirty:
        r, a = dirty[0]
        return _reject("clean_audits", f"audit {a.get('name')} failed on {r.label or r.workload[:8]}: "
                                       f"{a.get('detail', '')}".rstrip(": "))
    return None


def _mean_latency(records: list[EvalRecord], workloads: list[str]) -> Optional[float]:
    by_workload = {r.workload: r.latency_ms for r in records}
    values = [by_workload.get(w) for w in workloads]
    return statistics.fmean(values) if values and all(v is not None for v in values) else None  # type: ignore[arg-type]


def screen_failure(records: list[EvalRecord], incumbent_records: list[EvalRecord],
                   thresholds: PromotionThresholds) -> Optional[Decision]:
    """Before a paired measurement: is the candidate's own evaluation already clearly slower?

    Two single measurements on the same workloads; without latencies on both sides (no GPU, or the
    incumbent was evaluated on other workloads) nothing is screened out.
    """
    workloads = [r.workload for r in records]
    mean_b, mean_a = _mean_latency(records, workloads), _mean_latency(incumbent_records, workloads)
    if mean_a is None or mean_b is None:
        return None
    change = mean_b / mean_a - 1.0
    if change <= thresholds.screen_slack_rel + 1e-9:  # exactly at the slack is still let through
        return None
    return _reject("screen", f"its evaluation averaged {mean_b:.4g} ms vs the incumbent's {mean_a:.4g} ms "
                             f"({change:+.1%}, more than {thresholds.screen_slack_rel:.0%} slower): "
                             "no paired measurement spent on it",
                   mean_incumbent_ms=mean_a, mean_candidate_ms=mean_b, change_rel=change)


def repeats_in_order(measurement: PairedMeasurement, order: str) -> tuple[int, list[str]]:
    """Complete repeats whose roles ran in exactly ``order``, and what was wrong with the others."""
    by_repeat: dict[int, list[str]] = {}
    for s in measurement.samples:
        by_repeat.setdefault(s.repeat, []).append(s.role)
    good, problems = 0, []
    for repeat, roles in sorted(by_repeat.items()):
        if "".join(roles) == order:
            good += 1
        else:
            problems.append(f"repeat {repeat} ran {''.join(roles)}, the rules want {order}")
    return good, problems


def mean_latencies(measurement: PairedMeasurement, role: str, workloads: list[str]) -> dict[str, Optional[float]]:
    """Per workload, the mean over every run of ``role``."""
    out: dict[str, Optional[float]] = {}
    for w in workloads:
        values = [s.latencies.get(w) for s in measurement.samples if s.role == role]
        out[w] = statistics.fmean(values) if values and all(v is not None for v in values) else None
    return out


def decide(records: list[EvalRecord], measurement: Optional[PairedMeasurement],
           thresholds: PromotionThresholds, regimes: Optional[dict[str, str]] = None) -> Decision:
    """Whether the candidate evaluated in ``records`` replaces the incumbent. ``regimes``: workload -> regime."""
    gate = gate_failure(records, thresholds)
    if gate is not None:
        return gate
    if measurement is None or not measurement.samples:
        return _reject("timing", NO_TIMING)
    good, problems = repeats_in_order(measurement, thresholds.paired_order)
    if problems:
        return _reject("paired_order", *problems)
    if good < thresholds.min_repeats:
        return _reject("repeats", f"{thresholds.min_repeats} paired repeats needed, {good} measured")
    workloads = [r.workload for r in records]
    a = mean_latencies(measurement, "A", workloads)
    b = mean_latencies(measurement, "B", workloads)
    missing = [w for w in workloads if a[w] is None or b[w] is None]
    if missing:
        return _reject("timing", f"no paired latency for workload(s) {', '.join(m[:8] for m in missing)}")
    mean_a = statistics.fmean(a[w] for w in workloads)  # type: ignore[misc]
    mean_b = statistics.fmean(b[w] for w in workloads)  # type: ignore[misc]
    change = mean_b / mean_a - 1.0
    details: dict[str, Any] = {"mean_incumbent_ms": mean_a, "mean_candidate_ms": mean_b, "change_rel": change,
                               "repeats": good, "order": measurement.order,
                               "submissions": [s.submission_id for s in measurement.samples]}
    if not mean_b < mean_a * (1.0 - thresholds.noise_floor_rel):
        what = "slower than" if change > 0 else "within the noise floor of"
        return _reject("noise_floor", f"mean {mean_b:.4g} ms vs incumbent {mean_a:.4g} ms ({change:+.1%}): "
                                      f"{what} the incumbent (needs < -{thresholds.noise_floor_rel:.0%})", **details)
    regimes = regimes or {}
    groups: dict[str, list[str]] = {}
    for w in workloads:
        groups.setdefault(regimes.get(w) or "all", []).append(w)
    ratios = {g: statistics.fmean(b[w] for w in ws) / statistics.fmean(a[w] for w in ws)  # type: ignore[misc]
              for g, ws in groups.items()}
    details["regime_ratios"] = ratios
    worse = {g: r for g, r in ratios.items() if r > 1.0 + thresholds.max_regime_regression_rel}
    if worse:
        listed = ", ".join(f"{g} {r - 1:+.1%}" for g, r in sorted(worse.items()))
        return _reject("regime_regression", f"regime(s) slower than the {thresholds.max_regime_regression_rel:.0%} "
                                            f"bound: {listed}; archived as a regime specialist", **details)
    return Decision(PROMOTED, "promoted", (f"mean {mean_b:.4g} ms vs {mean_a:.4g} ms ({change:+.1%}) over "
                                           f"{good} {measurement.order} repeats",), details)
