"""The audits a Session runs around an evaluation (harness.audits.verdicts holds the pure decisions they call).

Mixed into ``harness.pipeline.evaluate.Session``: the static gate before the build, the precision audit against the
fp64 oracle, the fresh-input recheck after timing, the escalation of a suspicious speedup, attribution of GPU
time to kernel names, and the instruction proof (SASS, and ncu counters at the full level). Each reads the
session's workers, reference cache, archive and audit config, and appends its results to the workload's
(or the submission's) audits.
"""

from __future__ import annotations

import secrets
import time
from typing import Any, Optional

import torch

from .attribution import own_kernels
from .model import Audit
from .storage import narrow_storage
from .verdicts import (AuditConfig, attribution_verdict, confirmed_timing, known_input_verdict, needs_confirmation,
                       plan_recheck, precision_verdict, recheck_verdict, replay_verdict, thread_verdict,
                       timer_consistency_verdict)
from ..measure.correctness import CheckResult, Tolerance
from ..data.dataset import EvalPreset
from ..data.inputs import trial_seed
from ..data.results import SubmissionResult, WorkloadResult
from ..sandbox.messages import RecheckRequest, SassReply, SassRequest
from ..sandbox.runner import WorkerCrashed, WorkerProcess, WorkerTimeout
from ..data.schema import Definition, EvaluationStatus, Solution, Workload, dump_json


