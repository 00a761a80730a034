"""One workload on a built worker: the correctness trials against the reference, then the official timing and
the fresh-input recheck, all within the workload's deadline.

Mixed into ``harness.pipeline.evaluate.Session`` (as ``harness.audits.session_audits.SessionAudits`` is): the
candidate's
evaluation and the baselines' (``run_audits=False``) go through ``_evaluate_workload``.
"""

from __future__ import annotations

import re
import time
from typing import Any, Optional

import torch

from ..audits.model import Audit
from ..audits.verdicts import INTERPRETER_SKIP
from ..measure.correctness import CheckResult, Tolerance, merge_results
from ..data.dataset import EvalPreset
from ..data.inputs import trial_seed
from ..data.results import WorkloadResult
from ..sandbox.build import extension_builder, gpu_only_extension
from ..sandbox.messages import Reply, Request, RunRequest, TimeRequest
from ..sandbox.runner import WorkerCrashed, WorkerPastDeadline, WorkerProcess, WorkerTimeout
from ..data.statuses import SubmissionStatus
from ..data.schema import Definition, EvaluationStatus, Workload
from ..measure.timing_reply import apply_timing_reply
from .trusted import ReferenceFailed


# Plain wall-clock calls of the clock-truth audit after a workload's last trial; under tracing, that trial's timed
# calls are the walls (the fastest plain call and the median traced call are compared with its span:
# harness.audits.verdicts).
CLOCK_TRUTH_CALLS = 12


_CUDA_CHECK = re.compile(r"is_cuda|\bcuda\b|CUDA tensor|device type cuda|Expected all tensors to be on", re.I)


def cpu_host_hint(error: Optional[str], has_gpu: bool) -> str:
    """What a contestant needs to know when a check for CUDA tensors fails on a host without a GPU."""
    if has_gpu or not error or not _CUDA_CHECK.search(error):
        return ""
    return (" (this host has no GPU: inputs are CPU tensors and Triton runs in its interpreter, so a check for "
            "CUDA tensors fails here; it passes on a GPU host)")


# Inductor types a Python float given to a user-defined Triton kernel as fp64 where eager Triton types it fp32, so
# the kernel that passes outside torch.compile fails to compile inside it (a loop-carried fp32 value turns fp64).
_INDUCTOR_FP64 = re.compile(r"Loop-carried variable \w+ has initial type .*fp32.* re-assigned to .*fp64", re.S)


def inductor_float_hint(error: Optional[str]) -> str:
    """What a contestant needs to know when a Triton kernel fails only under torch.compile: its float argument."""
    if not error or not _INDUCTOR_FP64.search(error):
        return ""
    return (" (under torch.compile, Inductor passes a Python float argument of a Triton kernel as fp64, where eager "
            "Triton passes fp32: cast it in the kernel, `x.to(tl.float32)`, or make it a `tl.constexpr`)")


def extension_built_at_call(traceback: Optional[str]) -> Optional[str]:
    """Why a call failed on a host without a GPU where the solution builds its CUDA extension at its first call
    (load_inline in the entry point, not at import), or None: the failure went through the extension builder."""
    builder = extension_builder(traceback or "")
    return gpu_only_extension(builder, " built at its first call") if builder else None


# What Triton's interpreter cannot run though a GPU runs it (the error of an honest kernel, with a name for it).
# Only interpreter errors: a kernel's own mistakes under the interpreter stay the candidate's RUNTIME_ERROR.
_INTERPRETER_LIMITS = (
    (re.compile(r"inline_asm not supported in interpreter mode"), "inline PTX (tl.inline_asm_elementwise)"),
    (re.compile(r"libdevice's __nv_\w+ is not available under Triton's CPU interpreter"), "a libdevice (extern) call"),
    (re.compile(r"ufunc 'bitwise_(and|or|xor)' not supported for the input types"),
     "a bitwise operation on a block of booleans and a scalar boolean"),
)
# A Triton builtin the interpreter does not hand its semantic to (`tl.extra.cuda.smid()`, `globaltimer()`...): the
# error names no function, the traceback's frame above Triton's builtin wrapper does (its caret marks the call).
_NO_SEMANTIC = re.compile(r"_semantic. argument must be provided outside of JIT functions")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line \d+, in (?P<function>\S+)\s*$')
_CALLED = re.compile(r"([A-Za-z_][\w.]*)\s*\(")


