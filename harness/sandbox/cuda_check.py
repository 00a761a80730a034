"""nvcc's compile-only check of CUDA sources on a host without a GPU (``build._nvcc_cubins``): honest about what
this host can and cannot check.

Such a host has the CPU wheel of torch and often a partial CUDA toolkit, so torch's CUDA headers stop at includes
that only a CUDA build of torch or a fuller toolkit provides: ``c10/cuda/CUDAGuard.h`` and friends at the generated
``c10/cuda/impl/cuda_cmake_macros.h``, ``ATen/cuda/CUDAContext.h`` at ``cusparse.h`` / ``cublas_v2.h`` /
``cublasLt.h`` / ``cusolverDn.h``. Those are not the candidate's errors. So:

- a header this host lacks and ``STAND_INS`` covers is given a stand-in, in a folder of the build's own that only
  this check uses, and only when nvcc's preprocessor cannot find it (``absent_headers``: a real header always
  wins). The cmake header's stand-in is what the generated file holds; the library ones declare just what torch's
  own headers use (handle and status types), so code calling cuBLAS/cuSPARSE/cuSOLVER itself cannot be checked
  here: a failure naming those libraries is "not checkable on this host", never a COMPILE_ERROR;
- a missing header that a GPU host's toolkit or CUDA torch provides (``provider``) makes that file not checkable
  here (its workloads SKIPPED with the reason), where a missing header of the candidate's own is a COMPILE_ERROR;
- everything else nvcc rejects is the candidate's COMPILE_ERROR, as on a GPU host.
With the torch binding, nvcc gets the flags torch's extension builder gives it on a GPU host (its ``-D__CUDA_NO_*``
and ``--expt-relaxed-constexpr``, the extension's name, the C++ standard of that torch), so what builds there
compiles here.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Optional

_CMAKE_MACROS = "c10/cuda/impl/cuda_cmake_macros.h"

# header -> text. Exact for the cmake header (a CUDA build of torch generates just this); partial for the libraries.
STAND_INS: dict[str, str] = {
    _CMAKE_MACROS: "#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n",
    "cusparse.h": ("#pragma once\ntypedef struct cusparseContext* cusparseHandle_t;\n"
                   "typedef enum { CUSPARSE_STATUS_SUCCESS = 0 } cusparseStatus_t;\n"),
    "cublas_v2.h": ("#pragma once\ntypedef struct cublasContext* cublasHandle_t;\n"
                    "typedef enum { CUBLAS_STATUS_SUCCESS = 0 } cublasStatus_t;\n"),
    "cublasLt.h": "#pragma once\ntypedef struct cublasLtContext* cublasLtHandle_t;\n",
    "cusolver_common.h": "#pragma once\ntypedef enum { CUSOLVER_STATUS_SUCCESS = 0 } cusolverStatus_t;\n",
    "cusolverDn.h": ("#pragma once\n#include <cusolver_common.h>\n"
                     "typedef struct cusolverDnContext* cusolverDnHandle_t;\n"),
}
STAND_IN_MARK = "// stand-in for a header this host lacks (the CPU-only CUDA check)\n"
# the libraries whose stand-ins are partial: an error that names them is the stand-in's gap, not the candidate's
_PARTIAL_LIBRARY = re.compile(r"\b(cublas|cusparse|cusolver|CUBLAS_|CUSPARSE_|CUSOLVER_)\w*")

# headers a GPU host's CUDA toolkit, CUDA torch or its libraries provide (what they are called in the message)
_EXTERNAL = [
    (re.compile(r"^(ATen/cuda|ATen/native/cuda|c10/cuda|torch/csrc/cuda|ATen/cudnn)/"), "a CUDA build of torch"),
    (re.compile(r"^(cu(blas|blasLt|sparse|solver|fft|rand|file|pti)\w*|nvrtc|nvml|nvToolsExt\w*|cuda\w*)\.h$"
                r"|^(nvtx3|cub|thrust|cuda)/"), "the full CUDA toolkit"),
    (re.compile(r"^cudnn\w*\.h$|^cudnn_frontend"), "cuDNN"),
    (re.compile(r"^(nccl|nvshmem\w*|cudss|cutensor\w*)\.h$"), "an NVIDIA library of the GPU host"),
    (re.compile(r"^(cutlass|cute)/"), "CUTLASS"),
    (re.compile(r"^(tvm/ffi|dlpack)/"), "apache-tvm-ffi (the tvm-ffi binding's package)"),
]
_MISSING = [re.compile(r"fatal error: ([^\s:]+): No such file or directory"),
            re.compile(r'catastrophic error: cannot open source file "([^"]+)"')]


def tvm_ffi_include_flags() -> list[str]:
    """``-isystem`` for apache-tvm-ffi's headers (tvm/ffi, dlpack) where the package is installed; none where it
    is not (a missing tvm/ffi header is then this host's, ``_EXTERNAL``)."""
    try:
        from tvm_ffi import libinfo  # type: ignore[import-not-found]

        paths = libinfo.include_paths()
    except Exception:
        return []
    return [flag for p in paths for flag in ("-isystem", str(p))]


def torch_extension_flags(name: str) -> list[str]:
    """The nvcc flags ``torch.utils.cpp_extension.load`` adds on a GPU host (no arch, no -O: ours)."""
    try:
        from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

        common = list(COMMON_NVCC_FLAGS)
    except Exception:
        common = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                  "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__", "--expt-relaxed-constexpr"]
    return [f"-DTORCH_EXTENSION_NAME={name}", "-DTORCH_API_INCLUDE_EXTENSION_H", *common]


