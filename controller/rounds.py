"""A run as the archive holds it: the incumbent, the history, each round's summary and the run's report.

Everything here reads the archive (the controller's Store), never the harness: a finished run is reported
without starting an evaluation.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Optional

from harness.data.generation_request import HistoryItem
from harness.data.schema import Definition
from harness.data.statuses import RunStatus

from .evaluator import Evaluator
from .evidence.latency import mean_latency, mean_speedup_vs_fi
from .halving import HALVING_RULE, SCREENED_OUT, Rung, rungs_of, screening_line
from .promote import PROMOTED, EvalRecord
from .skills import PromotionThresholds
from .store import REJECTED, Store
from .trajectory import standing


class RunView:
    """Read-only views of one run; the Loop sets what they read."""

    store: Store
    run_id: str
    regimes: dict[str, Any]  # workload uuid -> its regime
    definition: Definition
    evaluator: Evaluator
    thresholds: PromotionThresholds  # ranked_figure: the latency figure read back

    # -- reading state back from the archive ------------------------------------------------------------

    def records(self, candidate: dict[str, Any]) -> list[EvalRecord]:
        return self.store.eval_records(candidate.get("submission_id"), self.regimes, self.thresholds.ranked_figure)

    def incumbent(self) -> dict[str, Any]:
        promoted = [d for d in self.store.decisions(self.run_id) if d["verdict"] == PROMOTED]
        if promoted:
            return self.store.candidate(promoted[-1]["candidate_id"])
        return self.store.candidates(self.run_id, 0)[0]

    def rounds_since_promotion(self) -> list[dict[str, Any]]:
        """The finished rounds after the last one that promoted (after round 0 when none has)."""
        promoted_rounds = [d["round"] for d in self.store.decisions(self.run_id) if d["verdict"] == PROMOTED]
        last = max(promoted_rounds, default=0)
        return [r for r in self.store.rounds(self.run_id) if r["round"] > last and r["status"] == RunStatus.DONE]

    def rounds_without_promotion(self) -> int:
        return len(self.rounds_since_promotion())

    def regimes_tried_since_promotion(self) -> frozenset[str]:
        """The regimes finished rounds attacked after the last promotion (controller/plan.py ``plan_round``)."""
        return frozenset(r["plan"]["regime"] for r in self.rounds_since_promotion() if r["plan"].get("regime"))

    def history(self) -> list[HistoryItem]:
        decisions = {d["candidate_id"]: d for d in self.store.decisions(self.run_id)}
        items = []
        for c in self.store.candidates(self.run_id):
            d = decisions.get(c["id"])
            records = self.records(c)
            by_regime = {r.regime for r in records if r.regime}
            regime_ms = {g: mean_latency([r for r in records if r.regime == g]) for g in sorted(by_regime)}
            items.append(HistoryItem(round=c["round"], name=c["solution_name"], status=c["status"],
                                     origin={k: v for k, v in c["origin"].items() if k != "notes"},
                                     # a screened-out candidate's run covered the planned regime only
                                     mean_latency_ms=None if c["status"] == SCREENED_OUT else mean_latency(records),
                                     verdict=f"{d['verdict']} ({d['rule']})" if d else "",
                                     regime_latency_ms={g: v for g, v in regime_ms.items() if v is not None}))
        return items

    # -- round summaries ------------------------------------------------------------------------------

    def summarize(self, round_number: int, kind: str, wall_s: float) -> dict[str, Any]:
        cands = self.store.candidates(self.run_id, round_number)
        responses = [r for r in self.store.responses_of_run(self.run_id) if r["round"] == round_number]
        decisions = [d for d in self.store.decisions(self.run_id) if d["round"] == round_number]
        best = None
        for c in cands:
            if c["status"] == SCREENED_OUT:
                continue  # a screening run: short, on the planned regime only, not comparable with full runs
            records = self.records(c)
            latency = mean_latency(records)
            if latency is not None and (best is None or latency < best[0]):
                best = (latency, mean_speedup_vs_fi(records), c["solution_name"])
        promoted = [d for d in decisions if d["verdict"] == PROMOTED]
        rungs = self.round_rungs(decisions)
        decisions = [d for d in decisions if d["rule"] != HALVING_RULE] or decisions  # finalists' decide the text
        incumbent = self.incumbent()
        if kind == "baseline":
            decision = "starting incumbent"
        elif promoted:
            decision = "promoted " + ", ".join(self.store.candidate(d["candidate_id"])["solution_name"]
                                               for d in promoted)
        elif decisions:
            decision = Counter(d["reasons"][0] if d["reasons"] else d["rule"] for d in decisions).most_common(1)[0][0]
        else:
            decision = "nothing to decide"
        return {
            "round": round_number, "kind": kind, "candidates": len(cands),
            "repairs": sum(1 for c in cands if c["depth"] > 0),
            "statuses": dict(Counter(c["status"] for c in cands)),
            "best_latency_ms": best[0] if best else None, "best_candidate": best[2] if best else None,
            "speedup_vs_flashinfer": best[1] if best else None,
            "tokens": sum((r["tokens_in"] or 0) + (r["tokens_out"] or 0) for r in responses),
            "cost_usd": sum(r["cost_usd"] or 0.0 for r in responses), "wall_s": round(wall_s, 3),
            "stopped": [r["stopped"] or r["error"] for r in responses if r["stopped"] or r["error"]],
            "rejected": [c["reason"] for c in cands if c["status"] == REJECTED],
            "decision": decision,
            "search": "; ".join(n for n in (self.search_notes(responses), screening_line(rungs)) if n),
            "screening": [r.to_json() for r in rungs],  # successive halving's rungs (controller/screening.py)
            # where the run stands after this round: the trajectory (controller/trajectory.py)
            "incumbent": {"name": incumbent["solution_name"], **standing(self.records(incumbent))},
        }

    @staticmethod
    def round_rungs(decisions: list[dict[str, Any]]) -> list[Rung]:
        """The rungs of successive halving archived with a round's screened-out decisions (by depth, then rung)."""
        return rungs_of([d["details"]["halving"] for d in decisions
                         if d["rule"] == HALVING_RULE and (d.get("details") or {}).get("halving")])

    def search_notes(self, responses: list[dict[str, Any]]) -> str:
        """What the offline search decided for this round's requests (controller/search.py), from their archived
        replies: the regime, the population explored, and a design switch on a stall."""
        notes = []
        for r in responses:
            try:
                search = json.loads(self.store.raw_text(r) or "{}").get("search")
            except (ValueError, AttributeError):
                continue  # a model's reply: free text, no search record
            if isinstance(search, dict) and search.get("population"):
                notes.append(f"{search.get('regime') or '-'}: population {', '.join(search['population'])}"
                             + ("; stalled: design switch" if search.get("stalled") else ""))
        return "; ".join(notes)

    # -- the report -------------------------------------------------------------------------------------

    def nothing_produced(self) -> Optional[str]:
        """Why no round played produced a candidate (the provider failed, or every reply was refused); None when
        one did, or when no round was played (--rounds 0, or a stop rule before round 1)."""
        if not any(r["round"] > 0 and r["status"] == RunStatus.DONE for r in self.store.rounds(self.run_id)):
            return None
        cands = [c for c in self.store.candidates(self.run_id) if c["round"] > 0]
        if any(c["solution_hash"] for c in cands):  # code came back (a duplicate too: the provider works)
            return None
        responses = [r for r in self.store.responses_of_run(self.run_id) if r["round"] > 0]
        errors = [r["error"] for r in responses if r["error"]]
        refused = [c["reason"] for c in cands if c["status"] == REJECTED and c["reason"]]
        stopped = [r["stopped"] for r in responses if r["stopped"]]
        why = next((found[-1] for found in (errors, refused, stopped) if found), "the provider proposed nothing")
        return "no round produced a candidate: " + " ".join(str(why).split())[:500]

    def timing_note(self, cands: list[dict[str, Any]]) -> str:
        """From the archive (a finished run is reported without starting the harness)."""
        if any(r.latency_ms is not None for c in cands for r in self.records(c)):
            return "available"
        used_gpu = {self.store.submission_used_gpu(c["submission_id"]) for c in cands if c["submission_id"]}
        if used_gpu == {False}:
            return "unavailable: no GPU on this host"
        return f"unavailable: {self.evaluator.why_no_timing() or 'no evaluation was timed'}"

    def report(self) -> dict[str, Any]:
        row = self.store.run(self.run_id) or {}
        rounds = [r["summary"] for r in self.store.rounds(self.run_id) if r["status"] == RunStatus.DONE]
        inc = self.incumbent()
        inc_records = self.records(inc)
        decisions = self.store.decisions(self.run_id)
        promoted = [d for d in decisions if d["verdict"] == PROMOTED]
        spent = self.store.spend(self.run_id)
        cands = self.store.candidates(self.run_id)
        return {
            "run_id": self.run_id, "definition": self.definition.name, "provider": row.get("provider"),
            "status": row.get("status"), "stop_reason": row.get("stop_reason"),
            "timing": self.timing_note(cands),
            "rounds": rounds,
            "incumbent": {"candidate_id": inc["id"], "name": inc["solution_name"],
                          "solution_hash": inc["solution_hash"],
                          "status": inc["status"], "origin": inc["origin"], "promoted": bool(promoted),
                          "mean_latency_ms": mean_latency(inc_records),
                          "exported": promoted[-1]["exported"] if promoted else None},
            "decisions": [{"round": d["round"], "candidate": self.store.candidate(d["candidate_id"])["solution_name"],
                           "verdict": d["verdict"], "rule": d["rule"], "reasons": d["reasons"]} for d in decisions],
            "nothing_produced": self.nothing_produced(),
            "totals": {"candidates": len(cands),
                       "evaluated": sum(1 for c in cands if c["submission_id"] is not None),
                       "tokens": spent["tokens"], "cost_usd": spent["cost_usd"], "wall_s": round(spent["wall_s"], 3)},
        }
