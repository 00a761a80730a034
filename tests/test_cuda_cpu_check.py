"""nvcc's compile-only check on a host without a GPU (harness/sandbox/cuda_check.py): honest CUDA code that includes
torch's stream/guard/context headers is not a COMPILE_ERROR because this host has the CPU wheel of torch and a
partial toolkit; the candidate's own errors still are; what cannot be checked here is SKIPPED with the reason."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.data.schema import Definition, Solution, load_model
from harness.sandbox import cuda_check
from harness.sandbox.build import BuildError, build

from support import DEFINITIONS, KV8_PS1, solution_dict

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

# what a contestant's .cu looks like: torch's guard, stream and launch check, dispatched over bf16/fp16
TORCH_CUDA = """
#include <ATen/cuda/CUDAContext.h>
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <limits>

template <typename scalar_t>
__global__ void scale(scalar_t* x, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = static_cast<scalar_t>(static_cast<float>(x[i]) * s);
  if (i == n) x[0] = static_cast<scalar_t>(std::numeric_limits<float>::infinity());  // --expt-relaxed-constexpr
}

void run(at::Tensor x, double s) {
  TORCH_CHECK(x.is_cuda(), "x must be on the GPU");
  const c10::cuda::CUDAGuard guard(x.device());
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int n = x.numel();
  AT_DISPATCH_REDUCED_FLOATING_TYPES(x.scalar_type(), "scale", [&] {
    scale<scalar_t><<<(n + 255) / 256, 256, 0, stream>>>(x.data_ptr<scalar_t>(), static_cast<float>(s), n);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""
TYPE_ERROR = TORCH_CUDA.replace("const int n = x.numel();", "const int* n = x.numel();")
CUBLAS_CALL = TORCH_CUDA.replace("C10_CUDA_KERNEL_LAUNCH_CHECK();", (
    "C10_CUDA_KERNEL_LAUNCH_CHECK();\n"
    "  TORCH_CUDABLAS_CHECK(cublasSetStream(at::cuda::getCurrentCUDABlasHandle(), stream));"))
TORCH_INCLUDE = Path(__import__("torch").__file__).parent / "include"


@pytest.fixture(scope="module")
def definition() -> Definition:
    return load_model(Definition, DEFINITIONS / "definitions" / "gqa_paged" / f"{KV8_PS1}.json")


def cuda(source: str, binding: str = "torch", extra: dict[str, str] | None = None) -> Solution:
    data = solution_dict(source, entry="kernel.cu::run", language="cuda", extra_sources=extra)
    data["spec"]["binding"] = binding
    return Solution.model_validate(data)


def _cpu_host_lacks(header: str) -> bool:
    return header in cuda_check.absent_headers(shutil.which("nvcc"), ["-isystem", str(TORCH_INCLUDE)],
                                               Path(__import__("tempfile").mkdtemp()))


def test_torch_stream_guard_and_context_headers_compile_on_a_cpu_host(definition, tmp_path):
    built = build(cuda(TORCH_CUDA), definition, tmp_path, have_gpu=False)
    assert built.compile_only and list(built.artifacts) == ["cubin:kernel.cu"] and built.note == ""
    assert Path(built.artifacts["cubin:kernel.cu"]).read_bytes()[:4] == b"\x7fELF"
    if not (TORCH_INCLUDE / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").exists():  # the CPU wheel
        assert "stand-ins for headers this host lacks: " in built.log and "cuda_cmake_macros.h" in built.log
    assert "-std=c++" in built.log


def test_a_type_error_in_the_candidates_code_is_still_a_compile_error(definition, tmp_path):
    with pytest.raises(BuildError, match="nvcc failed on kernel.cu") as err:
        build(cuda(TYPE_ERROR), definition, tmp_path, have_gpu=False)
    assert 'kernel.cu(21): error: a value of type "int64_t"' in err.value.log and "const int *" in err.value.log


def test_a_missing_header_of_the_candidates_own_is_a_compile_error(definition, tmp_path):
    source = '#include "helpers.cuh"\n' + TORCH_CUDA
    with pytest.raises(BuildError, match="nvcc failed on kernel.cu") as err:
        build(cuda(source), definition, tmp_path, have_gpu=False)
    assert "helpers.cuh: No such file or directory" in err.value.log


@pytest.mark.parametrize("include", ['/* x */#include "helper.py"', '#/**/include "helper.py"',
                                     '#inc\\\nlude "helper.py"'])
def test_a_python_file_an_include_the_gate_does_not_read_is_never_written_for_the_build(definition, tmp_path,
                                                                                     include):
    """Red team: an #include spelled so the gate's reading misses it compiled a .py file the gate scanned only as
    Python (whose findings block nothing in a CUDA solution). What the gate calls unreached is not written."""
    helper = "static int helper_value() { return 1; }\n"
    with pytest.raises(BuildError, match="nvcc failed on kernel.cu") as err:
        build(cuda(include + "\n" + TORCH_CUDA, extra={"helper.py": helper}), definition, tmp_path, have_gpu=False)
    assert "helper.py: No such file or directory" in err.value.log
    built = build(cuda('#include "helper.py"\n' + TORCH_CUDA, extra={"helper.py": helper}), definition,
                  tmp_path / "seen", have_gpu=False)  # an include the gate reads: written, and scanned as C++
    assert built.compile_only and "cubin:kernel.cu" in built.artifacts


def test_a_header_only_a_gpu_host_has_makes_the_file_not_checkable_here(definition, tmp_path):
    if not _cpu_host_lacks("cusparse.h"):  # a stand-in question only where the toolkit is partial
        pytest.skip("this host's toolkit is complete")
    source = "#include <cudnn.h>\n" + TORCH_CUDA
    built = build(cuda(source, extra={"ok.cu": TORCH_CUDA}), definition, tmp_path, have_gpu=False)
    assert built.compile_only and list(built.artifacts) == ["cubin:ok.cu"]  # the other file is still checked
    assert "not checkable on this host: kernel.cu includes <cudnn.h>, which cuDNN provides" in built.note


def test_calling_a_library_whose_headers_are_stood_in_for_is_not_checkable_here(definition, tmp_path):
    if not _cpu_host_lacks("cublas_v2.h"):
        pytest.skip("this host has cuBLAS's headers: the call is checked for real")
    built = build(cuda(CUBLAS_CALL), definition, tmp_path, have_gpu=False)
    assert built.compile_only and not built.artifacts
    assert "kernel.cu uses cublas, whose headers this host lacks" in built.note


def test_a_library_header_included_by_a_header_of_the_solutions_own_is_named_with_it(definition, tmp_path):
    """Red team round 4: the note named the .cu while the CUTLASS include stood in one of the solution's headers."""
    kernel = '#include "include/mma_helpers.cuh"\n__global__ void k(float* x) { x[0] = 1.0f; }\n'
    helpers = "#pragma once\n#include <cute/tensor.hpp>\n"
    built = build(cuda(kernel, extra={"include/mma_helpers.cuh": helpers}), definition, tmp_path, have_gpu=False)
    assert built.compile_only and not built.artifacts
    assert "includes <cute/tensor.hpp> (through include/mma_helpers.cuh), which CUTLASS provides" in built.note, \
        built.note


def test_torch_binding_gets_torch_extension_flags_tvm_ffi_does_not(definition, tmp_path):
    """--expt-relaxed-constexpr is torch's: a constexpr host function in a kernel builds under torch's builder."""
    kernel = ("#include <limits>\n__global__ void k(float* x) { x[0] = std::numeric_limits<float>::infinity(); }\n")
    assert build(cuda(kernel), definition, tmp_path / "torch", have_gpu=False).artifacts
    with pytest.raises(BuildError) as err:
        build(cuda(kernel, binding="tvm-ffi"), definition, tmp_path / "tvm", have_gpu=False)
    assert "expt-relaxed-constexpr" in err.value.log


def test_stand_ins_and_providers():
    assert cuda_check.provider("cublas_v2.h") == cuda_check.provider("cusolverDn.h") == "the full CUDA toolkit"
    assert cuda_check.provider("cudnn.h") == "cuDNN"
    assert cuda_check.provider("ATen/cuda/CUDAContext.h") == "a CUDA build of torch"
    assert cuda_check.provider("cutlass/gemm/device/gemm.h") == "CUTLASS"
    assert cuda_check.provider("helpers.cuh") is None and cuda_check.provider("my_cuda_utils.h") is None
    assert cuda_check.missing_headers("a.h:3:10: fatal error: cusparse.h: No such file or directory") == ["cusparse.h"]
    assert cuda_check.partial_stand_in_failure({"cublas_v2.h"}, 'k.cu(3): error: identifier "cublasSetStream"') \
        == "cublas"
    assert cuda_check.partial_stand_in_failure({"c10/cuda/impl/cuda_cmake_macros.h"}, "error: cublasX") is None


# -- through the harness --------------------------------------------------------------------------------------

BINDING = """
#include <torch/extension.h>
void run(at::Tensor x, double s);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); }
"""


@pytest.mark.slow
def test_honest_cuda_is_skipped_on_cpu_and_a_type_error_is_a_compile_error(tiny_dataset_root, tmp_path):
    from harness.archive.database import Archive
    from harness.data.dataset import Dataset
    from harness.pipeline.evaluate import Session, SubmitOptions

    def submit(s, source):
        data = solution_dict(source, entry="kernel.cu::run", language="cuda", extra_sources={"binding.cpp": BINDING})
        data["spec"]["binding"] = "torch"
        return s.submit(Solution.model_validate(data)).workloads[0]

    # every workload over the CPU size limit (the Triton interpreter's): CUDA is compiled all the same (red team
    # round 4: a MoE solution in CUDA was skipped unbuilt, "too slow for the Triton interpreter")
    with Session(Dataset(tiny_dataset_root), Archive(tmp_path / "a"),
                 SubmitOptions(workloads=["tiny_b2_t40"], timeout_s=600, cpu_max_input_mib=0.0)) as s:
        honest, broken = submit(s, TORCH_CUDA), submit(s, TYPE_ERROR)
    assert honest.status == "SKIPPED" and "compiled with nvcc for sm_90a" in honest.message, honest.message
    assert broken.status == "COMPILE_ERROR" and "nvcc failed on kernel.cu" in broken.message


TVM_FFI_KERNEL = """
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>
__global__ void scale(float* x, float s, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= s; }
"""


def test_a_tvm_ffi_solution_is_checked_where_the_package_is_and_said_unchecked_where_it_is_not(definition, tmp_path):
    """tvm-ffi is the default binding: its headers are the package's, never the candidate's to ship."""
    assert cuda_check.provider("tvm/ffi/container/tensor.h") == cuda_check.provider("dlpack/dlpack.h")
    assert "apache-tvm-ffi" in cuda_check.provider("tvm/ffi/function.h")
    if cuda_check.tvm_ffi_include_flags():  # installed: compiled for real
        assert build(cuda(TVM_FFI_KERNEL, binding="tvm-ffi"), definition, tmp_path, have_gpu=False).artifacts
        return
    built = build(cuda(TVM_FFI_KERNEL, binding="tvm-ffi"), definition, tmp_path, have_gpu=False)
    assert built.compile_only and not built.artifacts
    assert "not checkable on this host" in built.note and "apache-tvm-ffi" in built.note
