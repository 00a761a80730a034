"""Promotion as pure functions over archived evaluations (skills/promotion-rules).

The measure is the contest's: a definition's score is the arithmetic mean over workloads of per-workload
speedups (harness/pipeline/evaluate.py definition_scores), so promotion compares per-workload speedups of the
candidate over the incumbent (incumbent latency / candidate latency, the same workloads, the same session),
never a mean of raw latencies (where one millisecond workload would drown every microsecond one).

Rules, checked in order; the first that fails is the recorded reason:
  1. every workload PASSED;          2. every audit clean;
  3. timing exists (on a host without a GPU it does not: "no timing: correctness only, nothing promoted");
     screen: a candidate whose own evaluation's mean speedup over the incumbent's own evaluation is below
     ``1 - screen_slack_rel`` is refused before any paired measurement is spent on it; one at least
     ``decisive_speedup`` times faster on every workload, on the same card, needs none (``decisive_speedups``);
  4. at least ``min_repeats`` paired repeats, each in ``paired_order`` (ABBA: incumbent, candidate,
     candidate, incumbent, measured back to back by the harness); with ``pair_changed_only``, on the workloads whose
     code differs (a dispatching candidate's regimes that run byte-identical code are 1x by construction);
  5. mean per-workload speedup above ``1 + noise_floor_rel``, or (``gap_gain_rel``) at least 1 with a gap closed: on a
     workload where the incumbent trails the library baseline, at least ``1 + gap_gain_rel`` and faster in every repeat,
     and none opened (no workload where the incumbent leads the baseline falls behind it);
  6. no regime's mean speedup below ``1 - max_regime_regression_rel`` (a regime specialist);
  7. no single workload's speedup below ``1 - max_workload_regression_rel``;
  8. the candidate's evaluation at the full audit level (run only once 1-7 hold) is promotable: every
     workload PASSED, no failed audit, no harness promotion blocker (``confirm``).
Nothing here measures or re-times anything: the measurement is an input, produced by the harness.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from harness.data.statuses import EvaluationStatus

from .skills import PromotionThresholds


def ranked_latency(official_ms: Optional[float], kernel_ms: Optional[float], figure: str) -> Optional[float]:
    """The figure a candidate is ranked on (PromotionThresholds.ranked_figure): the kernel figure where asked for
    and measured (a solution with a setup), else the official one."""
    return kernel_ms if figure == "kernel" and kernel_ms is not None else official_ms

NO_TIMING = "no timing: correctness only, nothing promoted"
PROMOTED, REJECTED = "PROMOTED", "REJECTED"
FULL_AUDIT_LEVEL = "full"
_EPS = 1e-9  # a value exactly at a bound is on the allowed side of it


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
    # against the timed reference: the only yardstick where the definition has no library baseline on this GPU
    speedup_vs_reference: Optional[float] = None
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
    stopped: str = ""  # why it stopped before its last repeat (futility_stop), else empty

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"order": self.order, "samples": [s.__dict__ for s in self.samples]}
        return {**out, "stopped": self.stopped} if self.stopped else out


def futility_stop(samples: Sequence[PairedSample], order: str, repeats: int, stop_below: Optional[float]
                  ) -> Optional[str]:
    """Why a paired measurement should stop now, or None: after a complete repeat that is not the last, the mean over
    workloads of (mean A latency / mean B latency) so far is below ``stop_below`` (the promotion rules'
    ``futility_below``). Only ever a refusal: a candidate at that mean would need the remaining repeats to lift the
    whole measurement above 1 + the noise floor."""
    done = len(samples) // len(order)
    if stop_below is None or not samples or len(samples) % len(order) or done >= repeats:
        return None
    workloads = sorted(set.intersection(*(set(s.latencies) for s in samples)))
    measured = PairedMeasurement(order, tuple(samples))
    speedups = workload_speedups(mean_latencies(measured, "A", workloads), mean_latencies(measured, "B", workloads),
                                 workloads)
    if not speedups:
        return None
    score = mean_speedup(speedups)
    if score >= stop_below:
        return None
    return (f"paired measurement stopped after {done} of {repeats} repeats: mean speedup {score:.3f}x over "
            f"{len(speedups)} workload(s), below {stop_below:.3g}x (futility_below)")


@dataclass(frozen=True)
class FullEvaluation:
    """The candidate's evaluation at the full audit level, made only once everything else says promote."""

    submission_id: Optional[int]
    audit_level: Optional[str]  # as the harness archived it with the submission
    records: tuple[EvalRecord, ...]
    blockers: tuple[str, ...] = ()  # the harness's promotion blockers (static gate, whole-submission audits)


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


