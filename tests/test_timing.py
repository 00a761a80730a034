"""Tests for harness.timing: pure attribution/aggregation logic on CPU, the real timer on GPU."""

from __future__ import annotations

import enum
import json
from types import SimpleNamespace

import pytest

from harness.timing import (
    ApiLaunch,
    GpuActivity,
    TimingConfig,
    TimingError,
    TrialTiming,
    _CuptiCollector,
    aggregate_trials,
    analyse_activities,
    attribute_activities,
    check_kernel_sets,
    flush_buffer_bytes,
    median,
    span_per_iteration,
    time_trial,
)

torch = pytest.importorskip("torch")

# Times are CUPTI nanoseconds; spans come back in ms, so 1000 ns == 0.001 ms.
NS = 1e-6


def K(start, end, corr, name="gemm"):
    return GpuActivity(start, end, corr, name)


def L(start, corr, end=None):
    return ApiLaunch(start, start + 5 if end is None else end, corr)


# --------------------------------------------------------------------------------------
# span_per_iteration / attribute_activities
# --------------------------------------------------------------------------------------

SPAN_CASES = [
    pytest.param(
        # The kernel launched in window 0 only runs after window 0 closed (the GPU was
        # behind); it still belongs to iteration 0 because its correlation id does.
        [(100, 200), (1000, 1100)],
        [K(300, 400, 1), K(1200, 1250, 2)],
        [L(150, 1), L(1050, 2)],
        [100 * NS, 50 * NS],
        id="attribution-by-correlation-id",
    ),
    pytest.param(
        # Two kernels with an idle GPU gap between them: the gap is part of the call.
        [(0, 500)],
        [K(1000, 2000, 1, "a"), K(5000, 6000, 2, "b")],
        [L(10, 1), L(20, 2)],
        [5000 * NS],
        id="gap-between-kernels-counted",
    ),
    pytest.param(
        # Overlapping kernels on two streams: first start to last end.
        [(0, 500)],
        [K(1000, 3000, 1, "main"), K(1500, 4000, 2, "side")],
        [L(10, 1), L(20, 2)],
        [3000 * NS],
        id="two-streams-counted",
    ),
    pytest.param(
        # The flush's memset is launched before the window and runs right before the
        # kernel; a synchronize after the window launches nothing. Neither may count.
        [(100, 200)],
        [K(60, 990, 9, "[memset bytes=125829120 value=0]"), K(1000, 1500, 1)],
        [L(50, 9), L(150, 1), L(250, 10)],
        [500 * NS],
        id="launched-outside-window-ignored",
    ),
    pytest.param(
        # A memcpy and a memset launched by the callable are GPU work like kernels.
        [(0, 100)],
        [K(200, 300, 1, "[memcpy kind=8 bytes=64]"), K(300, 450, 2, "[memset bytes=4 value=0]"), K(460, 700, 3)],
        [L(10, 1), L(20, 2), L(30, 3)],
        [500 * NS],
        id="memcpy-memset-counted",
    ),
    pytest.param(
        # Launch start exactly on either window edge is inside (closed interval).
        [(100, 200), (300, 400)],
        [K(500, 600, 1), K(700, 800, 2)],
        [L(100, 1), L(400, 2)],
        [100 * NS, 100 * NS],
        id="window-edges-inclusive",
    ),
    pytest.param(
        # A runtime call and the driver call under it each carry their own id; the kernel
        # names whichever launched it. Activities with unknown ids are ignored.
        [(0, 100)],
        [K(200, 260, 7), K(900, 5000, 42)],
        [L(10, 6, end=40), L(12, 7, end=30)],
        [60 * NS],
        id="unknown-correlation-ignored",
    ),
]


@pytest.mark.parametrize("windows, activities, launches, expected_ms", SPAN_CASES)
def test_span_per_iteration(windows, activities, launches, expected_ms):
    spans = span_per_iteration(windows, activities, launches)
    assert spans == pytest.approx(expected_ms)


