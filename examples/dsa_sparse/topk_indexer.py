"""DSA top-k indexer: FP8 scores through the paged, DeepGEMM-packed key cache, then a radix select per row.

Rendered from skills/dsa-sparse/references/triton_topk_indexer.py.tmpl with
PAGE_SIZE=64 BLOCK_N=64 NUM_WARPS=4 SELECT_WARPS=8.

Row b holds seq_lens[b] tokens on the pages block_table[b, :]. Token j's score is
sum_h w_h relu(q_h . k_j), k_j = its FP8 key x its fp32 scale; the output is the global ids
(page * PAGE_SIZE + slot) of the top min(TOPK, L) scores, then -1 padding. Order is not judged.

- Rows with L <= TOPK return every token: no score is computed for them (the set is the answer).
- Scoring (grid rows x token blocks): the FP8 keys of BLOCK_N tokens are gathered through the page table
  and multiplied with the 64 query heads; FP8 x FP8 products are exact in bf16 operands with an fp32
  accumulator, and relu(q . k) x scale = relu(q . (k x scale)) since scales are positive.
- Selection (one program per row): the k-th largest score is found by a 32-step bisection on the scores'
  order-preserving int32 keys (a radix select, one bit per step, counting with tl.sum); the tokens above it,
  then the first tokens equal to it, are compacted with a prefix sum.

Packed cache layout (per page): PAGE_SIZE x 128 FP8 bytes, then PAGE_SIZE fp32 scales; the
[num_pages, PAGE_SIZE, 1, 132] shape is a view of that, not 132 contiguous bytes per token.
"""

import torch  # only to allocate the scores scratch and to view the packed cache (no kernel launches)
import triton
import triton.language as tl

PAGE_SIZE = 64
BLOCK_N = 64  # tokens scored per program
NUM_WARPS = 4  # warps of the scoring kernel
SELECT_WARPS = 8  # warps of the per-row selection kernel

SCALE_BYTES = 4


@triton.jit
def _score_tokens(q_ptr, k_fp8_ptr, k_scale_ptr, weights_ptr, seq_lens_ptr, block_table_ptr, scores_ptr,
                  MAX_PAGES: tl.constexpr, ROW: tl.constexpr, TOPK: tl.constexpr, HEADS: tl.constexpr,
                  DIM: tl.constexpr, PAGE: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    length = tl.load(seq_lens_ptr + row)
    if length > TOPK:  # shorter rows return all their tokens without scores
        valid = n < length
        page = tl.load(block_table_ptr + row * MAX_PAGES + n // PAGE, mask=valid, other=0).to(tl.int64)
        slot = n % PAGE
        d = tl.arange(0, DIM)
        heads = tl.arange(0, HEADS)
        page_bytes = PAGE * (DIM + 4)
        k = tl.load(k_fp8_ptr + page[:, None] * page_bytes + slot[:, None] * DIM + d[None, :],
                    mask=valid[:, None], other=0.0)
        scale = tl.load(k_scale_ptr + page * (page_bytes // 4) + (PAGE * DIM) // 4 + slot, mask=valid, other=0.0)
        q = tl.load(q_ptr + row * HEADS * DIM + heads[:, None] * DIM + d[None, :])
        qk = tl.dot(q.to(tl.bfloat16), tl.trans(k.to(tl.bfloat16)))  # [HEADS, BLOCK] fp32
        w = tl.load(weights_ptr + row * HEADS + heads)
        s = tl.sum(tl.maximum(qk * scale[None, :], 0.0) * w[:, None], 0)
        tl.store(scores_ptr + row * ROW + n, s, mask=n < ROW)


@triton.jit
def _select_topk(scores_ptr, seq_lens_ptr, block_table_ptr, out_ptr, MAX_PAGES: tl.constexpr, ROW: tl.constexpr,
                 ROW_P2: tl.constexpr, TOPK: tl.constexpr, PAGE: tl.constexpr, FILL: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    length = tl.load(seq_lens_ptr + row)
    k = tl.minimum(length, TOPK)
    n = tl.arange(0, ROW_P2)
    valid = n < length
    if length > TOPK:
        s = tl.load(scores_ptr + row * ROW + n, mask=valid, other=0.0)
        bits = s.to(tl.int32, bitcast=True)
        # order-preserving int32 key: negative floats have their magnitude bits flipped; padding sorts last
        key = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
        key = tl.where(valid, key, -2147483648)
        lo = tl.full([], -2147483648, tl.int64)
        hi = tl.full([], 2147483647, tl.int64)
        for _ in range(32):  # largest t with count(key >= t) >= k: the k-th largest key
            mid = lo + (hi - lo + 1) // 2
            enough = tl.sum((key >= mid.to(tl.int32)).to(tl.int32), 0) >= k
            lo = tl.where(enough, mid, lo)
            hi = tl.where(enough, hi, mid - 1)
        threshold = lo.to(tl.int32)
        above = key > threshold
        tied = key == threshold
        need = k - tl.sum(above.to(tl.int32), 0)
        chosen = above | (tied & (tl.cumsum(tied.to(tl.int32), 0) <= need))
    else:
        chosen = valid
    position = tl.cumsum(chosen.to(tl.int32), 0) - 1
    page = tl.load(block_table_ptr + row * MAX_PAGES + n // PAGE, mask=chosen, other=0)
    tl.store(out_ptr + row * TOPK + position, page * PAGE + n % PAGE, mask=chosen)
    for start in range(0, TOPK, FILL):
        o = start + tl.arange(0, FILL)
        tl.store(out_ptr + row * TOPK + o, tl.full([FILL], -1, tl.int32), mask=(o >= k) & (o < TOPK))


def run(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices):
    batch, heads, dim = q_index_fp8.shape
    num_pages, page_size, _, with_scale = k_index_cache_fp8.shape
    assert page_size == PAGE_SIZE and with_scale == dim + SCALE_BYTES
    topk = topk_indices.shape[1]
    max_pages = block_table.shape[1]
    if batch == 0:
        return
    row = max(max_pages * PAGE_SIZE, 1)
    scores = torch.empty((batch, row), dtype=torch.float32, device=q_index_fp8.device)
    # Two typed views of the same packed bytes: FP8 values, and fp32 scales (4-byte aligned, 132 = 33 x 4).
    k_fp8 = k_index_cache_fp8.view(torch.uint8).view(torch.float8_e4m3fn)
    k_scale = k_index_cache_fp8.view(torch.float32)
    _score_tokens[(batch, triton.cdiv(row, BLOCK_N))](
        q_index_fp8.contiguous(), k_fp8, k_scale, weights.contiguous(), seq_lens, block_table.contiguous(), scores,
        MAX_PAGES=max_pages, ROW=row, TOPK=topk, HEADS=heads, DIM=dim, PAGE=PAGE_SIZE, BLOCK=BLOCK_N,
        num_warps=NUM_WARPS)
    _select_topk[(batch,)](scores, seq_lens, block_table.contiguous(), topk_indices, MAX_PAGES=max_pages, ROW=row,
                           ROW_P2=triton.next_power_of_2(row), TOPK=topk, PAGE=PAGE_SIZE,
                           FILL=min(1024, triton.next_power_of_2(topk)), num_warps=SELECT_WARPS)
