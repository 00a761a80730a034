"""Planning as pure functions: which regime to attack next, with which hypothesis, inside which bounds,
and when to stop. Everything here is computed from archived data, so a resumed run plans the same."""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from typing import Any, Optional

from harness.data.generation_request import (Acceptance, Budget, Constraints, Diagnosis, Evidence, GenerationRequest,
                                        HistoryItem, Incumbent, Repair, RequestKind)
from harness.data.statuses import EvaluationStatus

from .evidence.latency import build_latency_evidence, timing_available
from .promote import EvalRecord
from .skills import PromotionThresholds
from .tactics import TacticBook, hypothesis_text

# What to try, by regime (data, not code). The offline provider reads the regime, a model reads the text.
HYPOTHESES: dict[str, str] = {
    "latency-bound": ("Too few programs to fill the GPU (batch x KV heads < 2 x SMs): split each request's KV "
                      "range (split-KV with a merge), fewer dependent loads per step, or a persistent grid."),
    "memory-bound": ("Large batches stream K/V once: keep more bytes in flight (BLOCK_N, stages), use "
                     "tl.dot on 16-row tiles, and avoid register spills; aim at the byte floor."),
    "skewed": ("A few long requests dominate the batch (max length far above the mean): one program per "
               "request serialises the long ones; split each request's KV range (split-KV with a merge) so long "
               "requests spread over many programs, sized by length rather than by batch."),
    "all": "Improve the slowest workloads without regressing the others.",
}
# Every failing verdict: a candidate that failed with one of these is worth a repair request.
REPAIRABLE = tuple(s for s in EvaluationStatus if s != EvaluationStatus.PASSED)
# Skills every request quotes (when present), then the tactics of the target's architecture.


@dataclass(frozen=True)
class RoundPlan:
    regime: str
    hypothesis: str
    reason: str
    diagnosis: Optional[Diagnosis] = None  # with ncu evidence for the regime

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"regime": self.regime, "hypothesis": self.hypothesis, "reason": self.reason}
        if self.diagnosis is not None:  # latency-only plans stay as they were
            out["diagnosis"] = self.diagnosis.model_dump(mode="json")
        return out


def rank_regimes(incumbent: list[EvalRecord]) -> list[tuple[str, str]]:
    """(regime, reason), most worth attacking first. When every workload has a FlashInfer speedup: first the regimes
    where FlashInfer is still ahead on some workload (the goal is at least 1x on every one), the worst such workload
    first; then the others furthest behind FlashInfer (lowest mean speedup; the definition's score is the mean of
    those speedups, and a regime's roofline is no target where even FlashInfer stays far from it, as at batch 1).
    Else, when every workload is timed: furthest from its roofline. Else most failures, then most workloads (ties:
    alphabetical)."""
    groups: dict[str, list[EvalRecord]] = {}
    for r in incumbent:
        groups.setdefault(r.regime or "all", []).append(r)
    fractions = {g: [r.fraction_of_floor for r in rs] for g, rs in groups.items()}
    speedups = {g: [r.speedup_vs_fi for r in rs] for g, rs in groups.items()}
    if groups and all(v is not None for vs in speedups.values() for v in vs):
        behind = {g: statistics.fmean(speedups[g]) for g in groups}  # type: ignore[arg-type]
        worst = {g: min(speedups[g]) for g in groups}  # type: ignore[type-var]
        floor = {g: statistics.fmean(fractions[g]) if all(v is not None for v in fractions[g]) else None
                 for g in groups}  # type: ignore[arg-type]

        def reason(g: str) -> str:
            lost = [s for s in speedups[g] if s < 1.0]  # type: ignore[operator]
            head = (f"FlashInfer ahead on {len(lost)} workload(s) (worst {worst[g]:.3g}x; {behind[g]:.3g}x mean "
                    "speedup" if lost else f"furthest behind FlashInfer ({behind[g]:.3g}x mean speedup")
            return head + (f", {floor[g]:.0%} of the floor)" if floor[g] is not None else ")")

        def key(g: str) -> tuple[float, float]:
            return (worst[g], behind[g]) if worst[g] < 1.0 else (1.0, behind[g])  # type: ignore[return-value]

        return [(g, reason(g)) for g in sorted(sorted(groups), key=key)]
    if groups and all(v is not None for vs in fractions.values() for v in vs):
        mean = {g: statistics.fmean(fractions[g]) for g in groups}  # type: ignore[arg-type]
        return [(g, f"furthest from the roofline ({mean[g]:.0%} of the floor)")
                for g in sorted(sorted(groups), key=lambda g: mean[g])]
    failures = {g: sum(r.status != EvaluationStatus.PASSED for r in rs) for g, rs in groups.items()}
    ordered = sorted(sorted(groups), key=lambda g: (-failures[g], -len(groups[g])))  # ties stay alphabetical
    return [(g, f"{failures[g]} failing workload(s)" if failures[g]
             else f"no timing; the regime with most workloads ({len(groups[g])})") for g in ordered]


