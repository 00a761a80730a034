"""A CUDA/C++ solution's TVM-FFI build (binding ``tvm-ffi``, the default), as flashinfer-bench main's TVMFFIBuilder
builds it. Runs inside the worker only.

What the official builder does beyond compiling, and so what a contestant's code may rely on:
- the folder of the sources is on the include path (``#include "common.cuh"`` beside ``kernel.cu``);
- a build with CUDA sources (or a target named "cuda") links ``-lcuda -lcublas``, with ``-L`` the toolkit's library
  folder: a kernel file that calls cuBLAS (``cublasCreate``) or the driver API (``cuTensorMapEncodeTiled``) builds;
- the library is opened once with every symbol resolved (``RTLD_NOW``) before it is loaded: an unresolved symbol is a
  build error, not a process that dies in the middle of a call.
Without these a contestant's MoE that creates a cuBLAS handle ended its worker with exit code 127 ("undefined symbol:
cublasCreate_v2") at its first call on an H100: a RUNTIME_ERROR where the official evaluator builds and runs it.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

CUDA_LINK_LIBRARIES = ("-lcuda", "-lcublas")


def cuda_library_folder(nvcc: Optional[str] = None, prefixes: Sequence[str] = (
        "/usr/local/cuda", "/usr/local/cuda-12", "/usr/local/cuda-13")) -> Optional[str]:
    """The toolkit's library folder (the one holding libcudart.so): beside the nvcc on PATH first, then the usual
    prefixes; None where none has it."""
    found = nvcc if nvcc is not None else shutil.which("nvcc")
    homes = [Path(found).resolve().parent.parent] if found else []
    homes += [Path(p) for p in prefixes]
    for home in homes:
        for sub in ("targets/x86_64-linux/lib", "lib64", "lib"):
            if (home / sub / "libcudart.so").exists():
                return str(home / sub)
    return None


def link_flags(has_cuda_sources: bool, target_hardware: Sequence[str], library_folder: Optional[str],
               linkable: Callable[[str], bool] = lambda flag: True) -> list[str]:
    """The official builder's extra link flags: CUDA's driver and cuBLAS where there are CUDA sources or a target
    named "cuda", with ``-L`` the library folder where one was found; none otherwise. A library ``linkable`` says the
    linker cannot find is left out rather than failing every build on a host that lacks it: code that needs it then
    fails the symbol check, naming the symbol."""
    if not has_cuda_sources and not any(t.lower() == "cuda" for t in target_hardware):
        return []
    return ([f"-L{library_folder}"] if library_folder else []) + [f for f in CUDA_LINK_LIBRARIES if linkable(f)]


LINKER_FOLDERS = ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib", "/lib",
                  "/usr/local/lib")  # where the linker looks by itself


def linkable_in(library_folder: Optional[str], system: Sequence[str] = LINKER_FOLDERS) -> Callable[[str], bool]:
    """Whether ``-lNAME`` will resolve: ``libNAME.so`` in the library folder (or its ``stubs/``, where the toolkit
    keeps the driver's link stub), in the linker's own folders, or in the dynamic linker's cache."""
    try:
        cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        cache = ""
    folders = ([Path(library_folder), Path(library_folder) / "stubs"] if library_folder else [])
    folders += [Path(f) for f in system]

    def linkable(flag: str) -> bool:
        so = f"lib{flag.removeprefix('-l')}.so"
        return any((f / so).exists() for f in folders) or f"\t{so} (" in cache

    return linkable


def unresolved_symbols(library: str) -> Optional[str]:
    """The loader's error where the shared object has a symbol nothing resolves (opened with RTLD_NOW), else None."""
    try:
        probe = ctypes.CDLL(library, mode=os.RTLD_NOW)
    except OSError as err:
        return str(err)
    del probe
    return None


def build_and_load(name: str, cpp_files: list[str], cuda_files: list[str], source_folder: Path, build_folder: Path,
                   target_hardware: Sequence[str]) -> tuple[Any, str]:
    """(the loaded module, the shared object's path). Raises ImportError without apache-tvm-ffi, UnresolvedSymbols
    (the caller's BuildError) for a symbol nothing defines, and whatever tvm_ffi raises for a failed compile."""
    import tvm_ffi
    import tvm_ffi.cpp

    folder = cuda_library_folder() if cuda_files else None
    flags = link_flags(bool(cuda_files), target_hardware, folder, linkable_in(folder))
    if folder and "-lcuda" in flags and (Path(folder) / "stubs" / "libcuda.so").exists():
        flags.append(f"-L{folder}/stubs")  # the driver's link stub, last; libcuda.so.1 itself is loaded at run time
    library = str(tvm_ffi.cpp.build(name, cpp_files=cpp_files or None, cuda_files=cuda_files or None,
                                    extra_include_paths=[str(source_folder)], extra_ldflags=flags or None,
                                    build_directory=str(build_folder)))
    problem = unresolved_symbols(library)
    if problem:
        raise UnresolvedSymbols(f"the built library has unresolved symbols: {problem}")
    return tvm_ffi.load_module(library), library


class UnresolvedSymbols(RuntimeError):
    """The shared object built, but a symbol it uses is in no library it links."""
