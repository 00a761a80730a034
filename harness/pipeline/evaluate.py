"""The evaluation pipeline: static checks -> build -> correctness -> timing -> archive.

A ``Session`` owns the trusted reference worker and its cache of reference outputs, so several
solutions (and the controller's thousands of candidates) reuse them. Each solution gets its own
candidate worker, built once and reused for all workloads; a worker that crashes, hangs or breaks its
CUDA context is replaced by a fresh one for the next workload. The audit steps around each evaluation
(static gate, precision, recheck, escalation, attribution, instruction proof) are in harness/audits/session_audits.py;
one workload's trials and timing in harness/pipeline/workload_evaluation.py; a timed workload's speedups and roofline
verdict in harness/pipeline/comparison.py; a submission's status, notices, promotion blockers and archived scores in
harness/pipeline/submission_summary.py; starting a candidate's worker (and the spare launched ahead) in
harness/pipeline/candidate_workers.py; the session's settings (``SubmitOptions``) in harness/data/options.py.
"""

from __future__ import annotations

import concurrent.futures
import time
import random
import secrets
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from ..archive.database import Archive
from ..archive.storage import ArchiveStorageError, storage_failure, storage_where
from ..measure import scores
from ..audits.thresholds import policy_thresholds
from .baselines import Baselines
from .baselines_ahead import BaselinesAhead
from ..audits.verdicts import AuditConfig
from ..sandbox.build import static_signature_problem
from ..sandbox.extension_cache import ExtensionCache
from .candidate_workers import CandidateWorkers
from .comparison import place_in_context
from ..measure.correctness import Tolerance
from ..data.dataset import Dataset, EvalPreset
from ..families import family_for
from ..measure.memory import tensor_bytes
from ..data.options import SubmitOptions
from .phases import PhaseClock
from ..sandbox.runner import WorkerOptions, WorkerProcess
from ..data.schema import Definition, EvaluationStatus, Language, Solution, Workload, dump_json
from ..sandbox.isolation import load_sandbox_policy
from ..sandbox.stale import remove_stale
from .trusted import (ReferenceFailed, SandboxUnavailable, TrustedReference,  # noqa: F401 (the CLI's errors)
                      TrustedSettings)
from ..data.results import SubmissionResult, WorkloadResult
from ..audits.session_audits import SessionAudits
from .submission_summary import (
    archived_scores,
    cpu_skip_message,
    cut_short,
    opened_result,
    settle,
    storage_outcome,
    unrun_result,
)
from .candidate_run import CandidateRun
from .workload_evaluation import WorkloadEvaluation
from .worker_options import worker_options_for

Progress = Callable[[str, dict[str, Any]], None]

# A solution that runs out of time on this many workloads in a row (each in a fresh process) is not run on the
# rest: they are SKIPPED with the reason, and the submission is a TIMEOUT, instead of costing the limit each.
TIMEOUTS_IN_A_ROW = 2


def input_bytes(definition: Definition, workload: Workload) -> int:
    return tensor_bytes(definition, definition.inputs, workload)


def builds_extension(solution: Solution) -> bool:
    """A Python solution that builds native code when imported (torch.utils.cpp_extension load/load_inline,
    tvm_ffi.cpp), as the static gate tells one (harness.audits.static_gate ``builds_native``)."""
    return any(s.path.endswith(".py") and ("cpp_extension" in s.content or "tvm_ffi" in s.content)
               for s in solution.sources)


def cpu_size_rule(solution: Solution, definition: Definition, workload: Workload, options: SubmitOptions,
                  has_gpu: bool) -> tuple[Optional[str], Optional[str]]:
    """(deferred, skip): why a workload is too large to run on a host without a GPU. The size rule is the Triton
    interpreter's: a CUDA solution is compiled on this host (nvcc, for sm_90a) and then skipped for want of a GPU,
    whatever its inputs weigh, so its build is checked. A Python solution that builds an extension is built first
    too: where the build says it cannot run here (a CUDA extension), that is the workload's reason; the size reason
    (``deferred``) holds only where the extension does run here."""
    if has_gpu or options.all_workloads_on_cpu or solution.spec.language == Language.cuda:
        return None, None
    skip = cpu_skip_message(input_bytes(definition, workload), options.cpu_max_input_mib,
                            family_for(definition.op_type).serial_steps(definition, workload),
                            options.cpu_max_serial_steps)
    return (skip, None) if skip and builds_extension(solution) else (None, skip)


