"""C++ and CUDA solutions on a machine without a GPU: C++ builds and runs (torch binding), CUDA is
compiled by nvcc to a cubin for the target so compile errors are caught, and nothing pretends to run."""

from __future__ import annotations

import shutil

import pytest

from harness.archive.database import Archive
from harness.data.dataset import Dataset
from harness.pipeline.evaluate import Session, SubmitOptions
from harness.data.schema import Solution
from support import KV8_PS1

CPP_ZEROS = """
#include <torch/extension.h>

// Builds and runs, but computes nothing: the harness must judge it, not crash on it.
void run(torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache, torch::Tensor kv_indptr,
         torch::Tensor kv_indices, double sm_scale, torch::Tensor output, torch::Tensor lse) {
  output.zero_();
  lse.zero_();
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); }
"""

CUDA_KERNEL = """
extern "C" __global__ void fill(float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 0.0f;
}
"""


def native(source: str, language: str, path: str, binding: str | None) -> Solution:
    return Solution.model_validate({
        "name": f"native_{language}", "definition": KV8_PS1, "author": "tests",
        "spec": {"language": language, "target_hardware": ["H200"], "entry_point": f"{path}::run",
                 "destination_passing_style": True, "binding": binding},
        "sources": [{"path": path, "content": source}]})


@pytest.fixture(scope="module")
def session(tiny_dataset_root, tmp_path_factory):
    with Session(Dataset(tiny_dataset_root), Archive(tmp_path_factory.mktemp("a")),
                 SubmitOptions(workloads=["tiny_b2_t40"], timeout_s=600)) as s:
        yield s


@pytest.mark.slow
def test_cpp_with_torch_binding_builds_runs_and_is_judged(session):
    result = session.submit(native(CPP_ZEROS, "cpp", "kernel.cpp", "torch"))
    assert result.workloads[0].status == "INCORRECT_NUMERICAL", result.workloads[0].message


@pytest.mark.slow
def test_cpp_compile_error_is_recorded_with_the_compiler_output(session):
    result = session.submit(native(CPP_ZEROS.replace("lse.zero_();", "lse.zero_()"), "cpp", "kernel.cpp", "torch"))
    w = result.workloads[0]
    assert w.status == "COMPILE_ERROR" and "error" in w.log.lower() and "kernel.cpp" in w.log


def test_tvm_ffi_binding_without_the_package_is_a_clear_compile_error(session):
    pytest.importorskip("torch")
    try:
        import tvm_ffi  # noqa: F401
        pytest.skip("apache-tvm-ffi is installed here")
    except ImportError:
        pass
    result = session.submit(native(CPP_ZEROS, "cpp", "kernel.cpp", None))
    assert result.workloads[0].status == "COMPILE_ERROR"
    assert "apache-tvm-ffi" in result.workloads[0].message


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_cuda_without_a_gpu_is_compiled_to_a_cubin_and_not_run(session):
    result = session.submit(native(CUDA_KERNEL, "cuda", "kernel.cu", "torch"))
    w = result.workloads[0]
    assert w.status == "SKIPPED" and "compiled with nvcc for sm_90a" in w.message
    assert result.status == "SKIPPED" and not result.all_passed


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_cuda_compile_error_without_a_gpu_is_caught(session):
    result = session.submit(native(CUDA_KERNEL.replace("0.0f;", "0.0f"), "cuda", "kernel.cu", "torch"))
    w = result.workloads[0]
    assert w.status == "COMPILE_ERROR" and "nvcc failed on kernel.cu" in w.message and "error" in w.log
