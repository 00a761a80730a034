"""The harness behind a small port: what the loop asks of an evaluation, and the harness Session that answers."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional, Protocol

from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.pipeline.evaluate import Session, SubmitOptions
from harness.data.schema import Solution

from .promote import PairedMeasurement, PairedSample, futility_stop, ranked_latency


class Evaluator(Protocol):
    def evaluate(self, solution: Solution, on_start: Callable[[int], None]) -> int: ...

    def evaluate_full(self, solution: Solution) -> int: ...

    # Optional: ``screen(solution, workloads, iterations, trials) -> submission id``, a short run for successive
    # halving (controller/screening.py). An evaluator without it evaluates every candidate in full.

    def why_no_timing(self) -> Optional[str]: ...

    def measure_paired(self, incumbent: Solution, candidate: Solution, repeats: int,
                       order: str = "ABBA", figure: str = "official", stop_below: Optional[float] = None,
                       workloads: Optional[list[str]] = None) -> Optional[PairedMeasurement]: ...

    def close(self) -> None: ...


def paired_runs(timing_run: Callable[[str], Optional[tuple[dict[str, float], int]]], repeats: int, order: str,
                stop_below: Optional[float] = None) -> Optional[PairedMeasurement]:
    """``repeats`` x ``order`` timing runs (``timing_run(role) -> (workload -> latency, submission id)``, None when a
    run cannot be timed or fails: then the whole measurement is None), stopping early where ``futility_stop`` says."""
    samples: list[PairedSample] = []
    for repeat in range(repeats):
        for role in order:
            run = timing_run(role)
            if run is None:
                return None
            samples.append(PairedSample(role, repeat, run[0], run[1]))
        stopped = futility_stop(samples, order, repeats, stop_below)
        if stopped:
            return PairedMeasurement(order, tuple(samples), stopped)
    return PairedMeasurement(order, tuple(samples))


class HarnessEvaluator:
    """One harness Session for the run: every candidate is a harness submission, archived by the harness."""

    def __init__(self, dataset: Dataset, archive: Archive, options: SubmitOptions):
        self.dataset, self.archive, self.options = dataset, archive, options
        self._session: Optional[Session] = None
        self._on_start: Optional[Callable[[int], None]] = None

    @property
    def session(self) -> Session:
        if self._session is None:
            self._session = Session(self.dataset, self.archive, self.options, progress=self._progress)
        return self._session

    def _progress(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "start" and self._on_start is not None:
            self._on_start(int(data["submission_id"]))

    def evaluate(self, solution: Solution, on_start: Callable[[int], None]) -> int:
        self._on_start = on_start
        try:
            return self.session.submit(solution).submission_id
        finally:
            self._on_start = None

    @contextmanager
    def _on(self, workloads: Optional[list[str]]) -> Iterator[Session]:
        """The session, its submissions limited to ``workloads`` meanwhile (None or empty: the run's)."""
        session = self.session
        if not workloads:
            yield session
            return
        saved = session.options.workloads
        session.options.workloads = list(workloads)
        try:
            yield session
        finally:
            session.options.workloads = saved

    def evaluate_on(self, solution: Solution, workloads: Optional[list[str]], budget_s: Optional[float] = None) -> int:
        """A draft from a tool conversation, on the named workloads (None: the run's), fast audits. Its submission
        is archived like any other; it is not a candidate until the model submits it. ``budget_s``: what its
        request's wall time has left: the harness stops the draft's worker there (Session.submit's ``budget_s``)."""
        with self._on(workloads) as session:
            return session.submit(solution, **({} if budget_s is None else {"budget_s": budget_s})).submission_id

    def screen(self, solution: Solution, workloads: Optional[list[str]], iterations: int, trials: int) -> int:
        """A screening run of successive halving: correctness on ``trials`` seeds and a timing run of ``iterations``
        per trial, audits off (never promotable by itself), on ``workloads`` (None: the run's)."""
        with self._on(workloads) as session:
            return session.submit(solution, audit_level="off", iterations=iterations, trials=trials).submission_id

    def evaluate_full(self, solution: Solution) -> int:
        """The evaluation a promotion rests on: every audit, run-time attribution included."""
        return self.session.submit(solution, audit_level="full").submission_id

    def why_no_timing(self) -> Optional[str]:
        if not self.session.has_gpu:
            return "no GPU on this host"
        if not self.options.timing:
            return "timing switched off"
        return None

    def measure_paired(self, incumbent: Solution, candidate: Solution, repeats: int,
                       order: str = "ABBA", figure: str = "official", stop_below: Optional[float] = None,
                       workloads: Optional[list[str]] = None) -> Optional[PairedMeasurement]:
        """Re-submit incumbent (A) and candidate (B) interleaved in one session (one GPU allocation); each
        workload's ``figure`` (controller.promote.ranked_latency) is what the samples hold. ``stop_below``: stop
        after a repeat whose paired mean speedup so far is below it (controller.promote.futility_stop).
        ``workloads``: only these (None: the run's). None where the harness cannot time (no GPU): promotion then
        says so and promotes nothing."""
        if self.why_no_timing() is not None:
            return None

        def timing_run(role: str) -> Optional[tuple[dict[str, float], int]]:
            # timing runs: both were audited in their own evaluations (an "off" run is never promotable
            # by itself; promotion reads the candidate's audited evaluation)
            with self._on(workloads) as session:
                result = session.submit(incumbent if role == "A" else candidate, audit_level="off")
            if result.timing_unavailable_reason or not result.all_passed:
                return None
            return ({w.workload: ranked_latency(w.latency_ms, getattr(w, "kernel_latency_ms", None), figure)
                     for w in result.workloads if w.evaluated and w.latency_ms is not None}, result.submission_id)

        return paired_runs(timing_run, repeats, order, stop_below)

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
