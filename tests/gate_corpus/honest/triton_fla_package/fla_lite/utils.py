import contextlib
import functools
import warnings

import torch

IS_CUDA = torch.cuda.is_available()


def input_guard(fn):
    """Make every tensor argument contiguous and run on its device (FLA's decorator)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        args = [a.contiguous() if isinstance(a, torch.Tensor) else a for a in args]
        kwargs = {k: (v.contiguous() if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
        tensor = next((a for a in args if isinstance(a, torch.Tensor)), None)
        ctx = torch.cuda.device(tensor.device.index) if IS_CUDA and tensor is not None else contextlib.nullcontext()
        with ctx:
            return fn(*args, **kwargs)

    return wrapper


@functools.lru_cache(maxsize=None)
def get_multiprocessor_count(index: int = 0) -> int:
    if not IS_CUDA:
        return 1
    return torch.cuda.get_device_properties(index).multi_processor_count


def check_shared_mem() -> bool:
    try:
        return IS_CUDA and torch.cuda.get_device_capability()[0] >= 9
    except RuntimeError:
        warnings.warn("could not query device capability", stacklevel=2)
        return False