def plan_round(incumbent: list[EvalRecord], diagnoses: Optional[dict[str, Diagnosis]] = None,
               book: Optional[TacticBook] = None, stalled: frozenset[str] = frozenset(),
               tried: frozenset[str] = frozenset()) -> RoundPlan:
    """Which regime to attack, with which hypothesis.

    Latency only (no ``diagnoses``): the first regime of ``rank_regimes`` and its regime's hypothesis.
    With ncu diagnoses (loop regime -> Diagnosis of its profiled workload): regimes ncu finds at the roofline
    are skipped (unless all are), and the chosen regime's limiter picks the hypothesis through the skills'
    limiter-to-tactic tables (``book``); a regime without a diagnosis keeps the latency hypothesis.
    ``stalled`` (controller/search.py ``stalled_regimes``): regimes whose best has stopped improving go after the
    others (unless all have), so one regime that resists every move does not take every round.
    ``tried``: regimes rounds have attacked since the incumbent last changed, without a promotion; they too go after
    the others, so the rounds a wall budget allows go round the regimes instead of repeating one that just failed
    (a regime stalls only after ``patience`` such rounds, and a loop of minutes has a handful).
    """
    ranked = rank_regimes(incumbent)
    if not ranked:
        return RoundPlan("all", HYPOTHESES["all"], "no evaluations of the incumbent")
    ranked = _attacked_last(ranked, tried, "tried since the incumbent last changed")
    ranked = _attacked_last(ranked, stalled, "stalled")
    if not diagnoses:
        regime, reason = ranked[0]
        return RoundPlan(regime, HYPOTHESES.get(regime, HYPOTHESES["all"]), reason)
    at_roofline = {g for g, d in diagnoses.items() if d.classification == "at-roofline"}
    open_ = [(g, why) for g, why in ranked if g not in at_roofline]
    regime, reason = (open_ or ranked)[0]
    if open_ and at_roofline:
        reason += f"; ncu: {', '.join(sorted(at_roofline))} at the roofline"
    fallback = HYPOTHESES.get(regime, HYPOTHESES["all"])
    diagnosis = diagnoses.get(regime)
    if diagnosis is None:
        return RoundPlan(regime, fallback, reason + "; no ncu profile of this regime")
    hypothesis = hypothesis_text(diagnosis, book or TacticBook(), fallback)
    reason += f"; ncu: {diagnosis.classification}" + (f", limiter {diagnosis.limiter}" if diagnosis.limiter else "")
    return RoundPlan(regime, hypothesis, reason, diagnosis)


def _attacked_last(ranked: list[tuple[str, str]], pushed: frozenset[str], why_pushed: str
                   ) -> list[tuple[str, str]]:
    """``ranked`` with the regimes in ``pushed`` after the others (unless every regime is), the first saying so."""
    kept = [(g, why) for g, why in ranked if g not in pushed]
    if not kept or len(kept) == len(ranked):
        return ranked
    skipped = ", ".join(sorted(g for g, _ in ranked if g in pushed))
    return [(g, f"{why}; {skipped} {why_pushed}, attacked after the others") for g, why in kept] + \
           [(g, why) for g, why in ranked if g in pushed]


