"""torch's CUDA queries in the candidate's worker on a host without a GPU, answered instead of raised.

The CPU wheel of torch raises "Torch not compiled with CUDA enabled" from ``torch.cuda.synchronize()``,
``torch.cuda.current_stream()`` and ``torch.cuda.get_device_properties(...)``, calls an honest GPU solution makes (an
SM count for a persistent grid at import, a synchronize after its launches), so its Triton kernels, which the
interpreter can run here, were never reached: a RUNTIME_ERROR or COMPILE_ERROR that a GPU host never gives. On a host
without a GPU the candidate's worker answers them as they hold for work that is already done when a call returns (the
interpreter runs every kernel to its end): synchronizing, and waiting on a stream, do nothing; the device is a
stand-in of the H100 (its SM count, capability, registers, shared memory), said so in its name;
``torch.cuda.is_available()`` stays False and ``device_count()`` 0, so a solution that asks whether it has a GPU is
told the truth (and an import that raises after asking is SKIPPED as needing one, not the candidate's error).
``torch.accelerator``'s device and stream queries (torch 2.6's device-agnostic spelling of the same calls: ``with
torch.accelerator.device_index(i):``, ``current_device_index()``) are answered alike; its ``is_available()`` stays
False and ``current_accelerator()`` None.

An operator the solution registers for CUDA alone (``@torch.library.custom_op("ns::op", device_types="cuda")``,
``torch.library.register_kernel(op, "cuda")``, ``Library.impl(name, fn, "CUDA")``: all of them go through
``Library.impl``) has no kernel for the CPU tensors this host gives it ("Could not run 'ns::op' with arguments from
the 'CPU' backend"), so the Triton launch it wraps was never reached. Here the same kernel is registered for CPU as
well, as the host's stand-in for CUDA tensors, unless the solution registers a CPU kernel of its own (before or
after: its own then replaces the stand-in). Never in PyTorch's own namespaces: the worker's dispatcher guard holds
``aten``/``prims`` to PyTorch's kernels (harness.sandbox.dispatcher_guard).
Applied before the worker's fingerprint is taken (harness.sandbox.integrity), never on a GPU.
"""

from __future__ import annotations

import contextlib
import os
import sys
import types
from typing import Any

# PyTorch's own operator namespaces (harness.audits.static_gate.common's list, and `_`, every operator's fallbacks):
# no stand-in kernel is ever registered into one.
_TORCH_NAMESPACES = frozenset({"_", "aten", "prim", "prims", "quantized", "_quantized", "c10d", "_c10d_functional",
                               "mkldnn", "mkl", "cuda", "sparse", "profiler", "inductor", "higher_order"})
# The H100 SXM's figures (CUDA's device properties), which the Hopper kernels of this contest are sized for.
STAND_IN = {
    "name": "NVIDIA H100 80GB HBM3 (stand-in: this host has no GPU)", "major": 9, "minor": 0,
    "multi_processor_count": 132, "total_memory": 80 * 1024 ** 3, "regs_per_multiprocessor": 65536,
    "shared_memory_per_multiprocessor": 233472, "shared_memory_per_block": 49152,
    "shared_memory_per_block_optin": 232448, "max_threads_per_multi_processor": 2048,
    "max_threads_per_block": 1024, "warp_size": 32, "L2_cache_size": 50 * 1024 ** 2, "clock_rate": 1980000,
    "memory_clock_rate": 2619000, "memory_bus_width": 5120, "is_integrated": False, "is_multi_gpu_board": False,
    "gcnArchName": "NVIDIA H100", "uuid": "00000000-0000-0000-0000-000000000000",
}


class _StandInStream:
    """The current stream of a host whose every kernel has finished when its launch returns."""

    cuda_stream = 0
    stream_id = 0
    device_index = 0
    device_type = 1

    def synchronize(self) -> None:
        return None

    def wait_stream(self, stream: Any) -> None:
        return None

    def wait_event(self, event: Any) -> None:
        return None

    def query(self) -> bool:
        return True

    def record_event(self, event: Any = None) -> Any:
        return event

    def __repr__(self) -> str:
        return "<torch.cuda.Stream stand-in: this host has no GPU>"


class _Device(contextlib.AbstractContextManager):
    """``with torch.cuda.device(i):`` (and ``torch.accelerator.device_index(i)``): one device, nothing to switch."""

    def __init__(self, device: Any = None, /) -> None:
        self.idx = 0

    def __exit__(self, *exc: Any) -> None:
        return None


# The files whose code asked ``torch.cuda.is_available()`` here (and was told False): a solution's import that asked
# and then raised stopped for want of a GPU (`if not torch.cuda.is_available(): raise ...`), which a GPU host would
# not (build.py).
ASKED_FOR_A_GPU: list[str] = []


