# ruff: noqa
from __future__ import annotations

import functools

import triton

from .common import MAX_SPLITS, MIN_TOKENS_PER_SPLIT


@functools.lru_cache(maxsize=256)
def choose_splits(max_len: int, batch: int, kv_heads: int, sms: int = 132) -> int:
    """Enough splits to fill the GPU, none shorter than MIN_TOKENS_PER_SPLIT."""
    if max_len <= MIN_TOKENS_PER_SPLIT:
        return 1
    want = triton.cdiv(sms * 2, max(batch * kv_heads, 1))
    return max(1, min(MAX_SPLITS, want, triton.cdiv(max_len, MIN_TOKENS_PER_SPLIT)))
