"""Official-aligned GPU timer: our reimplementation of flashinfer-bench main's timer.

flashinfer-bench main times a callable with ``flashinfer.testing.bench_gpu_time_with_cupti``
(cold L2, no CUDA graphs) and reports, per workload, the mean over trials of each trial's
median. This module reproduces that method so that our numbers are comparable with the
contest's, and ``benchmarks/timing_parity.py`` checks on a GPU that they agree within 2%.

One trial, exactly as the official timer runs it:

1. an int8 flush buffer of 2 x L2 is allocated; it is zeroed before *every* call below, so
   every call starts with a cold L2;
2. one untimed call (first-use costs: JIT, allocator, autotune);
3. five "estimation" calls timed together with one CUDA event pair (flush included; the
   official timer only uses this figure to derive iteration counts when none are given, we
   keep it as ``estimate_ms`` for the record);
4. ``warmup`` untimed calls;
5. ``iterations`` timed calls, each: flush, synchronize, host timestamp, call, host
   timestamp, synchronize.

With CUPTI, every GPU activity (kernel, memcpy, memset, on any stream) whose launching
runtime/driver API call started inside an iteration's host window belongs to that
iteration, and the iteration's time is ``max(end) - min(start)`` over those activities:
host launch overhead before the first kernel is excluded, idle gaps between kernels are
included. The flush is launched before the window opens, so it is never counted.

Without CUPTI the official timer falls back to a CUDA event pair per call; those numbers
include launch overhead and are labelled ``aligned=False``. Aligned and non-aligned trials
are never combined (``aggregate_trials`` refuses).

The pure parts (attribution, spans, kernel-set check, statistics) take plain records and
are tested on CPU; only ``time_trial`` needs a GPU.
"""

from __future__ import annotations

import bisect
import contextlib
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ApiLaunch",
    "GpuActivity",
    "Latency",
    "TimingConfig",
    "TimingError",
    "TrialTiming",
    "aggregate_trials",
    "analyse_activities",
    "attribute_activities",
    "check_kernel_sets",
    "cupti_status",
    "flush_buffer_bytes",
    "median",
    "span_per_iteration",
    "time_trial",
    "time_trials",
]

Backend = Literal["cupti", "cuda_events"]

# The official timer's fixed count of estimation calls before warmup.
ESTIMATION_CALLS = 5
# Bytes per CUPTI activity buffer handed out on request; 8 MiB holds tens of thousands of
# records, so a 50-iteration trial fits in one or two buffers.
_CUPTI_BUFFER_BYTES = 8 * 1024 * 1024
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


def analyse_activities(
    windows: Sequence[tuple[int, int]],
    activities: Iterable[GpuActivity],
    launches: Iterable[ApiLaunch],
) -> tuple[list[float], list[str]]:
    """Spans (ms) and the common kernel set of one trial's CUPTI records.

    Checks each iteration in order, as the official timer does: an empty iteration or an
    iteration whose set differs from the first raises ``TimingError``.
    """
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


# ----------------------------------------------------------------------------------------
# CUPTI availability
# ----------------------------------------------------------------------------------------


def _load_cupti() -> tuple[Any | None, str | None]:
    """Return ``(cupti bindings module, None)`` or ``(None, reason it is unusable)``.

    The official timer requires cupti-python >= 13 (CUDA 13 activity records); older
    versions, or none, make it fall back to CUDA events.
    """
    try:
        from cupti import cupti as cupti_api  # type: ignore[import-not-found]
    except Exception as exc:  # ImportError, or a broken install failing at load time
        return None, f"cupti-python not importable ({type(exc).__name__}: {exc})"
    try:
        from importlib.metadata import version

        installed = version("cupti-python")
    except Exception as exc:
        return None, f"cupti-python version unknown ({type(exc).__name__}: {exc})"
    try:
        major = int(installed.split(".")[0])
    except ValueError:
        return None, f"cupti-python version {installed!r} not understood"
    if major < 13:
        return None, f"cupti-python {installed} < 13"
    return cupti_api, None


def cupti_status() -> tuple[bool, str]:
    """``(usable, description)``: whether the aligned CUPTI backend can run here."""
    module, reason = _load_cupti()
    if module is None:
        return False, reason or "cupti unavailable"
    from importlib.metadata import version

    return True, f"cupti-python {version('cupti-python')}"