def test_attribution_groups_activities_per_window():
    windows = [(0, 100), (200, 300)]
    activities = [K(400, 500, 2, "b"), K(110, 150, 1, "a"), K(350, 360, 3, "c")]
    launches = [L(250, 3), L(50, 1), L(260, 2)]
    grouped = attribute_activities(windows, activities, launches)
    assert [sorted(a.name for a in group) for group in grouped] == [["a"], ["b", "c"]]


EMPTY_CASES = [
    pytest.param([(0, 100)], [], [], 0, id="nothing-at-all"),
    pytest.param(
        # Iteration 1 only "contains" the flush launched before it: no GPU work of its own.
        [(0, 100), (200, 300)],
        [K(110, 150, 1), K(190, 199, 5, "[memset bytes=8 value=0]")],
        [L(50, 1), L(180, 5)],
        1,
        id="only-flush-before-window",
    ),
    pytest.param(
        # An API call in the window that launched no GPU work (cudaGetDevice and friends).
        [(0, 100)],
        [],
        [L(40, 3)],
        0,
        id="api-call-without-gpu-work",
    ),
]


@pytest.mark.parametrize("windows, activities, launches, bad_index", EMPTY_CASES)
def test_empty_iteration_raises(windows, activities, launches, bad_index):
    with pytest.raises(TimingError, match=f"no GPU activity recorded in timed iteration {bad_index}"):
        span_per_iteration(windows, activities, launches)
    with pytest.raises(TimingError, match=f"no GPU activity recorded in timed iteration {bad_index}"):
        analyse_activities(windows, activities, launches)


# --------------------------------------------------------------------------------------
# kernel-set consistency
# --------------------------------------------------------------------------------------

KERNEL_SET_CASES = [
    pytest.param([["a", "b"], ["b", "a"], ["a", "b", "a"]], ["a", "b"], None, id="same-set-any-order"),
    pytest.param([["a"]], ["a"], None, id="single-iteration"),
    pytest.param([], [], None, id="no-iterations"),
    pytest.param([["a", "b"], ["a", "b"], ["a"]], None, r"iteration 2.*missing \{b\}, extra \{\}", id="missing-kernel"),
    pytest.param([["a"], ["a", "cache_hit"]], None, r"iteration 1.*missing \{\}, extra \{cache_hit\}",
                 id="extra-kernel"),
    pytest.param([["gemm_v1"], ["gemm_v2"]], None, r"missing \{gemm_v1\}, extra \{gemm_v2\}", id="swapped-kernel"),
]


@pytest.mark.parametrize("sets, expected, error", KERNEL_SET_CASES)
def test_check_kernel_sets(sets, expected, error):
    if error is None:
        assert check_kernel_sets(sets) == expected
    else:
        with pytest.raises(TimingError, match="inconsistent kernel set") as info:
            check_kernel_sets(sets)
        assert info.match(error)


def test_analyse_activities_inconsistent_kernel_set():
    windows = [(0, 100), (200, 300), (400, 500)]
    activities = [K(110, 150, 1, "gemm"), K(310, 350, 2, "gemm"), K(510, 550, 3, "gemm"), K(560, 570, 4, "reduce")]
    launches = [L(10, 1), L(210, 2), L(410, 3), L(420, 4)]
    with pytest.raises(TimingError, match=r"inconsistent kernel set in timed iteration 2.*extra \{reduce\}"):
        analyse_activities(windows, activities, launches)


def test_analyse_activities_returns_spans_and_names():
    windows = [(0, 100), (200, 300)]
    activities = [K(110, 150, 1, "b"), K(160, 170, 2, "a"), K(310, 330, 3, "a"), K(330, 390, 4, "b")]
    launches = [L(10, 1), L(20, 2), L(210, 3), L(220, 4)]
    spans, names = analyse_activities(windows, activities, launches)
    assert spans == pytest.approx([60 * NS, 80 * NS])
    assert names == ["a", "b"]


