"""The official timer's records and the decisions on them, without a GPU (harness.measure.timing runs the timer).

GPU activities and the API calls that launched them, grouped per timed iteration; spans, the kernel-set check,
statistics and the trial models. Everything here takes plain records and is tested on CPU.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

Backend = Literal["cupti", "cuda_events"]

# The official timer's fixed count of estimation calls before warmup.
ESTIMATION_CALLS = 5
_MIB = 1024 * 1024
_NS_PER_MS = 1e6


class TimingError(RuntimeError):
    """The timer could not produce a trustworthy figure for this callable."""


class TimingConfig(BaseModel):
    """Per-workload timing parameters; the defaults are the official evaluation's."""

    model_config = ConfigDict(frozen=True)

    warmup: int = Field(default=10, ge=0)
    iterations: int = Field(default=50, ge=1)
    num_trials: int = Field(default=3, ge=1)


class TrialTiming(BaseModel):
    """One trial: ``iterations`` timed calls of one callable on one set of inputs."""

    samples_ms: list[float]
    median_ms: float
    backend: Backend
    aligned: bool
    kernel_names: list[str] = Field(default_factory=list)
    # GPU time (ns) per activity signature summed over the timed iterations: who did the work (attribution)
    kernel_ns: dict[str, float] = Field(default_factory=dict)
    estimate_ms: float | None = None
    warmup: int
    iterations: int
    flush_bytes: int = 0
    device: str = ""
    note: str | None = None
    # the trial's host wall by step (seconds): setup (flush buffer, the untimed first call), untimed (estimation and
    # warm-up calls), tracer_start / timed_calls / tracer_stop (CUPTI on, the timed iterations, its records
    # delivered and CUPTI off), analysis (spans from the records): the timer's own cost, never a figure of fn's
    host_s: dict[str, float] = Field(default_factory=dict)
    # with CUPTI: each timed call's host wall from just before the call to the synchronisation after it, taken in
    # the timed loop itself (under the tracer, on the cold L2 the flush left): the clock-truth audit's traced walls
    traced_wall_ms: list[float] | None = None


class Latency(BaseModel):
    """The official per-workload figure plus everything needed to audit it later."""

    latency_ms: float
    trial_medians_ms: list[float]
    aligned: bool
    backend: Backend
    num_trials: int
    trials: list[TrialTiming]
    note: str | None = None


class GpuActivity(NamedTuple):
    """One GPU-side record: a kernel, memcpy or memset, times in ns on CUPTI's clock.

    ``name`` is the activity's signature used for the kernel-set check: the kernel name,
    or the kind plus its parameters for memcpy/memset (a memcpy of a different size is a
    different piece of work).
    """

    start_ns: int
    end_ns: int
    correlation_id: int
    name: str


class ApiLaunch(NamedTuple):
    """One host-side runtime or driver API call; its correlation id links it to the GPU
    activities it launched."""

    start_ns: int
    end_ns: int
    correlation_id: int