def apply(torch: Any) -> bool:
    """Answer the queries in this process; False (nothing changed) where torch has a GPU."""
    cuda = torch.cuda
    if cuda.is_available():
        return False
    props = types.SimpleNamespace(**STAND_IN)
    stream = _StandInStream()
    told_no_gpu = cuda.is_available

    def is_available() -> bool:
        ASKED_FOR_A_GPU.append(sys._getframe(1).f_code.co_filename)  # who asked: the solution's files, or torch's
        return told_no_gpu()

    cuda.is_available = is_available
    cuda.synchronize = lambda device=None: None
    cuda.current_stream = lambda device=None: stream
    cuda.default_stream = lambda device=None: stream
    cuda.get_device_properties = lambda device=None: props
    cuda.get_device_capability = lambda device=None: (props.major, props.minor)
    cuda.get_device_name = lambda device=None: props.name
    cuda.current_device = lambda: 0
    cuda.set_device = lambda device: None
    cuda.is_current_stream_capturing = lambda: False
    cuda.device = _Device
    nvtx = getattr(cuda, "nvtx", None)
    if nvtx is not None:
        nvtx.range_push = lambda msg: 0
        nvtx.range_pop = lambda: 0
        nvtx.mark = lambda msg: None
        nvtx.range = lambda msg, *args, **kwargs: contextlib.nullcontext()
    _answer_accelerator(getattr(torch, "accelerator", None), stream)
    library = getattr(getattr(torch, "library", None), "Library", None)
    if library is not None:
        _register_cuda_kernels_for_cpu(library)
    return True


def _answer_accelerator(accelerator: Any, stream: _StandInStream) -> None:
    """torch.accelerator's device and stream queries, as torch.cuda's above (torch before 2.6 has no such module)."""
    if accelerator is None:
        return
    accelerator.synchronize = lambda device=None, /: None
    accelerator.current_stream = lambda device=None, /: stream
    accelerator.set_stream = lambda stream, /: None
    accelerator.current_device_index = accelerator.current_device_idx = lambda: 0
    accelerator.set_device_index = accelerator.set_device_idx = lambda device, /: None
    accelerator.device_index = _Device


# Stand-in CPU kernels by operator ("ns::op.overload" as registered), each in a Library of its own so that a CPU
# kernel of the solution's own can take its place (destroying a Library removes what it registered).
_STAND_INS: dict[str, Any] = {}


def _register_cuda_kernels_for_cpu(library: Any) -> None:
    """``Library.impl`` registers a CUDA kernel for CPU too (see the module docstring)."""
    original = library.impl
    if getattr(original, "_crucible", False):
        return

    def impl(self: Any, op_name: Any, fn: Any, dispatch_key: str = "", *args: Any, **kwargs: Any) -> Any:
        key = dispatch_key or getattr(self, "dispatch_key", "")
        name = _operator(self, op_name) if key in ("CUDA", "CPU") else ""
        if key == "CPU" and name in _STAND_INS:
            _STAND_INS.pop(name)._destroy()  # the solution's own CPU kernel replaces the stand-in
        result = original(self, op_name, fn, dispatch_key, *args, **kwargs)
        if key == "CUDA" and name and name not in _STAND_INS and not _has_cpu_kernel(name) and not _torchs_own():
            stand_in = library(self.ns, "IMPL")
            original(stand_in, op_name, fn, "CPU", *args, **kwargs)
            _STAND_INS[name] = stand_in
        return result

    impl._crucible = True
    library.impl = impl


def _operator(lib: Any, op_name: Any) -> str:
    """``ns::op.overload`` of an ``impl`` call outside PyTorch's namespaces, else "" (nothing to stand in for)."""
    if getattr(lib, "ns", None) in _TORCH_NAMESPACES:
        return ""
    schema = getattr(op_name, "_schema", None)  # an OpOverload: its schema's name carries the namespace
    if schema is not None:
        name = schema.name + (f".{schema.overload_name}" if schema.overload_name else "")
    else:
        name = op_name if isinstance(op_name, str) else ""
    if name and "::" not in name:
        name = f"{lib.ns}::{name}"
    return name if name.split("::")[0] == lib.ns else ""


def _torchs_own() -> bool:
    """The registration is PyTorch's (its symm_mem operators register CUDA kernels when imported), not the
    solution's: the first caller outside torch.library's public APIs is in torch's own folder."""
    import torch

    folder = os.path.dirname(os.path.abspath(torch.__file__))
    apis = (os.path.join(folder, "library.py"), os.path.join(folder, "_library") + os.sep)
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(apis):
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename.startswith(folder + os.sep)


def _has_cpu_kernel(name: str) -> bool:
    import torch

    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(name.split(".")[0], "CPU"))
    except Exception:  # an operator the dispatcher does not know (yet): the solution registers it next
        return False
