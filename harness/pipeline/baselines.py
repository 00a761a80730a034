"""The FlashInfer baselines of a definition, beside a session's candidates.

Each baseline solution (the dataset's ``solutions/baseline/``) runs in a worker of its own, kept for the session,
through the same pipeline as a candidate (correctness, official timing) but without audits. A figure is measured
once per card, toolchain and workload and kept in the archive; a card of the same model reuses another card's
device-bound figures once a spot check on this card agrees (``scores.carried_baseline_reusable``,
``scores.baseline_spot_check_holds``). A failure is archived with its message
and log and never reused as a figure. A baseline that runs past the workload's time limit (a library's JIT build
on a fresh host can take longer than any workload), or fails the same way on two workloads in a row (a library
that cannot run on this host: FlashInfer's GDN kernels without CuTe-DSL fail on every call), is not started again
in this session: each later workload lists it as not run, with the reason, instead of paying the limit, or a
worker's start, again on every workload.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from ..measure import scores
from ..archive.database import Archive
from ..measure.correctness import Tolerance
from ..data.dataset import Dataset, EvalPreset
from ..data.results import WorkloadResult
from ..sandbox.runner import WorkerProcess
from ..data.schema import Definition, EvaluationStatus, Solution, Workload
from ..data.statuses import SubmissionStatus
from .baselines_ahead import BaselinesAhead
from .trusted import TrustedReference
from .worker_options import FLASHINFER_CACHE_ENV, flashinfer_cache  # noqa: F401  (callers import them from here)

# (solution, definition, timeout) -> (worker, None) or (None, the failed start as a WorkloadResult)
StartWorker = Callable[[Solution, Definition, float], tuple[Optional[WorkerProcess], Optional[WorkloadResult]]]
# (worker, definition, workload, label, preset, tolerance, timeout) -> the workload's result, without audits
EvaluateWorkload = Callable[[WorkerProcess, Definition, Workload, str, EvalPreset, Tolerance, float], WorkloadResult]


def best_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The faster of the baselines that passed, per figure (official and kernel), and why the others count not."""
    passed = [r for r in runs if r["status"] == EvaluationStatus.PASSED.value and r["official_ms"]]
    failures = [f"{r['solution']}: {r['status']} {r.get('message') or ''}".strip() for r in runs
                if r["status"] != EvaluationStatus.PASSED.value]
    if not passed:
        return {"runs": runs, "official_ms": None, "kernel_ms": None, "failures": failures}
    best_official = min(passed, key=lambda r: r["official_ms"])
    best_kernel = min(passed, key=lambda r: r["kernel_ms"] or r["official_ms"])
    return {"runs": runs, "official_ms": best_official["official_ms"], "official_solution": best_official["solution"],
            "official_busy_ms": best_official.get("busy_ms"),
            "kernel_ms": best_kernel["kernel_ms"] or best_kernel["official_ms"],
            "kernel_solution": best_kernel["solution"], "failures": failures}


def spot_check_notice(solution: str, label: str, carried: dict[str, Any], measured: dict[str, Any],
                      holds: bool) -> str:
    """One line for the submission's notices: a spot check of another card's baseline figures, both figures."""
    figures = ", ".join(f"{k.removesuffix('_ms')} {measured.get(k) or 0:.4g} ms here vs {carried.get(k) or 0:.4g} "
                        "carried" for k in ("official_ms", "kernel_ms"))
    verdict = ("held: its device-bound figures from the other card are used" if holds else
               f"did not hold (tolerance {scores.SPOT_CHECK_TOLERANCE:.0%}): every figure of it is measured "
               "on this card")
    return f"carried baseline {solution}: spot check on {label} ({figures}) {verdict}"