def _builtin_called(traceback: str) -> Optional[str]:
    """The dotted name of the call whose frame entered Triton's builtin wrapper (triton/language/core.py)."""
    lines = traceback.splitlines()
    for i, line in enumerate(lines):
        m = _FRAME.match(line)
        if m is None or m["function"] != "wrapper" or not m["file"].replace("\\", "/").endswith("language/core.py"):
            continue
        code = lines[i - 1] if i else ""  # the caller's source line, or (Python 3.11+) the carets under its call
        if i >= 2 and code.strip() and set(code.strip()) <= set("^~"):
            start = len(code) - len(code.lstrip())
            code = lines[i - 2][start:start + len(code.strip())]
        called = _CALLED.search(code)
        if called:
            return called.group(1)
    return None


def interpreter_limit(error: Optional[str], traceback: Optional[str] = None) -> Optional[str]:
    """The interpreter limit an error shows, or None (the candidate's own error)."""
    text = f"{error or ''}\n{traceback or ''}"
    if "active drivers" in (error or "") and "triton/runtime/driver.py" in (traceback or ""):
        return "Triton's GPU driver (triton.runtime.driver.active: the device, its SM count)"
    if "Torch not compiled with CUDA enabled" in (error or "") and "torch/cuda/__init__.py" in (traceback or ""):
        return "a CUDA device (device='cuda', .cuda()), which the CPU build of torch has not got"
    if "InterpreterError" not in text or "triton/runtime/interpreter.py" not in (traceback or ""):
        return None  # raised by the interpreter itself, not a message a candidate wrote
    if "libdevice" in text and "cannot convert None" in text:
        return "a libdevice (extern) call"
    if _NO_SEMANTIC.search(text):
        called = _builtin_called(traceback or "")
        return (f"`{called}`, a Triton builtin the interpreter cannot call" if called
                else "a Triton builtin the interpreter cannot call")
    return next((what for pattern, what in _INTERPRETER_LIMITS if pattern.search(text)), None)


# The worker's steps of a run request that are the harness's work, not the candidate's (harness.sandbox.worker)
HARNESS_STEPS = ("inputs", "fingerprint", "digest", "integrity", "release")


def harness_seconds(spent_s: Optional[dict[str, float]], took_s: float) -> float:
    """The seconds of a request the worker spent on the harness's own steps, at most what the request took."""
    own = sum(max(float((spent_s or {}).get(step, 0.0)), 0.0) for step in HARNESS_STEPS)
    return min(own, max(took_s, 0.0))


def has_work(reference_outputs: dict[str, Any]) -> bool:
    """Whether the reference's outputs hold any value that takes computing: a finite non-zero element. An MoE call
    that routes no token to this rank's experts is all zeros (one token: half the draws), a batch of empty requests
    zeros and -inf; a solution that writes those without a kernel of its own did no work elsewhere either."""
    return any(bool((torch.isfinite(t) & (t != 0)).any()) for t in reference_outputs.values()
               if isinstance(t, torch.Tensor) and t.numel())


