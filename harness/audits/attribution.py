"""Who did the work: GPU time in the candidate's own kernels against library kernels (pure functions).

The official timer's CUPTI records already name every kernel, memcpy and memset of every timed call
(harness.measure.timing ``kernel_ns``), so attribution costs no extra GPU call and runs at every audit level.

A kernel is the candidate's own when its name is one the candidate wrote, read from its sources by the
harness (never reported by the candidate): a Triton kernel is named after its Python function and carries a
plain C name; a ``__global__`` function of its sources (CUDA files, or CUDA text inside Python for
``load_inline``) carries a C++ symbol whose own identifier is matched (demangled), not a substring. A symbol
in a library's namespace (``at::``, ``flashinfer::``) or with a library's prefix (``nvjet``, ``sm90_xmma``...) is
never the candidate's, whatever its last name. An anonymous namespace is the candidate's only where its sources
declare that kernel in one and, where nvcc's symbol names the translation unit
(``_GLOBAL__N__<hash>_<length>_<file>_<hash>``), that file is one of the candidate's (``cuda.cu`` for CUDA text
built inline from Python): PyTorch's file-local kernels (``SoftMax.cu``'s ``softmax_warp_forward``) stay PyTorch's.
Everything else is the library's (PyTorch's aten, cuBLAS/cuBLASLt, cuDNN, CUTLASS instantiated by a library,
FlashInfer, NCCL). Moving data is not computing: memsets, memcpys and PyTorch's fill/copy/cast kernels
(``torch.zeros`` for a split-K accumulator, ``.to(torch.bfloat16)``, ``.contiguous()``) are housekeeping,
reported but left out of the share, so an honest wrapper's allocations are never read as a fallback.
PyTorch's pointwise kernels (TensorIterator's ``elementwise_kernel`` family: gate math, masks, a scale) cannot
do an operator's contractions, reductions or selections; up to a small budget per call they are an honest
wrapper's glue (a GDN solution's gates in PyTorch: about 7 launch-bound kernels, 10-15 us a call, beside a
3 us decode kernel) and are reported but left out of the share; above it they count as library compute.
"""

from __future__ import annotations

import re
from typing import Mapping, NamedTuple, Optional

from .model import Audit

ANONYMOUS = "_GLOBAL__N"  # a demangled "(anonymous namespace)", as a qualified name's part
# A C++ symbol whose qualified name passes through one of these is a library's, whatever its last name.
LIBRARY_NAMESPACES = ("at", "c10", "at_cuda_detail", "cub", "thrust", "flashinfer", "cublas", "cublasLt", "cudnn",
                      "cutlass", "cute", "nccl", "xformers", "fmha", "triton_kernels", "deep_gemm", "tensorrt_llm",
                      "vllm", "sgl_kernel")
# Unmangled library kernels (cuBLAS's nvjet, cuBLAS/cuDNN "sm90_xmma..." families, FlashInfer's C names).
LIBRARY_PREFIXES = ("nvjet", "sm90_xmma", "sm80_xmma", "sm100_xmma", "xmma_", "cutlass", "ampere_", "hopper_",
                    "volta_", "turing_", "gemv", "gemmk", "gemm_", "splitKreduce", "cublas", "cudnn", "flashinfer",
                    "BatchDecode", "BatchPrefill", "SinglePrefill", "SingleDecode", "MergeStates", "fmha_",
                    "flash_fwd", "flash_bwd", "nccl", "cask_", "implicit_convolve")
# PyTorch's own Triton kernels, torch.compile's (Inductor): triton_<kind>_fused_<ops>_<n> (kind: pointwise, reduction,
# persistent reduction, template, foreach, scan...), triton_<kind>_<n> without descriptive names, a bare "triton_"
# without unique ones. Generated at run time under names a candidate can predict, so a decoy def of that name in its
# sources must not make them its own. Exact shapes only: "triton_split_kv" or "triton_forward" are a contestant's.
INDUCTOR_NAME = re.compile(r"^triton_(?:(?:poi|red|per|tem|for|spl|mix|sca)_(?:fused\w*|_?)\d+|_?\d*)$")
# Data movement that computes nothing: PyTorch's fill, copy and cast kernels, and the driver's memset/memcpy.
# Each name starts an identifier (after a mangled length, "::" or the start; never inside a word): a kernel
# called ``_fwd_prefill_kernel`` ends in "fill_kernel" and computes.
HOUSEKEEPING = re.compile(r"^\[mem(set|cpy)|(?<![A-Za-z_])(FillFunctor|fill_kernel|direct_copy_kernel|copy_kernel|"
                          r"CatArrayBatchedCopy|cast_kernel|_to_copy|copy_device_to_device)|"
                          r"(?<![A-Za-z_])(unrolled_elementwise_kernel|elementwise_kernel)<.*(copy|Copy|fill|Fill)")