# --------------------------------------------------------------------------------------
# statistics and aggregation
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values, expected",
    [([3.0], 3.0), ([1.0, 3.0], 2.0), ([5.0, 1.0, 3.0], 3.0), ([4.0, 1.0, 3.0, 2.0], 2.5)],
)
def test_median(values, expected):
    assert median(values) == expected


def test_median_empty():
    with pytest.raises(ValueError):
        median([])


@pytest.mark.parametrize(
    "l2_bytes, expected",
    [
        (62_914_560, 125_829_120),  # H200: 60 MiB -> 120 MiB
        (50 * 1024 * 1024 + 123, 100 * 1024 * 1024),  # rounded down to whole MiB, as official
        (1000, 1024 * 1024),  # never below 1 MiB
    ],
)
def test_flush_buffer_bytes(l2_bytes, expected):
    assert flush_buffer_bytes(l2_bytes) == expected


def _trial(samples, *, aligned=True, backend=None):
    backend = backend or ("cupti" if aligned else "cuda_events")
    return TrialTiming(
        samples_ms=samples,
        median_ms=median(samples),
        backend=backend,
        aligned=aligned,
        kernel_names=["k"] if aligned else [],
        estimate_ms=1.0,
        warmup=10,
        iterations=len(samples),
    )


@pytest.mark.parametrize(
    "trial_samples, expected_medians, expected_latency",
    [
        ([[1.0, 2.0, 3.0]], [2.0], 2.0),
        # mean of medians (2, 4, 9) = 5, not the median of all samples (4) nor their mean
        ([[1.0, 2.0, 3.0], [4.0, 4.0, 100.0], [8.0, 9.0, 10.0]], [2.0, 4.0, 9.0], 5.0),
        ([[1.0, 2.0], [3.0, 5.0]], [1.5, 4.0], 2.75),
    ],
)
def test_aggregate_mean_of_medians(trial_samples, expected_medians, expected_latency):
    latency = aggregate_trials([_trial(s) for s in trial_samples])
    assert latency.trial_medians_ms == expected_medians
    assert latency.latency_ms == pytest.approx(expected_latency)
    assert latency.aligned is True and latency.backend == "cupti"
    assert latency.num_trials == len(trial_samples)
    # raw samples are kept and the whole record round-trips through JSON
    dumped = json.loads(json.dumps(latency.model_dump()))
    assert [t["samples_ms"] for t in dumped["trials"]] == trial_samples
    assert type(latency).model_validate(dumped) == latency


def test_aggregate_non_aligned_trials():
    latency = aggregate_trials([_trial([1.0], aligned=False), _trial([3.0], aligned=False)])
    assert latency.aligned is False and latency.backend == "cuda_events"
    assert latency.latency_ms == 2.0


@pytest.mark.parametrize(
    "flags",
    [[True, False], [False, True], [True, True, False]],
)
def test_aggregate_refuses_mixing_aligned(flags):
    with pytest.raises(ValueError, match="aligned"):
        aggregate_trials([_trial([1.0], aligned=flag) for flag in flags])


def test_aggregate_refuses_empty():
    with pytest.raises(ValueError):
        aggregate_trials([])


def test_timing_config_defaults_are_official():
    config = TimingConfig()
    assert (config.warmup, config.iterations, config.num_trials) == (10, 50, 3)
    with pytest.raises(ValueError):
        TimingConfig(iterations=0)


# --------------------------------------------------------------------------------------
# CUPTI glue against a fake bindings module (CPU)
# --------------------------------------------------------------------------------------


class _FakeKind(enum.IntEnum):
    MEMCPY = 1
    MEMSET = 2
    RUNTIME = 5
    DRIVER = 6
    CONCURRENT_KERNEL = 10
    MARKER = 12