class Baselines:
    def __init__(self, dataset: Dataset, archive: Archive, trusted: TrustedReference,
                 carried_trust: dict[tuple[str, str], Optional[bool]], start: StartWorker,
                 evaluate: EvaluateWorkload, ahead: Optional[BaselinesAhead] = None):
        self.dataset, self.archive, self.trusted, self._carried_trust = dataset, archive, trusted, carried_trust
        self._start, self._evaluate = start, evaluate
        self.ahead = ahead  # baselines started beside the candidate's first workload (harness.pipeline.baselines_ahead)
        self.workers: dict[str, Optional[WorkerProcess]] = {}  # solution hash -> its worker (None: failed start)
        self._start_failure: dict[str, Optional[WorkloadResult]] = {}
        self.given_up: dict[str, str] = {}  # solution hash -> why it is not run again in this session
        self._last_failure: dict[str, tuple[str, str]] = {}  # solution hash -> its last (status, message)
        self.spot_checks: list[str] = []  # what each spot check of carried figures found, for the notices
        self._archive_read: set[tuple[str, str]] = set()  # (baseline, definition): earlier spot checks looked up

    def to_run(self, definition: Definition, workloads: list[Workload]) -> list[Solution]:
        """The baselines that will run in this submission: no figure of theirs on this card for some workload, not
        started in this session yet (their processes may then be launched ahead)."""
        return [sol for sol in self.dataset.baselines(definition.name)
                if sol.content_hash not in self.workers and sol.content_hash not in self.given_up
                and any(self._needs_run(sol, definition, w) for w in workloads)]

    def _needs_run(self, sol: Solution, definition: Definition, workload: Workload) -> bool:
        """No figure of this card, and none from another card that may stand for it (device-bound, trusted)."""
        t = self.trusted
        keys = (t.toolchain_key, definition.name, workload.uuid, sol.content_hash)
        if self.archive.baseline_run(t.gpu_key, *keys) is not None:
            return False
        carried = self.archive.baseline_run(t.gpu_key, *keys, gpu_model=t.gpu_model)
        return not (carried is not None and scores.carried_baseline_reusable(carried) and self.trust(sol, definition))

    def trust(self, sol: Solution, definition: Definition) -> Optional[bool]:
        """Do another card's figures of ``sol`` hold on this one? This session's spot check, else the spot checks
        earlier sessions made on this card (the archive holds both figures of a workload: this card's, and a
        device-bound one of another card of the model; all must agree), else None: not checked yet. Read from the
        archive, a spot check is made once per card, not once per session (a worker's start and a workload's
        timing, on every warm `harness submit`)."""
        key = ("baseline", sol.content_hash)
        if self._carried_trust.get(key) is not None or (sol.content_hash, definition.name) in self._archive_read:
            return self._carried_trust.get(key)
        self._archive_read.add((sol.content_hash, definition.name))  # once per session: two queries per workload
        t = self.trusted
        verdicts = []
        for workload in self.dataset.workloads_for(definition.name):
            keys = (t.toolchain_key, definition.name, workload.uuid, sol.content_hash)
            own = self.archive.baseline_run(t.gpu_key, *keys)
            other = own and self.archive.baseline_run(t.gpu_key, *keys, gpu_model=t.gpu_model, other_cards=True)
            if other and scores.carried_baseline_reusable(other):
                verdicts.append(scores.baseline_spot_check_holds(other, own))
        if verdicts:
            self._carried_trust[key] = all(verdicts)
        return self._carried_trust.get(key)

    def figures(self, definition: Definition, workload: Workload, preset: EvalPreset, tol: Tolerance,
                timeout_s: float) -> Optional[dict[str, Any]]:
        """The baselines on this workload (``best_of``), or None where the definition has none."""
        solutions = self.dataset.baselines(definition.name)
        if not solutions:
            return None
        t = self.trusted
        runs = []
        for sol in solutions:
            keys = (t.toolchain_key, definition.name, workload.uuid, sol.content_hash)
            cached = self.archive.baseline_run(t.gpu_key, *keys)
            carried = None if cached else self.archive.baseline_run(t.gpu_key, *keys, gpu_model=t.gpu_model)
            # another card's figure stands for this one's only where it is device time, and once a spot check on
            # such a workload agrees; launch-bound figures are this host's to measure
            reusable = carried is not None and scores.carried_baseline_reusable(carried)
            trust = self.trust(sol, definition) if reusable else None
            if cached is None and reusable and trust:
                cached = carried
            if cached is None:
                cached = self._measure(sol, definition, workload, preset, tol, timeout_s)
                if reusable and trust is None and cached["status"] == EvaluationStatus.PASSED.value:
                    holds = scores.baseline_spot_check_holds(carried, cached)
                    self._carried_trust[("baseline", sol.content_hash)] = holds
                    self.spot_checks.append(spot_check_notice(sol.name, self.dataset.label(workload), carried,
                                                              cached, holds))
            runs.append({"solution": sol.name, **cached})
        return best_of(runs)

    def _give_up_if_hopeless(self, sol: Solution, workload: Workload, wr: WorkloadResult, timeout_s: float) -> None:
        key = sol.content_hash
        if wr.status == EvaluationStatus.PASSED.value:
            self._last_failure.pop(key, None)
            return
        label = self.dataset.label(workload)
        if wr.status == EvaluationStatus.TIMEOUT.value:
            self.given_up[key] = f"timed out on {label} in this session ({timeout_s:.0f} s limit)"
            return
        failure = (wr.status, wr.message)
        if self._last_failure.get(key) == failure:
            self.given_up[key] = (f"failed the same way on two workloads in a row, the last {label}: "
                                  f"{wr.status} {wr.message[:300]}")
        self._last_failure[key] = failure

    def _measure(self, sol: Solution, definition: Definition, workload: Workload, preset: EvalPreset,
                 tol: Tolerance, timeout_s: float) -> dict[str, Any]:
        if sol.content_hash in self.given_up:  # not archived: a later session (a warm JIT cache) tries again
            return {"status": SubmissionStatus.SKIPPED.value, "official_ms": None, "kernel_ms": None,
                    "message": f"not run: {self.given_up[sol.content_hash]}", "log_blob": None}
        worker = self.workers.get(sol.content_hash)
        if sol.content_hash not in self.workers or (worker is not None and not worker.alive):
            taken = self.ahead.take(sol.content_hash) if self.ahead is not None else None
            if taken is not None and (taken[1] is not None or (taken[0] is not None and taken[0].alive)):
                worker, failure = taken
            else:
                worker, failure = self._start(sol, definition, timeout_s)
            self.workers[sol.content_hash] = worker
            self._start_failure[sol.content_hash] = failure
        if worker is None:
            failure = self._start_failure.get(sol.content_hash)
            run = {"status": failure.status if failure else EvaluationStatus.COMPILE_ERROR.value,
                   "official_ms": None, "kernel_ms": None,
                   "message": f"build: {failure.message if failure else 'failed'}"[:2000],
                   "log": failure.log if failure else ""}
            if failure is not None and failure.status == EvaluationStatus.TIMEOUT.value:
                self.given_up[sol.content_hash] = f"its start ran out of time in this session ({timeout_s:.0f} s limit)"
        else:
            wr = self._evaluate(worker, definition, workload, self.dataset.label(workload), preset, tol, timeout_s)
            run = {"status": wr.status, "official_ms": wr.latency_ms, "kernel_ms": wr.kernel_latency_ms,
                   "busy_ms": wr.gpu_busy_ms,
                   "message": wr.message[:2000] or None, "log": wr.log}
            if not worker.alive or wr.status in (EvaluationStatus.RUNTIME_ERROR.value, EvaluationStatus.TIMEOUT.value):
                worker.stop()  # a fresh process for the next workload
                self.workers.pop(sol.content_hash, None)
            self._give_up_if_hopeless(sol, workload, wr, timeout_s)
        log = run.pop("log", "")
        failed = log and run["status"] != EvaluationStatus.PASSED.value
        run["log_blob"] = self.archive.put_blob(log, "log") if failed else None
        t = self.trusted
        self.archive.add_baseline_run({"gpu_key": t.gpu_key, "gpu_model": t.gpu_model, "toolchain": t.toolchain_key,
                                       "definition": definition.name, "workload_uuid": workload.uuid,
                                       "solution_hash": sol.content_hash, "solution_name": sol.name, **run})
        return run
