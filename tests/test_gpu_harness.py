"""The harness on a GPU: official timing in the pipeline, a broken CUDA context, a harness that never
touches CUDA itself. Runs only where a GPU is visible (marker `gpu`)."""

from __future__ import annotations

import pytest

from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.pipeline.evaluate import Session, SubmitOptions
from harness.data.schema import Solution
from support import KV8_PS1, TORCH_CANDIDATE, example_solution, triton_example

pytestmark = pytest.mark.gpu

WORKLOADS = ["uniform_b1_kv512", "uniform_b64_kv2048", "skewed_b64"]


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    archive = Archive(tmp_path_factory.mktemp("archive"))
    with Session(Dataset(), archive, SubmitOptions(workloads=WORKLOADS, reference_timing=True)) as s:
        yield s


def test_example_solution_is_timed_officially(session):
    result = session.submit(Solution.model_validate(triton_example(KV8_PS1)))
    assert [w.status for w in result.workloads] == ["PASSED"] * 3, [w.message for w in result.workloads]
    for w in result.workloads:
        assert w.latency_ms > 0 and w.reference_latency_ms > 0 and w.speedup_factor > 0
        assert w.aligned is True, w.timing_note  # CUPTI: the official method
        assert len(w.timing) == 3 and all(len(t["samples_ms"]) == 50 for t in w.timing)
        # attribution from the timer's own CUPTI records: the example's kernel did all the compute
        attribution = next(a for a in w.audits if a.name == "attribution")
        assert attribution.passed and attribution.share > 0.99, attribution
        # GPU memory per process, within what the workload needs
        assert w.memory["processes"]["candidate"]["peak_bytes"] > 0 and w.memory["within_budget"], w.memory
    assert result.promotion_blockers == [], result.promotion_blockers
    # where the workers' time went: the timer's own steps, and the clock-truth calls beside it
    steps = result.worker_steps_s
    assert {"candidate.time.timer.timed_calls", "candidate.time.timer.tracer_stop", "candidate.time.inputs",
            "candidate.run.call", "candidate.time.clock_truth"} <= set(steps), steps
    rows = list(session.archive.db["timing_samples"].rows)
    assert len(rows) >= 9
    # A batch of 64 x 2048 tokens moves 64 MiB of KV: it cannot take less than ~15 us on any GPU.
    assert result.workloads[1].latency_ms > 0.015


def test_illegal_memory_access_is_a_runtime_error_and_the_session_survives(session):
    bad = session.submit(Solution.model_validate(example_solution("illegal_address")))
    first = bad.workloads[0]
    assert first.status == "RUNTIME_ERROR"
    assert "illegal" in (first.message + first.log).lower()
    assert all(w.status == "RUNTIME_ERROR" for w in bad.workloads)  # each in a fresh process, each fails
    good = session.submit(Solution.model_validate(triton_example(KV8_PS1)))
    assert good.status == "PASSED"


def test_the_harness_process_never_initialises_cuda(session):
    import torch

    session.submit(Solution.model_validate(triton_example(KV8_PS1)))
    assert not torch.cuda.is_initialized()


def test_flashinfer_baselines_roofline_and_scores(tmp_path):
    archive = Archive(tmp_path / "archive")
    with Session(Dataset(), archive, SubmitOptions(workloads=["uniform_b1_kv512", "uniform_b64_kv2048"],
                                                   reference_timing=True)) as s:
        result = s.submit(Solution.model_validate(triton_example(KV8_PS1)))
        runs_after_first = archive.db["baseline_runs"].count
        again = s.submit(Solution.model_validate(triton_example(KV8_PS1)))
    assert result.status == "PASSED"
    for w in result.workloads:
        # plan() inside the timed call costs host time the kernel figure does not pay
        assert w.fi_official_ms > w.fi_kernel_ms > 0
        assert w.speedup_vs_fi_official == pytest.approx(w.fi_official_ms / w.latency_ms)
        assert 0 < w.floor_ms < w.latency_ms and 0 < w.fraction_of_floor <= 1.05
        assert any(a.name == "roofline_plausibility" and a.passed for a in w.audits)
    assert runs_after_first == 4  # 2 workloads x 2 FlashInfer variants, measured once...
    assert archive.db["baseline_runs"].count == 4  # ...and reused by the second submission
    assert again.workloads[0].fi_official_ms == result.workloads[0].fi_official_ms
    assert result.scores["vs_flashinfer_official"] > 0 and result.scores["vs_reference"] > 1