class _CuptiCollector:
    """One trial's CUPTI session; all state lives on the instance, so nothing leaks from
    one ``time_trial`` call into the next."""

    def __init__(self, cupti_api: Any) -> None:
        self._api = cupti_api
        kinds = cupti_api.ActivityKind
        # GPU work on every stream, plus the API calls whose correlation ids tie that work
        # to the iteration that launched it (torch launches through the runtime API,
        # Triton and other JITs through the driver API, so both are needed).
        self._gpu_kinds = (kinds.CONCURRENT_KERNEL, kinds.MEMCPY, kinds.MEMSET)
        self._api_kinds = (kinds.RUNTIME, kinds.DRIVER)
        self._kernel_kind = int(kinds.CONCURRENT_KERNEL)
        self._memcpy_kind = int(kinds.MEMCPY)
        self._memset_kind = int(kinds.MEMSET)
        self._gpu_kind_ids = {int(kind) for kind in self._gpu_kinds}
        self._api_kind_ids = {int(kind) for kind in self._api_kinds}
        self.activities: list[GpuActivity] = []
        self.launches: list[ApiLaunch] = []
        self._enabled: list[Any] = []

    # CUPTI asks for an empty buffer: (size in bytes, max records; 0 = as many as fit).
    def _buffer_requested(self) -> tuple[int, int]:
        return _CUPTI_BUFFER_BYTES, 0

    # CUPTI hands back a full buffer. The record objects view CUPTI-owned memory that is
    # reused after this returns, so copy out plain values now.
    def _buffer_completed(self, records: list) -> None:
        for record in records:
            kind = int(record.kind)
            if kind in self._gpu_kind_ids:
                self.activities.append(
                    GpuActivity(
                        int(record.start),
                        int(record.end),
                        int(record.correlation_id),
                        self._signature(kind, record),
                    )
                )
            elif kind in self._api_kind_ids:
                self.launches.append(
                    ApiLaunch(int(record.start), int(record.end), int(record.correlation_id))
                )

    def _signature(self, kind: int, record: Any) -> str:
        if kind == self._kernel_kind:
            return str(record.name)
        if kind == self._memcpy_kind:
            return f"[memcpy kind={int(record.copy_kind)} bytes={int(record.bytes)}]"
        return f"[memset bytes={int(record.bytes)} value={int(record.value)}]"

    def start(self) -> None:
        api = self._api
        try:
            # Buffers first, so no record produced right after enabling finds none.
            api.activity_register_callbacks(self._buffer_requested, self._buffer_completed)
            for kind in (*self._api_kinds, *self._gpu_kinds):
                api.activity_enable(kind)
                self._enabled.append(kind)
        except Exception as exc:
            self.stop(flush=False)
            raise TimingError(
                f"could not start CUPTI activity tracing ({type(exc).__name__}: {exc}); "
                "is another profiler attached?"
            ) from exc

    def stop(self, *, flush: bool = True) -> None:
        """Deliver outstanding records, disable what we enabled and detach CUPTI, so a
        later trial (ours or FlashInfer's) starts from a clean CUPTI state."""
        api = self._api
        errors: list[str] = []
        if flush:
            try:
                # Everything was synchronized, so all records are complete: flag 0 (not
                # forced) delivers them without risking half-written records.
                api.activity_flush_all(0)
            except Exception as exc:
                errors.append(f"flush: {exc}")
        while self._enabled:
            kind = self._enabled.pop()
            try:
                api.activity_disable(kind)
            except Exception as exc:
                errors.append(f"disable {kind}: {exc}")
        try:
            api.finalize()
        except Exception as exc:
            errors.append(f"finalize: {exc}")
        if errors and flush:
            raise TimingError("CUPTI teardown failed: " + "; ".join(errors))

    def timestamp(self) -> int:
        return int(self._api.get_timestamp())


# ----------------------------------------------------------------------------------------
# GPU timing
# ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def traced() -> Iterator[None]:
    """CUPTI activity tracing on, as during the timed iterations, its records discarded.

    Tracing costs every API call a few microseconds, so a callable that launches many small kernels runs its
    GPU work further apart under the timer than without it. A wall time to be compared with the CUPTI span
    (the clock-truth audit) must be taken under the same tracing, or an honest multi-kernel callable reads as
    faster by wall clock than its own GPU span (1.12 ms against 1.26 ms for a PyTorch attention on the H200).
    """
    cupti_api, _ = _load_cupti()
    if cupti_api is None:
        yield
        return
    collector = _CuptiCollector(cupti_api)
    collector.start()
    try:
        yield
    finally:
        collector.stop()


def _first_cuda_tensor_device(obj: Any, depth: int = 0) -> Any | None:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.device if obj.is_cuda else None
    if depth > 4:
        return None
    if isinstance(obj, (list, tuple)):
        items: Iterable[Any] = obj
    elif isinstance(obj, dict):
        items = obj.values()
    else:
        return None
    for item in items:
        found = _first_cuda_tensor_device(item, depth + 1)
        if found is not None:
            return found
    return None