# ----------------------------------------------------------------------------------------
# Pure logic (CPU-testable)
# ----------------------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    """Median with the mean of the two middle values for even counts (as
    ``statistics.median``, which the official timer uses)."""
    if not values:
        raise ValueError("median of an empty sequence")
    ordered = sorted(float(v) for v in values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2.0


def flush_buffer_bytes(l2_cache_bytes: int) -> int:
    """Size of the cold-L2 flush buffer for an L2 of ``l2_cache_bytes``.

    The official timer sizes it as 2 x L2 rounded down to whole MiB; we round the same way
    so the flush costs the same on GPUs whose L2 is not a whole number of MiB.
    """
    if l2_cache_bytes <= 0:
        raise ValueError(f"L2 cache size must be positive, got {l2_cache_bytes}")
    return max(_MIB, (2 * l2_cache_bytes) // _MIB * _MIB)


def attribute_activities(
    windows: Sequence[tuple[int, int]],
    activities: Iterable[GpuActivity],
    launches: Iterable[ApiLaunch],
) -> list[list[GpuActivity]]:
    """Group GPU activities by the host window whose API calls launched them.

    An API call belongs to window ``(t0, t1)`` when its *start* lies in ``[t0, t1]``
    (inclusive); every GPU activity carrying that call's correlation id belongs to the
    same iteration, whatever stream it ran on and however late it ran. Activities whose
    launch started outside every window (the L2 flush, the synchronize calls) are dropped.
    """
    launches_by_start = sorted(launches, key=lambda launch: launch.start_ns)
    launch_starts = [launch.start_ns for launch in launches_by_start]

    activities_by_corr: dict[int, list[GpuActivity]] = {}
    for activity in activities:
        activities_by_corr.setdefault(activity.correlation_id, []).append(activity)

    grouped: list[list[GpuActivity]] = []
    for window_start, window_end in windows:
        lo = bisect.bisect_left(launch_starts, window_start)
        hi = bisect.bisect_right(launch_starts, window_end)
        corr_ids = {launches_by_start[i].correlation_id for i in range(lo, hi)}
        iteration: list[GpuActivity] = []
        for corr_id in sorted(corr_ids):
            iteration.extend(activities_by_corr.get(corr_id, ()))
        grouped.append(iteration)
    return grouped


def _span_ms(iteration: Sequence[GpuActivity]) -> float:
    first_start = min(activity.start_ns for activity in iteration)
    last_end = max(activity.end_ns for activity in iteration)
    return (last_end - first_start) / _NS_PER_MS


def span_per_iteration(
    windows: Sequence[tuple[int, int]],
    activities: Iterable[GpuActivity],
    launches: Iterable[ApiLaunch],
) -> list[float]:
    """Per-iteration GPU time in ms: from the first activity an iteration launched to the
    last one's end, across all streams (gaps between kernels count).

    Raises ``TimingError`` for an iteration that launched no GPU activity: such a call did
    no measurable work, and a zero would make any callable look infinitely fast.
    """
    grouped = attribute_activities(windows, activities, launches)
    spans = []
    for index, iteration in enumerate(grouped):
        if not iteration:
            raise TimingError(f"no GPU activity recorded in timed iteration {index}")
        spans.append(_span_ms(iteration))
    return spans


def _format_names(names: Iterable[str]) -> str:
    return "{" + ", ".join(sorted(names)) + "}"


def check_kernel_sets(kernel_sets: Sequence[Iterable[str]]) -> list[str]:
    """Check every iteration launched the same set of activity signatures.

    A callable whose work changes between calls (caching results after the first call,
    data-dependent dispatch, lazy compilation mid-measurement) is not measuring one thing;
    the official timer refuses it, and so do we. Returns the common set, sorted.
    """
    if not kernel_sets:
        return []
    reference = set(kernel_sets[0])
    for index, names in enumerate(kernel_sets[1:], start=1):
        current = set(names)
        if current != reference:
            raise _kernel_set_mismatch(index, reference, current)
    return sorted(reference)


def _kernel_set_mismatch(index: int, reference: set[str], current: set[str]) -> TimingError:
    return TimingError(
        f"inconsistent kernel set in timed iteration {index} vs iteration 0: "
        f"missing {_format_names(reference - current)}, "
        f"extra {_format_names(current - reference)}"
    )


def unlaunched_activities(
    windows: Sequence[tuple[int, int]],
    activities: Iterable[GpuActivity],
    launches: Iterable[ApiLaunch],
) -> list[GpuActivity]:
    """GPU activities that ran after the first timed window opened yet carry no launch record the timer kept.

    Every activity is launched by some API call. The timer keeps the records of every call except pure queries
    (harness.measure.cupti_trace.QUIET_RUNTIME_APIS); an activity without its launch record would fall in no iteration
    and
    its time would go uncounted, so one is a fault of the measurement, never a faster figure.
    """
    if not windows:
        return []
    opened = windows[0][0]
    launched = {launch.correlation_id for launch in launches}
    return [a for a in activities if a.start_ns >= opened and a.correlation_id not in launched]


def analyse_activities(
    windows: Sequence[tuple[int, int]],
    activities: Iterable[GpuActivity],
    launches: Iterable[ApiLaunch],
) -> tuple[list[float], list[str]]:
    """Spans (ms) and the common kernel set of one trial's CUPTI records.

    Checks each iteration in order, as the official timer does: an empty iteration or an
    iteration whose set differs from the first raises ``TimingError``, and so does an activity whose launch
    record is missing (``unlaunched_activities``).
    """
    launches = list(launches)
    activities = list(activities)
    orphans = unlaunched_activities(windows, activities, launches)
    if orphans:
        names = _format_names({a.name for a in orphans})
        raise TimingError(f"{len(orphans)} GPU activities in the timed calls have no launch record: {names}")
    grouped = attribute_activities(windows, activities, launches)
    spans: list[float] = []
    reference: set[str] | None = None
    for index, iteration in enumerate(grouped):
        if not iteration:
            raise TimingError(f"no GPU activity recorded in timed iteration {index}")
        names = {activity.name for activity in iteration}
        if reference is None:
            reference = names
        elif names != reference:
            raise _kernel_set_mismatch(index, reference, names)
        spans.append(_span_ms(iteration))
    return spans, sorted(reference or ())


def time_per_activity(
    windows: Sequence[tuple[int, int]],
    activities: Iterable[GpuActivity],
    launches: Iterable[ApiLaunch],
) -> dict[str, float]:
    """GPU time (ns) per activity signature over every timed iteration: the records the timer already has,
    read again to say which kernels did the work."""
    total: dict[str, float] = {}
    for iteration in attribute_activities(windows, activities, launches):
        for activity in iteration:
            total[activity.name] = total.get(activity.name, 0.0) + float(activity.end_ns - activity.start_ns)
    return total


def aggregate_trials(trials: Sequence[TrialTiming]) -> Latency:
    """The official per-workload latency: arithmetic mean of the trials' medians.

    Aligned (CUPTI) and non-aligned (CUDA events) figures measure different things (events
    include launch overhead), so mixing them raises ``ValueError`` rather than producing a
    number that is neither.
    """
    if not trials:
        raise ValueError("aggregate_trials needs at least one trial")
    aligned_flags = {trial.aligned for trial in trials}
    if len(aligned_flags) > 1:
        raise ValueError(
            "refusing to combine aligned (cupti) and non-aligned (cuda_events) trials: "
            + ", ".join(f"trial {i}: {t.backend}" for i, t in enumerate(trials))
        )
    backends = {trial.backend for trial in trials}
    if len(backends) > 1:
        raise ValueError(f"refusing to combine trials timed with different backends: {sorted(backends)}")
    medians = [trial.median_ms for trial in trials]
    notes = sorted({trial.note for trial in trials if trial.note})
    return Latency(
        latency_ms=math.fsum(medians) / len(medians),
        trial_medians_ms=medians,
        aligned=aligned_flags.pop(),
        backend=backends.pop(),
        num_trials=len(trials),
        trials=list(trials),
        note="; ".join(notes) or None,
    )


def busy_per_call_ms(trials: Sequence[dict]) -> float | None:
    """GPU time of one timed call: the CUPTI activities' durations (kernels, copies, memsets) summed per call,
    averaged over the trials. Where it is far below the call's span (the official latency), the span holds the
    host's work between the call's kernels (Python, launch overhead): a host-bound call, not a slow kernel.
    None where the trials carry no activity durations (CPU timing, older records)."""
    per_call = [sum(t["kernel_ns"].values()) / t["iterations"] / 1e6 for t in trials
                if t.get("kernel_ns") and t.get("iterations")]
    return sum(per_call) / len(per_call) if per_call else None


def aggregate_timing(trials: Sequence[dict]) -> tuple[float, bool, str]:
    """The official latency of trials as a worker reports them (dicts of TrialTiming): the mean over trials of
    each trial's median, whether it is aligned, and the backend. Never mixes aligned and not."""
    aligned = {bool(t.get("aligned")) for t in trials}
    if len(aligned) != 1:
        raise ValueError("aligned and non-aligned timing trials cannot be combined")
    return sum(t["median_ms"] for t in trials) / len(trials), aligned.pop(), trials[0].get("backend", "")
