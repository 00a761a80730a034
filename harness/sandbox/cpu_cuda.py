"""torch's CUDA queries in the candidate's worker on a host without a GPU, answered instead of raised.

The CPU wheel of torch raises "Torch not compiled with CUDA enabled" from ``torch.cuda.synchronize()``,
``torch.cuda.current_stream()`` and ``torch.cuda.get_device_properties(...)``, calls an honest GPU solution makes
(an SM count for a persistent grid at import, a synchronize after its launches), so its Triton kernels, which the
interpreter can run here, were never reached: a RUNTIME_ERROR or COMPILE_ERROR that a GPU host never gives. On a
host without a GPU the candidate's worker answers them as they hold for work that is already done when a call
returns (the interpreter runs every kernel to its end): synchronizing, and waiting on a stream, do nothing; the
device is a stand-in of the H100 (its SM count, capability, registers, shared memory), said so in its name;
``torch.cuda.is_available()`` stays False and ``device_count()`` 0, so a solution that asks whether it has a GPU
is told the truth. Applied before the worker's fingerprint is taken (harness.sandbox.integrity), never on a GPU.
"""

from __future__ import annotations

import contextlib
import types
from typing import Any

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
    """``with torch.cuda.device(i):``: one device, nothing to switch."""

    def __init__(self, device: Any = None) -> None:
        self.idx = 0

    def __exit__(self, *exc: Any) -> None:
        return None


def apply(torch: Any) -> bool:
    """Answer the queries in this process; False (nothing changed) where torch has a GPU."""
    cuda = torch.cuda
    if cuda.is_available():
        return False
    props = types.SimpleNamespace(**STAND_IN)
    stream = _StandInStream()
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
    return True
