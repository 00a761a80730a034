# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""Index scores: one program per (row, page of its block table)."""
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({}, num_warps=w, num_stages=s) for w in (4, 8) for s in (2, 3)],
                 key=["HEADS", "HEAD_DIM"])
@triton.jit
def _index_scores(q_ptr, kv_fp8_ptr, kv_scale_ptr, w_ptr, seq_lens_ptr, block_table_ptr, scores_ptr,
                  MAX_PAGES, HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE: tl.constexpr):
    b = tl.program_id(0)
    j = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + b)
    slot = tl.arange(0, PAGE)
    pos = j * PAGE + slot
    if j * PAGE < seq_len:
        page = tl.load(block_table_ptr + b * MAX_PAGES + j).to(tl.int64)
        h = tl.arange(0, HEADS)
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(q_ptr + (b * HEADS + h)[:, None] * HEAD_DIM + d[None, :]).to(tl.bfloat16)
        page_bytes = PAGE * (HEAD_DIM + 4)
        k = tl.load(kv_fp8_ptr + page * page_bytes + slot[:, None] * HEAD_DIM + d[None, :]).to(tl.bfloat16)
        k_scale = tl.load(kv_scale_ptr + (page * page_bytes + PAGE * HEAD_DIM) // 4 + slot)
        s = tl.dot(q, tl.trans(k))  # [HEADS, PAGE], exact: fp8 values are bf16 values
        s = tl.maximum(s * k_scale[None, :], 0.0)
        w = tl.load(w_ptr + b * HEADS + h)
        score = tl.sum(s * w[:, None], axis=0)
        score = tl.where(pos < seq_len, score, float("-inf"))
    else:
        score = tl.full([PAGE], float("-inf"), tl.float32)
    tl.store(scores_ptr + b * MAX_PAGES * PAGE + pos, score)


