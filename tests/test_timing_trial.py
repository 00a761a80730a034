"""Tests for harness.measure.timing, the timer itself: CUPTI glue against a fake bindings module (CPU), time_trial
without a GPU, and the real timer on GPU."""

from __future__ import annotations

import enum
from types import SimpleNamespace

import pytest

from harness.measure.timing import (
    ApiLaunch,
    GpuActivity,
    TimingError,
    _CuptiCollector,
    aggregate_trials,
    analyse_activities,
    median,
    time_trial,
)
from harness.measure.cupti_trace import api_base_name
from harness.measure.timing_records import unlaunched_activities

torch = pytest.importorskip("torch")

# Times are CUPTI nanoseconds; spans come back in ms, so 1000 ns == 0.001 ms.
NS = 1e-6


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


def test_the_timed_loop_reports_its_host_steps_in_order(monkeypatch):
    """Where a trial's host time goes (TrialTiming.host_s): CUPTI on, the timed calls, its records delivered and
    CUPTI off, the analysis; each step once, in that order, the fake's records still measured as before."""
    from harness.measure.timing import _timed_cupti

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    fake = _FakeCupti([_rec(_FakeKind.RUNTIME, 123, 123, 1, cbid=211),
                       _rec(_FakeKind.CONCURRENT_KERNEL, 200, 300, 1, name="k")])
    laps: list[str] = []
    spans, names, per_kernel, walls = _timed_cupti(fake, lambda: None, (), 1, lambda: None, laps.append)
    assert laps == ["tracer_start", "timed_calls", "tracer_stop", "analysis"]
    assert spans == pytest.approx([100 * NS]) and names == ["k"] and set(per_kernel) == {"k"}
    assert len(walls) == 1


def test_the_timed_loop_takes_each_calls_traced_wall_for_the_clock_truth_audit(monkeypatch):
    """The clock-truth audit's walls under tracing come from the timed calls themselves (no second tracer, no extra
    calls): one per timed iteration, from before the call to the synchronisation after it, so host work inside the
    call (here a sleep) and the synchronisation's wait are both in it, while the flush before the window is not."""
    import time

    from harness.measure.timing import _timed_cupti

    synced: list[float] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: (time.sleep(0.002), synced.append(1)))
    fake = _FakeCupti([_rec(_FakeKind.RUNTIME, 123, 123, 1, cbid=211),
                       _rec(_FakeKind.CONCURRENT_KERNEL, 200, 300, 1, name="k")])
    _, _, _, walls = _timed_cupti(fake, lambda: time.sleep(0.003), (), 1, lambda: time.sleep(0.02))
    assert len(walls) == 1 and len(synced) == 2
    assert 5.0 <= walls[0] < 20.0, walls  # the call's 3 ms and the 2 ms wait after it; not the flush


class _RuntimeCbid(enum.IntEnum):
    cudaGetDevice_v3020 = 17
    cudaLaunchKernel_v7000 = 211
    cudaMemcpyAsync_v3020 = 41
    cudaStreamGetCaptureInfo_v2_ptsz_v11030 = 330
    cudaStreamSynchronize_v3020 = 131


class _DriverCbid(enum.IntEnum):
    cuCtxGetCurrent = 305
    cuLaunchKernel = 307
    cuLaunchKernel_ptsz = 442


class _QuietingCupti(_FakeCupti):
    runtime_api_trace_cbid = _RuntimeCbid
    driver_api_trace_cbid = _DriverCbid

    def __init__(self, records):
        super().__init__(records)
        self.quiet: set[tuple[str, int]] = set()

    def activity_enable_runtime_api(self, cbid, enable):
        assert _FakeKind.RUNTIME in self.enabled, "the kind is enabled before its APIs are chosen"
        self.quiet.add(("runtime", cbid)) if not enable else None

    def activity_enable_driver_api(self, cbid, enable):
        self.quiet.add(("driver", cbid)) if not enable else None


@pytest.mark.parametrize("member, api", [
    ("cudaGetDevice_v3020", "cudaGetDevice"),
    ("cudaStreamGetCaptureInfo_v2_ptsz_v11030", "cudaStreamGetCaptureInfo"),
    ("cudaLaunchKernel_ptsz_v7000", "cudaLaunchKernel"),
    ("cuLaunchKernel_ptsz", "cuLaunchKernel"),
    ("cuGetProcAddress_v2", "cuGetProcAddress"),
    ("cudaMemcpy2DAsync_v3020", "cudaMemcpy2DAsync"),
    ("cuCtxGetCurrent", "cuCtxGetCurrent"),
])
def test_api_base_name(member, api):
    assert api_base_name(member) == api


def test_collector_leaves_out_query_apis_only():
    fake = _QuietingCupti([])
    collector = _CuptiCollector(fake)
    collector.start()
    collector.stop()
    # queries are left out; launches, copies and synchronisations stay traced
    assert fake.quiet == {("runtime", 17), ("runtime", 330), ("driver", 305)}
    assert collector.quieted == 3


def test_collector_without_per_api_switches_traces_every_call():
    collector = _CuptiCollector(_FakeCupti([]))  # an older cupti-python: no activity_enable_runtime_api
    collector.start()
    collector.stop()
    assert collector.quieted == 0


def test_an_activity_without_its_launch_record_is_an_error():
    launches = [ApiLaunch(10, 12, 1), ApiLaunch(40, 42, 3)]
    flush_before = GpuActivity(5, 8, 99, "flush")  # ran before the first window: not the timer's business
    kernel = GpuActivity(20, 30, 1, "k")
    unlaunched = GpuActivity(50, 60, 7, "hidden")
    assert unlaunched_activities([(9, 45)], [flush_before, kernel], launches) == []
    assert analyse_activities([(9, 45)], [flush_before, kernel], launches)[1] == ["k"]
    assert unlaunched_activities([(9, 45)], [kernel, unlaunched], launches) == [unlaunched]
    with pytest.raises(TimingError, match="1 GPU activities in the timed calls have no launch record: {hidden}"):
        analyse_activities([(9, 45)], [kernel, unlaunched], launches)


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
    from harness.measure.timing import cupti_status

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
    expected_steps = {"setup", "untimed", "tracer_start", "timed_calls", "tracer_stop", "analysis"}
    assert set(trial.host_s) == (expected_steps if backend == "cupti" else {"setup", "untimed", "timed_calls"})
    assert all(v >= 0 for v in trial.host_s.values())
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
