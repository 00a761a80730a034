"""Successive halving inside a round (controller/halving.py decides; RoundEvaluation in controller/screening.py
runs the rest of the round): rungs of short screens on the round's planned regime until ``finalists`` remain.

The wall budget is asked before each screen (RoundEvaluation.out_of_wall_time), and before each rung after the
first for room for the finalist: when the next rung and the finalist's full evaluation after it would not both fit
in what is left, but the evaluation alone would, the rung is not run and the fastest ``finalists`` of the rung
before go on (run 21: a 180 s run on a card new to the archive spent 67 s on round 0, screened 8 -> 4 -> 2 -> 1 in
86 s and had 27 s left for a 55 s evaluation, so it promoted nothing after all its screening).
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Optional

from harness.data.statuses import EvaluationStatus

from .halving import HALVING_RULE, SCREENED_OUT, Rung, Screened, budget_cut, decide_rung, needs_screening
from .plan import finalist_room_stop
from .rounds import RunView
from .search import HalvingSettings


class HalvingRounds(RunView):
    """Successive halving's rungs; RoundEvaluation supplies the wall budget's steps (out_of_wall_time, step_kind,
    timed_step, step_walls) and the run's config."""

    emit: Callable[[str, dict[str, Any]], None]
    halving: Optional[HalvingSettings]  # the skill's settings; None: off
    config: Any
    round_started: Optional[float]
    step_walls: Optional[dict[tuple[str, str], float]]
    out_of_wall_time: Callable[..., bool]
    step_kind: Callable[[str, dict[str, Any]], tuple[str, str]]
    timed_step: Callable[[tuple[str, str], Callable[[], Any]], Any]

    # -- successive halving ------------------------------------------------------------------------------

    def halving_active(self) -> Optional[HalvingSettings]:
        """The halving settings where they apply here: on in the skill, an evaluator that screens, and timing (a
        screen ranks by latency). None otherwise: every candidate is then evaluated in full."""
        if self.halving is None or not callable(getattr(self.evaluator, "screen", None)):
            return None
        return self.halving if self.evaluator.why_no_timing() is None else None

    def screen_workloads(self, round_number: int) -> Optional[list[str]]:
        """The round's planned regime's workloads (as archived with the round); None (the run's) for a plan on
        every regime or a regime none of the run's workloads is in."""
        row = self.store.round(self.run_id, round_number) or {}
        plan = row.get("plan") or {}
        regime = (json.loads(plan) if isinstance(plan, str) else plan).get("regime")
        chosen = [w.uuid for w in self.workloads if regime and self.regimes.get(w.uuid) == regime]
        return chosen or None

    def screening_rungs(self, round_number: int, depth: int) -> list[Rung]:
        """The archived rungs of one depth of a round, from its screened-out decisions."""
        decisions = [d for d in self.store.decisions(self.run_id) if d["round"] == round_number]
        return [r for r in self.round_rungs(decisions) if r.depth == depth]

    def screen_batch(self, round_number: int, depth: int, batch: list[dict[str, Any]],
                     halving: HalvingSettings) -> None:
        """Rungs of halving on ``batch`` (pending candidates of one depth) until ``finalists`` remain, or until the
        next rung would leave no room for the finalist's evaluation (the module's docstring)."""
        rung = max((r.rung for r in self.screening_rungs(round_number, depth)), default=-1) + 1
        workloads = self.screen_workloads(round_number)
        before: Optional[tuple[list[Screened], Rung, float]] = None  # this call's last rung: results, decision, wall
        while needs_screening(len(batch), halving.finalists):
            if self.out_of_wall_time(round_number):
                return
            if before is not None and self.cut_for_the_finalist(round_number, batch, before, rung, depth, halving):
                return
            iterations = halving.iterations(rung)
            labels = _labels(batch)
            results = []
            started = time.monotonic()
            for c in batch:  # the budget is asked before each screen: one rung of CUDA builds takes minutes
                kind = self.step_kind("screen", c)
                if self.out_of_wall_time(round_number, kind):
                    return
                results.append(self.timed_step(
                    kind, lambda c=c: self.screen_one(round_number, c, labels[c["id"]], workloads, iterations,
                                                      halving.screen_trials)))
            decided = decide_rung(results, halving.eta, halving.finalists, rung, iterations, depth)
            for c, result in zip(batch, results):
                if result.name in decided.cut:
                    self.screen_out(round_number, c, result, decided)
            self.emit("screen", {"round": round_number, "rung": rung, "iterations": iterations,
                                 "entered": len(batch), "kept": list(decided.kept)})
            batch = [c for c in batch if labels[c["id"]] in decided.kept]
            before = (results, decided, time.monotonic() - started)
            rung += 1

    def cut_for_the_finalist(self, round_number: int, batch: list[dict[str, Any]],
                             before: tuple[list[Screened], Rung, float], rung: int, depth: int,
                             halving: HalvingSettings) -> bool:
        """Would rung ``rung`` on ``batch`` leave no room for the finalist's evaluation? Then it is not run: the
        fastest ``finalists`` of the rung before go on, the others are cut with the budget's reason. Its expected
        wall is the rung before's per candidate (screens of one design cost their start and build, not their few
        timed iterations); the evaluation's is the longest of its kind so far (none yet: no reserve)."""
        results, decided, wall = before
        if self.config.budget_wall_s is None or self.round_started is None:
            return False
        spent = self.store.spend(self.run_id)["wall_s"] + time.monotonic() - self.round_started
        rung_s = wall / max(len(decided.entered), 1) * len(batch)
        evaluation_s = max((self.step_walls or {}).get(self.step_kind("evaluate", c), 0.0) for c in batch)
        why = finalist_room_stop(spent, self.config.budget_wall_s, rung_s, evaluation_s)
        if why is None:
            return False
        cut = budget_cut(decided, halving.finalists, rung, why, depth)
        by_name = {r.name: r for r in results}
        labels = _labels(batch)
        for c in batch:
            if labels[c["id"]] in cut.cut:
                self.screen_out(round_number, c, by_name[labels[c["id"]]], cut)
        self.emit("screen", {"round": round_number, "rung": rung, "iterations": 0, "entered": len(batch),
                             "kept": list(cut.kept), "budget": why})
        return True

    def screen_one(self, round_number: int, candidate: dict[str, Any], label: str, workloads: Optional[list[str]],
                   iterations: int, trials: int) -> Screened:
        self.emit("screen_run", {"round": round_number, "name": candidate["solution_name"], "iterations": iterations})
        submission_id = self.evaluator.screen(self.store.solution(candidate), workloads,  # type: ignore[attr-defined]
                                              iterations, trials)
        records = self.store.eval_records(submission_id, self.regimes, self.thresholds.ranked_figure)
        failing = next((r for r in records if r.status != EvaluationStatus.PASSED), None)
        if failing is not None:
            status, message = failing.status, failing.message
        elif not records:  # nothing ran (refused before the first workload)
            status, message = self.store.submission_status(submission_id) or "UNKNOWN", "no workload evaluated"
        else:
            status, message = EvaluationStatus.PASSED.value, ""
        return Screened(label, str(status), {r.workload: r.latency_ms for r in records}, message, submission_id)

    def screen_out(self, round_number: int, candidate: dict[str, Any], result: Screened,
                   rung: Rung) -> None:
        """Archive why ``candidate`` was cut: its status (the failing one, else SCREENED_OUT), its screening
        submission, and a decision with the rung's record."""
        why = f"rung {rung.rung} ({rung.iterations} iterations): {rung.cut[result.name]}"
        status = SCREENED_OUT if result.status == EvaluationStatus.PASSED.value else result.status
        self.store.set_candidate(candidate["id"], status, submission_id=result.submission_id, reason=why)
        details = {"halving": rung.to_json(), "screening_submission": result.submission_id,
                   "status": result.status}
        self.store.add_decision(self.run_id, round_number, candidate["id"], self.incumbent()["id"], SCREENED_OUT,
                                HALVING_RULE, [why], details)
        self.emit("candidate", {"round": round_number, "name": candidate["solution_name"], "status": status,
                                "screened_out": why})


def _labels(batch: list[dict[str, Any]]) -> dict[int, str]:
    """Candidate id -> the name a rung's record gives it: its solution's name, with its id where names repeat."""
    names = [c["solution_name"] for c in batch]
    return {c["id"]: c["solution_name"] if names.count(c["solution_name"]) == 1 else f"{c['solution_name']}#{c['id']}"
            for c in batch}