class _FakeCupti:
    """Stands in for ``cupti.cupti``: records calls, replays canned activity records."""

    ActivityKind = _FakeKind

    def __init__(self, records, fail_enable=False):
        self.records = records
        self.fail_enable = fail_enable
        self.calls: list[tuple] = []
        self.enabled: set[int] = set()
        self.callbacks = None

    def activity_register_callbacks(self, requested, completed):
        self.calls.append(("register",))
        self.callbacks = (requested, completed)

    def activity_enable(self, kind):
        if self.fail_enable and kind == _FakeKind.DRIVER:
            raise RuntimeError("CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED")
        self.calls.append(("enable", int(kind)))
        self.enabled.add(int(kind))

    def activity_disable(self, kind):
        self.calls.append(("disable", int(kind)))
        self.enabled.discard(int(kind))

    def activity_flush_all(self, flag):
        self.calls.append(("flush", flag))
        requested, completed = self.callbacks
        size, max_records = requested()
        assert size > 0 and max_records == 0
        completed(self.records)

    def finalize(self):
        self.calls.append(("finalize",))

    def get_timestamp(self):
        return 123


def _rec(kind, start, end, corr, **extra):
    return SimpleNamespace(kind=int(kind), start=start, end=end, correlation_id=corr, **extra)


def test_collector_converts_records_and_tears_down():
    records = [
        _rec(_FakeKind.RUNTIME, 10, 20, 1, cbid=211),
        _rec(_FakeKind.DRIVER, 12, 18, 2, cbid=307),
        _rec(_FakeKind.CONCURRENT_KERNEL, 100, 200, 1, name="gemm_kernel"),
        _rec(_FakeKind.MEMCPY, 200, 210, 2, copy_kind=8, bytes=64),
        _rec(_FakeKind.MEMSET, 210, 220, 2, bytes=16, value=0),
        _rec(_FakeKind.MARKER, 0, 0, 0),
    ]
    fake = _FakeCupti(records)
    collector = _CuptiCollector(fake)
    collector.start()
    assert fake.calls[0] == ("register",)
    assert fake.enabled == {1, 2, 5, 6, 10}
    assert collector.timestamp() == 123
    collector.stop()
    assert fake.enabled == set()
    assert fake.calls[-1] == ("finalize",)
    assert ("flush", 0) in fake.calls
    assert collector.launches == [ApiLaunch(10, 20, 1), ApiLaunch(12, 18, 2)]
    assert collector.activities == [
        GpuActivity(100, 200, 1, "gemm_kernel"),
        GpuActivity(200, 210, 2, "[memcpy kind=8 bytes=64]"),
        GpuActivity(210, 220, 2, "[memset bytes=16 value=0]"),
    ]
    spans, names = analyse_activities([(0, 50)], collector.activities, collector.launches)
    assert spans == pytest.approx([120 * NS])
    assert names == ["[memcpy kind=8 bytes=64]", "[memset bytes=16 value=0]", "gemm_kernel"]


def test_collector_start_failure_is_timing_error_and_cleans_up():
    fake = _FakeCupti([], fail_enable=True)
    collector = _CuptiCollector(fake)
    with pytest.raises(TimingError, match="could not start CUPTI"):
        collector.start()
    assert fake.enabled == set()
    assert fake.calls[-1] == ("finalize",)


def test_collectors_keep_state_per_call():
    first = _CuptiCollector(_FakeCupti([_rec(_FakeKind.RUNTIME, 1, 2, 1)]))
    second = _CuptiCollector(_FakeCupti([]))
    first.start()
    first.stop()
    second.start()
    second.stop()
    assert len(first.launches) == 1 and second.launches == []


# --------------------------------------------------------------------------------------
# time_trial without a GPU
# --------------------------------------------------------------------------------------


def _cupti_usable() -> bool:
    from harness.timing import cupti_status

    return cupti_status()[0]


