"""Tests for harness.measure.timing, pure logic on CPU: attribution of GPU activities to iterations, kernel-set
consistency, statistics and aggregation of trials."""

from __future__ import annotations

import json

import pytest

from harness.measure.timing import (
    ApiLaunch,
    GpuActivity,
    TimingConfig,
    TimingError,
    TrialTiming,
    aggregate_trials,
    analyse_activities,
    attribute_activities,
    check_kernel_sets,
    flush_buffer_bytes,
    median,
    span_per_iteration,
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
