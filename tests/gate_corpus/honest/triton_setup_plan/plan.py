"""Setup: everything that depends only on shapes (scratch, typed views of the packed cache, launch sizes)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

PAGE_SIZE = 64
SCALE_BYTES = 4


@dataclass
class IndexerPlan:
    batch: int
    heads: int
    dim: int
    max_pages: int
    row: int
    row_p2: int
    scores: torch.Tensor
    k_fp8: torch.Tensor
    k_scale: torch.Tensor


def plan(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table) -> IndexerPlan:
    batch, heads, dim = q_index_fp8.shape
    _, page_size, _, with_scale = k_index_cache_fp8.shape
    if page_size != PAGE_SIZE or with_scale != dim + SCALE_BYTES:
        raise ValueError(f"unexpected cache layout {tuple(k_index_cache_fp8.shape)}")
    max_pages = block_table.shape[1]
    row = max(max_pages * PAGE_SIZE, 1)
    scores = torch.empty((batch, row), dtype=torch.float32, device=q_index_fp8.device)
    raw = k_index_cache_fp8.view(torch.uint8)
    return IndexerPlan(batch, heads, dim, max_pages, row, triton.next_power_of_2(row), scores,
                       raw.view(torch.float8_e4m3fn), k_index_cache_fp8.view(torch.float32))
