"""Audits stricter than the official evaluation: pure decisions, fed by the worker and the reference worker.

The official timer calls the candidate on one input set, reusing the same input and output buffers for
every timed call, and never looks at those outputs again. That lets a candidate replay a cached result,
skip work once an output buffer holds something, or behave until it has been called N times. The
fresh-input recheck closes those doors: after timing, the candidate is called again in a secret order

- on input sets it has never seen, with output buffers poisoned with NaN (replay and skip-if-written
  have nothing to return), and
- on a used input buffer whose content was overwritten with new data, into the output buffer it wrote
  before (a cache keyed by pointer, or a "the output already holds a result" shortcut, returns the old
  answer),

and every one of those outputs is checked against the reference. Each audit is an ``Audit`` (harness.audits.model:
name, passed, detail; its name catalogued in definitions/audits.yaml); an evaluation with any failed audit can never
be promoted.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass
from typing import Sequence, Any, Iterable, Mapping, Optional, Union

from ..data.statuses import EvaluationStatus, SubmissionStatus
from . import attribution
from .attribution import OwnKernels
from .cpu_attribution import MAX_SHARE, cpu_attribution_verdict, host_library, is_cpu_variant, settles
from .model import AUDIT_LEVELS, Audit, as_audits


@dataclass(frozen=True)
class AuditConfig:
    level: str = "fast"
    fresh_input_sets: int = 2  # distinct never-seen input sets per workload (fast); full uses 4
    reused_buffer_calls: int = 1  # calls on overwritten input buffers into already-written outputs
    precision_error_multiple: float = 4.0  # candidate error vs fp64 oracle <= this x the reference's own
    precision_error_floor: float = 1e-6  # below this mean error nobody is judged (exact results)
    # ...nor below this share of the output's mean magnitude: fp32 arithmetic with the fast exp2/log2 every
    # attention kernel uses. FlashInfer's own lse on the H200: 4e-6 relative (60-130x an exact fp32 reference,
    # so a multiple alone flags it). fp16 rounding is >= 2^-13 relative on average, 4x above this; bf16 32x.
    precision_relative_floor: float = 2.0 ** -15
    clock_ratio: float = 2.0  # wall time per call may exceed the CUPTI span by this factor...
    # ...plus this much host overhead per kernel launch: a Triton launch plus the synchronisation measured
    # 0.06-0.07 ms of wall time around a 0.004 ms kernel on the H200 host, and an honest dispatching solution's
    # one Triton launch of 40 arguments and 20 compile-time constants 0.115-0.125 ms around a 0.008 ms kernel on a
    # slower H200 host (benchmarks/results/2026-12-04_h200_run14): twice that, so honest launches never fail it,
    # while host work worth hiding (a millisecond of CPU arithmetic per call) still does.
    clock_slack_ms: float = 0.25
    clock_floor_ratio: float = 0.9  # a wall time under this share of the CUPTI span means a tampered clock
    # a call on never-seen content may be this much slower than its repeat on the same content (honest kernels
    # cost the same twice; this leaves room for clocks and launch noise) ...
    replay_ratio: float = 2.0
    replay_slack_ms: float = 0.05  # ...plus this, before the repeats (what the official timer sees) look replayed
    # GPU work a solution's setup launches (outside the kernel figure) may be this multiple of its call's own...
    setup_work_ratio: float = 1.0
    # ...plus this: an honest plan copies a few small arrays (FlashInfer's plan(): host work and small copies)
    setup_work_slack_ms: float = 0.02
    attribution_min_share: float = 0.95  # share of compute time in kernels the candidate wrote
    # ...or at most this much library compute per call (an honest wrapper's index arithmetic: a few us)
    attribution_allowance_us: float = 5.0
    # ...and PyTorch pointwise kernels up to this much per call are glue (gate math, masks: ~1.5-3 us a launch)
    attribution_pointwise_us: float = 25.0
    # ...or every ATen kernel (reductions, top-k, scatters too) up to this much: off unless a family's routing or
    # bookkeeping is part of its definition (MoE sets it in audit_policy.yaml)
    attribution_aten_glue_us: float = 0.0
    # ...or up to this share of the call's compute (MoE: a vLLM-style wrapper's sum over the top-k in PyTorch grows
    # with the tokens, past any fixed budget, while staying a small part of the call)
    attribution_aten_glue_share: float = 0.0
    # on a host without a GPU: the share of the inputs' float elements library operators may read (its reasons:
    # harness.audits.cpu_attribution.MAX_SHARE)
    attribution_cpu_max_share: float = MAX_SHARE
    # ...and reductions reading together at most this share of them are glue there: off unless a family's scans are
    # bookkeeping (GDN's cumulative gates, set in audit_policy.yaml); a top-k that is the work (the DSA indexer's)
    # reads few elements too, and stays unsettled
    attribution_cpu_reduction_share: float = 0.0
    speedup_bound: float = 5.0  # faster than FlashInfer by more than this: run every audit
    # a latency below the roofline floor by more than this share is impossible (roofline_plausibility). The floor
    # stands on the bandwidth this GPU achieved for torch.sum (H200: 4274 GB/s, 89% of the data sheet's 4.8 TB/s), and
    # honest kernels come close to it or past it (the GQA example 103%, FlashInfer up to 105% on the H200): only a
    # latency no memory system gives (past 125% of the achieved rate) is a verdict; replay is far below that.
    roofline_margin: float = 0.2

    @classmethod
    def for_level(cls, level: str, **overrides: Any) -> "AuditConfig":
        if level not in AUDIT_LEVELS:
            raise ValueError(f"audit level must be one of {AUDIT_LEVELS}, got {level!r}")
        base = {"off": {}, "fast": {}, "full": {"fresh_input_sets": 4, "reused_buffer_calls": 2}}[level]
        return cls(level=level, **{**base, **overrides})


# -- fresh-input recheck ---------------------------------------------------------------------------------


def plan_recheck(fresh_seeds: list[int], reused_calls: int, rng: random.Random,
                 reuse_seeds: Optional[list[int]] = None, known_seed: Optional[int] = None) -> list[dict[str, Any]]:
    """The call sequence, in an order the candidate cannot predict.

    ``{"kind": "fresh", "seed": s}``: new input tensors for seed s, NaN-poisoned new outputs.
    ``{"kind": "reuse", "seed": s, "buffers_of": i}``: the input tensors of step i overwritten in place
    with seed s's content, outputs written into step i's (already written) output buffers. ``reuse_seeds`` (one per
    reused call): content seen nowhere else, so the reuse call is also the replay audit's timed call
    (``replay_verdict``); without them each reuse step takes another fresh step's content.
    ``{"kind": "known", "seed": s, "buffers_of": i}`` (with ``known_seed``, on a GPU): step i's buffers refilled
    with the content the official timer timed, last; timed like a reuse call (``known_input_verdict``).
    """
    if len(fresh_seeds) < 2 and reused_calls:
        raise ValueError("reusing buffers needs at least two fresh input sets")
    if reuse_seeds is not None and len(reuse_seeds) != reused_calls:
        raise ValueError("one reuse seed per reused call")
    seeds = list(fresh_seeds)
    rng.shuffle(seeds)
    steps: list[dict[str, Any]] = [{"kind": "fresh", "seed": s} for s in seeds]
    for j in range(reused_calls):
        i = rng.randrange(len(seeds))
        # Overwrite with the content of a *different* seed, so a stale answer is a wrong answer.
        other = reuse_seeds[j] if reuse_seeds is not None else rng.choice([s for k, s in enumerate(seeds) if k != i])
        steps.append({"kind": "reuse", "seed": other, "buffers_of": i})
    if known_seed is not None and reused_calls:
        steps.append({"kind": "known", "seed": known_seed, "buffers_of": rng.randrange(len(seeds))})
    return steps


def recheck_verdict(step_checks: list[tuple[dict[str, Any], bool, str]]) -> Audit:
    """One audit from the per-step correctness checks: (step, passed, message)."""
    failed = [(s, m) for s, ok, m in step_checks if not ok]
    if not step_checks:
        return Audit(name="fresh_input_recheck", passed=False, detail="no recheck calls were made")
    if failed:
        step, message = failed[0]
        how = {"fresh": "on fresh inputs with NaN-poisoned outputs",
               "known": "on reused input buffers refilled with the content the timer timed"}.get(
            step["kind"], "on reused input buffers holding new data, into outputs it had already written")
        signs = ("replay, skip-if-written, call counting, or state keyed by a buffer's identity (`data_ptr()`, "
                 "`id()`, `is`) that the new data in the same buffer made stale" if step["kind"] == "reuse"
                 else "replay, skip-if-written or call counting")
        return Audit(name="fresh_input_recheck", passed=False,
                     detail=f"{len(failed)} of {len(step_checks)} recheck calls wrong; first {how}: {message} "
                            f"(signs of {signs})")
    return Audit(name="fresh_input_recheck", passed=True,
                 detail=f"{len(step_checks)} calls in secret order, all correct")


def replay_verdict(same_input_wall_ms: list[float], fresh_wall_ms: list[float],
                   cfg: AuditConfig, tunings: Optional[list[int]] = None) -> Optional[Audit]:
    """Do repeated calls on the same inputs (what the official timer makes) look like replay?

    Like is compared with like: a call on content the candidate has never seen and its immediate repeat on the
    same buffers are timed the same way (cold L2, synchronised wall clock, same clocks), so host launch overhead
    (tens of microseconds for a Triton launch, more than a small kernel's span) is on both sides. An honest kernel
    costs about the same twice; a result replayed by content (a cache keyed by a hash of the inputs) makes the
    repeat much cheaper. The new content is written into buffers the candidate has already run on (the reuse
    calls of ``plan_recheck`` with ``reuse_seeds``), so the one-off costs of new memory are on neither side:
    the caching allocator growing for the call's scratch (``torch.empty`` inside the call) and the GPU's TLB
    missing on pages never touched by a kernel. Both are honest, and on the H200 they made the first call on new buffers
    2.6x its repeat (DSA sparse attention, a 0.1 ms gather over a 624 MB cache). A cache keyed by pointer
    returns stale results on new content, which the recheck's correctness catches.

    ``tunings`` (keys Triton's autotuner tuned in each new-content call, as the worker counted them) only explain a
    failure: tuning keyed by content is a cache filled at run time, and a count from the candidate's process could
    be forged (harness.sandbox.triton_tuning).

    The i-th repeat is paired with the i-th new-content call. With two or more pairs (the full level) the
    slowest is left out, so one stray slow call cannot fail it, while replay makes every repeat cheap.
    """
    pairs = list(zip(same_input_wall_ms, fresh_wall_ms))
    if not pairs:
        return None

    def excess(pair: tuple[float, float]) -> float:
        return pair[1] / (cfg.replay_ratio * pair[0] + cfg.replay_slack_ms)

    left_out = max(pairs, key=excess) if len(pairs) >= 2 else None
    kept = [p for p in pairs if p is not left_out]
    same, fresh = statistics.median(p[0] for p in kept), statistics.median(p[1] for p in kept)
    limit = cfg.replay_ratio * same + cfg.replay_slack_ms
    note = (f"; slowest of {len(pairs)} pairs left out: {left_out[1]:.4g} vs {left_out[0]:.4g} ms"
            if left_out is not None else "")
    passed = fresh <= limit
    tuned = sum(tunings or [])
    why = ("" if passed or not tuned else
           f": Triton's autotuner tuned {tuned} new key{'s' if tuned > 1 else ''} in the never-seen calls. A key "
           "read from the inputs' content (a count by .item(), not a shape) tunes again on every new input, which "
           "the official timer, repeating one input, never pays: key the tuning on shapes")
    return Audit(name="fresh_input_timing", passed=passed,
                 detail=f"new-content call {fresh:.4g} ms vs {same:.4g} ms for its repeat (wall per call; "
                        f"limit {limit:.4g} ms{note}){why}")


def known_input_verdict(known_wall_ms: float, new_wall_ms: list[float], cfg: AuditConfig,
                        new_repeat_wall_ms: Optional[list[float]] = None) -> Optional[Audit]:
    """Is the candidate faster on the content the official timer timed than on content it never saw?

    A table of answers built before the run (outputs read from an earlier submission's log, for inputs drawn
    the same way) or a cache filled during the timed calls answers the timed content at once and must compute
    anything new: the timer then measured the lookup. The known content is written into warm buffers and timed
    exactly as the never-seen content of the reuse calls (cold L2, synchronised wall clock), so an honest
    kernel costs the same on both; the same bound as ``replay_verdict``.

    ``new_repeat_wall_ms`` (each never-seen call's repeat on the same content): a never-seen call costs the cheaper
    of itself and its repeat. One wall-clock sample of a sub-millisecond call can be a host stall (H100, 2026-12-05:
    an honest dispatch at 0.59 ms on the known content measured 1.38 ms once on new content); its repeat is not. A
    table learnt before the run computes the repeat too, so it stays expensive; a cache filled at run time makes the
    repeat cheap and the new call not, which ``replay_verdict`` fails.
    """
    if not new_wall_ms:
        return None
    repeats = list(new_repeat_wall_ms or [])
    costs = [min(w, r) for w, r in zip(new_wall_ms, repeats)] + list(new_wall_ms[len(repeats):])
    new = statistics.median(costs)
    limit = cfg.replay_ratio * known_wall_ms + cfg.replay_slack_ms
    spread = (f" (each the cheaper of the call, {statistics.median(new_wall_ms):.4g} ms, and its repeat)"
              if repeats and new != statistics.median(new_wall_ms) else "")
    return Audit(name="known_input_timing", passed=new <= limit,
                 detail=f"never-seen content {new:.4g} ms{spread} vs {known_wall_ms:.4g} ms on the content the timer "
                        f"timed (wall per call; limit {limit:.4g} ms)"
                        + ("" if new <= limit else ": the timed content was answered without the work"))


def timer_consistency_verdict(known_wall_ms: float, known_repeat_ms: Optional[float], timer_wall_ms: list[float],
                              cfg: AuditConfig) -> Optional[Audit]:
    """Did the candidate do less work under the official timer than when its answers were checked?

    The timer's clock-truth calls (harness.sandbox.worker: flush, synchronise, call, synchronise, on the last
    trial's content, from inside the timer) and the recheck's call on that same content (the same way, from the
    recheck, its outputs judged) time one callable on one content. A candidate that tells the two apart (the
    caller's frames, a count of calls) and skips work when timed is cheap under the timer and costs the whole work
    in the recheck, where skipping would show as a wrong answer. Honest code costs the same in both; the replay
    audits' bound. The recheck's call costs the cheaper of itself and its repeat (one sample can be a host stall)."""
    if not timer_wall_ms:
        return None
    recheck = known_wall_ms if known_repeat_ms is None else min(known_wall_ms, known_repeat_ms)
    timer = statistics.median(timer_wall_ms)
    limit = cfg.replay_ratio * timer + cfg.replay_slack_ms
    return Audit(name="timer_consistency", passed=recheck <= limit,
                 detail=f"the timed content {recheck:.4g} ms per call when checked vs {timer:.4g} ms under the timer "
                        f"(wall per call; limit {limit:.4g} ms)"
                        + ("" if recheck <= limit else ": less work was done under the official timer"))


# The recheck's wall-clock audits: one sample each at the fast level, on a host the candidate shares with nothing it
# controls but the harness does not control either (H100, 2026-12-05: honest dispatches failed known_input_timing on
# 2 of 28 workloads, 1.4-1.6 ms against 0.46-0.59 ms, where the same kernels had passed before and after).
TIMING_AUDITS = ("fresh_input_timing", "known_input_timing", "timer_consistency")


def needs_confirmation(audits: Sequence[Audit]) -> bool:
    """A recheck whose every call was right but whose wall clock says replay: worth a second recheck before it
    blocks promotion. A wrong answer is never re-asked."""
    timing = [a for a in audits if a.name in TIMING_AUDITS]
    others = [a for a in audits if a.name not in TIMING_AUDITS]
    return any(not a.passed for a in timing) and all(a.passed for a in others)


def confirmed_timing(first: Sequence[Audit], second: Sequence[Audit]) -> list[Audit]:
    """The first recheck's audits, each failed timing audit judged again by the second recheck's (other never-seen
    content, the same timed content): it stands where the second fails it too or has no verdict (cut short), and
    is withdrawn where the second passes. Replay or a table of answers shows on every recheck (the content the timer
    timed is the same in both); a host stall on one sample does not. The other audits keep the worse of the two (a
    wrong answer on the second's calls fails as one on the first's would), and failed audits only the second has are
    added."""
    by_name = {a.name: a for a in second}
    judged: list[Audit] = []
    for a in first:
        again = by_name.get(a.name)
        if a.name not in TIMING_AUDITS:  # correctness, threads: the second's failure counts as much as the first's
            judged.append(again if again is not None and not again.passed else a)
        elif a.passed:
            judged.append(a)
        elif again is None:
            judged.append(Audit(name=a.name, passed=False, detail=f"{a.detail}; a second recheck gave no verdict"))
        elif again.passed:
            judged.append(Audit(name=a.name, passed=True,
                                detail=f"not confirmed: a second recheck on other never-seen content passed "
                                       f"({again.detail}); the first: {a.detail}"))
        else:
            judged.append(Audit(name=a.name, passed=False,
                                detail=f"{a.detail}; confirmed by a second recheck on other never-seen content "
                                       f"({again.detail})"))
    names = {a.name for a in first}
    judged += [a for a in second if not a.passed and a.name not in names and a.name not in TIMING_AUDITS]
    return judged


def setup_work_verdict(official_busy_ms: Optional[float], kernel_busy_ms: Optional[float],
                       cfg: AuditConfig) -> Optional[Audit]:
    """Does the solution's ``setup`` do the work its timed call leaves out?

    The kernel figure times the call with setup outside, as FlashInfer's ``plan()`` is; the official figure times
    setup inside every call. Their CUPTI records give the GPU time of each per call (kernels, copies, memsets):
    the difference is setup's. A plan is host work and a few small copies; a setup that computes the answer (the
    call then only copies it out) launches the work there, where the kernel figure does not see it."""
    if official_busy_ms is None or kernel_busy_ms is None:
        return None
    setup = max(official_busy_ms - kernel_busy_ms, 0.0)
    limit = cfg.setup_work_ratio * kernel_busy_ms + cfg.setup_work_slack_ms
    return Audit(name="setup_work", passed=setup <= limit,
                 detail=f"setup's GPU work {setup * 1e3:.4g} us per call vs the call's own {kernel_busy_ms * 1e3:.4g} "
                        f"us (limit {limit * 1e3:.4g} us)"
                        + ("" if setup <= limit else ": the work is done in setup, outside the kernel figure"))


# -- clock truth, threads ----------------------------------------------------------------------------------


def clock_truth_verdict(wall_ms: list[float], span_ms: list[float], cfg: AuditConfig,
                        launches: int = 1, traced_wall_ms: Optional[list[float]] = None) -> Optional[Audit]:
    """Synchronised wall time per call against the CUPTI span: host work the timer cannot see.

    ``launches`` is the number of distinct kernels per call: each brings its own host launch cost.
    ``traced_wall_ms``: the timed calls' own walls, under CUPTI tracing as their span was (TrialTiming). The
    tampered-clock bound compares those: tracing slows every API call, so a callable of many small launches
    spreads its GPU work further under the timer than without it, and an untraced wall can honestly be shorter
    than the span. The host-work bound compares the untraced wall: tracing's own cost is not the candidate's.
    """
    if not wall_ms or not span_ms:
        return None
    # The host-work bound takes the fastest call: host work of the candidate's own is in every call, while a
    # stray delay (another process on the device, a descheduled thread) is not (H200, honest Triton example:
    # one run's median 0.137 ms around a 0.017 ms kernel, where 0.06-0.07 ms is typical).
    span, wall, typical = statistics.median(span_ms), min(wall_ms), statistics.median(wall_ms)
    floor_wall = statistics.median(traced_wall_ms) if traced_wall_ms else typical
    # Wall and span come from separate calls, so clocks may differ a little between them (H200, honest:
    # wall 2-6% under the span when the wall calls ran with a warm L2); a tampered clock is far off.
    if floor_wall < span * cfg.clock_floor_ratio:
        return Audit(name="clock_truth", passed=False,
                     detail=f"wall {floor_wall:.4g} ms (under CUPTI tracing) shorter than the GPU span "
                            f"{span:.4g} ms: the timer's clock was tampered with")
    limit = cfg.clock_ratio * span + cfg.clock_slack_ms * max(1, launches)
    return Audit(name="clock_truth", passed=wall <= limit,
                 detail=f"wall {wall:.4g} ms (fastest of {len(wall_ms)}; median {typical:.4g}) vs CUPTI span "
                        f"{span:.4g} ms (limit {limit:.4g} ms)"
                        + ("" if wall <= limit else ": work on host threads or outside the timed GPU activity"))


def thread_verdict(threads_before: int, threads_after: int, candidate_threads: Sequence[str] = (),
                   candidate_processes: Sequence[str] = ()) -> Audit:
    """Threads started during the recheck (any kind), Python threads of the candidate's still alive, and processes of
    the candidate's, alive or started at any time before (during the correctness calls, at import: ``started ...``
    entries, harness.sandbox.process_log): a process's work is outside the worker's threads and outside the CUPTI
    trace of the worker's process."""
    new = threads_after - threads_before
    if candidate_processes:
        return Audit(name="thread_creation", passed=False,
                     detail=f"{len(candidate_processes)} process(es) of the candidate's, alive during the recheck or "
                            f"started before it ({', '.join(candidate_processes[:5])})")
    if candidate_threads:
        names = ", ".join(candidate_threads[:5])
        return Audit(name="thread_creation", passed=False,
                     detail=f"{len(candidate_threads)} Python thread(s) of the candidate's alive during the recheck "
                            f"({names})")
    return Audit(name="thread_creation", passed=new <= 0,
                 detail="no new threads" if new <= 0 else f"{new} thread(s) started by the candidate during its calls")


# -- precision ---------------------------------------------------------------------------------------------


def precision_verdict(errors: dict[str, tuple[float, ...]], cfg: AuditConfig) -> Audit:
    """``errors``: output -> (candidate mean |err| vs fp64 oracle, reference mean |err| vs the oracle[, mean
    |oracle|]). An error is judged only above both floors (absolute, and relative to the output's magnitude)."""
    worst = None
    for name, (cand, ref, *magnitude) in errors.items():
        floor = max(cfg.precision_error_floor, cfg.precision_relative_floor * (magnitude[0] if magnitude else 0.0))
        limit = max(cfg.precision_error_multiple * ref, floor)
        ratio = cand / ref if ref > 0 else float("inf") if cand > floor else 0.0
        if cand > limit and (worst is None or ratio > worst[1]):
            worst = (name, ratio, cand, ref, floor)
    if worst:
        name, ratio, cand, ref, floor = worst
        return Audit(name="precision", passed=False,
                     detail=f"{name}: mean error vs fp64 {cand:.3g} is {ratio:.1f}x the reference's "
                            f"{ref:.3g} (limit {cfg.precision_error_multiple:g}x, and above the floor "
                            f"{floor:.3g}): lower-precision arithmetic than the reference (values rounded to a "
                            f"narrower type on the way: an input scaled and cast back to bf16 before a product, "
                            f"scores or sums kept in bf16/fp16)")
    summary = ", ".join(f"{n} {e[0]:.3g} vs {e[1]:.3g}" for n, e in errors.items())
    return Audit(name="precision", passed=True,
                 detail=f"mean error vs fp64 within {cfg.precision_error_multiple:g}x the reference's "
                        f"or under the floor ({summary})")


# -- attribution -------------------------------------------------------------------------------------------

def attribution_verdict(kernel_ns: dict[str, float], own: OwnKernels, cfg: AuditConfig, calls: int = 1,
                        library_is_own: bool = False) -> Audit:
    """Who did the work, with this level's thresholds (harness.audits.attribution)."""
    return attribution.attribution_verdict(kernel_ns, own, cfg.attribution_min_share, calls,
                                           cfg.attribution_allowance_us, library_is_own,
                                           cfg.attribution_pointwise_us, cfg.attribution_aten_glue_us,
                                           cfg.attribution_aten_glue_share)


def cpu_attribution_audit(calls: Sequence[Any], cfg: AuditConfig, library_is_own: bool = False) -> Optional[Audit]:
    """Who did the work on a host without a GPU, with this level's thresholds (harness.audits.cpu_attribution), from
    the ATen compute the worker counted in each checked call (harness.sandbox.messages.LibraryCompute); None where
    none was counted (a GPU without timing). A family with ATen glue on a GPU (MoE's routing) has it here too."""
    glue = cfg.attribution_aten_glue_us > 0 or cfg.attribution_aten_glue_share > 0
    judged = [(c.input_elements, {name: (op.kind, op.elements) for name, op in c.ops.items()}) for c in calls]
    return cpu_attribution_verdict(judged, glue, library_is_own, cfg.attribution_cpu_max_share,
                                   cfg.attribution_cpu_reduction_share)


def is_fallback(audits: Iterable[Audit]) -> bool:
    """Did attribution find the work done outside the candidate's own kernels?"""
    return any(a.name == "attribution" and not a.passed and a.detail.startswith("fallback") for a in audits)


# -- promotion gate ----------------------------------------------------------------------------------------

AuditLike = Union[Audit, Mapping[str, Any]]  # an Audit, or one as archived


def unconfirmed_library_use(evaluated: list[dict[str, Any]], static_findings: list[dict[str, Any]]) -> list[str]:
    """The static gate saw library or PyTorch compute; the attribution audit settles it on every workload it
    ran on (a pass clears it, a failure is already a blocker). A PASSED workload where attribution could not
    run leaves the finding standing: it blocks, as "unconfirmed". A CPU's attribution (the worker's count of ATen
    operators: harness.audits.cpu_attribution) settles PyTorch findings only, never another library's (FlashInfer:
    where it is missing, a CPU runs what the solution does instead)."""
    from .static_gate import awaits_attribution

    def settled(w: dict[str, Any], f: dict[str, Any]) -> bool:
        return not host_library(f) and any(a.name == "attribution" and (settles(f) or not is_cpu_variant(a))
                                           for a in as_audits(w.get("audits", [])))

    passed = [w for w in evaluated if w["status"] == EvaluationStatus.PASSED]
    for f in (f for f in static_findings if awaits_attribution(f)):
        unsettled = [w["label"] for w in passed if not settled(w, f)]
        if unsettled:
            if host_library(f):
                return [f"static gate: {f['rule']} at {f['path']}:{f['line']} unconfirmed: numpy/scipy compute on "
                        "the host, which no run-time attribution sees (CUPTI records GPU kernels; a CPU counts "
                        "PyTorch's operators)"]
            return [f"static gate: {f['rule']} at {f['path']}:{f['line']} unconfirmed: run-time attribution (CUPTI "
                    f"on a GPU; on a CPU, of PyTorch compute only) did not settle it on {len(unsettled)} "
                    f"workload(s), first {unsettled[0]}"]
    return []


# The message of a workload SKIPPED because the solution's own call stopped Triton's CPU interpreter
# (harness.pipeline.workload_evaluation): a skip the solution chose, unlike the host's skips of large inputs.
INTERPRETER_SKIP = "not checkable under Triton's CPU interpreter"


def promotion_blockers(workloads: list[dict[str, Any]], static_findings: list[dict[str, Any]],
                       audit_level: str = "fast",
                       submission_audits: Optional[list[AuditLike]] = None) -> list[str]:
    """Why an evaluated submission cannot be promoted (empty: it can).

    ``workloads``: ``{"label", "status", "audits"}`` each (and its ``message``). ``submission_audits``: audits of the
    submission as a whole (the instruction proof), not of one workload. Audits are ``Audit`` objects, or dicts as
    archived. A workload skipped because the solution's own call stopped the CPU interpreter was never checked, and
    the solution chose where that happens (on the workloads it gets wrong, say): it blocks."""
    reasons = [] if audit_level != "off" else ["audits were switched off"]
    reasons += [f"audit {a.name} failed: {a.detail}" for a in as_audits(submission_audits or []) if not a.passed]
    errors = [f for f in static_findings if f.get("severity") == "error"]
    if errors:
        f = errors[0]
        reasons.append(f"static gate: {len(errors)} error finding(s), first {f['rule']} at {f['path']}:{f['line']}")
    evaluated = [w for w in workloads if w["status"] != SubmissionStatus.SKIPPED]
    if not evaluated:
        reasons.append("no workload was evaluated")
    reasons += [f"{w['label']}: never checked: the solution's own call stopped Triton's CPU interpreter there "
                "(check it on a GPU host)" for w in workloads
                if w["status"] == SubmissionStatus.SKIPPED and (w.get("message") or "").startswith(INTERPRETER_SKIP)]
    reasons += unconfirmed_library_use(evaluated, static_findings)
    for w in evaluated:
        if w["status"] != EvaluationStatus.PASSED:
            reasons.append(f"{w['label']}: {w['status']}")
        for a in as_audits(w.get("audits", [])):
            if not a.passed:
                reasons.append(f"{w['label']}: audit {a.name} failed: {a.detail}")
    return reasons
