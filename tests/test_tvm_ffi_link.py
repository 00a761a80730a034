"""A CUDA/C++ solution's TVM-FFI build links and checks as flashinfer-bench main's TVMFFIBuilder does
(harness/sandbox/tvm_ffi_build.py): `-lcuda -lcublas` with the toolkit's library folder where there are CUDA sources,
and every symbol resolved before the module is loaded. A contestant's MoE that creates a cuBLAS handle died with exit
code 127 at its first call (H100), where the official evaluator builds and runs it. The pure parts are tested here;
the real build on a GPU host (the `gpu` tests at the end)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from harness.sandbox.tvm_ffi_build import cuda_library_folder, link_flags, linkable_in, unresolved_symbols

from support import KV8_PS1


@pytest.mark.parametrize("cuda_sources, targets, folder, expected", [
    (True, ["H200"], "/cuda/lib64", ["-L/cuda/lib64", "-lcuda", "-lcublas"]),
    (True, ["H200"], None, ["-lcuda", "-lcublas"]),  # no folder found: the linker's own search path
    (False, ["H200", "B200"], "/cuda/lib64", []),  # C++ only, no CUDA target: nothing extra
    (False, ["CUDA"], "/cuda/lib64", ["-L/cuda/lib64", "-lcuda", "-lcublas"]),  # a target named cuda, any case
])
def test_cuda_is_linked_where_the_official_builder_links_it(cuda_sources, targets, folder, expected):
    assert link_flags(cuda_sources, targets, folder) == expected


def test_a_library_the_linker_cannot_find_is_left_out_not_a_failed_build(tmp_path):
    """On a host whose toolkit lacks cuBLAS every CUDA build would fail to link: the flag is left out, and code that
    needs cuBLAS fails the symbol check, naming the symbol."""
    lib, system = tmp_path / "lib64", tmp_path / "usr_lib"
    (lib / "stubs").mkdir(parents=True)
    system.mkdir()
    (lib / "libcublas.so").write_text("")
    (lib / "stubs" / "libcuda.so").write_text("")  # the toolkit's driver stub
    (system / "libcufft.so").write_text("")
    found = linkable_in(str(lib), [str(system)])
    assert [found(f) for f in ("-lcublas", "-lcuda", "-lcufft", "-lcusparse_nowhere")] == [True, True, True, False]
    assert link_flags(True, ["H100"], str(lib), lambda flag: flag != "-lcublas") == [f"-L{lib}", "-lcuda"]
    assert linkable_in(None, [])("-lcublas_nowhere") is False


def test_the_library_folder_is_the_one_beside_nvcc_then_the_usual_prefixes(tmp_path):
    home, other = tmp_path / "cuda-13.0", tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "nvcc").write_text("")
    (home / "targets" / "x86_64-linux" / "lib").mkdir(parents=True)
    (home / "targets" / "x86_64-linux" / "lib" / "libcudart.so").write_text("")
    (other / "lib64").mkdir(parents=True)
    (other / "lib64" / "libcudart.so").write_text("")
    assert cuda_library_folder(str(home / "bin" / "nvcc"), [str(other)]) == str(home / "targets/x86_64-linux/lib")
    assert cuda_library_folder(str(tmp_path / "none" / "bin" / "nvcc"), [str(other)]) == str(other / "lib64")
    assert cuda_library_folder(str(tmp_path / "none" / "bin" / "nvcc"), [str(tmp_path / "none")]) is None


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_a_library_with_a_symbol_nothing_defines_is_found_before_it_is_loaded(tmp_path):
    source = tmp_path / "lib.c"
    source.write_text("extern int nowhere_defined(int);\nint f(int a) { return nowhere_defined(a); }\n"
                      "int g(int a) { return a + 1; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(tmp_path / "bad.so"), str(source)], check=True)
    problem = unresolved_symbols(str(tmp_path / "bad.so"))
    assert problem is not None and "nowhere_defined" in problem
    (tmp_path / "ok.c").write_text("int g(int a) { return a + 1; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(tmp_path / "ok.so"), str(tmp_path / "ok.c")], check=True)
    assert unresolved_symbols(str(tmp_path / "ok.so")) is None


CUBLAS_AND_DRIVER = r'''
#include <tvm/ffi/function.h>
#include <cublas_v2.h>
#include <cuda.h>
#include "status.h"
// a cuBLAS handle and the driver's version: both need the official builder's -lcublas -lcuda
int handle_and_driver(int x) {
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return -1;
  cublasDestroy(handle);
  int version = 0;
  if (cuDriverGetVersion(&version) != CUDA_SUCCESS || version <= 0) return -2;
  return ok_status(x);
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(handle_and_driver, handle_and_driver);
'''
MISSING = r'''
#include <tvm/ffi/function.h>
extern "C" int crucible_defined_nowhere(int);
__global__ void noop() {}
int call_missing(int x) { return crucible_defined_nowhere(x); }
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, call_missing);
'''


@pytest.mark.gpu
def test_a_cuda_file_using_cublas_and_the_driver_builds_and_runs(tmp_path):
    from harness.sandbox.tvm_ffi_build import build_and_load

    src = tmp_path / "src"
    src.mkdir()
    (src / "kernel.cu").write_text(CUBLAS_AND_DRIVER)
    (src / "status.h").write_text("#pragma once\ninline int ok_status(int x) { return x + 1; }\n")
    module, library = build_and_load("crucible_link_probe", [], [str(src / "kernel.cu")], src, tmp_path / "build",
                                      ["H100"])
    assert module.handle_and_driver(41) == 42
    assert library.endswith(".so")


@pytest.mark.gpu
def test_an_unresolved_symbol_is_a_compile_error_not_a_dead_worker(tmp_path):
    from harness.data.dataset import Dataset
    from harness.data.schema import Solution
    from harness.sandbox.build import BuildError, build

    solution = Solution.model_validate({
        "name": "missing_symbol", "definition": KV8_PS1, "author": "tests",
        "spec": {"language": "cuda", "target_hardware": ["H100"], "entry_point": "kernel.cu::run",
                 "destination_passing_style": True, "binding": "tvm-ffi"},
        "sources": [{"path": "kernel.cu", "content": MISSING}]})
    with pytest.raises(BuildError, match="unresolved symbols.*crucible_defined_nowhere"):
        build(solution, Dataset().definition(KV8_PS1), tmp_path, have_gpu=True)
