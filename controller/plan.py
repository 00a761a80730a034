"""Planning as pure functions: which regime to attack next, with which hypothesis, inside which bounds,
and when to stop. Everything here is computed from archived data, so a resumed run plans the same."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Optional

from .latency_evidence import build_evidence
from .promote import EvalRecord
from .request import (Acceptance, Budget, Constraints, GenerationRequest, HistoryItem, Incumbent, Repair,
                      RequestKind)
from .skills import PromotionThresholds, Skill, skill_excerpt

# What to try, by regime (data, not code). The offline provider reads the regime, a model reads the text.
HYPOTHESES: dict[str, str] = {
    "latency-bound": ("Too few programs to fill the GPU (batch x KV heads < SMs): split each request's KV "
                      "range (split-KV with a merge), fewer dependent loads per step, or a persistent grid."),
    "memory-bound": ("Large batches stream K/V once: keep more bytes in flight (BLOCK_N, stages), use "
                     "tl.dot on 16-row tiles, and avoid register spills; aim at the byte floor."),
    "all": "Improve the slowest workloads without regressing the others.",
}
REPAIRABLE = ("COMPILE_ERROR", "RUNTIME_ERROR", "INCORRECT_SHAPE", "INCORRECT_NUMERICAL", "INCORRECT_DTYPE",
              "TIMEOUT")
# Skills every request quotes (when present), then the tactics of the target's architecture.
REQUEST_SKILLS = ("gqa-decode", "promotion-rules")
TACTICS_BY_TARGET = {"H200": "hopper-tactics", "H100": "hopper-tactics", "B200": "blackwell-tactics",
                     "GB200": "blackwell-tactics"}


@dataclass(frozen=True)
class RoundPlan:
    regime: str
    hypothesis: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"regime": self.regime, "hypothesis": self.hypothesis, "reason": self.reason}


def plan_round(incumbent: list[EvalRecord]) -> RoundPlan:
    """The regime furthest from its roofline when timing exists; else the one with most failures, else most
    workloads (ties: alphabetical)."""
    groups: dict[str, list[EvalRecord]] = {}
    for r in incumbent:
        groups.setdefault(r.regime or "all", []).append(r)
    if not groups:
        return RoundPlan("all", HYPOTHESES["all"], "no evaluations of the incumbent")
    fractions = {g: [r.fraction_of_floor for r in rs] for g, rs in groups.items()}
    if all(v is not None for vs in fractions.values() for v in vs):
        regime = min(sorted(fractions), key=lambda g: statistics.fmean(fractions[g]))  # type: ignore[arg-type]
        reason = f"furthest from the roofline ({statistics.fmean(fractions[regime]):.0%} of the floor)"  # type: ignore[arg-type]
    else:
        failures = {g: sum(r.status != "PASSED" for r in rs) for g, rs in groups.items()}
        regime = max(sorted(groups), key=lambda g: (failures[g], len(groups[g])))
        reason = (f"{failures[regime]} failing workload(s)" if failures[regime]
                  else f"no timing; the regime with most workloads ({len(groups[regime])})")
    return RoundPlan(regime, HYPOTHESES.get(regime, HYPOTHESES["all"]), reason)


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
                      note="" if timing else "this host has no GPU: candidates are judged on correctness only "
                                             "and none can be promoted")


def excerpts(skills: dict[str, Skill], target_hardware: str, max_chars: int) -> dict[str, str]:
    names = [*REQUEST_SKILLS, TACTICS_BY_TARGET.get(target_hardware, "")]
    return {n: skill_excerpt(skills[n], max_chars) for n in names if n in skills}


def build_request(*, run_id: str, round_number: int, key: str, kind: RequestKind, definition: str,
                  definition_summary: str, target_hardware: str, plan: RoundPlan, incumbent: Incumbent,
                  incumbent_records: list[EvalRecord], history: list[HistoryItem], skill_excerpts: dict[str, str],
                  constraints: Constraints, budget: Budget, thresholds: PromotionThresholds,
                  repair: Optional[Repair] = None, seed: int = 0, why_no_timing: str = "no GPU on this host"
                  ) -> GenerationRequest:
    evidence = build_evidence(incumbent_records, why_no_timing)
    return GenerationRequest(
        run_id=run_id, round=round_number, key=key, kind=kind, definition=definition,
        definition_summary=definition_summary, target_hardware=target_hardware, regime=plan.regime,
        hypothesis=plan.hypothesis if repair is None else "Make the failed candidate pass; keep its idea.",
        incumbent=incumbent, evidence=evidence, skill_excerpts=skill_excerpts, constraints=constraints,
        budget=budget, acceptance=acceptance(thresholds, evidence.kind != "correctness-only"), history=history,
        repair=repair, seed=seed)


def log_excerpt(failures: list[tuple[EvalRecord, str]], max_chars: int) -> str:
    """The harness's words on the first failing workloads: status, message, then the tail of the log."""
    parts = []
    for record, log in failures[:3]:
        tail = log[-max_chars // 2:] if log else ""
        parts.append(f"[{record.label or record.workload[:8]}] {record.status}: {record.message}".strip()
                     + (f"\n{tail}" if tail else ""))
    text = "\n\n".join(parts)
    return text if len(text) <= max_chars else text[: max_chars - 20] + "\n[... cut ...]"
