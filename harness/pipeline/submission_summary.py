"""A submission's bookkeeping around its workloads, as pure functions of results: the result it opens with, the
result of a workload that is not run, and, once all ran, the submission's status, notices, promotion blockers and
the row the archive finishes it with; also how a submission the harness could not finish is archived.

The ``Session`` (harness/pipeline/evaluate.py) runs workers and writes the archive; what these functions decide
depends only on the results, so it is kept apart from the process handling and can be tested without workers.
"""

from __future__ import annotations

from typing import Any, Optional

from ..archive.storage import storage_failure
from ..audits.model import audits_json
from ..audits.verdicts import promotion_blockers
from ..data.results import SubmissionResult, WorkloadResult
from ..data.schema import EvaluationStatus, Workload
from ..data.statuses import SubmissionStatus
from ..measure import scores


def cpu_skip_message(size: int, limit_mib: float, serial_steps: int = 0, max_serial_steps: int = 0) -> Optional[str]:
    """Why a workload is skipped on a host without a GPU (None: it runs). The Triton interpreter runs a kernel
    in numpy, and the reference and a PyTorch solution run on the CPU, far too slowly for large inputs, so only
    workloads up to ``limit_mib`` of inputs are run there, and
    only those whose recurrence (``serial_steps``: its tokens, one after another) is at most ``max_serial_steps``
    steps long (0: no bound)."""
    if size > limit_mib * (1 << 20):
        return (f"skipped on CPU: {size / (1 << 20):.0f} MiB of inputs > {limit_mib:g} MiB, too slow to check "
                f"without a GPU (--all-workloads runs it)")
    if max_serial_steps and serial_steps > max_serial_steps:
        return (f"skipped on CPU: a recurrence of {serial_steps} steps (tokens) > {max_serial_steps}, too slow to "
                f"check without a GPU (--all-workloads runs it)")
    return None


def opened_result(submission_id: int, solution: str, definition: str, static_findings: list[dict[str, Any]],
                  sandbox: str, has_gpu: bool, timing: bool) -> SubmissionResult:
    """The result of a submission just archived as RUNNING, with what holds for every workload of it: a sandbox
    short of full is a notice (the isolation the scores were measured under), and a result without timing says
    why, so correctness-only figures are not read as a slow kernel."""
    result = SubmissionResult(submission_id, solution, definition, SubmissionStatus.RUNNING, [],
                              static_findings=static_findings, sandbox=sandbox)
    if sandbox != "full":
        result.notices.append(f"sandbox: {sandbox}")
    if not has_gpu:
        result.timing_unavailable_reason = "no GPU on this host: correctness only, timing unavailable"
    elif not timing:
        result.timing_unavailable_reason = "timing switched off (--no-timing)"
    return result


def unrun_result(workload: Workload, label: str, skip: Optional[str], static_problem: Optional[str],
                 build_failure: Optional[WorkloadResult]) -> Optional[WorkloadResult]:
    """The result of a workload that needs no candidate worker, or None when it is to be run. ``skip``: why it is
    not run (too large for the CPU's interpreter; the solution ran out of time on the workloads before). A static
    signature problem or a failed build fails every workload the same way, so each is recorded without a
    fresh build attempt per workload."""
    if skip:
        return WorkloadResult(workload.uuid, label, SubmissionStatus.SKIPPED, message=skip)
    if static_problem:
        return WorkloadResult(workload.uuid, label, EvaluationStatus.COMPILE_ERROR.value, message=static_problem,
                              log=static_problem)
    if build_failure is not None:
        return WorkloadResult(workload.uuid, label, build_failure.status, message=build_failure.message,
                              log=build_failure.log)
    return None


def overall_status(workloads: list[WorkloadResult]) -> str:
    """The submission's status: its first evaluated workload that did not pass decides it (a failure anywhere is
    the submission's failure); SKIPPED when none was evaluated, so a skip never reads as a pass."""
    evaluated = [w for w in workloads if w.evaluated]
    if not evaluated:
        return SubmissionStatus.SKIPPED
    return next((w.status for w in evaluated if w.status != EvaluationStatus.PASSED.value),
                EvaluationStatus.PASSED.value)