# TensorIterator's pointwise kernels (at::native::...); index_elementwise_kernel (gathers) and reductions are not.
POINTWISE = frozenset({"vectorized_elementwise_kernel", "unrolled_elementwise_kernel", "elementwise_kernel"})

_PY_DEF = re.compile(r"^\s*(?:async\s+)?def\s+(\w+)\s*\(", re.M)
_GLOBAL = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:static\s+|inline\s+)*"
                     r"(?:void|[\w:<>]+)\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(")


_ANONYMOUS_BLOCK = re.compile(r"(?<![\w:])namespace\s*\{")
# What torch.utils.cpp_extension.load_inline and tvm_ffi.cpp.build_inline name the CUDA text they compile.
INLINE_CUDA_FILE = "cuda.cu"
_UNIT_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx")


class OwnKernels(NamedTuple):
    """Names a candidate's kernels can carry: Python functions (Triton kernels, plain C names only) and
    ``__global__`` functions (C++ symbols, or plain with ``extern "C"``); of those, the ones declared in an
    anonymous namespace, and the file names (as nvcc writes them in such a namespace's symbol: "." as "_") of the
    translation units they can come from."""

    python: frozenset[str]
    cuda: frozenset[str]
    cuda_anonymous: frozenset[str] = frozenset()
    units: frozenset[str] = frozenset()


def own_kernels(sources: Mapping[str, str]) -> OwnKernels:
    """From the candidate's sources ({path: text}): every Python ``def`` and every ``__global__`` function
    (in any file: CUDA text inside Python too)."""
    python: set[str] = set()
    cuda: set[str] = set()
    anonymous: set[str] = set()
    units: set[str] = set()
    for path, text in sources.items():
        if path.endswith(".py"):
            python.update(_PY_DEF.findall(text))
        found = _GLOBAL.findall(text)
        cuda.update(found)
        if path.endswith(".py") and found:
            units.add(INLINE_CUDA_FILE.replace(".", "_"))
        elif path.endswith(_UNIT_SUFFIXES):  # a kernel of a header it includes carries its name
            units.add(path.rsplit("/", 1)[-1].replace(".", "_"))
        for start, end in _anonymous_blocks(text):
            anonymous.update(_GLOBAL.findall(text, start, end))
    return OwnKernels(frozenset(python), frozenset(cuda), frozenset(anonymous), frozenset(units))


def _anonymous_blocks(text: str) -> list[tuple[int, int]]:
    """(start, end) of each ``namespace { ... }`` body, by brace depth (braces in comments or strings are rare
    enough in kernel sources; a miscount only leaves a kernel unclaimed, never claims one)."""
    blocks = []
    for match in _ANONYMOUS_BLOCK.finditer(text):
        depth, i = 1, match.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        blocks.append((match.end(), i))
    return blocks


def anonymous_unit(part: str) -> Optional[str]:
    """The translation unit nvcc names in an anonymous namespace's symbol part ("_GLOBAL__N__b6d5ab84_10_SoftMax_cu_
    9f978f63" -> "SoftMax_cu"); "" for one that names none (a host compiler's "_GLOBAL__N_1", a demangled
    "(anonymous namespace)"); None for a part that is no anonymous namespace."""
    if part == ANONYMOUS:
        return ""
    if not part.startswith("_GLOBAL__N"):
        return None
    match = re.match(r"_GLOBAL__N__[0-9a-fA-F]+_(\d+)_", part)
    if not match:
        return ""
    return part[match.end():match.end() + int(match.group(1))]