@pytest.mark.skipif(_cupti_usable(), reason="cupti-python is installed here")
def test_cupti_backend_requested_but_unavailable():
    with pytest.raises(TimingError, match="CUPTI backend requested but unavailable"):
        time_trial(lambda: None, (), warmup=0, iterations=1, backend="cupti")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_time_trial_without_gpu_is_timing_error():
    with pytest.raises(TimingError, match="CUDA"):
        time_trial(lambda: None, (), warmup=0, iterations=1, backend="cuda_events")


def test_time_trial_rejects_bad_counts():
    with pytest.raises(ValueError):
        time_trial(lambda: None, (), warmup=0, iterations=0)
    with pytest.raises(ValueError):
        time_trial(lambda: None, (), warmup=-1, iterations=1)
    with pytest.raises(ValueError):
        time_trial(lambda: None, (), warmup=0, iterations=1, backend="wallclock")


# --------------------------------------------------------------------------------------
# GPU
# --------------------------------------------------------------------------------------

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
needs_cupti = pytest.mark.skipif(not _cupti_usable(), reason="needs cupti-python >= 13")

GPU_BACKENDS = [
    pytest.param("cupti", marks=needs_cupti),
    "cuda_events",
]


def _matmul_case():
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    return torch.matmul, (a, b), 1


def _two_kernel_case():
    x = torch.randn(1 << 20, device="cuda")
    y = torch.empty_like(x)

    def scale_then_shift(src, dst):
        torch.mul(src, 2.0, out=dst)
        dst.add_(1.0)

    return scale_then_shift, (x, y), 2


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("backend", GPU_BACKENDS)
@pytest.mark.parametrize("make_case", [_matmul_case, _two_kernel_case], ids=["matmul", "two-kernels"])
def test_time_trial_gpu(backend, make_case):
    fn, args, min_kernels = make_case()
    trial = time_trial(fn, args, warmup=3, iterations=12, backend=backend)
    assert trial.backend == backend
    assert len(trial.samples_ms) == 12
    assert all(sample > 0 for sample in trial.samples_ms)
    assert trial.median_ms == median(trial.samples_ms)
    assert trial.flush_bytes >= 2 * torch.cuda.get_device_properties(0).L2_cache_size - (1 << 20)
    if backend == "cupti":
        assert trial.aligned is True and trial.note is None
        assert len(trial.kernel_names) >= min_kernels
        # the flush (an int8 zero_ of 2 x L2) must not appear among the measured work
        assert not any(f"bytes={trial.flush_bytes}" in name for name in trial.kernel_names)
        assert not any("FillFunctor" in name for name in trial.kernel_names)
    else:
        assert trial.aligned is False and trial.note


@pytest.mark.gpu
@needs_gpu
@needs_cupti
def test_time_trial_gpu_no_launch_raises():
    def host_only(x):
        return x.shape[0] + 1

    x = torch.zeros(4, device="cuda")
    with pytest.raises(TimingError, match="no GPU activity recorded in timed iteration 0"):
        time_trial(host_only, (x,), warmup=1, iterations=5, backend="cupti")


@pytest.mark.gpu
@needs_gpu
@needs_cupti
def test_time_trial_gpu_repeated_cupti_calls_and_aggregate():
    fn, args, _ = _matmul_case()
    trials = [time_trial(fn, args, warmup=2, iterations=8, backend="cupti") for _ in range(3)]
    latency = aggregate_trials(trials)
    assert latency.aligned and latency.num_trials == 3
    assert latency.latency_ms == pytest.approx(sum(t.median_ms for t in trials) / 3)


@pytest.mark.gpu
@needs_gpu
def test_time_trial_gpu_auto_backend_labels_itself():
    fn, args, _ = _matmul_case()
    trial = time_trial(fn, args, warmup=1, iterations=4, backend="auto")
    assert trial.aligned == (trial.backend == "cupti")
    if trial.backend == "cuda_events":
        assert "CUPTI unavailable" in (trial.note or "")