def definition_scores(workloads: list[WorkloadResult]) -> dict[str, Optional[float]]:
    """The definition's scores (harness.measure.scores), without the list of workloads a partial one misses."""
    return scores.definition_scores(workloads)[0]


def short_run(iterations: Optional[int], trials: Optional[int]) -> dict[str, int]:
    """One submission's shorter run (the controller's screening runs of successive halving): timed iterations per
    trial and correctness trials (seeds) instead of the preset's, as overrides of the candidate's preset; archived
    in the submission's options as ``short_run``. Baselines and the reference are still measured with the preset."""
    return {k: n for k, n in (("iterations", iterations), ("num_trials", trials)) if n}


class Session(WorkloadEvaluation, SessionAudits, CandidateRun):
    """Trusted state shared by submissions: the reference worker, its outputs, the environment."""

    def __init__(self, dataset: Dataset, archive: Archive, options: Optional[SubmitOptions] = None,
                 progress: Optional[Progress] = None):
        self.dataset = dataset
        self.archive = archive
        self.archive.close_abandoned()  # submissions a killed harness left RUNNING
        # and the private folders and cgroups of its workers: of processes that no longer run (never those of this
        # process, such as the workers harness submit launched early: harness.pipeline.early_workers)
        remove_stale()
        self.options = options or SubmitOptions()
        self.sandbox_policy = self.options.sandbox_policy or load_sandbox_policy(dataset.root)
        self.progress = progress or (lambda kind, data: None)
        # Seeds the candidate cannot predict before it runs: the archive's secret (so the reference's outputs
        # of earlier sessions can be reused), or this session's own.
        archive_secret = None if self.options.fresh_seeds else archive.seed_secret()
        self._secret = archive_secret or secrets.token_bytes(16)
        self.audit_config = AuditConfig.for_level(self.options.audit_level)
        self._rng = random.Random(secrets.randbits(64))  # secret order of recheck calls
        # (kind, definition) -> do figures carried from another card of this model hold here? None: not checked
        self._carried_trust: dict[tuple[str, str], Optional[bool]] = {}
        self.clock = PhaseClock()  # where the time goes: worker start, build, reference, ...
        self.worker_spent: dict[str, float] = {}  # ...and inside the workers: "role.op.step" -> s (WorkerOptions)
        self.phase_s = self.clock.totals
        self._phase = self.clock.phase
        extensions = None if self.options.fresh_builds else ExtensionCache(Path(archive.folder) / "cache" /
                                                                           "extensions")
        self.candidates = CandidateWorkers(self.options, self._worker_options, self._phase, extensions)
        self.trusted = TrustedReference(
            dataset, archive, TrustedSettings(require_sandbox=self.options.require_sandbox,
                                              sandbox=self.options.sandbox,
                                              reference_timing=self.options.reference_timing,
                                              reuse_outputs=archive_secret is not None),
            self._worker_options, self._phase, self.candidates.launch_first_spare, self._carried_trust)
        self.baselines = Baselines(
            dataset, archive, self.trusted, self._carried_trust,
            lambda sol, definition, timeout_s: self._start_candidate(sol, definition, timeout_s, role="baseline"),
            lambda *args: self._evaluate_workload(*args, run_audits=False, baseline=True),
            BaselinesAhead(self.candidates, dataset))

    # -- the trusted reference worker ---------------------------------------------------------------

    def _worker_options(self, role: str, cpu_only: Optional[bool] = None) -> WorkerOptions:
        return worker_options_for(role, self.options, self.sandbox_policy, self.dataset.root, self.archive.folder,
                                  not self.has_gpu if cpu_only is None else cpu_only, spent=self.worker_spent)

    @property
    def has_gpu(self) -> bool:
        # Asked of the reference worker: this process never initialises CUDA, so nothing a candidate
        # does to a GPU context can reach the harness.
        return self.trusted.has_gpu

    def reference_worker(self) -> WorkerProcess:
        return self.trusted.worker()

    @property
    def environment(self) -> dict[str, Any]:
        return self.trusted.environment

    @environment.setter
    def environment(self, value: dict[str, Any]) -> None:
        self.trusted.environment = value

    @property
    def sandbox_level(self) -> str:
        return self.trusted.sandbox_level

    @property
    def gpu_key(self) -> str:
        return self.trusted.gpu_key

    @property
    def gpu_model(self) -> str:
        return self.trusted.gpu_model

    @property
    def toolchain_key(self) -> str:
        return self.trusted.toolchain_key

    def reference_outputs(self, definition: Definition, workload: Workload,
                          seed: int, keep: bool = True) -> tuple[str, dict[str, torch.Tensor]]:
        return self.trusted.outputs(definition, workload, seed, keep)

    def oracle_outputs(self, definition: Definition, workload: Workload, seed: int) -> dict[str, torch.Tensor]:
        return self.trusted.oracle(definition, workload, seed)

    def reference_latency(self, definition: Definition, workload: Workload, seeds: list[int],
                          preset: EvalPreset, baseline_figure: Optional[bool] = None) -> Optional[float]:
        # Without a library baseline figure on this workload (DSA on sm_90 has none; MoE's stand-in where its
        # module is not built on this host) the reference is the only yardstick a score can have: it is timed
        # whenever baselines are asked for, not only with --time-reference.
        # ``baseline_figure`` None: whether the definition has a library baseline at all.
        if baseline_figure is None:
            baseline_figure = bool(self.dataset.baselines(definition.name))
        measure = self.options.baselines and not baseline_figure
        return self.trusted.latency(definition, workload, seeds, preset, measure=measure)

    def ceilings(self):
        return self.trusted.ceilings()

    def baseline(self, definition: Definition, workload: Workload, preset: EvalPreset, tol: Tolerance,
                 timeout_s: float) -> Optional[dict[str, Any]]:
        """The FlashInfer baselines on this workload (harness.pipeline.baselines)."""
        return self.baselines.figures(definition, workload, preset, tol, timeout_s)

    def _compare(self, definition: Definition, workload: Workload, preset: EvalPreset, tol: Tolerance,
                 timeout_s: float, wr: WorkloadResult) -> None:
        """Put a timed result in context: the reference, FlashInfer and the hardware floor
        (harness.pipeline.comparison); the figures come from the session's workers. Called after the workload's
        official timing, so the baselines started ahead have ended (``_quiet_host``)."""
        with self._phase("baselines"):
            fi = self.baseline(definition, workload, preset, tol, timeout_s) if self.options.baselines else None
        reference_ms = self.reference_latency(definition, workload, self._seeds(workload, preset), preset,
                                              baseline_figure=bool(fi and fi.get("official_ms")))
        cost = family_for(definition.op_type).workload_cost(definition, workload, root=self.dataset.root)
        with self._phase("ceilings"):
            ceilings = self.ceilings()
        place_in_context(wr, reference_ms, fi, cost, ceilings, self.audit_config.roofline_margin)

    def close(self) -> None:
        """Stop every worker of the session, side by side: each tears down a CUDA context (seconds on a GPU)."""
        self.baselines.ahead.close()
        self.candidates.close()
        workers = [w for w in (*self.baselines.workers.values(), self.trusted.process) if w is not None]
        self.baselines.workers.clear()
        self.trusted.process = None
        if len(workers) > 1:
            with concurrent.futures.ThreadPoolExecutor(len(workers)) as pool:
                list(pool.map(lambda w: w.stop(), workers))
        elif workers:
            workers[0].stop()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- one solution -------------------------------------------------------------------------------

    def submit(self, solution: Solution, *, audit_level: Optional[str] = None, iterations: Optional[int] = None,
               trials: Optional[int] = None, budget_s: Optional[float] = None) -> SubmissionResult:
        """Evaluate ``solution`` on the session's workloads. ``audit_level`` overrides the session's for this
        submission only (the controller's paired timing runs use "off": the candidate's audits were run on its own
        evaluation, and it cannot tell the levels apart while timed); ``iterations``/``trials``: ``short_run``;
        ``budget_s``: the submission's wall time from now (a controller's draft: what its request has left), where
        its worker is killed (``CandidateRun``: the workload a TIMEOUT that says so, the rest SKIPPED)."""
        started, phases_before, steps_before = time.perf_counter(), dict(self.phase_s), dict(self.worker_spent)
        self._budget = None if budget_s is None else (budget_s, time.monotonic() + budget_s)
        session_config = self.audit_config
        try:
            # the level (the session's, or this submission's) with the definition's thresholds from its policy
            definition = self.dataset.definition(solution.definition)
            overrides = policy_thresholds(self._policy_document(), definition.name, definition.op_type)
        except (KeyError, ValueError):
            overrides = {}  # an unknown definition is reported by _submit; a bad policy by the static gate
        self.audit_config = AuditConfig.for_level(audit_level or session_config.level, **overrides)
        self._open_submission: Optional[int] = None
        try:
            result = self._submit(solution, short_run(iterations, trials))
        except BaseException as err:
            submission_id, closed = self._open_submission, self._close_cut_short(err)
            storage = storage_failure(err)
            if storage is not None:  # a full disk: one line for the command, with what became of the record
                raise ArchiveStorageError(storage_outcome(storage, storage_where(err, self.archive.folder),
                                                          submission_id, closed)) from err
            raise
        finally:
            self.audit_config, self._budget = session_config, None
        result.wall_s = time.perf_counter() - started
        result.phases_s = self.clock.since(phases_before)
        steps = {k: round(v - steps_before.get(k, 0.0), 3) for k, v in self.worker_spent.items()}
        result.worker_steps_s = dict(sorted(((k, v) for k, v in steps.items() if v > 0), key=lambda kv: -kv[1]))
        return result

    def _close_cut_short(self, err: BaseException) -> bool:
        """A submission the harness could not finish (Ctrl-C, SIGTERM, a harness bug, a full disk) is archived as
        such, with its finished workloads, rather than left RUNNING for ever; whether that could be written."""
        if self._open_submission is None:
            return True
        status, message = cut_short(err)
        try:
            self.archive.finish_submission(self._open_submission, status, message)
            return True
        except Exception:  # the archive itself may be what failed; the original error matters more
            return False
        finally:
            self._open_submission = None

    def _submit(self, solution: Solution, short_run: Optional[dict[str, int]] = None) -> SubmissionResult:
        definition = self.dataset.definition(solution.definition)
        preset = self.dataset.preset(definition.name)
        run_preset = preset.model_copy(update=short_run) if short_run else preset  # the candidate's own runs
        timeout_s = self.options.timeout_s or preset.timeout_s
        workloads = self.dataset.workloads_for(definition.name, self.options.workloads)
        if not workloads:
            raise ValueError(f"definition {definition.name} has no workloads in {self.dataset.root}")
        tol = Tolerance(preset.atol, preset.rtol, preset.required_matched_ratio, preset.allow_matching_nonfinite)

        self.reference_worker()  # fixes the environment before anything is archived
        env_id = self.archive.put_environment(self.environment)
        self.archive.put_solution(dump_json(solution), solution.content_hash)
        library_is_own = self.dataset.is_baseline(solution)  # the dataset's own FlashInfer baselines
        static_findings = self._static_gate(solution, definition, library_is_own)
        submission_id = self.archive.start_submission(
            solution.content_hash, solution.name, definition.name, solution.author,
            {"workloads": [w.uuid for w in workloads], "timeout_s": timeout_s, "preset": preset.model_dump(),
             "gpu": self.has_gpu, "audit_level": self.audit_config.level, "sandbox": self.sandbox_level,
             "static_gate": {"passed": not any(f["severity"] == "error" for f in static_findings),
                             "findings": static_findings}, **({"short_run": short_run} if short_run else {})}, env_id)
        self._open_submission = submission_id
        result = opened_result(submission_id, solution.name, definition.name, static_findings, self.sandbox_level,
                               self.has_gpu, self.options.timing)
        self.progress("start", {"submission_id": submission_id, "solution": solution.name,
                                "definition": definition.name, "workloads": len(workloads)})

        static_problem = static_signature_problem(solution, definition)
        if self.options.baselines and self.has_gpu and not static_problem:
            # Their starts, builds and first calls (a library's JIT compile) beside the candidate's first workload;
            # the dataset's own baseline as the candidate only launched ahead, for the candidate to take.
            to_run = self.baselines.to_run(definition, workloads)
            if library_is_own and any(b.content_hash == solution.content_hash for b in to_run):
                self.candidates.launch_ahead(solution.content_hash, "baseline")
            self.baselines.ahead.begin([b for b in to_run if b.content_hash != solution.content_hash],
                                       definition, timeout_s)
        candidate: Optional[WorkerProcess] = None
        build_failure: Optional[WorkloadResult] = None
        timed_out: list[str] = []  # the labels of the workloads that ran out of time, in a row
        try:
            for workload in workloads:
                phases_before = dict(self.phase_s)
                label = self.dataset.label(workload)
                self.progress("workload", {"label": label, "uuid": workload.uuid})
                deferred, skip = cpu_size_rule(solution, definition, workload, self.options, self.has_gpu)
                if len(timed_out) >= TIMEOUTS_IN_A_ROW:  # each more would cost the whole limit again
                    skip = (f"not run: the solution ran out of time on {' and '.join(timed_out)} in a row "
                            f"(each in a fresh process, {timeout_s:.0f} s limit)")
                skip = self._past_budget() or skip
                wr = unrun_result(workload, label, skip, static_problem, build_failure)
                if wr is None:
                    if candidate is None or not candidate.alive:
                        first_build = candidate is None and build_failure is None and not result.workloads
                        # The dataset's own baseline, byte for byte, runs as its baseline workers do: with the
                        # session's FlashInfer JIT cache, not compiling FlashInfer again in a private folder.
                        candidate, failure = self._start_candidate(
                            solution, definition, timeout_s, role="baseline" if library_is_own else "candidate",
                            deadline=self._budget[1] if self._budget else None, result=result)
                        if candidate is not None and first_build and candidate.build_log.strip():
                            from ..archive.views import add_artifact

                            add_artifact(self.archive, submission_id, "build_log", candidate.build_log)
                        if failure is not None:
                            build_failure = failure
                            wr = WorkloadResult(workload.uuid, label, failure.status, message=failure.message,
                                                log=failure.log)
                            self._record(result, definition, solution, workload, wr, env_id)
                            continue
                    if deferred and not candidate.compile_only:  # its extension runs here: the size rule holds
                        wr = unrun_result(workload, label, deferred, None, None)
                    else:
                        wr, candidate = self._on_candidate(candidate, solution, definition, workload, label,
                                                           run_preset, preset, tol, timeout_s, library_is_own)
                wr.phases_s = self.clock.since(phases_before)
                if wr.status == EvaluationStatus.TIMEOUT.value:
                    timed_out.append(label)
                elif wr.evaluated:
                    timed_out.clear()
                self._record(result, definition, solution, workload, wr, env_id)
            if build_failure is None and not static_problem:
                self._instruction_proof(candidate, solution, definition, result)
        finally:
            if candidate is not None:
                candidate.stop()

        # A definition without a library baseline on this GPU is scored against the reference throughout (the
        # workloads where its baselines gave no figure get their own notice: submission_summary.closing_notices).
        reference_is_the_yardstick = bool(self.options.baselines and self.has_gpu
                                          and not self.dataset.baselines(result.definition))
        settle(result, self.audit_config.level, reference_is_the_yardstick)
        result.notices += self.baselines.spot_checks  # once: the first submission of the session that ran them
        self.baselines.spot_checks.clear()
        self.archive.finish_submission(submission_id, result.status, "; ".join(result.notices),
                                       archived_scores(result))
        self._open_submission = None
        self.progress("done", {"status": result.status})
        return result

    @property
    def _spare(self) -> Optional[WorkerProcess]:
        """The launched, unused candidate process (harness.pipeline.candidate_workers)."""
        return self.candidates.spare