def test_baseline_solutions_submitted_directly_report_both_figures_and_pass_every_audit(tmp_path):
    """The FlashInfer baselines are honest: submitted as candidates, no audit of the default level flags them
    (the adversarial suite's zero-false-positive rule; FlashInfer needs a GPU, so it is checked here)."""
    from harness.data.dataset import Dataset as DS

    opts = SubmitOptions(workloads=["uniform_b1_kv8192", "uniform_b16_kv2048"], baselines=False)
    with Session(Dataset(), Archive(tmp_path / "a"), opts) as s:
        for baseline in DS().baselines(KV8_PS1):
            result = s.submit(baseline)
            for w in result.workloads:
                assert w.status == "PASSED" and w.latency_ms > w.kernel_latency_ms > 0, (baseline.name, w.message)
            assert result.promotion_blockers == [], (baseline.name, result.promotion_blockers)


def test_submissions_spread_over_all_gpus(tmp_path):
    import torch

    from harness.pipeline.parallel import submit_all

    solutions = [Solution.model_validate(triton_example(d)) for d in
                 ("gqa_paged_decode_h32_kv8_d128_ps1", "gqa_paged_decode_h32_kv4_d128_ps1")]
    results = submit_all(solutions, Dataset(), tmp_path / "archive",
                         SubmitOptions(workloads=["uniform_b16_kv512"], baselines=False))
    assert [r.definition for r in results] == [s.definition for s in solutions]
    assert all(r.status == "PASSED" for r in results)
    archive = Archive(tmp_path / "archive")
    gpus = {archive.submission(r.submission_id)["environment"].get("gpu_uuid") for r in results}
    assert len(gpus) == min(2, torch.cuda.device_count())


# Computes honestly on the first call per buffer pair, then launches nothing: the timer reuses buffers. It keeps
# every pair it has seen alive, so the allocator never hands a correctness trial an address it knows (a cache
# keyed by addresses alone is caught earlier, as INCORRECT_NUMERICAL, when trial 2 reuses trial 1's memory).
LAUNCHES_NOTHING_WHEN_WARM = TORCH_CANDIDATE.replace("def run(", "def _compute(") + '''

_seen = {}


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    key = (q.data_ptr(), output.data_ptr())
    if key not in _seen:
        _seen[key] = (q, output)
        _compute(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse)
'''


SPINS_FOREVER = '''
import triton
import triton.language as tl


@triton.jit
def _spin(flag_ptr):
    while tl.load(flag_ptr, volatile=True) == 0:
        pass


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    flag = kv_indptr[:1] * 0  # a fresh zero that nobody will ever set
    _spin[(1,)](flag)
'''


def _solution(source: str, name: str) -> Solution:
    return Solution.model_validate({
        "name": name, "definition": KV8_PS1, "author": "tests",
        "spec": {"language": "triton", "target_hardware": ["H200"], "entry_point": "kernel.py::run",
                 "destination_passing_style": True},
        "sources": [{"path": "kernel.py", "content": source}]})


def test_pytorch_doing_the_work_is_a_fallback_found_at_run_time(session):
    """No source scan needed: the timer's CUPTI records show aten and cuBLAS kernels doing the compute."""
    result = session.submit(_solution(TORCH_CANDIDATE, "torch_only"))
    attribution = [a for w in result.workloads for a in w.audits if a.name == "attribution"]
    assert attribution and all(not a.passed and a.detail.startswith("fallback") for a in attribution), attribution
    assert result.promotion_blockers and any(w.status == "PASSED" for w in result.workloads)


def test_a_call_that_launches_nothing_during_timing_is_a_runtime_error(session):
    result = session.submit(_solution(LAUNCHES_NOTHING_WHEN_WARM, "launches_nothing"))
    w = result.workloads[0]
    assert w.status == "RUNTIME_ERROR" and "no GPU activity" in w.message, w.message


def test_a_kernel_that_never_finishes_is_a_timeout_and_the_gpu_stays_usable(tmp_path):
    with Session(Dataset(), Archive(tmp_path / "a"),
                 SubmitOptions(workloads=["uniform_b1_kv512"], timeout_s=30, baselines=False)) as s:
        hung = s.submit(_solution(SPINS_FOREVER, "spins_forever"))
        assert hung.workloads[0].status == "TIMEOUT"
        after = s.submit(Solution.model_validate(triton_example(KV8_PS1)))
    assert after.status == "PASSED"
