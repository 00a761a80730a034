"""What a worker reports of itself in its hello: versions, the device, and the GPU's state at start; and which GPU
NVML knows it as. Runs inside the worker (harness.sandbox.worker)."""

from __future__ import annotations

import os
import sys
from typing import Any

import torch


def environment() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda_available": torch.cuda.is_available(),
        "triton_interpret": os.environ.get("TRITON_INTERPRET") == "1",
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception:
        info["triton"] = None
    try:  # the version only: importing flashinfer itself costs seconds
        from importlib.metadata import version

        info["flashinfer"] = version("flashinfer-python")
    except Exception:
        info["flashinfer"] = None
    if info["cuda_available"]:
        props = torch.cuda.get_device_properties(0)
        info.update(device_count=torch.cuda.device_count(), device_name=props.name, cuda=torch.version.cuda,
                    capability=f"{props.major}.{props.minor}", sm_count=props.multi_processor_count,
                    l2_bytes=getattr(props, "L2_cache_size", None), memory_bytes=props.total_memory,
                    uuid=str(getattr(props, "uuid", "")))
        from ..measure.gpu_state import gpu_state

        state = gpu_state(nvml_index())
        info.update(driver=state.get("driver"), gpu_uuid=state.get("uuid"), gpu_state_at_start=state)
    return info


def nvml_index() -> int:
    """NVML numbers GPUs physically; CUDA_VISIBLE_DEVICES (set per worker by the harness) says which one."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return int(visible) if visible.isdigit() else 0