class SessionAudits:
    """The audit steps of ``Session`` (see the module docstring); not used on its own.

    What they read of the session, all set by ``Session.__init__``: ``dataset``, ``archive``, ``options``,
    ``audit_config``, ``trusted`` (harness.pipeline.trusted.TrustedReference: the reference's outputs, oracle, judge),
    ``_secret`` (input seeds), ``_rng`` (the recheck's secret order), ``_phase`` (time accounting), and the
    ``has_gpu``/``environment``/``reference_outputs``/``oracle_outputs``/``_within_deadline`` it forwards.
    """

    def _static_gate(self, solution: Solution, definition: Definition, library_is_own: bool = False
                     ) -> list[dict[str, Any]]:
        """Findings of the static gate (before any build), archived as an audit on every workload.
        ``library_is_own``: the dataset's own baselines, whose library findings only warn."""
        from .static_gate import declared_library, policy_from_mapping

        policy = policy_from_mapping(self._policy_document(), definition=definition.name, op_type=definition.op_type)
        with self._phase("static_gate"):
            findings = _gate_findings(solution, policy)
        if library_is_own:
            findings = [declared_library(f) for f in findings]
        return [f.model_dump() for f in findings]

    def _policy_document(self) -> dict[str, Any]:
        """The dataset's audit_policy.yaml (else the shipped one), as data: read once per session, then shared by
        the static gate, the audit thresholds and the instruction claims of every submission."""
        cached = getattr(self, "_policy_data", None)
        if cached is None:
            from .static_gate import DEFAULT_POLICY_PATH, PolicyError
            from .static_gate.policy import read_policy_yaml

            path = self.dataset.root / "audit_policy.yaml"
            path = path if path.exists() else DEFAULT_POLICY_PATH
            cached = read_policy_yaml(path) or {}
            if not isinstance(cached, dict):
                raise PolicyError(f"{path}: expected a mapping at top level")
            self._policy_data = cached
        return cached

    def _policy_claims(self, definition: Definition) -> list[str]:
        """Instruction families the definition's audit policy requires of every solution (harness.audits.sass)."""
        from .sass import policy_claims

        return policy_claims(self._policy_document(), definition.name, definition.op_type)

    def _instruction_proof(self, worker: Optional[WorkerProcess], solution: Solution, definition: Definition,
                           result: SubmissionResult) -> None:
        """Once per submission, after its workloads (Triton compiles kernels as they first run): the SASS of what
        the candidate built, archived as the `sass` artifact, and the instruction_proof audit of its claims."""
        from .sass import KernelSass, histogram, instruction_proof, merged_claims, summary_text
        from ..archive.views import add_artifact

        if self.audit_config.level == "off":
            return
        claims = merged_claims(solution.spec.instruction_claims, self._policy_claims(definition))
        kernels: list[KernelSass] = []
        note = "no candidate worker is running (none was started, or the last one failed)"
        if worker is not None and worker.alive:
            try:
                with self._phase("audits"):
                    reply, _ = worker.request(SassRequest(), timeout_s=600)
            except (WorkerTimeout, WorkerCrashed) as err:
                reply = SassReply(ok=False, error=f"disassembly failed: {err}")
            note = reply.error or ""
            if reply.ok:
                kernels = [KernelSass.from_json(k.model_dump()) for k in reply.kernels]
                note = "; ".join(reply.notes) or ("" if kernels else "no kernel in the binaries")
                if kernels:
                    head = f"{solution.name}: SASS of {', '.join(reply.files)} ({reply.tool})"
                    add_artifact(self.archive, result.submission_id, "sass",
                                 summary_text(kernels, header=head + (f"\nnotes: {note}" if note else "")))
        if not claims and not kernels:
            return  # nothing claimed, nothing built for a GPU here: no audit to show
        arch = self._gpu_arch() or (kernels[0].arch if kernels else None)
        counters, counter_note, failure = None, "", ""
        if not claims or not kernels:
            pass
        elif self.audit_config.level != "full":
            counter_note = "ncu counters run at --audit-level full"
        elif not self.has_gpu:
            counter_note = "no GPU on this host"
        else:
            counters, counter_note, failure = self._claim_counters(solution, result, claims, kernels, arch)
        audit = instruction_proof(claims, histogram(kernels) if kernels else None, counters, arch,
                                  sass_note=note, counter_note=counter_note)
        if failure:
            audit = Audit(name=audit.name, passed=False, detail=f"{failure}; {audit.detail}")
        result.audits.append(audit)

    def _gpu_arch(self) -> Optional[str]:
        capability = str(self.environment.get("capability") or "")
        return "sm_" + capability.replace(".", "") if capability else None

    def _claim_counters(self, solution: Solution, result: SubmissionResult, claims: list[str],
                        kernels: list[Any], arch: Optional[str]) -> tuple[Optional[dict[str, Any]], str, str]:
        """(counters summed over the candidate's own kernels or None, why None, why the proof failed) from one
        Nsight Compute pass over the first PASSED workload (harness.profiling: ncu and the target in the
        candidate's sandbox, harness.profiling.wall)."""
        from ..profiling import NO_PERMISSION, OK, UNAVAILABLE, profile_workloads, record_profile, select_backend
        from .sass import FAMILIES, arch_key, counter_metrics, own_kernel_counters

        if not any(arch_key(arch) in FAMILIES[c].counters for c in claims):
            return None, f"no counter for {', '.join(claims)} on {arch}", ""
        passed = next((w for w in result.workloads if w.status == EvaluationStatus.PASSED.value), None)
        if passed is None:
            return None, "no workload passed, none profiled", ""
        profiler = select_backend("auto")
        ok, why = profiler.available()
        if not ok:
            return None, f"no profiler: {why}", ""
        metrics = counter_metrics(claims, arch)
        workload = self.dataset.workloads_for(result.definition, [passed.workload])[0]
        with self._phase("audits"):
            summary = profile_workloads(profiler, dump_json(solution), solution.content_hash, [passed.workload],
                                        self.dataset.root, metrics, seed=trial_seed(self._secret, workload, 3000),
                                        isolate_network=self.options.isolate_network,
                                        sandbox=self.options.sandbox, hidden=[str(self.archive.folder)])[0]
        record_profile(self.archive, summary, {"purpose": "instruction_proof"}, result.submission_id)
        if summary.status in (UNAVAILABLE, NO_PERMISSION):  # the host's profiler, not the candidate
            return None, f"profiler {summary.status}: {summary.reason}", ""
        if summary.status != OK:
            return None, "", f"counters could not be collected: profile {summary.status}: {summary.reason}"
        counters, matched = own_kernel_counters(
            ((k.name, {m: k.value(m) for m in metrics}) for k in summary.kernels), [k.name for k in kernels], metrics)
        if not matched:
            return None, "", ("none of the profiled kernels (" + ", ".join(k.name[:60] for k in summary.kernels[:3])
                              + ") is one the candidate built")
        return counters, "", ""

    def _precision_audit(self, definition: Definition, workload: Workload, seed: int,
                         got: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> Audit:
        narrowed = [why for name in definition.outputs if name in got and name in ref
                    for why in [narrow_storage(name, got[name], ref[name])] if why]
        if narrowed:
            return Audit(name="precision", passed=False, detail="; ".join(narrowed))
        if not any("float" in str(spec.dtype) for spec in definition.outputs.values()):
            # indices, counts, masks (a top-k's): exact or wrong, which correctness already judged; no float64
            # run is needed (and a reference that reinterprets bytes, as the DSA indexer's does, has none)
            return Audit(name="precision", passed=True, detail="not judged: integer outputs, judged exactly")
        try:
            oracle = self.oracle_outputs(definition, workload, seed)
        except RuntimeError as err:  # the reference cannot run in float64 (a view of raw bytes): ours, not theirs
            return Audit(name="precision", passed=True,
                         detail=f"not judged: the float64 oracle failed: {str(err).splitlines()[0][:300]}")
        errors = {}
        for name in definition.outputs:
            if name not in got:  # an optional output the solution did not return (harness.families)
                continue
            if not (ref[name].is_floating_point() and oracle[name].is_floating_point()):
                continue  # indices, counts, masks: exact or wrong, which correctness already judged
            o = oracle[name].to(torch.float64)
            finite = torch.isfinite(o) & torch.isfinite(ref[name].to(torch.float64))
            if not finite.any():
                continue
            cand_err = (got[name].to(torch.float64) - o)[finite].abs().mean().item()
            ref_err = (ref[name].to(torch.float64) - o)[finite].abs().mean().item()
            errors[name] = (cand_err, ref_err, o[finite].abs().mean().item())
        return precision_verdict(errors, self.audit_config)

    def _judge(self, definition: Definition, workload: Workload, seed: int, got: dict[str, torch.Tensor],
               expected: dict[str, torch.Tensor], tol: Tolerance) -> CheckResult:
        return self.trusted.judge(definition, workload, seed, got, expected, tol)

    def _recheck(self, worker: WorkerProcess, definition: Definition, workload: Workload, preset: EvalPreset,
                 tol: Tolerance, wr: WorkloadResult, deadline: float, cfg: Optional[AuditConfig] = None,
                 seed_base: int = 1000) -> None:
        """After timing: fresh and reused-buffer calls in secret order, every output judged
        (harness.audits.verdicts). Where every call was right but a wall-clock audit failed, a second recheck on
        other never-seen content confirms or withdraws it (``confirmed_timing``), if the deadline leaves room for
        one more of what the first took."""
        start, began = len(wr.audits), time.monotonic()
        self._recheck_once(worker, definition, workload, preset, tol, wr, deadline, cfg, seed_base)
        first = wr.audits[start:]
        if wr.status != EvaluationStatus.PASSED.value or not needs_confirmation(first):
            return
        took = time.monotonic() - began
        if deadline - time.monotonic() < 1.5 * took:
            wr.audits[start:] = [a if a.passed else Audit(name=a.name, passed=False,
                                                          detail=f"{a.detail}; no time left to confirm it")
                                 for a in first]
            return
        del wr.audits[start:]
        self._recheck_once(worker, definition, workload, preset, tol, wr, deadline, cfg, seed_base + 500)
        second = wr.audits[start:]
        wr.audits[start:] = confirmed_timing(first, second if wr.status == EvaluationStatus.PASSED.value else [])

    def _recheck_once(self, worker: WorkerProcess, definition: Definition, workload: Workload, preset: EvalPreset,
                      tol: Tolerance, wr: WorkloadResult, deadline: float, cfg: Optional[AuditConfig],
                      seed_base: int) -> None:
        cfg = cfg or self.audit_config
        fresh = [trial_seed(self._secret, workload, seed_base + i) for i in range(cfg.fresh_input_sets)]
        # The reuse calls' content is drawn for this submission alone, never from the archive's secret: every
        # seed of the secret gives the same inputs to every submission to the archive, so their outputs can be
        # learnt (a candidate printing them into a log that a later submission's author reads). A table of such
        # answers fails here; one that computes what it does not know passes, and on a GPU these calls are also
        # what the replay audits time as never-seen content. Their reference outputs are not kept.
        reuse = [secrets.randbits(56) for _ in range(cfg.reused_buffer_calls)]
        # on a GPU, last: the content the official timer timed, timed against the reuse calls; its last trial's, the
        # one whose clock-truth calls timed it under the timer too (timer_consistency_verdict)
        known = trial_seed(self._secret, workload, preset.num_trials - 1) if self.has_gpu else None
        steps = plan_recheck(fresh, cfg.reused_buffer_calls, self._rng, reuse, known)
        one_off = set(reuse)
        request = RecheckRequest(workload=workload, steps=steps, dataset_root=str(self.dataset.root))
        answered = self._within_deadline(worker, request, deadline, wr, "recheck", "audits")
        if answered is None:
            return
        reply, outputs = answered
        if not reply.ok:
            wr.audits.append(Audit(name="fresh_input_recheck", passed=False,
                                   detail=f"the candidate failed on recheck inputs: {reply.error}"))
            return
        if len(reply.input_fingerprints) != len(steps) or len(reply.wall_ms) != len(steps):
            worker.kill()  # a reply that does not answer the request: the worker broke the protocol
            wr.status = EvaluationStatus.RUNTIME_ERROR.value
            wr.message = (f"recheck: the worker broke the protocol: its reply covers {len(reply.wall_ms)} of "
                          f"{len(steps)} calls")
            return
        checks = []
        for i, step in enumerate(steps):
            ref_fp, ref_out = self.reference_outputs(definition, workload, int(step["seed"]),
                                                     keep=int(step["seed"]) not in one_off)
            if reply.input_fingerprints[i] != ref_fp:
                checks.append((step, False, "inputs differ from the reference's (the call changed them?)"))
                continue
            got = {n: outputs[f"{i}/{n}"] for n in definition.outputs if f"{i}/{n}" in outputs}
            expected = {n: ref_out[n] for n in definition.outputs}
            result = self._judge(definition, workload, int(step["seed"]), got, expected, tol)
            checks.append((step, result.passed, result.message))
        wr.audits.append(recheck_verdict(checks))
        wr.library_compute.extend(reply.library_compute)  # its calls count for the CPU's attribution as well
        wr.audits.append(thread_verdict(reply.threads_before, reply.threads_after, reply.candidate_threads,
                                        reply.candidate_processes))
        # a call on never-seen content in warm buffers against its repeat (verdicts.replay_verdict)
        timed = [i for i, s in enumerate(steps) if s["kind"] == "reuse"]
        if not self.has_gpu or not timed:
            return
        content, repeat = reply.wall_ms, reply.repeat_wall_ms
        if len(repeat) != len(steps):
            wr.audits.append(Audit(name="fresh_input_timing", passed=False,
                                   detail=f"the recheck's reply times {len(repeat)} repeats of {len(steps)} calls "
                                          "(the worker's reply was changed)"))
            return
        tunings = [reply.tunings[i] for i in timed] if len(reply.tunings) == len(steps) else []
        wr.audits.append(replay_verdict([repeat[i] for i in timed], [content[i] for i in timed], cfg, tunings))
        known_step = next((i for i, s in enumerate(steps) if s["kind"] == "known"), None)
        if known_step is not None:
            verdict = known_input_verdict(content[known_step], [content[i] for i in timed], cfg,
                                          [repeat[i] for i in timed])
            if verdict is not None:
                wr.audits.append(verdict)
            timer_walls = [w for t in (wr.timing_kernel or wr.timing or []) for w in (t.get("wall_ms") or [])]
            verdict = timer_consistency_verdict(content[known_step], repeat[known_step], timer_walls, cfg)
            if verdict is not None:
                wr.audits.append(verdict)

    def _escalate(self, worker: WorkerProcess, definition: Definition, workload: Workload, preset: EvalPreset,
                  tol: Tolerance, timeout_s: float, wr: WorkloadResult, library_is_own: bool = False) -> None:
        """Too fast to believe (a speedup over FlashInfer above the bound): the full level's recheck on this
        workload, on other never-seen inputs (attribution already runs at every level)."""
        full = AuditConfig.for_level("full")
        wr.audits.append(Audit(name="escalation", passed=True,
                               detail=f"{wr.speedup_vs_fi_kernel:.3g}x faster than FlashInfer (bound "
                                      f"{self.audit_config.speedup_bound:g}x): full audits run on this workload"))
        self._recheck(worker, definition, workload, preset, tol, wr, time.monotonic() + timeout_s, cfg=full,
                      seed_base=3000)

    def _attribution(self, solution: Solution, wr: WorkloadResult, library_is_own: bool = False) -> None:
        """Who did the work, read from the CUPTI records the official timer already took (every audit level
        but off; no extra GPU call). Without timing (no GPU) the timing note says so, and the static gate's library
        findings stay unconfirmed (harness.audits.verdicts.promotion_blockers). Timed without CUPTI records (CUDA
        events:
        not the official method either), nothing can clear the evaluation: a failed audit, not a fallback."""
        trials = wr.timing or []
        if not trials:
            wr.timing_note = (wr.timing_note + "; " if wr.timing_note else "") + "attribution unavailable: no timing"
            return
        if not all(t.get("kernel_ns") for t in trials):
            wr.audits.append(Audit(name="attribution", passed=False,
                                   detail="unavailable: timed without CUPTI kernel records (CUDA events, not aligned), "
                                          "so who did the work is unknown; install cupti-python >= 13"))
            return
        kernel_ns: dict[str, float] = {}
        for t in trials:
            for name, ns in t["kernel_ns"].items():
                kernel_ns[name] = kernel_ns.get(name, 0.0) + float(ns)
        calls = sum(int(t.get("iterations") or 1) for t in trials)
        own = own_kernels({s.path: s.content for s in solution.sources})
        # a library's Triton kernel under the name of a function of the solution's own is the library's
        borrowed = sorted(own.python & set(wr.triton_kernels_elsewhere) & set(kernel_ns))
        own = own._replace(python=own.python - set(wr.triton_kernels_elsewhere))
        verdict = attribution_verdict(kernel_ns, own, self.audit_config, calls, library_is_own)
        if not verdict.passed and wr.has_work is False:  # nothing took computing: no kernel of its own needed
            verdict = verdict.model_copy(update={"passed": True, "detail": "no work: the reference's output on every "
                                                 "timed input is zeros or non-finite; "
                                                 + verdict.detail.removeprefix("fallback: ")})
        if borrowed and not library_is_own:
            verdict = verdict.model_copy(update={"detail": verdict.detail + "; compiled from files outside the "
                                                 "solution, so not its own whatever it names its functions: "
                                                 + ", ".join(borrowed[:4])})
        wr.audits.append(verdict)


def _gate_findings(solution: Solution, policy: Any) -> list[Any]:
    """The static gate's findings on ``solution``; one blocking finding where the gate itself fails (a MemoryError,
    a RecursionError, a rule's own fault on hostile text): judged, never a traceback of the harness."""
    from .static_gate import scan_sources, unreadable

    try:
        findings = scan_sources({s.path: s.content for s in solution.sources}, solution.spec.language.value, policy)
        return _where_it_never_runs(findings, solution)
    except Exception as exc:
        return [unreadable(solution.sources[0].path if solution.sources else "", exc)]


def _where_it_never_runs(findings: list[Any], solution: Solution) -> list[Any]:
    """Findings in code that never runs when the harness imports the solution are warnings that block nothing: a
    file no import reaches, a self-test's functions named only by a main guard, a branch under a variable no worker
    has (`if _PROFILE:`, a contestant's opt-in profiling path)."""
    from ..sandbox.build import never_imported_files
    from .static_gate import in_a_file_never_imported
    from .static_gate.policy import in_a_function_never_called, in_code_never_run
    from .static_gate.python_env_flags import dead_branches
    from .static_gate.python_reach import never_called

    unreached = never_imported_files(solution)  # never written for the build either
    findings = [in_a_file_never_imported(f) if f.path in unreached else f for f in findings]
    if solution.spec.language.value == "cuda":
        return findings
    sources = {s.path: s.content for s in solution.sources}
    entries = [solution.spec.entry_point] + ([solution.spec.setup] if solution.spec.setup else [])
    idle, dead = never_called(sources, entries), dead_branches(sources, entries)
    return [in_code_never_run(in_a_function_never_called(f, idle), dead) for f in findings]