def stop_reason(spent: dict[str, float], budget_tokens: Optional[int], budget_cost_usd: Optional[float],
                budget_wall_s: Optional[float], rounds_without_promotion: int, incumbent: list[EvalRecord],
                thresholds: PromotionThresholds) -> Optional[str]:
    """Why the loop must not start another round, or None."""
    if budget_tokens is not None and spent["tokens"] >= budget_tokens:
        return f"budget: {spent['tokens']:.0f} tokens spent of {budget_tokens}"
    if budget_cost_usd is not None and spent["cost_usd"] >= budget_cost_usd:
        return f"budget: ${spent['cost_usd']:.4f} spent of ${budget_cost_usd:.4f}"
    if budget_wall_s is not None and spent["wall_s"] >= budget_wall_s:
        return f"budget: {spent['wall_s']:.0f} s wall time spent of {budget_wall_s:.0f} s"
    if rounds_without_promotion >= thresholds.stop_no_improvement_rounds:
        return f"no improvement for {rounds_without_promotion} rounds"
    fractions = [r.fraction_of_floor for r in incumbent]
    if fractions and all(f is not None and f >= thresholds.stop_at_fraction_of_floor for f in fractions):
        return (f"at the roofline: every workload at >= {thresholds.stop_at_fraction_of_floor:.0%} of the floor")
    return None


def wall_budget_stop(spent_s: float, budget_s: Optional[float], expected_s: float = 0.0) -> Optional[str]:
    """Why the next evaluation step must not start under a wall budget, or None. ``expected_s``: what a step of its
    kind took at most so far in the run (0 when none ran yet). A budget is a limit, not a starting deadline: a step
    that would run past it (a CUDA candidate's build takes a minute) is not started, so the run ends within its
    budget and says so, instead of running on until an outer timeout kills it without a report."""
    if budget_s is None:
        return None
    if spent_s >= budget_s:
        return f"budget: {spent_s:.0f} s wall time spent of {budget_s:.0f} s"
    if spent_s + expected_s > budget_s:
        return (f"budget: {spent_s:.0f} s wall time spent of {budget_s:.0f} s; the next step would not fit "
                f"(~{expected_s:.0f} s, the longest of its kind so far)")
    return None


def finalist_room_stop(spent_s: float, budget_s: Optional[float], rung_s: float,
                       evaluation_s: float) -> Optional[str]:
    """Why successive halving should stop before its next rung, or None: the rung (``rung_s`` expected) and the
    finalist's full evaluation after it (``evaluation_s``) would not both fit in the budget, while the evaluation
    alone would. Where even that does not fit the cut saves nothing (the round ends NOT_EVALUATED either way), and
    with no evaluation measured yet there is nothing to reserve."""
    if budget_s is None or evaluation_s <= 0:
        return None
    left = budget_s - spent_s
    if evaluation_s > left or rung_s + evaluation_s <= left:
        return None
    return (f"budget: {left:.0f} s left of {budget_s:.0f} s holds the finalist's evaluation (~{evaluation_s:.0f} s) "
            f"but not the next rung before it (~{rung_s:.0f} s)")


def request_budget(max_output_tokens: int, candidates: int, request_wall_s: float, spent: dict[str, float],
                   budget_tokens: Optional[int], budget_cost_usd: Optional[float],
                   budget_wall_s: Optional[float]) -> Budget:
    """The next request's bounds: the per-request limits, cut to what the loop's budget has left."""
    wall = request_wall_s if budget_wall_s is None else max(min(request_wall_s, budget_wall_s - spent["wall_s"]), 1.0)
    return Budget(max_output_tokens=max_output_tokens, max_candidates=candidates, wall_s=wall,
                  max_total_tokens=None if budget_tokens is None else max(int(budget_tokens - spent["tokens"]), 1),
                  max_cost_usd=None if budget_cost_usd is None else max(budget_cost_usd - spent["cost_usd"], 0.0))