def cxx_standard(torch_binding: bool) -> str:
    """torch 2.13 builds its extensions with C++20 and its headers use C++20; before that, and for tvm-ffi, C++17."""
    if not torch_binding:
        return "-std=c++17"
    try:
        import torch

        major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    except Exception:
        return "-std=c++17"
    return "-std=c++20" if (major, minor) >= (2, 13) else "-std=c++17"


def absent_headers(nvcc: str, flags: list[str], folder: Path) -> list[str]:
    """The ``STAND_INS`` headers nvcc cannot find with these flags: one ``__has_include`` probe, preprocessed only."""
    names = list(STAND_INS)
    probe = folder / "crucible_has_include_probe.cu"
    probe.write_text("".join(f"#if !__has_include(<{h}>)\nCRUCIBLE_ABSENT_{i}\n#endif\n" for i, h in enumerate(names)))
    try:
        proc = subprocess.run([nvcc, "-E", *flags, str(probe)], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return []  # then the compile's own messages say what is missing
    finally:
        probe.unlink(missing_ok=True)
    if proc.returncode != 0:
        return []
    return [names[int(i)] for i in sorted(set(re.findall(r"CRUCIBLE_ABSENT_(\d+)", proc.stdout)), key=int)]


def missing_headers(output: str) -> list[str]:
    return [m for pattern in _MISSING for m in pattern.findall(output)]


def including_file(output: str, header: str) -> Optional[str]:
    """The file whose #include of ``header`` failed (``include/helpers.cuh:3:10: fatal error: cute/tensor.hpp: ...``,
    nvcc's ``include/helpers.cuh(3): catastrophic error: cannot open source file "cute/tensor.hpp"``)."""
    quoted = re.escape(header)
    for pattern in (rf"^(\S+?):\d+:\d+: fatal error: {quoted}: No such file",
                    rf'^(\S+?)\(\d+\): catastrophic error: cannot open source file "{quoted}"'):
        m = re.search(pattern, output, re.MULTILINE)
        if m:
            return m.group(1)
    return None


def provider(header: str) -> Optional[str]:
    """Who provides a header this host lacks, if it is not the candidate's to ship."""
    return next((who for pattern, who in _EXTERNAL if pattern.search(header)), None)


def write_stand_in(folder: Path, header: str) -> None:
    target = folder / header
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(STAND_IN_MARK + STAND_INS[header])


def partial_stand_in_failure(used: set[str], output: str) -> Optional[str]:
    """The library a failure names when it went through a partial stand-in, else None (the candidate's error)."""
    if not used - {_CMAKE_MACROS}:
        return None
    errors = "\n".join(line for line in output.splitlines() if "error" in line or "argument types are" in line)
    hit = _PARTIAL_LIBRARY.search(errors)
    return hit.group(1).rstrip("_").lower() if hit else None
