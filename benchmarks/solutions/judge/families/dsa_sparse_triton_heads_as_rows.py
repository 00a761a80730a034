"""Honest DSA sparse attention: one Triton program per token, its 16 query heads as the rows of every tensor-core
product, the 2048 selected positions walked in chunks with an online base-2 softmax.

Each chunk gathers the chunk's compressed-KV rows (512 wide, which are both the keys' first part and the values)
and their positional-encoding rows (64) straight from the paged caches by the token indices; padding (-1) is masked
to a -inf logit. A token whose positions are all padding gets a zero output and an lse of -inf, as the definition's
reference leaves them. Host side: views of the caches, the scale as a float, one launch."""

import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def sparse_mla_rows(qn_ptr, qp_ptr, ckv_ptr, kpe_ptr, idx_ptr, out_ptr, lse_ptr, scale_log2,
                    TOPK: tl.constexpr, H: tl.constexpr, DC: tl.constexpr, DP: tl.constexpr, BN: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    h = tl.arange(0, H)
    dc = tl.arange(0, DC)
    dp = tl.arange(0, DP)
    qn = tl.load(qn_ptr + (t * H + h[:, None]) * DC + dc[None, :])
    qp = tl.load(qp_ptr + (t * H + h[:, None]) * DP + dp[None, :])

    m = tl.full([H], float("-inf"), tl.float32)
    total = tl.zeros([H], tl.float32)
    acc = tl.zeros([H, DC], tl.float32)
    for start in range(0, TOPK, BN):
        cols = start + tl.arange(0, BN)
        ids = tl.load(idx_ptr + t * TOPK + cols, mask=cols < TOPK, other=-1)
        valid = ids >= 0
        rows = tl.where(valid, ids, 0).to(tl.int64)
        kc = tl.load(ckv_ptr + rows[:, None] * DC + dc[None, :], mask=valid[:, None], other=0.0)
        kp = tl.load(kpe_ptr + rows[:, None] * DP + dp[None, :], mask=valid[:, None], other=0.0)
        logits = tl.dot(qn, tl.trans(kc)) + tl.dot(qp, tl.trans(kp))
        logits = tl.where(valid[None, :], logits * scale_log2, float("-inf"))
        m_new = tl.maximum(m, tl.max(logits, 1))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # nothing valid yet: keep every term at 0
        rescale = tl.exp2(m - shift)
        p = tl.exp2(logits - shift[:, None])
        total = total * rescale + tl.sum(p, 1)
        acc = acc * rescale[:, None] + tl.dot(p.to(tl.bfloat16), kc)
        m = m_new

    seen = total > 0
    out = tl.where(seen[:, None], acc / tl.where(seen, total, 1.0)[:, None], 0.0)
    tl.store(out_ptr + (t * H + h[:, None]) * DC + dc[None, :], out.to(tl.bfloat16))
    tl.store(lse_ptr + t * H + h, tl.where(seen, m + tl.log2(tl.where(seen, total, 1.0)), float("-inf")))


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    tokens, heads, dim_ckv = q_nope.shape
    dim_kpe = q_pe.shape[-1]
    topk = sparse_indices.shape[-1]
    ckv = ckv_cache.reshape(-1, dim_ckv)  # token-level rows: index = page * page_size + offset
    kpe = kpe_cache.reshape(-1, dim_kpe)
    sparse_mla_rows[(tokens,)](
        q_nope.contiguous(), q_pe.contiguous(), ckv, kpe, sparse_indices.contiguous(), output, lse,
        float(sm_scale) * LOG2E, TOPK=topk, H=heads, DC=dim_ckv, DP=dim_kpe, BN=16, num_warps=8)
