"""A worker's timing reply read into the workload's result (harness.measure.timing_reply), on recorded-shape replies."""

import pytest

from harness.audits.verdicts import AuditConfig
from harness.data.results import WorkloadResult
from harness.measure.timing_reply import apply_timing_reply
from harness.sandbox.messages import TimeReply


def trial(median, aligned=True, walls=(), traced=(), names=("k",), note=""):
    return {"samples_ms": [median], "median_ms": median, "aligned": aligned,
            "backend": "cupti" if aligned else "cuda_events", "warmup": 10, "iterations": 1,
            "wall_ms": list(walls), "traced_wall_ms": list(traced), "kernel_names": list(names), "note": note}


def result():
    return WorkloadResult("w", "label", "PASSED")


def test_official_and_kernel_figures_and_the_clock_audit_on_the_kernel_calls():
    wr = result()
    header = {"ok": True, "trials": [trial(0.30), trial(0.34)],
              "kernel_trials": [trial(0.12), trial(0.10, walls=[0.12, 0.13], traced=[0.14])]}
    apply_timing_reply(wr, TimeReply.model_validate(header), AuditConfig())
    assert wr.latency_ms == pytest.approx(0.32) and wr.kernel_latency_ms == pytest.approx(0.11) and wr.aligned
    [clock] = [a for a in wr.audits if a.name == "clock_truth"]
    assert clock.passed and "span 0.1 ms" in clock.detail  # the kernel trial's span, not the official one
    assert wr.timing_note == "" and not wr.throttled


@pytest.mark.parametrize("header, status, note", [
    ({"ok": False, "error": "CUDA error: an illegal memory access"}, "RUNTIME_ERROR", ""),
    ({"ok": True, "trials": [trial(0.5, aligned=False, note="CUPTI unavailable")]}, "PASSED", "CUPTI unavailable"),
    ({"ok": True, "trials": [trial(0.5)],
      "gpu_state_before": {"available": True, "throttle_reasons": ["sw_thermal_slowdown"]},
      "gpu_state_after": {"available": True}}, "PASSED", "GPU throttled: sw_thermal_slowdown"),
])
def test_failures_fallbacks_and_throttling_are_said(header, status, note):
    wr = result()
    apply_timing_reply(wr, TimeReply.model_validate(header), AuditConfig())
    assert wr.status == status and note in (wr.timing_note or "")
    if status != "PASSED":
        assert wr.message.startswith("timing: CUDA error") and wr.latency_ms is None


@pytest.mark.parametrize("kernel_ns, iterations, busy", [
    # one kernel of 3 us per call over 50 calls, on a 30 us span: the span is mostly host work
    ([{"gdn": 150_000.0}], 50, 0.003),
    # kernels, a copy and a memset all count; two trials are averaged like the official figure
    ([{"a": 40_000.0, "[memcpy DtoD 64]": 10_000.0}, {"a": 45_000.0, "[memset 8]": 5_000.0}], 10, 0.005),
    # no activity durations (CPU timing, an older record): no figure, never 0
    ([{}], 10, None),
])
def test_gpu_busy_per_call_beside_the_span(kernel_ns, iterations, busy):
    wr = result()
    trials = [{**trial(0.030), "kernel_ns": ns, "iterations": iterations} for ns in kernel_ns]
    apply_timing_reply(wr, TimeReply.model_validate({"ok": True, "trials": trials}), AuditConfig())
    assert wr.latency_ms == pytest.approx(0.030)
    assert wr.gpu_busy_ms == (None if busy is None else pytest.approx(busy))


def test_the_clock_audit_compares_the_walls_with_the_span_of_their_own_trial():
    # Clock-truth calls run in the last trial only; an earlier trial on other inputs (MoE routing drawn from
    # its seed) took five times as long. The median over every trial's span would read as a tampered clock.
    wr = result()
    header = {"ok": True, "trials": [trial(1.0), trial(1.1), trial(0.20, walls=[0.21, 0.25], traced=[0.22, 0.23])]}
    apply_timing_reply(wr, TimeReply.model_validate(header), AuditConfig())
    [clock] = [a for a in wr.audits if a.name == "clock_truth"]
    assert clock.passed, clock.detail
    assert "span 0.2 ms" in clock.detail