def _read_source_name(mangled: str, i: int) -> tuple[str, int]:
    """One ``<length><identifier>`` of an Itanium-mangled name at ``i``."""
    j = i
    while j < len(mangled) and mangled[j].isdigit():
        j += 1
    if j == i:
        return "", i
    n = int(mangled[i:j])
    return mangled[j:j + n], j + n


def qualified_name(symbol: str) -> list[str]:
    """The nested name of a kernel symbol: ``_ZN10flashinfer6decodeEv`` -> ["flashinfer", "decode"];
    ``_Z9my_kernelPf`` -> ["my_kernel"]; a demangled ``void ns::k<...>(...)`` -> ["ns", "k"]; a C name -> [it]."""
    if symbol.startswith("_Z"):
        i = 2
        if i < len(symbol) and symbol[i] == "L":
            i += 1
        parts = []
        if i < len(symbol) and symbol[i] == "N":
            i += 1
            while i < len(symbol) and symbol[i] in "rVKL":  # cv-qualifiers and internal linkage
                i += 1
            while i < len(symbol) and symbol[i] != "E":
                if symbol[i] == "I":  # template arguments: skip to the matching E
                    depth, i = 1, i + 1
                    while i < len(symbol) and depth:
                        depth += {"I": 1, "E": -1}.get(symbol[i], 0)
                        i += 1
                    continue
                if symbol.startswith("St", i):
                    parts.append("std")
                    i += 2
                    continue
                name, nxt = _read_source_name(symbol, i)
                if not name:
                    break
                parts.append(name)
                i = nxt
            return parts
        name, _ = _read_source_name(symbol, i)
        return [name] if name else [symbol]
    readable = symbol.replace("(anonymous namespace)", ANONYMOUS)
    head = readable.split("(")[0].split("<")[0].strip()
    head = head.split()[-1] if head.split() else readable
    return [p for p in head.split("::") if p] or [symbol]


def is_housekeeping(name: str) -> bool:
    return bool(HOUSEKEEPING.search(name))


def is_pointwise(name: str) -> bool:
    """One of PyTorch's own pointwise kernels (a kernel the candidate wrote is never counted as PyTorch's)."""
    parts = qualified_name(name)
    return parts[:2] == ["at", "native"] and parts[-1] in POINTWISE


def is_aten(name: str) -> bool:
    """One of PyTorch's own ATen kernels (pointwise, reductions, top-k, sort, index, scatter); cuBLAS, cuDNN and
    PyTorch's attention kernels live elsewhere."""
    return qualified_name(name)[:2] == ["at", "native"]


def pytorch_glue(others: Mapping[str, float], calls: int, pointwise_us: float, aten_us: float,
                 aten_share: float = 0.0, compute_ns: float = 0.0) -> dict[str, float]:
    """The kernels, among those not the candidate's (``others``: name -> ns over ``calls``), that are a wrapper's
    PyTorch glue: every ATen kernel where they take at most ``aten_us`` per call together, or at most
    ``aten_share`` of the call's compute (``compute_ns``, the candidate's kernels included) (a family whose
    definition includes bookkeeping, e.g. MoE's routing and its sum over the top-k); else the pointwise ones
    where those take at most ``pointwise_us`` (the default: pointwise maps cannot contract, reduce or select, so
    no budget can hide an operator's work in them). Nothing where a budget is exceeded."""
    per_call = max(calls, 1) * 1e3

    def within(kernels: dict[str, float], budget_us: float) -> bool:
        return bool(kernels) and sum(kernels.values()) / per_call <= budget_us

    aten = {n: t for n, t in others.items() if is_aten(n)}
    if within(aten, aten_us) or (aten and aten_share > 0 and sum(aten.values()) <= aten_share * compute_ns):
        return aten
    pointwise = {n: t for n, t in aten.items() if is_pointwise(n)}
    return pointwise if within(pointwise, pointwise_us) else {}


# The CUDA math libraries' kernels outside any namespace (cuBLAS's gemmSN_NN_kernel and dot_kernel, which
# torch.matmul reaches on odd shapes) carry the library's own types in their template arguments
# (cublasGemvTensorStridedBatched, cublasDotParams): a decoy __global__ of the same name in a candidate's sources
# does not make one of them its own.
LIBRARY_TYPE_MARKS = ("cublas", "cudnn", "cusparse", "cusolver", "cufft")


