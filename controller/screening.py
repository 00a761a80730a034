"""A round's candidate evaluation: successive halving on short runs (when on), each remaining candidate's
evaluation through the harness, then the promotion decisions. Mixed into the Loop (controller/loop.py).

Successive halving (controller/halving.py decides, settings in the skill's ``search: halving:``): when it is on,
the evaluator can screen (``screen``) and time (a GPU), the pending candidates of one depth of a round (the
explore request's, or one repair depth's) are screened on the round's planned regime with a short run (one
correctness trial, a short timing run, audits off); the fastest ``ceil(n / eta)`` are timed again with a run
``eta`` times longer, and so on until ``finalists`` remain. Each cut candidate gets an archived decision (verdict
``SCREENED_OUT``, rule ``halving``, the rung's record in its details) and its screening submission: one that failed
its screen keeps the harness's failing status, so it can be repaired like any failed candidate. Finalists go on to
the evaluation and promotion below, unchanged (the rungs: controller/halving_rounds.py). With halving off every
candidate is evaluated as before.

A wall-time budget (``--budget-wall-s``) is checked before each screen and each evaluation, not only between
rounds: once it is spent, or the next step would run past it (it is expected to take as long as the longest step of
its kind so far in the run: a screen or an evaluation, of a CUDA or a Triton candidate), the round's candidates not
evaluated yet end ``NOT_EVALUATED`` (with the reason), the round decides on the evaluations it finished (a rung
cut short decides nothing: its screens stay in the archive as submissions), and the run stops with its report (an
evaluation already running finishes).

Resumable like the rest: a rung's decisions are archived as it finishes, so a resumed run continues with the
candidates still pending at the next rung; an evaluation cut off by a kill is redone, one the harness finished
is adopted.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Optional

from harness.data.schema import Solution, dump_json
from harness.data.statuses import NO_VERDICT, SubmissionStatus

from .dispatch import unchanged_regimes
from .plan import wall_budget_stop
from .promote import (REJECTED as NOT_PROMOTED, Decision, FullEvaluation, PairedMeasurement, confirm, decide,
                      decisive_speedups, gate_failure, screen_failure, versus_baseline)
from .halving_rounds import HalvingRounds
from .search import HalvingSettings, SearchSettings
from .providers.offline import offline_generator
from .skills import PromotionThresholds, Skill, SkillError
from .store import DUPLICATE, EVALUATING, NOT_EVALUATED, PENDING, REJECTED, UNFINISHED

# A harness submission's start (its worker, the solution's import and build) in workloads' worth of time: run 17's
# timing runs took 4.6 s to their first workload and about 1 s per workload after it (14 workloads: 19 s).
RUN_START_IN_WORKLOADS = 5


def paired_estimate_s(per_unit: float, timing_runs: int, timed: int, evaluation: float) -> float:
    """The wall of a paired measurement of ``timing_runs`` runs on ``timed`` workloads, each run a start plus a share
    per workload (``per_unit`` seconds each of ``RUN_START_IN_WORKLOADS + timed``), and the full-audit evaluation
    after it (``evaluation`` s)."""
    return timing_runs * per_unit * (RUN_START_IN_WORKLOADS + timed) + evaluation


def export_solution(folder: Path, solution: Solution) -> Path:
    path = folder / "promoted" / solution.definition / f"{solution.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(dump_json(solution), indent=2) + "\n")
    tmp.replace(path)
    return path


def search_settings(skills: dict[str, Skill], definition: Any) -> SearchSettings:
    """The ``search:`` settings of the skill whose templates serve ``definition`` (the defaults for a definition no
    skill template serves, e.g. a run from a given incumbent with a model provider: halving then off)."""
    try:
        return offline_generator(skills, definition).search
    except SkillError:
        return SearchSettings()


# The rule of a decision the wall budget deferred (the paired measurement would not fit): not a verdict on the
# candidate, so a run given more budget takes it back and decides again (controller/extend.py).
BUDGET_RULE = "budget"


class RoundEvaluation(HalvingRounds):
    """The evaluation steps of a round; the Loop sets what they use (see RunView, and ``halving``)."""

    emit: Callable[[str, dict[str, Any]], None]
    thresholds: PromotionThresholds
    workloads: list[Any]
    halving: Optional[HalvingSettings]  # the skill's settings; None: off
    config: Any  # the run's LoopConfig (controller.loop; its budget_wall_s here)
    round_started: Optional[float] = None  # time.monotonic() when the explore round being played began
    budget_stop: Optional[str] = None  # why the round being played stopped evaluating: its wall budget ran out
    # The longest wall time of each kind of step so far in this process's run, (screen|evaluate, language) -> s:
    # what the next such step is expected to take, for the wall budget.
    step_walls: Optional[dict[tuple[str, str], float]] = None

    # -- the wall budget inside a round ----------------------------------------------------------------------

    def out_of_wall_time(self, round_number: int, step: Optional[tuple[str, str]] = None) -> bool:
        """Is the run's wall budget spent (finished rounds plus this one so far), or would the next ``step`` (its
        kind: see step_walls) run past it? Then every candidate of the round still pending ends NOT_EVALUATED with
        the reason, and the round stops evaluating."""
        budget = self.config.budget_wall_s
        if self.budget_stop is not None:
            return True
        if budget is None or self.round_started is None:
            return False
        spent = self.store.spend(self.run_id)["wall_s"] + time.monotonic() - self.round_started
        expected = (self.step_walls or {}).get(step, 0.0) if step is not None else 0.0
        why = wall_budget_stop(spent, budget, expected)
        if why is None:
            return False
        self.budget_stop = f"{why}, in round {round_number}"
        for c in self.store.candidates(self.run_id, round_number):
            if c["status"] == PENDING:
                self.store.set_candidate(c["id"], NOT_EVALUATED, reason=self.budget_stop)
                self.emit("candidate", {"round": round_number, "name": c["solution_name"], "status": NOT_EVALUATED})
        return True

    # -- evaluation ----------------------------------------------------------------------------------------

    def evaluate_pending(self, round_number: int) -> None:
        halving = self.halving_active()
        if halving is not None:
            pending = [c for c in self.store.candidates(self.run_id, round_number) if c["status"] == PENDING]
            for depth in sorted({c["depth"] for c in pending}):
                self.screen_batch(round_number, depth, [c for c in pending if c["depth"] == depth], halving)
        for c in self.store.candidates(self.run_id, round_number):
            if c["status"] not in UNFINISHED:
                continue
            kind = self.step_kind("evaluate", c)
            if c["status"] == PENDING and self.out_of_wall_time(round_number, kind):
                return
            self.timed_step(kind, lambda c=c: self.evaluate_candidate(round_number, c))

    def step_kind(self, step: str, candidate: dict[str, Any]) -> tuple[str, str]:
        """A step's kind for the wall budget's estimate: screen or evaluate, and the candidate's language (a CUDA
        candidate builds for a minute where a Triton one imports in seconds)."""
        try:
            language = str(self.store.solution(candidate).spec.language)
        except Exception:  # an unreadable solution fails in its step, which says why; the estimate is moot
            language = ""
        return step, language

    def timed_step(self, kind: tuple[str, str], step: Callable[[], Any]) -> Any:
        """Run ``step`` and keep the longest wall time of its kind (step_walls)."""
        started = time.monotonic()
        try:
            return step()
        finally:
            self.note_wall(kind, time.monotonic() - started)

    def note_wall(self, kind: tuple[str, str], seconds: float) -> None:
        """Keep the longest wall time a step of ``kind`` took (step_walls: the wall budget's estimates)."""
        walls = self.step_walls = self.step_walls if self.step_walls is not None else {}
        walls[kind] = max(walls.get(kind, 0.0), seconds)

    def evaluate_candidate(self, round_number: int, c: dict[str, Any]) -> None:
        if c["status"] == EVALUATING and c["submission_id"] is not None:
            status = self.store.submission_status(c["submission_id"])
            if status is not None and status not in NO_VERDICT:  # the harness finished before the kill
                self.store.set_candidate(c["id"], status, reason="adopted the finished harness evaluation")
                self.emit("candidate", {"round": round_number, "name": c["solution_name"], "status": status,
                                        "adopted": True})
                return
        abandoned = c["submission_id"] if c["status"] == EVALUATING else None  # cut short by the kill
        solution = self.store.solution(c)
        self.emit("evaluate", {"round": round_number, "name": c["solution_name"]})
        submission_id = self.evaluator.evaluate(
            solution, on_start=lambda sid, cid=c["id"]: self.store.set_candidate(cid, EVALUATING, submission_id=sid))
        status = self.store.submission_status(submission_id) or "UNKNOWN"
        self.store.set_candidate(c["id"], status, submission_id=submission_id)
        if abandoned is not None and abandoned != submission_id:
            # Reviewers see why it never finished, and where its evaluation went.
            self.store.archive.finish_submission(
                abandoned, SubmissionStatus.INTERRUPTED,
                f"stopped before it finished; run {self.run_id} evaluated the candidate again as submission "
                f"{submission_id}")
        self.emit("candidate", {"round": round_number, "name": c["solution_name"], "status": status})

    # -- promotion -----------------------------------------------------------------------------------------

    def decide_round(self, round_number: int) -> None:
        for c in self.store.candidates(self.run_id, round_number):
            if (c["status"] in (*UNFINISHED, REJECTED, DUPLICATE, NOT_EVALUATED)
                    or self.store.decision(self.run_id, c["id"])):
                continue
            incumbent = self.incumbent()
            records = self.records(c)
            measurement = None
            screened = decisive = None
            baseline: dict[str, float] = {}
            unchanged: set[str] = set()
            if gate_failure(records, self.thresholds) is None:
                incumbent_records = self.records(incumbent)
                baseline = versus_baseline(incumbent_records)
                screened = screen_failure(records, incumbent_records, self.thresholds)
                decisive = decisive_speedups(records, incumbent_records, self.thresholds, self.store.same_card(
                    c.get("submission_id"), incumbent.get("submission_id")))
                if screened is None and decisive is None:
                    unchanged = self.unchanged_workloads(c, incumbent)
                    screened = self.paired_measurement_cut(round_number, c, incumbent, len(unchanged))
                if screened is None and decisive is None:
                    measurement = self.measure_paired(c, incumbent, unchanged)
            decision = screened or decide(records, measurement, self.thresholds, self.regimes, decisive, baseline,
                                          unchanged)
            if decision.promoted:  # only a promotable evaluation at the full audit level makes it stand
                decision = confirm(decision, self.full_evaluation(round_number, c), [r.workload for r in records],
                                   self.thresholds)
            self.record_decision(round_number, c, incumbent, decision, measurement)

    def timing_runs(self) -> int:
        """Harness submissions of one paired measurement: the incumbent's and the candidate's, interleaved."""
        return self.thresholds.min_repeats * len(self.thresholds.paired_order)

    def unchanged_workloads(self, candidate: dict[str, Any], incumbent: dict[str, Any]) -> set[str]:
        """With `pair_changed_only`: the workloads whose regime runs byte-identical code in the two dispatching
        solutions (controller/dispatch.py unchanged_regimes), which a paired measurement need not time."""
        if not self.thresholds.pair_changed_only:
            return set()
        a, b = self.store.solution(incumbent), self.store.solution(candidate)
        same = unchanged_regimes((a.spec.model_dump(mode="json"), {f.path: f.content for f in a.sources}),
                                 (b.spec.model_dump(mode="json"), {f.path: f.content for f in b.sources}))
        unchanged = {w.uuid for w in self.workloads if self.regimes.get(w.uuid) in same}
        # the same code everywhere (a duplicate under another name): nothing to leave out, the rules time it all
        return unchanged if len(unchanged) < len(self.workloads) else set()

    def measure_paired(self, candidate: dict[str, Any], incumbent: dict[str, Any],
                       unchanged: frozenset[str] | set[str] = frozenset()) -> Optional[PairedMeasurement]:
        """The paired measurement (on the workloads not in ``unchanged``), its wall time per timing run kept for the
        wall budget's next estimate (per run it made: a futility stop makes half of them)."""
        started = time.monotonic()
        timed = [w.uuid for w in self.workloads if w.uuid not in unchanged] if unchanged else None
        measurement = self.evaluator.measure_paired(self.store.solution(incumbent), self.store.solution(candidate),
                                                    self.thresholds.min_repeats, self.thresholds.paired_order,
                                                    self.thresholds.ranked_figure, self.thresholds.futility_below,
                                                    timed)
        runs = len(measurement.samples) if measurement is not None and measurement.samples else self.timing_runs()
        size = RUN_START_IN_WORKLOADS + len(timed or self.workloads)
        self.note_wall(("timing run", self.step_kind("evaluate", candidate)[1]),
                       (time.monotonic() - started) / runs / size)
        return measurement

    def paired_measurement_cut(self, round_number: int, candidate: dict[str, Any], incumbent: dict[str, Any],
                               unchanged: int = 0) -> Optional[Decision]:
        """A decision not to promote when the paired measurement (on all but ``unchanged`` workloads) and the
        full-audit evaluation after it would run past the wall budget (run 15: eight timing runs of a dispatching
        solution took 150 s, past the budget and into the outer timeout, and the run lost its report). A candidate
        is never promoted unmeasured; the run stops after this round. None when the measurement fits (or no budget
        is set)."""
        if self.config.budget_wall_s is None or self.round_started is None:
            return None
        if self.evaluator.why_no_timing() is not None:  # no measurement will be made (no GPU): nothing to fit
            return None
        language = self.step_kind("evaluate", candidate)[1]
        walls = self.step_walls or {}
        evaluation = walls.get(("evaluate", language), 0.0)
        per_unit = (walls.get(("timing run", language))
                    or self.first_timing_run(candidate, incumbent, evaluation)
                    / (RUN_START_IN_WORKLOADS + len(self.workloads)))
        expected = paired_estimate_s(per_unit, self.timing_runs(), len(self.workloads) - unchanged, evaluation)
        spent = self.store.spend(self.run_id)["wall_s"] + time.monotonic() - self.round_started
        if wall_budget_stop(spent, self.config.budget_wall_s, expected) is None:
            return None
        why = wall_budget_stop(spent, self.config.budget_wall_s) or (
            f"budget: {spent:.0f} s wall time spent of {self.config.budget_wall_s:.0f} s; the paired measurement "
            f"({self.timing_runs()} timing runs) and the full-audit evaluation would not fit (~{expected:.0f} s)")
        self.budget_stop = f"{why}, in round {round_number}"
        return Decision(NOT_PROMOTED, BUDGET_RULE, (f"{why}: not promoted unmeasured",),
                        {"expected_s": round(expected)})

    def first_timing_run(self, candidate: dict[str, Any], incumbent: dict[str, Any], longest: float) -> float:
        """A first measurement's wall per timing run: the longer of the two solutions' own evaluations, as the
        archive timed them (a timing run is one without the audits; a resumed run knows them too), else the longest
        evaluation so far (run 16: the naive kernel's, 45 s, where the dispatches being measured took 25-30 s)."""
        own = [self.store.submission_wall(c.get("submission_id")) for c in (candidate, incumbent)]
        return max(own) if None not in own else longest

    def full_evaluation(self, round_number: int, candidate: dict[str, Any]) -> FullEvaluation:
        """Evaluate ``candidate`` again at the full audit level; what the harness archived of it."""
        self.emit("evaluate_full", {"round": round_number, "name": candidate["solution_name"]})
        submission_id = self.evaluator.evaluate_full(self.store.solution(candidate))
        submission = self.store.archive.submission(submission_id)
        scores = submission.get("scores") or {}
        full = FullEvaluation(submission_id, (submission.get("options") or {}).get("audit_level"),
                              tuple(self.store.eval_records(submission_id, self.regimes,
                                                            self.thresholds.ranked_figure)),
                              tuple(scores.get("promotion_blockers") or ()))
        self.emit("full_audit", {"round": round_number, "name": candidate["solution_name"],
                                 "submission_id": submission_id, "status": submission.get("status")})
        return full

    def record_decision(self, round_number: int, candidate: dict[str, Any], incumbent: dict[str, Any],
                        decision: Decision, measurement: Optional[PairedMeasurement]) -> None:
        exported = None
        if decision.promoted:
            exported = str(export_solution(self.store.archive.folder, self.store.solution(candidate)))
        details = {**decision.details, "measurement": measurement.to_json() if measurement else None}
        self.store.add_decision(self.run_id, round_number, candidate["id"], incumbent["id"], decision.verdict,
                                decision.rule, list(decision.reasons), details, exported)
        self.emit("decision", {"round": round_number, "name": candidate["solution_name"],
                               "verdict": decision.verdict, "reasons": list(decision.reasons)})
