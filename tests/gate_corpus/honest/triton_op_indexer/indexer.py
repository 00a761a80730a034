# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""DSA top-k indexer: FP8 scores in Triton registered as torch ops (torch.library.triton_op + wrap_triton, so the
kernels stay visible to torch.compile), the top-k itself by torch.topk, the token ids mapped back in Triton."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

__all__ = ["run"]


@triton.jit
def _scores_kernel(q_ptr, kv_ptr, sc_ptr, w_ptr, seq_lens_ptr, table_ptr, out_ptr, stride_table, stride_out,
                   stride_kv_page, stride_sc_page, H: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr):
    b = tl.program_id(0)
    p = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + b)
    tok = p * PAGE + tl.arange(0, PAGE)
    if p * PAGE < seq_len:
        page = tl.load(table_ptr + b * stride_table + p).to(tl.int64)
        h = tl.arange(0, H)
        d = tl.arange(0, D)
        slot = tl.arange(0, PAGE)
        q = tl.load(q_ptr + (b * H + h[:, None]) * D + d[None, :]).to(tl.float32)
        k = tl.load(kv_ptr + page * stride_kv_page + slot[:, None] * D + d[None, :]).to(tl.float32)
        k = k * tl.load(sc_ptr + page * stride_sc_page + slot)[:, None]
        s = tl.maximum(tl.dot(q, tl.trans(k)), 0.0)
        w = tl.load(w_ptr + b * H + h)
        score = tl.sum(s * w[:, None], axis=0)
        score = tl.where(tok < seq_len, score, float("-inf"))
    else:
        score = tl.full([PAGE], float("-inf"), tl.float32)
    tl.store(out_ptr + b * stride_out + tok, score)


@triton.jit
def _map_kernel(idx_ptr, seq_lens_ptr, table_ptr, out_ptr, k_found, stride_idx, stride_table, stride_out,
                PAGE: tl.constexpr, BLOCK: tl.constexpr):
    b = tl.program_id(0)
    j = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    seq_len = tl.load(seq_lens_ptr + b)
    found = j < k_found
    pos = tl.load(idx_ptr + b * stride_idx + j, mask=found, other=0)
    ok = found & (pos < seq_len)
    page = tl.load(table_ptr + b * stride_table + pos // PAGE, mask=ok, other=0)
    tl.store(out_ptr + b * stride_out + j, tl.where(ok, page * PAGE + pos % PAGE, -1), mask=j < stride_out)


@triton_op("dsa_indexer::scores", mutates_args={"scores"})
def index_scores(q: torch.Tensor, kv: torch.Tensor, kv_scale: torch.Tensor, weights: torch.Tensor,
                 seq_lens: torch.Tensor, block_table: torch.Tensor, scores: torch.Tensor) -> None:
    batch, heads, dim = q.shape
    page = kv_scale.shape[1]
    wrap_triton(_scores_kernel)[(batch, block_table.shape[1])](
        q, kv, kv_scale, weights, seq_lens, block_table, scores, block_table.stride(0), scores.stride(0),
        kv.stride(0), kv_scale.stride(0), H=heads, D=dim, PAGE=page)


@triton_op("dsa_indexer::map_tokens", mutates_args={"out"})
def map_tokens(idx: torch.Tensor, seq_lens: torch.Tensor, block_table: torch.Tensor, page: int,
               out: torch.Tensor) -> None:
    batch, width = out.shape
    block = 256
    wrap_triton(_map_kernel)[(batch, triton.cdiv(width, block))](
        idx, seq_lens, block_table, out, idx.shape[1], idx.stride(0), block_table.stride(0), width,
        PAGE=page, BLOCK=block)


def _unpack_cache(k_index_cache_fp8: torch.Tensor):
    """DeepGEMM's paged layout: per page, page_size x 128 FP8 bytes, then page_size float32 scales."""
    num_pages, page, _, dim_sf = k_index_cache_fp8.shape
    dim = dim_sf - 4
    flat = k_index_cache_fp8.view(torch.uint8).view(num_pages, page * dim_sf)
    kv = flat[:, : page * dim].view(torch.float8_e4m3fn)
    scales = flat[:, page * dim:].view(torch.float32)
    return kv, scales


def run(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices):
    batch = q_index_fp8.shape[0]
    kv, scales = _unpack_cache(k_index_cache_fp8)
    page = scales.shape[1]
    width = block_table.shape[1] * page
    scores = torch.empty(batch, width, dtype=torch.float32, device=q_index_fp8.device)
    index_scores(q_index_fp8, kv, scales, weights, seq_lens, block_table, scores)
    idx = torch.topk(scores, min(topk_indices.shape[1], width), dim=1).indices.to(torch.int32)
    map_tokens(idx, seq_lens, block_table, page, topk_indices)
