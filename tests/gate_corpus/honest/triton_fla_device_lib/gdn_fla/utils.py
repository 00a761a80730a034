# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""Host helpers for the GDN launchers, in the manner of flash-linear-attention's utils module, which contestants
vendor into their solutions: the backend Triton drives, the torch module of that device (looked up by its name), a
device context per tensor, capability and version checks made once, and an input guard for launchers."""

import contextlib
import functools
import inspect
import logging
import os
import sys
import warnings
from enum import Enum
from typing import Any, Callable, Optional

import torch
import triton
from packaging import version

logger = logging.getLogger(__name__)

FLA_GDN_DEBUG = os.environ.get("FLA_GDN_DEBUG", "0") == "1"
TRITON_NEWER_THAN_3_2 = version.parse(triton.__version__) >= version.parse("3.2.0")
# does this Triton's autotuner take `cache_results`? (asked of its signature, as FLA does)
AUTOTUNE_TAKES_CACHE = "cache_results" in inspect.signature(triton.autotune).parameters


def _no_gpu_backend() -> None:
    warnings.warn("Triton found no GPU backend here; the launchers fall back to the CPU device", stacklevel=2)


@functools.lru_cache(maxsize=None)
def get_available_device() -> str:
    """'cuda', 'hip', 'xpu'... as the active Triton driver names its target; 'cpu' where there is none."""
    try:
        return triton.runtime.driver.active.get_current_target().backend
    except Exception:
        _no_gpu_backend()
        return "cpu"


@functools.cache
def torch_at_least(wanted: str = "2.4") -> bool:
    return version.parse(torch.__version__) >= version.parse(wanted)


# ROCm builds of torch still call their device "cuda"
device = "cuda" if get_available_device() == "hip" else get_available_device()
device_torch_lib = getattr(torch, device)
device_platform = {"cuda": "nvidia", "hip": "amd", "xpu": "intel"}.get(get_available_device(), "cpu")

is_nvidia = device_platform == "nvidia"
is_intel = device_platform == "intel"
is_nvidia_hopper = is_nvidia and device_torch_lib.is_available() and (
    "NVIDIA H" in device_torch_lib.get_device_name(0) or device_torch_lib.get_device_capability()[0] >= 9)
use_cuda_graph = is_nvidia and os.environ.get("FLA_USE_CUDA_GRAPH", "0") == "1"


@functools.lru_cache(maxsize=None)
def get_multiprocessor_count(index: int = 0) -> int:
    try:
        return triton.runtime.driver.active.utils.get_device_properties(index)["multiprocessor_count"]
    except Exception:
        return 1


def all_max_shared_mem() -> list:
    if not device_torch_lib.is_available():
        return [-1]
    return [triton.runtime.driver.active.utils.get_device_properties(i)["max_shared_mem"]
            for i in range(device_torch_lib.device_count())]


class Backend(Enum):
    ADA = 101376
    AMPERE = 166912
    HOPPER = 232448
    DEFAULT = 102400

    @classmethod
    def shared_memory(cls, arch: str) -> int:
        return cls[arch.upper()].value if arch.upper() in cls.__members__ else cls.DEFAULT.value


@functools.lru_cache(maxsize=None)
def check_shared_mem(arch: str = "none", index: int = 0) -> bool:
    sizes = all_max_shared_mem()
    return index < len(sizes) and sizes[index] >= Backend.shared_memory(arch)


if torch_at_least("2.4"):
    def custom_device_ctx(index: int):
        return device_torch_lib.device(index)
else:
    def custom_device_ctx(index: int):
        return torch.cuda.device(index)


def current_device_index() -> int:
    return device_torch_lib.current_device() if device_torch_lib.is_available() else -1


@contextlib.contextmanager
def on_device_of(tensor: Optional[torch.Tensor]):
    """The device context of `tensor`'s GPU; nothing to enter for a CPU tensor (the Triton interpreter)."""
    if tensor is None or device == "cpu" or tensor.device.type != device or not device_torch_lib.is_available():
        yield
        return
    with custom_device_ctx(tensor.device.index):
        yield


def input_guard(fn: Callable[..., Any] = None, *, keep_strides: tuple = ()):
    """Make the tensor arguments of a launcher contiguous (but those named in `keep_strides`) and run it on the
    device of its first tensor argument."""

    def decorate(fn):
        names = list(inspect.signature(fn).parameters)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            def fix(name, value):
                if isinstance(value, torch.Tensor) and name not in keep_strides:
                    return value.contiguous()
                return value

            args = [fix(names[i] if i < len(names) else f"arg{i}", a) for i, a in enumerate(args)]
            kwargs = {k: fix(k, v) for k, v in kwargs.items()}
            first = next((t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)), None)
            with on_device_of(first):
                return fn(*args, **kwargs)

        return wrapper

    return decorate(fn) if fn is not None else decorate


if FLA_GDN_DEBUG:
    logger.info("GDN helpers: device=%s hopper=%s cuda graphs=%s", device, is_nvidia_hopper, use_cuda_graph)


def _upper_case_aliases():
    """The flags again under the upper-case names that newer kernels import."""
    module = sys.modules[__name__]
    for flag in ("is_nvidia", "is_intel", "use_cuda_graph"):
        if hasattr(module, flag):
            setattr(module, flag.upper(), getattr(module, flag))


_upper_case_aliases()
del _upper_case_aliases