@pytest.mark.parametrize("official_ns, kernel_ns, passed", [
    # FlashInfer-style plan: host work and two small copies (2 us each) beside a 7 us kernel
    ({"decode": 7_000.0, "[memcpy HtoD 256]": 2_000.0, "[memcpy DtoH 8]": 1_500.0}, {"decode": 7_000.0}, True),
    # a plan that launches a small index kernel: a few us, within the call's own work plus the slack
    ({"split": 200_000.0, "plan_kernel": 15_000.0}, {"split": 200_000.0}, True),
    # setup computes the attention (200 us); the timed call only copies the answer out (3 us)
    ({"attention": 200_000.0, "copy_out": 3_000.0}, {"copy_out": 3_000.0}, False),
    # the host variant: setup copies the cache to the host (1.4 ms of DtoH) to compute there
    ({"[memcpy DtoH 33554432]": 1_400_000.0, "[memcpy HtoD 65536]": 2_000.0}, {"[memcpy HtoD 65536]": 2_000.0}, False),
])
def test_setup_work_is_the_official_calls_gpu_time_beyond_the_kernel_calls(official_ns, kernel_ns, passed):
    wr = result()
    header = {"ok": True, "trials": [{**trial(0.5), "kernel_ns": official_ns}],
              "kernel_trials": [{**trial(0.1), "kernel_ns": kernel_ns}]}
    apply_timing_reply(wr, TimeReply.model_validate(header), AuditConfig())
    [setup] = [a for a in wr.audits if a.name == "setup_work"]
    assert setup.passed is passed, setup.detail
    no_setup = result()
    apply_timing_reply(no_setup, TimeReply.model_validate({"ok": True, "trials": header["trials"]}), AuditConfig())
    assert not [a for a in no_setup.audits if a.name == "setup_work"]  # no setup, no kernel figure: nothing to ask


@pytest.mark.parametrize("error, has_gpu, hinted", [
    ("AssertionError: q must be a CUDA tensor", False, True),
    ("RuntimeError: expected q.is_cuda", False, True),
    ("ValueError: Pointer argument cannot be accessed from Triton (cpu tensor?)", False, False),
    ("AssertionError: q must be a CUDA tensor", True, False),  # on a GPU host the check is the candidate's
    ("IndexError: index 7 is out of bounds", False, False),
    (None, False, False),
])
def test_a_cuda_check_failing_on_a_cpu_host_says_why(error, has_gpu, hinted):
    from harness.pipeline.workload_evaluation import cpu_host_hint

    assert bool(cpu_host_hint(error, has_gpu)) is hinted


_LOOP_CARRIED = ("InductorError: CompilationError: at 32:4:\n    for start in range(0, seq_len, BLOCK_N):\n    ^\n"
                 "AssertionError(\"Loop-carried variable m has initial type <['16'], fp32> but is re-assigned to "
                 "<['16'], fp64> in loop! Please make sure that the type stays consistent.\")")


@pytest.mark.parametrize("error, hinted", [
    (_LOOP_CARRIED, True),  # as an H100 host answered a torch.compile'd triton_op with a float scale
    (_LOOP_CARRIED.replace("fp64", "bf16"), False),  # the kernel's own type mistake: no torch.compile to blame
    ("AssertionError: Loop-carried variable acc has initial type fp32 but is re-assigned to fp64 in loop!", True),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", False),
    (None, False),
])
def test_a_float_argument_typed_fp64_by_inductor_is_named(error, hinted):
    from harness.pipeline.workload_evaluation import inductor_float_hint

    assert bool(inductor_float_hint(error)) is hinted


def test_the_triton_kernels_compiled_outside_the_solution_reach_the_result():
    """The worker's Triton cache says which kernels a library defined (harness.sandbox.triton_cache); attribution
    reads them from the result."""
    wr = result()
    header = {"ok": True, "trials": [trial(0.30)], "triton_kernels_elsewhere": ["gemm_kernel"]}
    apply_timing_reply(wr, TimeReply.model_validate(header), AuditConfig())
    assert wr.triton_kernels_elsewhere == ["gemm_kernel"]
    older = result()  # a worker that does not say: nothing is taken from elsewhere
    apply_timing_reply(older, TimeReply.model_validate({"ok": True, "trials": [trial(0.30)]}), AuditConfig())
    assert older.triton_kernels_elsewhere == []