def _name(record: Optional[EvalRecord], workload: str) -> str:
    return (record.label if record is not None and record.label else "") or workload[:8]


def gate_failure(records: list[EvalRecord], thresholds: PromotionThresholds) -> Optional[Decision]:
    """Rules 1 and 2: what no measurement can override."""
    if not records:
        return _reject("all_workloads_passed", "no workload was evaluated")
    failed = [r for r in records if r.status != EvaluationStatus.PASSED]
    if thresholds.require_all_workloads_passed and failed:
        listed = ", ".join(f"{r.label or r.workload[:8]} {r.status}" for r in failed[:5])
        return _reject("all_workloads_passed", f"{len(failed)} of {len(records)} workloads not PASSED: {listed}")
    dirty = [(r, a) for r in records for a in r.audits if not a.get("passed", False)]
    if thresholds.require_clean_audits and dirty:
        r, a = dirty[0]
        return _reject("clean_audits", f"audit {a.get('name')} failed on {r.label or r.workload[:8]}: "
                                       f"{a.get('detail', '')}".rstrip(": "))
    return None


def workload_speedups(incumbent_ms: dict[str, Optional[float]], candidate_ms: dict[str, Optional[float]],
                      workloads: list[str]) -> Optional[dict[str, float]]:
    """Per workload, incumbent latency / candidate latency (> 1: the candidate is faster); None unless both
    sides have a positive latency on every workload."""
    out: dict[str, float] = {}
    for w in workloads:
        a, b = incumbent_ms.get(w), candidate_ms.get(w)
        if a is None or b is None or a <= 0 or b <= 0:
            return None
        out[w] = a / b
    return out


def mean_speedup(speedups: dict[str, float]) -> float:
    """The definition score's aggregate: the arithmetic mean of per-workload speedups."""
    return statistics.fmean(speedups.values())


def _mean_ms(latencies: dict[str, Optional[float]], workloads: list[str]) -> Optional[float]:
    values = [latencies.get(w) for w in workloads]
    return statistics.fmean(values) if values and all(v is not None for v in values) else None  # type: ignore[arg-type]


def screen_failure(records: list[EvalRecord], incumbent_records: list[EvalRecord],
                   thresholds: PromotionThresholds) -> Optional[Decision]:
    """Before a paired measurement: is the candidate's own evaluation already clearly worse, by the score?

    Two single measurements on the same workloads, compared by the mean per-workload speedup; without
    latencies on both sides (no GPU, or the incumbent was evaluated on other workloads) nothing is screened out.
    """
    workloads = [r.workload for r in records]
    own = {r.workload: r.latency_ms for r in records}
    speedups = workload_speedups({r.workload: r.latency_ms for r in incumbent_records}, own, workloads)
    if not speedups:
        return None
    score = mean_speedup(speedups)
    if score >= 1.0 - thresholds.screen_slack_rel - _EPS:  # exactly at the slack is still let through
        return None
    return _reject("screen", f"its evaluation's mean speedup over the incumbent's is {score:.3f}x over "
                             f"{len(speedups)} workload(s) ({score - 1:+.1%}, more than "
                             f"{thresholds.screen_slack_rel:.0%} below 1x): no paired measurement spent on it",
                   mean_speedup=score, workload_speedups=speedups)


