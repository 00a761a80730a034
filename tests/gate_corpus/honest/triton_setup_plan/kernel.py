"""DSA top-k indexer: a scoring kernel over the paged FP8 keys, then a sort-based selection per row."""
from __future__ import annotations

import triton
import triton.language as tl

from .plan import PAGE_SIZE, IndexerPlan

BLOCK_N = 32


@triton.jit
def _score(q_ptr, k_ptr, ks_ptr, w_ptr, lens_ptr, bt_ptr, s_ptr, MAXP: tl.constexpr, ROW: tl.constexpr,
           H: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr, BN: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    n = tl.program_id(1) * BN + tl.arange(0, BN)
    L = tl.load(lens_ptr + b)
    ok = n < L
    page = tl.load(bt_ptr + b * MAXP + n // PAGE, mask=ok, other=0).to(tl.int64)
    slot = n % PAGE
    d = tl.arange(0, D)
    h = tl.arange(0, H)
    base = page * (PAGE * (D + 4))
    k = tl.load(k_ptr + base[:, None] + slot[:, None] * D + d[None, :], mask=ok[:, None], other=0.0)
    ks = tl.load(ks_ptr + base // 4 + PAGE * D // 4 + slot, mask=ok, other=0.0)
    q = tl.load(q_ptr + b * H * D + h[:, None] * D + d[None, :])
    qk = tl.dot(q.to(tl.bfloat16), tl.trans(k.to(tl.bfloat16)))  # [H, BN], exact products
    w = tl.load(w_ptr + b * H + h)
    s = tl.sum(tl.maximum(qk, 0.0) * w[:, None], 0) * ks
    tl.store(s_ptr + b * ROW + n, s, mask=n < ROW)


@triton.jit
def _select(s_ptr, lens_ptr, bt_ptr, out_ptr, MAXP: tl.constexpr, ROW: tl.constexpr, ROW_P2: tl.constexpr,
            TOPK: tl.constexpr, PAGE: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    L = tl.load(lens_ptr + b)
    n = tl.arange(0, ROW_P2)
    ok = n < L
    s = tl.load(s_ptr + b * ROW + n, mask=ok, other=0.0)
    bits = s.to(tl.int32, bitcast=True)
    key = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
    key = tl.where(ok, key, -2147483648)
    packed = (key.to(tl.int64) << 32) | n.to(tl.int64)
    packed = tl.sort(packed, descending=True)
    idx = (packed & 0xFFFFFFFF).to(tl.int32)
    k = tl.minimum(L, TOPK)
    take = n < k
    page = tl.load(bt_ptr + b * MAXP + idx // PAGE, mask=take, other=0)
    tl.store(out_ptr + b * TOPK + n, page * PAGE + idx % PAGE, mask=take)
    tl.store(out_ptr + b * TOPK + n, tl.full([ROW_P2], -1, tl.int32), mask=(n >= k) & (n < TOPK))


@triton.jit
def _pad(out_ptr, lens_ptr, TOPK: tl.constexpr, START: tl.constexpr, BLOCK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    o = START + tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + b * TOPK + o, tl.full([BLOCK], -1, tl.int32), mask=o < TOPK)


def run(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices, plan: IndexerPlan):
    if plan.batch == 0:
        return
    topk = topk_indices.shape[1]
    _score[(plan.batch, triton.cdiv(plan.row, BLOCK_N))](
        q_index_fp8, plan.k_fp8, plan.k_scale, weights, seq_lens, block_table, plan.scores, MAXP=plan.max_pages,
        ROW=plan.row, H=plan.heads, D=plan.dim, PAGE=PAGE_SIZE, BN=BLOCK_N)
    _select[(plan.batch,)](plan.scores, seq_lens, block_table, topk_indices, MAXP=plan.max_pages, ROW=plan.row,
                           ROW_P2=plan.row_p2, TOPK=topk, PAGE=PAGE_SIZE)
    if plan.row_p2 < topk:
        _pad[(plan.batch, triton.cdiv(topk - plan.row_p2, 256))](topk_indices, seq_lens, TOPK=topk,
                                                                START=plan.row_p2, BLOCK=256)