class WorkloadEvaluation:
    """The per-workload evaluation of ``Session`` (see the module docstring); not used on its own.

    What it reads of the session, all set by ``Session.__init__``: ``dataset``, ``options`` (``timing``),
    ``audit_config``, ``_secret`` (input seeds), ``_phase`` (time accounting), ``baselines`` (``ahead``),
    ``has_gpu``, ``reference_outputs``,
    and the audits of ``SessionAudits`` (``_judge``, ``_precision_audit``, ``_recheck``).
    ``_within_deadline`` serves those audits' requests too (the recheck's).
    """

    def _seeds(self, workload: Workload, preset: EvalPreset) -> list[int]:
        return [trial_seed(self._secret, workload, t) for t in range(preset.num_trials)]

    def _evaluate_workload(self, worker: WorkerProcess, definition: Definition, workload: Workload, label: str,
                           preset: EvalPreset, tol: Tolerance, timeout_s: float,
                           run_audits: bool = True, baseline: bool = False) -> WorkloadResult:
        """``baseline``: one of the dataset's own baselines (trusted library code, no audits): checked against the
        reference on the first trial's inputs only, enough to know its figure is of a correct call, and timed
        without the clock-truth calls; its timing, the official figure, draws every trial's inputs as always."""
        deadline = time.monotonic() + timeout_s
        moved_by_worker = 0.0  # seconds the deadline moved by the worker's own steps (at most timeout_s)
        log_offset = worker.log_size()
        seeds = self._seeds(workload, preset)
        merged: Optional[CheckResult] = None
        audits: list[Audit] = []
        wr = WorkloadResult(workload.uuid, label, EvaluationStatus.PASSED.value)
        try:
            for trial, seed in enumerate(seeds[:1] if baseline else seeds):
                # the harness's own work (the reference, judging, the float64 oracle) is never the candidate's
                # time: the deadline moves by it (a slow reference at full scale: MoE's 4 minutes at T=1)
                trusted_since = time.monotonic()
                ref_fp, ref_out = self.reference_outputs(definition, workload, seed)
                deadline += time.monotonic() - trusted_since
                with self._phase("correctness"):
                    asked = time.monotonic()
                    reply, outputs = worker.request(
                        RunRequest(workload=workload, seed=seed, dataset_root=str(self.dataset.root)),
                        timeout_s=max(deadline - time.monotonic(), 0.001))
                # ...and so is the worker's: drawing the inputs (1.3 GiB for MoE: 106 s on a CPU host), hashing and
                # digesting them, the integrity check; never more than the request took, at most once the limit
                own = harness_seconds(reply.spent_s, time.monotonic() - asked)
                moved = min(own, timeout_s - moved_by_worker)
                deadline, moved_by_worker = deadline + moved, moved_by_worker + moved
                built_late = None if self.has_gpu or reply.ok else extension_built_at_call(reply.traceback)
                if built_late:  # as an import-time build of a CUDA extension is on this host (sandbox.build)
                    wr.status, wr.message = SubmissionStatus.SKIPPED, f"{built_late}; {(reply.error or '')[:200]}"
                    break
                limit = None if self.has_gpu or reply.ok else interpreter_limit(reply.error, reply.traceback)
                if limit:  # what Triton's CPU interpreter cannot run: said, not blamed on the candidate
                    wr.status = SubmissionStatus.SKIPPED
                    wr.message = (f"{INTERPRETER_SKIP}: {limit} (it runs on a GPU host); "
                                  f"{(reply.error or '')[:200]}")
                    break
                if not reply.ok:
                    wr.status = reply.status or EvaluationStatus.RUNTIME_ERROR.value
                    wr.message = (f"trial {trial}: {reply.error or 'failed'}" + cpu_host_hint(reply.error, self.has_gpu)
                                  + inductor_float_hint(reply.error))
                    if reply.context_broken:
                        wr.message += " (the CUDA context is broken; the next workload gets a fresh process)"
                        worker.kill()
                    break
                if reply.input_fingerprint != ref_fp:
                    wr.status = EvaluationStatus.RUNTIME_ERROR.value
                    wr.message = ("harness fault: candidate and reference inputs differ "
                                  "(input generation not deterministic)")
                    break
                if reply.mutated_inputs:
                    audits.append(Audit(name="input_mutation", passed=False,
                                        detail=f"trial {trial}: modified inputs {reply.mutated_inputs}"))
                if reply.aliased_outputs:
                    audits.append(Audit(name="output_aliasing", passed=False,
                                        detail=f"trial {trial}: {'; '.join(reply.aliased_outputs)}"))
                worked = has_work({n: ref_out[n] for n in definition.outputs})
                wr.has_work = bool(wr.has_work) or worked
                if reply.own_kernels == 0 and worked:
                    audits.append(Audit(name="own_kernel", passed=False,
                                        detail=f"trial {trial}: no Triton kernel of the solution ran in the call; "
                                               "the work was done by something else (host code, a library)"))
                if reply.library_compute is not None:  # the CPU's attribution (SessionAudits._cpu_attribution)
                    wr.library_compute.append(reply.library_compute)
                # Definition order, not the payload's (safetensors sorts names).
                trusted_since = time.monotonic()
                with self._phase("compare"):
                    check = self._judge(definition, workload, seed, outputs,
                                        {n: ref_out[n] for n in definition.outputs}, tol)
                merged = check if merged is None else merge_results(merged, check)
                if trial == 0 and check.passed and run_audits:
                    audits.append(self._precision_audit(definition, workload, seed, outputs, ref_out))
                deadline += time.monotonic() - trusted_since
                if not check.passed:
                    wr.status = check.status.value
                    wr.message = f"trial {trial}: {check.message}"
                    break
        except WorkerTimeout as err:  # past the submission's deadline: Session._record says so
            limit = "" if isinstance(err, WorkerPastDeadline) else f" (limit {timeout_s:.0f} s per workload)"
            wr.status, wr.message = EvaluationStatus.TIMEOUT.value, f"{err}{limit}"
        except WorkerCrashed as err:
            wr.status, wr.message = EvaluationStatus.RUNTIME_ERROR.value, str(err)
        except ReferenceFailed as err:  # the harness's side could not run here (its memory at full size): not judged
            wr.status = SubmissionStatus.SKIPPED
            wr.message = f"not judged: {err} (the reference's failure, not the candidate's)"
        if merged is not None and merged.has_errors:
            wr.max_absolute_error = merged.max_absolute_error
            wr.max_relative_error = merged.max_relative_error
            wr.matched_ratio = merged.matched_ratio
        if not audits and merged is not None:  # at least one call completed and was inspected
            audits.append(Audit(name="input_mutation", passed=True, detail="inputs unchanged"))
            audits.append(Audit(name="output_aliasing", passed=True, detail="outputs are fresh memory"))
        wr.audits = audits

        if wr.status == EvaluationStatus.PASSED.value:
            deadline += self._quiet_host()  # waiting for the baselines' compiles is not this workload's time
            self._time(worker, definition, workload, seeds, preset, wr, deadline, clock_truth=not baseline)
        if wr.status == EvaluationStatus.PASSED.value and run_audits:
            self._recheck(worker, definition, workload, preset, tol, wr, deadline)
        wr.log = worker.log_since(log_offset) if worker.workdir else ""
        return wr

    def _quiet_host(self) -> float:
        """Before anything is timed: the baselines' starts and compiles begun beside the first workload have ended
        (harness.pipeline.baselines_ahead), so no compile shares the host with a measurement. The seconds waited
        (a workload's deadline moves by them: a library's JIT build is not the candidate's time)."""
        ahead = self.baselines.ahead
        if not ahead.pending:
            return 0.0
        started = time.monotonic()
        with self._phase("baselines"):
            ahead.wait()
        return time.monotonic() - started

    def _within_deadline(self, worker: WorkerProcess, message: Request, deadline: float, wr: WorkloadResult,
                         what: str, phase: str) -> Optional[tuple[Reply, dict[str, torch.Tensor]]]:
        """One request inside the workload's deadline; a hang or a crash becomes the workload's status."""
        try:
            with self._phase(phase):
                return worker.request(message, timeout_s=max(deadline - time.monotonic(), 0.001))
        except WorkerTimeout as err:
            wr.status, wr.message = EvaluationStatus.TIMEOUT.value, f"{what}: {err}"
        except WorkerCrashed as err:
            wr.status, wr.message = EvaluationStatus.RUNTIME_ERROR.value, f"{what}: {err}"
        return None

    def _time(self, worker: WorkerProcess, definition: Definition, workload: Workload, seeds: list[int],
              preset: EvalPreset, wr: WorkloadResult, deadline: float, clock_truth: bool = True) -> None:
        if not self.has_gpu:
            wr.timing_note = "no GPU: timing unavailable"
            return
        if not self.options.timing:
            wr.timing_note = "timing switched off"
            return
        deadline += self._quiet_host()
        clock_calls = CLOCK_TRUTH_CALLS if clock_truth and self.audit_config.level != "off" else 0
        request = TimeRequest(workload=workload, seeds=seeds, warmup=preset.warmup, iterations=preset.iterations,
                              dataset_root=str(self.dataset.root), clock_truth_calls=clock_calls)
        reply = self._within_deadline(worker, request, deadline, wr, "timing", "timing")
        if reply is None:
            return
        apply_timing_reply(wr, reply[0], self.audit_config)