def decisive_speedups(records: list[EvalRecord], incumbent_records: list[EvalRecord],
                      thresholds: PromotionThresholds, same_card: bool) -> Optional[dict[str, float]]:
    """Per-workload speedups of the candidate's own evaluation over the incumbent's own evaluation where the win is
    decisive: both on the same card and every workload at least ``decisive_speedup`` times faster (a paired
    measurement then cannot change the verdict: drift between two evaluations of one card is a few percent). None
    otherwise, or where the rules ask for a paired measurement every time (``decisive_speedup`` unset)."""
    if thresholds.decisive_speedup is None or not same_card or gate_failure(records, thresholds) is not None:
        return None
    speedups = workload_speedups({r.workload: r.latency_ms for r in incumbent_records},
                                 {r.workload: r.latency_ms for r in records}, [r.workload for r in records])
    if not speedups or min(speedups.values()) < thresholds.decisive_speedup - _EPS:
        return None
    return speedups


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


def versus_baseline(incumbent_records: list[EvalRecord]) -> dict[str, float]:
    """Per workload, the incumbent's own evaluation's speedup over the library baseline (FlashInfer's faster mode),
    where there is one: what rule 5's ``gap_gain_rel`` reads."""
    return {r.workload: r.speedup_vs_fi for r in incumbent_records if r.speedup_vs_fi is not None}


def trailing_baseline(baseline: dict[str, float]) -> set[str]:
    """The gaps: workloads where the incumbent is slower than the baseline."""
    return {w for w, v in baseline.items() if v < 1.0}


def gaps_opened(speedups: dict[str, float], baseline: dict[str, float]) -> dict[str, float]:
    """Workloads where the incumbent leads the baseline and the candidate would not (the incumbent's lead times the
    paired speedup below 1): what a gap closed must not cost."""
    return {w: v * speedups[w] for w, v in sorted(baseline.items())
            if w in speedups and v >= 1.0 and v * speedups[w] < 1.0}


def gaps_closed(measurement: PairedMeasurement, speedups: dict[str, float], gaps: set[str],
                thresholds: PromotionThresholds) -> dict[str, float]:
    """Of ``gaps``, the workloads the candidate closes (rule 5's second way): a paired speedup of at least
    ``1 + gap_gain_rel`` and the candidate faster in every repeat (its mean latency there below the incumbent's
    within each repeat), so a gain the size of one workload's noise is never taken for one. Empty when the rule is
    off (``gap_gain_rel`` unset)."""
    if thresholds.gap_gain_rel is None:
        return {}
    repeats = sorted({s.repeat for s in measurement.samples})

    def faster_in(repeat: int, w: str) -> bool:
        a = [s.latencies[w] for s in measurement.samples if s.repeat == repeat and s.role == "A" and w in s.latencies]
        b = [s.latencies[w] for s in measurement.samples if s.repeat == repeat and s.role == "B" and w in s.latencies]
        return bool(a and b) and statistics.fmean(b) < statistics.fmean(a)

    return {w: speedups[w] for w in sorted(gaps & set(speedups))
            if speedups[w] >= 1.0 + thresholds.gap_gain_rel - _EPS and all(faster_in(r, w) for r in repeats)}