def closing_notices(result: SubmissionResult, reference_is_the_yardstick: bool) -> list[str]:
    """What the reader of the result must know about its scores and workloads: partial scores and why, failed
    baselines, scoring against the reference (``reference_is_the_yardstick``: baselines were asked for on a GPU
    and the definition has none), GPU memory over budget, skipped workloads. ``result.scores_partial`` is set."""
    workloads = result.workloads
    reasons = {w.label: "; ".join(w.baseline_failures) or "no baseline figure"
               for w in workloads if w.baseline_failures}
    notices = scores.partial_notice({k: v for k, v in result.scores_partial.items() if k != "vs_reference"},
                                    reasons)
    failed_baselines = sorted({f.split(":")[0] for w in workloads for f in w.baseline_failures})
    if failed_baselines:
        notices.append(f"FlashInfer baseline(s) {', '.join(failed_baselines)} failed on "
                       f"{sum(bool(w.baseline_failures) for w in workloads)} workload(s): "
                       + next(f for w in workloads for f in w.baseline_failures)[:300])
        stood_in = [w.label for w in workloads
                    if w.baseline_failures and w.fi_official_ms is None and w.reference_latency_ms is not None]
        if stood_in and not reference_is_the_yardstick:
            notices.append(f"no baseline figure on {len(stood_in)} workload(s) ({', '.join(stood_in[:5])}"
                           f"{', ...' if len(stood_in) > 5 else ''}): scored against the reference (vs_reference) "
                           "there, which is timed for it")
    if reference_is_the_yardstick:
        notices.append(f"no library baseline for {result.definition} on this GPU: scored against the "
                       "reference (vs_reference), which is timed for it")
    over = [w.label for w in workloads if w.memory and not w.memory.get("within_budget", True)]
    if over:
        notices.append(f"GPU memory over budget on {', '.join(over)} (harness show: memory)")
    skipped = [w for w in workloads if not w.evaluated]
    if skipped:
        notices.append(f"{len(skipped)} of {len(workloads)} workloads skipped: {skipped[0].message}")
    return notices


def settle(result: SubmissionResult, audit_level: str, reference_is_the_yardstick: bool) -> None:
    """Fill in the submission's status, scores, notices and promotion blockers from its finished workloads."""
    result.status = overall_status(result.workloads)
    result.scores, result.scores_partial = scores.definition_scores(result.workloads)
    result.notices += closing_notices(result, reference_is_the_yardstick)
    result.promotion_blockers = promotion_blockers(
        [{"label": w.label, "status": w.status, "audits": w.audits, "message": w.message} for w in result.workloads],
        result.static_findings, audit_level, result.audits)


def archived_scores(result: SubmissionResult) -> dict[str, Any]:
    """The scores column the archive finishes a settled submission with: the leaderboard and ``harness show``
    read promotability from it, without the workloads."""
    return {**result.scores, "scores_partial": result.scores_partial or None,
            "promotable": not result.promotion_blockers, "promotion_blockers": result.promotion_blockers,
            "audits": audits_json(result.audits)}


def cut_short(err: BaseException) -> tuple[str, str]:
    """The status and message of a submission the harness could not finish: an Exception is the harness's own
    failure; anything else (KeyboardInterrupt, SystemExit from SIGTERM) an interruption, whose finished
    workloads still stand."""
    storage = storage_failure(err)
    if storage is not None:  # not the harness's fault nor the solution's: said so, with the error's own words
        return SubmissionStatus.HARNESS_ERROR, f"the archive could not be written: {storage} ({err})"[:2000]
    if isinstance(err, Exception):
        return SubmissionStatus.HARNESS_ERROR, f"the harness failed: {type(err).__name__}: {err}"[:2000]
    return (SubmissionStatus.INTERRUPTED,
            f"stopped ({type(err).__name__}) before it finished; finished workloads are kept")


def storage_outcome(reason: str, where: str, submission_id: Optional[int], closed: bool) -> str:
    """The one line a submission cut short by its storage (``reason``: "the disk is full") ends the command with:
    what failed, where, and what became of the submission's record (``closed``: its status could be written)."""
    line = f"{reason}: cannot write {where}; "
    if submission_id is None:
        return line + "nothing of this submission was archived"
    if closed:
        return line + (f"submission {submission_id} is archived as {SubmissionStatus.HARNESS_ERROR.value} with its "
                       "finished workloads (free space, then submit again)")
    return line + (f"submission {submission_id} could not be closed either: the next harness run on this archive "
                   f"records it as {SubmissionStatus.INTERRUPTED.value}")