def is_own(name: str, own: OwnKernels) -> bool:
    if name.startswith("[") or any(mark in name for mark in LIBRARY_TYPE_MARKS):  # memcpy/memset; cuBLAS, cuDNN
        return False
    parts = qualified_name(name)
    if not parts or parts[-1].startswith(LIBRARY_PREFIXES) or INDUCTOR_NAME.match(parts[-1]):
        return False
    plain = len(parts) == 1 and parts[0] == name  # a C name: Triton's, or extern "C"
    if parts[-1] not in (own.python | own.cuda if plain else own.cuda):
        return False
    for part in parts[:-1]:
        if part in LIBRARY_NAMESPACES:
            return False
        unit = anonymous_unit(part)
        if unit is not None and (parts[-1] not in own.cuda_anonymous or (unit and unit not in own.units)):
            return False
    return True


def attribution_verdict(kernel_ns: Mapping[str, float], own: OwnKernels, min_share: float, calls: int = 1,
                        allowance_us: float = 0.0, library_is_own: bool = False,
                        pointwise_us: float = 0.0, aten_us: float = 0.0, aten_share: float = 0.0) -> Audit:
    """At least ``min_share`` of the compute time (housekeeping left out) in the candidate's own kernels, or
    at most ``allowance_us`` of library compute per call (index arithmetic such as ``indptr[1:] - indptr[:-1]``
    costs an honest wrapper a few microseconds; any attention done by a library costs far more). ``calls``: how
    many timed calls ``kernel_ns`` sums over. At least one of the candidate's kernels must have run.

    ``pointwise_us``, ``aten_us``, ``aten_share``: PyTorch glue budgets (``pytorch_glue``), left out like housekeeping.
    ``library_is_own``: the dataset's own baselines declare a library call, so every kernel they launch is theirs.
    A failing verdict's detail starts with ``fallback:`` (harness.audits.verdicts.is_fallback reads it)."""
    total = sum(kernel_ns.values())
    if total <= 0:
        return Audit(name="attribution", passed=False, detail="no GPU time was attributed to any kernel")
    # The candidate's own kernels are its compute whatever they are called (a kernel of its own named
    # ``copy_kernel`` is code it wrote, not PyTorch's copy).
    chores = {n: t for n, t in kernel_ns.items()
              if is_housekeeping(n) and not (library_is_own or is_own(n, own))}
    compute = {n: t for n, t in kernel_ns.items() if n not in chores}
    glue = pytorch_glue({n: t for n, t in compute.items() if not (library_is_own or is_own(n, own))},
                        calls, pointwise_us, aten_us, aten_share, sum(compute.values()))
    glue_us = sum(glue.values()) / max(calls, 1) / 1e3
    compute = {n: t for n, t in compute.items() if n not in glue}
    mine = {n: t for n, t in compute.items() if library_is_own or is_own(n, own)}
    compute_total = sum(compute.values())
    library_us = (compute_total - sum(mine.values())) / max(calls, 1) / 1e3
    share = sum(mine.values()) / compute_total if compute_total > 0 else 0.0
    passed = bool(mine) and (share >= min_share or library_us <= allowance_us)
    others = sorted(((t, n) for n, t in compute.items() if n not in mine), reverse=True)[:3]
    detail = ("" if passed else "fallback: ") + (
        f"{100 * share:.1f}% of compute time in the candidate's kernels" if mine
        else "none of the candidate's kernels ran")
    if library_us > 0:
        detail += f" ({library_us:.1f} us of library compute per call)"
    if others:
        detail += "; elsewhere: " + ", ".join(f"{n[:80]} {100 * t / total:.1f}%" for t, n in others)
    if glue:
        detail += f"; PyTorch glue {glue_us:.1f} us per call (not counted)"
    if chores:
        detail += f"; data movement {100 * sum(chores.values()) / total:.1f}% (not counted)"
    return Audit(name="attribution", passed=passed, detail=detail,
                 share=round(share, 4), own_kernels=sorted(n for n in mine)[:8])