def decide(records: list[EvalRecord], measurement: Optional[PairedMeasurement],
           thresholds: PromotionThresholds, regimes: Optional[dict[str, str]] = None,
           decisive: Optional[dict[str, float]] = None, baseline: Optional[dict[str, float]] = None,
           unchanged: Optional[set[str]] = None) -> Decision:
    """Whether the candidate evaluated in ``records`` beats the incumbent (rules 1-7; ``confirm`` adds rule 8).
    ``regimes``: workload -> regime; ``decisive``: ``decisive_speedups`` where no paired measurement was made;
    ``baseline``: the incumbent's speedup over the library baseline per workload (``versus_baseline``); ``unchanged``:
    workloads whose calls run byte-identical code in both (controller.dispatch.unchanged_regimes): where the paired
    measurement left them out, their speedup is 1 by construction."""
    gate = gate_failure(records, thresholds)
    if gate is not None:
        return gate
    if decisive and (measurement is None or not measurement.samples):
        by_workload = {r.workload: r for r in records}
        score, slowest = mean_speedup(decisive), min(decisive, key=lambda w: decisive[w])
        return Decision(PROMOTED, "promoted", (
            f"decisive: every workload at least {thresholds.decisive_speedup:.3g}x faster in its own evaluation than "
            f"the incumbent's on this card (mean speedup {score:.3f}x over {len(decisive)} workload(s), slowest "
            f"{_name(by_workload[slowest], slowest)} {decisive[slowest]:.3f}x); no paired measurement needed",),
            {"mean_speedup": score, "workload_speedups": decisive, "decisive": True, "repeats": 0})
    if measurement is None or not measurement.samples:
        return _reject("timing", NO_TIMING)
    good, problems = repeats_in_order(measurement, thresholds.paired_order)
    if problems:
        return _reject("paired_order", *problems)
    if measurement.stopped and good < thresholds.min_repeats:
        return _reject("futility", measurement.stopped, repeats=good)
    if good < thresholds.min_repeats:
        return _reject("repeats", f"{thresholds.min_repeats} paired repeats needed, {good} measured")
    workloads = [r.workload for r in records]
    by_workload = {r.workload: r for r in records}
    a = mean_latencies(measurement, "A", workloads)
    b = mean_latencies(measurement, "B", workloads)
    same_code = [w for w in workloads if w in (unchanged or set()) and (a[w] is None or b[w] is None)]
    timed = [w for w in workloads if w not in same_code]
    missing = [w for w in timed if a[w] is None or b[w] is None or a[w] <= 0 or b[w] <= 0]  # type: ignore[operator]
    if missing or not timed:
        return _reject("timing", f"no paired latency for workload(s) {', '.join(m[:8] for m in missing or workloads)}")
    speedups = workload_speedups(a, b, timed)
    assert speedups is not None  # every latency is there and positive (checked above)
    speedups = {w: speedups.get(w, 1.0) for w in workloads}  # the same code: 1x by construction
    score = mean_speedup(speedups)
    details: dict[str, Any] = {"mean_speedup": score, "workload_speedups": speedups,
                               "mean_incumbent_ms": _mean_ms(a, timed), "mean_candidate_ms": _mean_ms(b, timed),
                               "repeats": good, "order": measurement.order,
                               "submissions": [s.submission_id for s in measurement.samples]}
    if same_code:
        details["unchanged_not_timed"] = same_code
    n = len(workloads)
    closed: dict[str, float] = {}
    if not score > 1.0 + thresholds.noise_floor_rel:
        baseline = baseline or {}
        gaps = trailing_baseline(baseline)
        closed = gaps_closed(measurement, speedups, gaps, thresholds) if score >= 1.0 - _EPS else {}
        opened = gaps_opened(speedups, baseline) if closed else {}
        if not closed or opened:
            what = "slower than" if score < 1.0 else "within the noise floor of"
            return _reject("noise_floor", f"mean speedup {score:.3f}x over {n} workload(s) ({score - 1:+.1%}): {what} "
                                          f"the incumbent (needs > {1 + thresholds.noise_floor_rel:.3g}x"
                                          f"{_gap_terms(thresholds, gaps, opened, speedups, by_workload)})", **details)
        details["gaps_closed"] = closed
    regimes = regimes or {}
    groups: dict[str, list[str]] = {}
    for w in workloads:
        groups.setdefault(regimes.get(w) or by_workload[w].regime or "all", []).append(w)
    regime_speedups = {g: statistics.fmean(speedups[w] for w in ws) for g, ws in groups.items()}
    details["regime_speedups"] = regime_speedups
    worse = {g: s for g, s in regime_speedups.items() if s < 1.0 - thresholds.max_regime_regression_rel - _EPS}
    if worse:
        listed = ", ".join(f"{g} {s:.3f}x ({s - 1:+.1%})" for g, s in sorted(worse.items()))
        bound = thresholds.max_regime_regression_rel
        return _reject("regime_regression", f"regime(s) regressing beyond the {bound:.0%} bound: {listed}; "
                                            "archived as a regime specialist", **details)
    regressed = {w: s for w, s in speedups.items() if s < 1.0 - thresholds.max_workload_regression_rel - _EPS}
    if regressed:
        listed = ", ".join(f"{_name(by_workload[w], w)} {s:.3f}x ({s - 1:+.1%})"
                           for w, s in sorted(regressed.items(), key=lambda item: item[1])[:5])
        bound = thresholds.max_workload_regression_rel
        return _reject("workload_regression", f"{len(regressed)} workload(s) regressing beyond the {bound:.0%} "
                                              f"bound: {listed}", **details)
    slowest = min(speedups, key=lambda w: speedups[w])
    reason = (f"mean speedup {score:.3f}x ({score - 1:+.1%}) over {n} workload(s) and {good} {measurement.order} "
              f"repeats; slowest workload {_name(by_workload[slowest], slowest)} {speedups[slowest]:.3f}x")
    if same_code:
        reason += f"; {len(same_code)} workload(s) run the incumbent's code unchanged: 1x, not re-timed"
    if closed:
        listed = ", ".join(f"{_name(by_workload[w], w)} {s:.3f}x" for w, s in closed.items())
        reason += (f"; within the noise floor, but closes the gap to the baseline on {listed} (faster in each of "
                   f"the {good} repeats, needs >= {1 + thresholds.gap_gain_rel:.3g}x)")  # type: ignore[operator]
    return Decision(PROMOTED, "promoted", (reason,), details)


