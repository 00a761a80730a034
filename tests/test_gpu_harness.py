"""The harness on a GPU: official timing in the pipeline, a broken CUDA context, a harness that never
touches CUDA itself. Runs only where a GPU is visible (marker `gpu`)."""

from __future__ import annotations

import pytest

from harness.archive import Archive
from harness.dataset import Dataset
from harness.evaluate import Session, SubmitOptions
from harness.schema import Solution
from support import KV8_PS1, example_solution, triton_example

pytestmark = pytest.mark.gpu

WORKLOADS = ["uniform_b1_kv512", "uniform_b64_kv2048", "skewed_b64"]


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    archive = Archive(tmp_path_factory.mktemp("archive"))
    with Session(Dataset(), archive, SubmitOptions(workloads=WORKLOADS)) as s:
        yield s


def test_example_solution_is_timed_officially(session):
    result = session.submit(Solution.model_validate(triton_example(KV8_PS1)))
    assert [w.status for w in result.workloads] == ["PASSED"] * 3, [w.message for w in result.workloads]
    for w in result.workloads:
        assert w.latency_ms > 0 and w.reference_latency_ms > 0 and w.speedup_factor > 0
        assert w.aligned is True, w.timing_note  # CUPTI: the official method
        assert len(w.timing) == 3 and all(len(t["samples_ms"]) == 50 for t in w.timing)
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