def acceptance(thresholds: PromotionThresholds, timing: bool) -> Acceptance:
    return Acceptance(min_repeats=thresholds.min_repeats, paired_order=thresholds.paired_order,
                      noise_floor_rel=thresholds.noise_floor_rel,
                      max_regime_regression_rel=thresholds.max_regime_regression_rel,
                      max_workload_regression_rel=thresholds.max_workload_regression_rel,
                      note="" if timing else "this host has no GPU: candidates are judged on correctness only "
                                             "and none can be promoted")


def build_request(*, run_id: str, round_number: int, key: str, kind: RequestKind, definition: str,
                  definition_summary: str, target_hardware: str, plan: RoundPlan, incumbent: Incumbent,
                  incumbent_records: list[EvalRecord], history: list[HistoryItem], skill_excerpts: dict[str, str],
                  constraints: Constraints, budget: Budget, thresholds: PromotionThresholds,
                  repair: Optional[Repair] = None, seed: int = 0, why_no_timing: str = "no GPU on this host",
                  ncu_markdown: Optional[str] = None, evidence_note: str = "") -> GenerationRequest:
    evidence = request_evidence(incumbent_records, why_no_timing, ncu_markdown, evidence_note)
    return GenerationRequest(
        run_id=run_id, round=round_number, key=key, kind=kind, definition=definition,
        definition_summary=definition_summary, target_hardware=target_hardware, regime=plan.regime,
        hypothesis=plan.hypothesis if repair is None else "Make the failed candidate pass; keep its idea.",
        diagnosis=plan.diagnosis if repair is None else None,
        incumbent=incumbent, evidence=evidence, skill_excerpts=skill_excerpts, constraints=constraints,
        budget=budget, acceptance=acceptance(thresholds, timing_available(incumbent_records)), history=history,
        repair=repair, seed=seed)


def request_evidence(records: list[EvalRecord], why_no_timing: str, ncu_markdown: Optional[str] = None,
                     note: str = "") -> Evidence:
    """The ncu evidence Markdown when a profile gave kernel digests; else the latency-only (or correctness-only)
    table of the archived evaluations, saying why no profile backs it."""
    if ncu_markdown:
        return Evidence(kind="profile", markdown=ncu_markdown, source="ncu", note=note)
    latency = build_latency_evidence(records, why_no_timing)
    markdown = latency.markdown + (f"\n\nNo ncu profile: {note}" if note else "")
    return latency.model_copy(update={"markdown": markdown, "source": "latency", "note": note})


# Terminal escapes and control characters a candidate printed: noise to a model (and a NUL is refused by some
# APIs); newlines and tabs stay.
_CONTROL = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|[\x00-\x08\x0b-\x1f\x7f]")


def log_excerpt(failures: list[tuple[EvalRecord, str]], max_chars: int) -> str:
    """The harness's words on the first failing workloads: status, message, then the tail of the log. The
    candidate's output is data for the next request (quoted there in a fence it cannot close): each message is cut
    to a quarter of the excerpt, so no one workload's words crowd out the others, and control characters go."""
    parts = []
    for record, log in failures[:3]:
        tail = _CONTROL.sub("", log[-max_chars // 2:]) if log else ""
        message = _CONTROL.sub("", (record.message or "")[:max_chars])
        message = message if len(message) <= max_chars // 4 else message[: max_chars // 4] + " [... cut ...]"
        parts.append(f"[{record.label or record.workload[:8]}] {record.status}: {message}".strip()
                     + (f"\n{tail}" if tail else ""))
    text = "\n\n".join(parts)
    return text if len(text) <= max_chars else text[: max_chars - 20] + "\n[... cut ...]"