def _gap_terms(thresholds: PromotionThresholds, gaps: set[str], opened: dict[str, float], speedups: dict[str, float],
               by_workload: dict[str, EvalRecord]) -> str:
    """The gap rule's side of a noise-floor refusal: what the candidate did where the incumbent trails, or the gap
    it would open where the incumbent leads."""
    if thresholds.gap_gain_rel is None or not gaps:
        return ""
    if opened:
        listed = ", ".join(f"{_name(by_workload[w], w)} {v:.3f}x" for w, v in list(opened.items())[:3])
        return f"; it closes a gap to the baseline but opens one: {listed} of the baseline"
    best = max(sorted(gaps & set(speedups)), key=lambda w: speedups[w], default=None)
    if best is None:
        return ""
    return (f", or >= 1x and >= {1 + thresholds.gap_gain_rel:.3g}x in every repeat on a workload the incumbent loses "
            f"to the baseline: best {_name(by_workload[best], best)} {speedups[best]:.3f}x")


def full_audit_failure(full: FullEvaluation, workloads: list[str],
                       thresholds: PromotionThresholds) -> Optional[Decision]:
    """Rule 8: is the candidate's full-audit-level evaluation promotable? None when it is."""
    where = f"full-audit evaluation (submission {full.submission_id})"
    if full.audit_level != FULL_AUDIT_LEVEL:
        return _reject("full_audit", f"{where} ran at audit level {full.audit_level!r}, not {FULL_AUDIT_LEVEL!r}")
    gate = gate_failure(list(full.records), thresholds)
    if gate is not None:
        return _reject("full_audit", *(f"{where}: {r}" for r in gate.reasons), failed_gate=gate.rule)
    missing = sorted(set(workloads) - {r.workload for r in full.records})
    if missing:
        return _reject("full_audit", f"{where} did not evaluate workload(s) {', '.join(m[:8] for m in missing[:5])}")
    if full.blockers:
        return _reject("full_audit", *(f"{where}: {b}" for b in full.blockers[:5]))
    return None


def confirm(decision: Decision, full: Optional[FullEvaluation], workloads: list[str],
            thresholds: PromotionThresholds) -> Decision:
    """A promotion stands only on a promotable full-audit-level evaluation; anything else is unchanged.
    The paired measurement's numbers stay in the details either way."""
    if not decision.promoted:
        return decision
    if full is None:
        return _reject("full_audit", "no full-audit evaluation was made", **decision.details)
    failure = full_audit_failure(full, workloads, thresholds)
    details = {**decision.details, "full_audit_submission": full.submission_id}
    if failure is not None:
        return Decision(REJECTED, failure.rule, failure.reasons, {**details, **failure.details})
    confirmed = f"full-audit evaluation (submission {full.submission_id}) promotable"
    return Decision(PROMOTED, decision.rule, (*decision.reasons, confirmed), details)
