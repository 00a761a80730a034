"""Honest DSA top-k indexer, a common idiom: the scores in Triton, the selection by `torch.topk`.

Kernel 1 scores every position of every row's pages: sum over heads of w_h * relu(q_h . k), with the FP8 keys
read straight from DeepGEMM's packed page layout (per page: 64 x 128 FP8 bytes, then 64 fp32 scales) and the
per-token scale applied after the dot. Positions past the row's length score -inf. `torch.topk` picks the best
positions per row (sorted), and kernel 2 maps them through the block table to token ids (-1 past the length)."""

import torch
import triton
import triton.language as tl


@triton.jit
def indexer_scores(q_ptr, kfp8_ptr, kscale_ptr, w_ptr, seq_lens_ptr, block_table_ptr, scores_ptr,
                   max_pages, row_len,
                   H: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    blk = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + row)

    pos = blk * BLOCK_N + tl.arange(0, BLOCK_N)
    live = pos < seq_len
    page = tl.load(block_table_ptr + row * max_pages + pos // PAGE, mask=live, other=0).to(tl.int64)
    slot = pos % PAGE
    dd = tl.arange(0, D)
    hh = tl.arange(0, H)

    page_bytes = PAGE * (D + 4)
    keys = tl.load(kfp8_ptr + page[:, None] * page_bytes + slot[:, None] * D + dd[None, :],
                   mask=live[:, None], other=0.0)
    kscale = tl.load(kscale_ptr + page * (page_bytes // 4) + PAGE * D // 4 + slot, mask=live, other=0.0)
    q = tl.load(q_ptr + row * H * D + hh[:, None] * D + dd[None, :])

    logits = tl.dot(q.to(tl.bfloat16), tl.trans(keys.to(tl.bfloat16)))  # [H, BLOCK_N], exact products
    logits = tl.maximum(logits * kscale[None, :], 0.0)
    w = tl.load(w_ptr + row * H + hh)
    score = tl.sum(logits * w[:, None], axis=0)
    score = tl.where(live, score, float("-inf"))
    tl.store(scores_ptr + row * row_len + pos, score, mask=pos < row_len)


@triton.jit
def positions_to_tokens(pick_ptr, seq_lens_ptr, block_table_ptr, out_ptr, max_pages, picked, width,
                        PAGE: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    col = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    seq_len = tl.load(seq_lens_ptr + row)
    pos = tl.load(pick_ptr + row * picked + col, mask=col < picked, other=0x7FFFFFFF).to(tl.int32)
    live = pos < seq_len
    page = tl.load(block_table_ptr + row * max_pages + pos // PAGE, mask=live, other=0)
    token = tl.where(live, page * PAGE + pos % PAGE, -1)
    tl.store(out_ptr + row * width + col, token, mask=col < width)


def run(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices):
    batch, heads, dim = q_index_fp8.shape
    page = k_index_cache_fp8.shape[1]
    max_pages = block_table.shape[1]
    row_len = max_pages * page
    width = topk_indices.shape[1]

    flat = k_index_cache_fp8.reshape(-1)
    kfp8 = flat.view(torch.float8_e4m3fn)
    kscale = flat.view(torch.float32)
    scores = torch.empty((batch, row_len), dtype=torch.float32, device=q_index_fp8.device)
    block_n = 64
    indexer_scores[(batch, triton.cdiv(row_len, block_n))](
        q_index_fp8, kfp8, kscale, weights, seq_lens, block_table, scores, max_pages, row_len,
        H=heads, D=dim, PAGE=page, BLOCK_N=block_n, num_warps=4)

    picked = min(width, row_len)
    _, pick = torch.topk(scores, picked, dim=1, sorted=True)

    block = 256
    positions_to_tokens[(batch, triton.cdiv(width, block))](
        pick, seq_lens, block_table, topk_indices, max_pages, picked, width, PAGE=page, BLOCK=block, num_warps=4)