def _resolve_device(device: Any, args: Sequence[Any]) -> Any:
    import torch

    if device is None:
        # Like the official timer: the device of the first CUDA tensor among the
        # arguments, else the current device.
        device = _first_cuda_tensor_device(list(args)) or torch.device(
            "cuda", torch.cuda.current_device()
        )
    device = torch.device(device)
    if device.type != "cuda":
        raise TimingError(f"time_trial needs a CUDA device, got {device}")
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def time_trial(
    fn: Callable[..., Any],
    args: Sequence[Any],
    *,
    warmup: int,
    iterations: int,
    device: Any = None,
    backend: Literal["auto", "cupti", "cuda_events"] = "auto",
) -> TrialTiming:
    """Time ``fn(*args)`` the way flashinfer-bench main does (see the module docstring).

    ``backend="auto"`` uses CUPTI when cupti-python >= 13 imports and CUDA events
    otherwise (``aligned=False``, the reason in ``note``); ``"cupti"`` raises
    ``TimingError`` when CUPTI is unavailable; ``"cuda_events"`` forces the fallback.
    """
    import torch

    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    if backend not in ("auto", "cupti", "cuda_events"):
        raise ValueError(f"unknown backend {backend!r}")

    args = tuple(args)
    note: str | None = None
    cupti_api = None
    if backend in ("auto", "cupti"):
        cupti_api, reason = _load_cupti()
        if cupti_api is None:
            if backend == "cupti":
                raise TimingError(f"CUPTI backend requested but unavailable: {reason}")
            note = f"CUPTI unavailable ({reason}); CUDA events used, includes launch overhead"
    else:
        note = "CUDA events requested; includes launch overhead"
    if not torch.cuda.is_available():
        raise TimingError("time_trial needs a CUDA GPU; torch.cuda.is_available() is False")

    dev = _resolve_device(device, args)
    with torch.cuda.device(dev):
        l2_bytes = int(torch.cuda.get_device_properties(dev).L2_cache_size)
        flush_bytes = flush_buffer_bytes(l2_bytes)
        flush_buffer = torch.empty(flush_bytes, dtype=torch.int8, device=dev)

        def flush_l2() -> None:
            flush_buffer.zero_()

        # One untimed call first: JIT compilation, autotuning, lazy allocation.
        torch.cuda.synchronize()
        fn(*args)
        torch.cuda.synchronize()

        # Estimation: five flushed calls under one event pair, as the official timer does.
        est_start = torch.cuda.Event(enable_timing=True)
        est_end = torch.cuda.Event(enable_timing=True)
        est_start.record()
        for _ in range(ESTIMATION_CALLS):
            flush_l2()
            fn(*args)
        est_end.record()
        torch.cuda.synchronize()
        estimate_ms = est_start.elapsed_time(est_end) / ESTIMATION_CALLS

        torch.cuda.synchronize()
        for _ in range(warmup):
            flush_l2()
            fn(*args)
        torch.cuda.synchronize()

        kernel_ns: dict[str, float] = {}
        if cupti_api is not None:
            samples, kernel_names, kernel_ns = _timed_cupti(cupti_api, fn, args, iterations, flush_l2)
            used: Backend = "cupti"
        else:
            samples = _timed_events(fn, args, iterations, flush_l2)
            kernel_names = []
            used = "cuda_events"

    return TrialTiming(
        samples_ms=samples,
        median_ms=median(samples),
        backend=used,
        aligned=used == "cupti",
        kernel_names=kernel_names,
        kernel_ns=kernel_ns,
        estimate_ms=estimate_ms,
        warmup=warmup,
        iterations=iterations,
        flush_bytes=flush_bytes,
        device=f"{dev} ({torch.cuda.get_device_name(dev)})",
        note=note,
    )


def _timed_cupti(
    cupti_api: Any,
    fn: Callable[..., Any],
    args: tuple,
    iterations: int,
    flush_l2: Callable[[], None],
) -> tuple[list[float], list[str], dict[str, float]]:
    import torch

    collector = _CuptiCollector(cupti_api)
    windows: list[tuple[int, int]] = []
    collector.start()
    try:
        for _ in range(iterations):
            # The flush is launched (and finished) before the window opens, so its
            # launch call falls outside the window and its memset/kernel is not counted.
            flush_l2()
            torch.cuda.synchronize()
            window_start = collector.timestamp()
            fn(*args)
            window_end = collector.timestamp()
            torch.cuda.synchronize()
            windows.append((window_start, window_end))
    except BaseException:
        collector.stop(flush=False)
        raise
    collector.stop()
    spans, kernel_names = analyse_activities(windows, collector.activities, collector.launches)
    return spans, kernel_names, time_per_activity(windows, collector.activities, collector.launches)


def _timed_events(
    fn: Callable[..., Any],
    args: tuple,
    iterations: int,
    flush_l2: Callable[[], None],
) -> list[float]:
    import torch

    # The official fallback: flush, then an event pair around the call on the current
    # stream, one synchronize at the end. Work on other streams is not seen and host
    # launch overhead is included: hence aligned=False.
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
    torch.cuda.synchronize()
    for start, end in zip(starts, ends):
        flush_l2()
        start.record()
        fn(*args)
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in zip(starts, ends)]


def time_trials(
    fn: Callable[..., Any],
    trial_args: Sequence[Sequence[Any]],
    config: TimingConfig | None = None,
    *,
    device: Any = None,
    backend: Literal["auto", "cupti", "cuda_events"] = "auto",
) -> Latency:
    """Time one trial per entry of ``trial_args`` (the official evaluation draws fresh
    inputs per trial) and aggregate them. ``config.num_trials`` is not consulted: the
    caller decides how many input sets there are."""
    config = config or TimingConfig()
    trials = [
        time_trial(
            fn,
            args,
            warmup=config.warmup,
            iterations=config.iterations,
            device=device,
            backend=backend,
        )
        for args in trial_args
    ]
    return aggregate_trials(trials)
