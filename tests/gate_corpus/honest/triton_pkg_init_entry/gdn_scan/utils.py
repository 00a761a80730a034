# ruff: noqa
from __future__ import annotations

import functools
from typing import Callable, TypeVar

import torch

F = TypeVar("F", bound=Callable)


def input_guard(fn: F) -> F:
    """Make every tensor argument contiguous (FLA's idiom) before the launch."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        args = tuple(a.contiguous() if isinstance(a, torch.Tensor) else a for a in args)
        kwargs = {k: (v.contiguous() if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
        return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


@functools.lru_cache(maxsize=8)
def num_programs_hint(device_index: int) -> int:
    if not torch.cuda.is_available():
        return 132
    return torch.cuda.get_device_properties(device_index).multi_processor_count
