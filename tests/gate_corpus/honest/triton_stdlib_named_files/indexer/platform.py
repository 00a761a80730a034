# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""Device facts and fixed layout constants (named like the standard `platform`)."""
import functools

import torch
import triton

PAGE_SIZE = 64


@functools.lru_cache(maxsize=None)
def sm_count(device_index: int) -> int:
    if not torch.cuda.is_available():
        return 132
    return torch.cuda.get_device_properties(device_index).multi_processor_count


@functools.lru_cache(maxsize=32)
def select_block(max_pages: int) -> int:
    return max(triton.next_power_of_2(max_pages * PAGE_SIZE), 16)
