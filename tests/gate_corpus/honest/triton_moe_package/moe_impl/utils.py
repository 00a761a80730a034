from __future__ import annotations

import functools
import logging
from typing import Dict, Tuple

import numpy as np
import torch

log = logging.getLogger(__name__)

_WORKSPACE: Dict[Tuple, torch.Tensor] = {}


def workspace(name: str, shape: Tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Scratch reused between calls of one shape (its content is never read before it is written)."""
    key = (name, tuple(shape), dtype, str(device))
    buf = _WORKSPACE.get(key)
    if buf is None:
        buf = torch.empty(shape, dtype=dtype, device=device)
        _WORKSPACE[key] = buf
        log.debug("allocated %s %s", name, shape)
    return buf


@functools.lru_cache(maxsize=None)
def next_pow2(n: int) -> int:
    return int(2 ** np.ceil(np.log2(max(n, 1))))


@functools.cache
def swiglu_limits(dtype_name: str) -> float:
    return float(np.finfo(np.float32).max) if dtype_name == "float32" else 448.0
