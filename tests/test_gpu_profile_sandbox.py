"""Nsight Compute inside the candidate's sandbox on a real GPU (harness.profiling.wall): the example's kernel
profiled with the metrics the controller asks for, and a candidate under ncu that looks for the archive finds
nothing. Runs only where a GPU is visible (marker `gpu`) and ncu can profile."""

from __future__ import annotations

import pytest

from controller.evidence.ncu_metrics import requested_metrics
from harness.data.dataset import Dataset
from harness.profiling import OK, profile_workloads, select_backend
from harness.sandbox.isolation import FULL, probe
from support import KV8_PS1, TORCH_CANDIDATE, solution_dict, triton_example

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def profiler():
    backend = select_backend("ncu")
    ok, why = backend.available()
    if not ok:
        pytest.skip(f"no profiler here: {why}")
    return backend


def test_the_example_is_profiled_inside_the_sandbox(profiler, tmp_path):
    [summary] = profile_workloads(profiler, triton_example(KV8_PS1), "h" * 64, ["uniform_b64_kv2048"],
                                  Dataset().root, requested_metrics("sm_90"), hidden=[str(tmp_path)])
    assert summary.status == OK, summary.reason + summary.log[-3000:]
    assert summary.sandbox == (FULL if probe()[0] else summary.sandbox)
    assert summary.kernels and summary.report, summary.log[-2000:]
    assert any(k.value("gpu__time_duration.sum") for k in summary.kernels)


def test_a_candidate_under_ncu_sees_no_archive(profiler, tmp_path):
    archive = tmp_path / "archive"
    archive.mkdir()
    (archive / "seal.key").write_text("SECRET-SEAL-KEY")
    probe_code = (f"def _probe():\n    try:\n        print('SAW', open({str(archive / 'seal.key')!r}).read(), "
                  "flush=True)\n    except OSError as err:\n        print('BLOCKED', type(err).__name__, flush=True)\n")
    call = "    batch, heads, dim = q.shape"
    source = probe_code + TORCH_CANDIDATE.replace(call, "    _probe()\n" + call)
    [summary] = profile_workloads(profiler, solution_dict(source), "h" * 64, ["uniform_b1_kv512"], Dataset().root,
                                  ["gpu__time_duration.sum"], hidden=[str(archive)])
    assert "SECRET-SEAL-KEY" not in summary.log and "BLOCKED" in summary.log, summary.log[-3000:]
