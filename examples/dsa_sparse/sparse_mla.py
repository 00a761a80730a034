"""DSA sparse MLA attention (absorbed layout) with a split top-k: programs per (query token, split), then a merge.

Rendered from skills/dsa-sparse/references/triton_sparse_mla.py.tmpl with
PAGE_SIZE=64 BLOCK_N=32 SPLIT=16 NUM_WARPS=8 NUM_STAGES=2.

Each query token attends to the rows its `sparse_indices` name (token id = page * PAGE_SIZE + slot into the
flattened cache, -1 = padding). All 16 heads of a token share every gathered row, so one program holds the
token's 16 query heads and streams the gathered ckv (512) and kpe (64) rows once: logits = q_nope . ckv +
q_pe . kpe (bf16 products, fp32 sums), online softmax in base 2, output = P . ckv (the latent is also the value).
Decode batches hold at most a few tokens, far fewer programs than SMs, so the top-k list is cut into SPLIT
chunks; each writes its partial (max m in log2 units, sum l, unnormalised fp32 accumulator) and a merge kernel
combines them:

    M = max_s m_s,   L = sum_s 2^(m_s - M) l_s,   output = sum_s 2^(m_s - M) acc_s / L,   lse = M + log2 L

A token whose indices are all padding gets output 0 and lse -inf (as the reference; the official rule fails a
returned -inf, and the workloads never have such a token).
"""

import torch  # only to allocate the partials (torch.empty launches no kernel)
import triton
import triton.language as tl

PAGE_SIZE = 64
BLOCK_N = 32  # gathered rows per inner step
SPLIT = 16  # chunks of the top-k list per token (a power of two: the merge uses tl.arange over it)
NUM_WARPS = 8
NUM_STAGES = 2  # software-pipelining depth of the gathered loads on the GPU

LOG2_E = 1.4426950408889634


@triton.jit
def _sparse_mla_chunk(q_nope_ptr, q_pe_ptr, ckv_ptr, kpe_ptr, indices_ptr, part_acc_ptr, part_ml_ptr,
                      qk_scale_log2, TOPK: tl.constexpr, HEADS: tl.constexpr, D_CKV: tl.constexpr,
                      D_KPE: tl.constexpr, CHUNK: tl.constexpr, BLOCK: tl.constexpr, SPLITS: tl.constexpr,
                      STAGES: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    heads = tl.arange(0, HEADS)
    dc = tl.arange(0, D_CKV)
    dp = tl.arange(0, D_KPE)
    q_nope = tl.load(q_nope_ptr + token * HEADS * D_CKV + heads[:, None] * D_CKV + dc[None, :])
    q_pe = tl.load(q_pe_ptr + token * HEADS * D_KPE + heads[:, None] * D_KPE + dp[None, :])
    m = tl.full([HEADS], float("-inf"), tl.float32)
    l = tl.zeros([HEADS], tl.float32)
    acc = tl.zeros([HEADS, D_CKV], tl.float32)
    for step in tl.range(0, CHUNK, BLOCK, num_stages=STAGES):
        n = split * CHUNK + step + tl.arange(0, BLOCK)
        index = tl.load(indices_ptr + token * TOPK + n, mask=n < TOPK, other=-1)
        valid = index >= 0
        # int64: 8462 pages x 64 rows x 512 elements overflow int32 offsets
        row = tl.where(valid, index, 0).to(tl.int64)
        ckv = tl.load(ckv_ptr + row[:, None] * D_CKV + dc[None, :], mask=valid[:, None], other=0.0)
        kpe = tl.load(kpe_ptr + row[:, None] * D_KPE + dp[None, :], mask=valid[:, None], other=0.0)
        # bf16 x bf16 products are exact in the fp32 accumulator, as in the reference's fp32 matmul
        s = tl.dot(q_nope, tl.trans(ckv)) + tl.dot(q_pe, tl.trans(kpe))
        s = tl.where(valid[None, :], s * qk_scale_log2, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # no valid row yet: keep exp2 finite
        alpha = tl.exp2(m - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(ckv.dtype), ckv)
        m = m_new
    part = (token * SPLITS + split) * HEADS + heads
    tl.store(part_acc_ptr + part[:, None] * D_CKV + dc[None, :], acc)
    tl.store(part_ml_ptr + part * 2, m)
    tl.store(part_ml_ptr + part * 2 + 1, l)


@triton.jit
def _sparse_mla_merge(part_acc_ptr, part_ml_ptr, output_ptr, lse_ptr, HEADS: tl.constexpr, D_CKV: tl.constexpr,
                      SPLITS: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    splits = tl.arange(0, SPLITS)
    dc = tl.arange(0, D_CKV)
    part = (token * SPLITS + splits) * HEADS + head
    m = tl.load(part_ml_ptr + part * 2)
    l = tl.load(part_ml_ptr + part * 2 + 1)
    big_m = tl.max(m, 0)
    big_m_safe = tl.where(big_m == float("-inf"), 0.0, big_m)
    weight = tl.where(m == float("-inf"), 0.0, tl.exp2(m - big_m_safe))
    big_l = tl.sum(weight * l, 0)
    acc = tl.load(part_acc_ptr + part[:, None] * D_CKV + dc[None, :])
    total = tl.sum(acc * weight[:, None], 0)
    out = tl.where(big_l > 0, total / tl.where(big_l > 0, big_l, 1.0), 0.0)
    tl.store(output_ptr + (token * HEADS + head) * D_CKV + dc, out.to(output_ptr.dtype.element_ty))
    lse = tl.where(big_l > 0, big_m + tl.log2(tl.where(big_l > 0, big_l, 1.0)), float("-inf"))
    tl.store(lse_ptr + token * HEADS + head, lse)


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    num_tokens, heads, d_ckv = q_nope.shape
    d_kpe = q_pe.shape[-1]
    topk = sparse_indices.shape[-1]
    assert ckv_cache.shape[1] == PAGE_SIZE and kpe_cache.shape[1] == PAGE_SIZE
    if num_tokens == 0:
        return
    # Whole BLOCK_N steps per chunk; chunks past the list's end are masked out and merge with weight 0.
    per_split = -(-topk // SPLIT)
    chunk = -(-per_split // BLOCK_N) * BLOCK_N
    part_acc = torch.empty((num_tokens, SPLIT, heads, d_ckv), dtype=torch.float32, device=q_nope.device)
    part_ml = torch.empty((num_tokens, SPLIT, heads, 2), dtype=torch.float32, device=q_nope.device)
    _sparse_mla_chunk[(num_tokens, SPLIT)](
        q_nope.contiguous(), q_pe.contiguous(), ckv_cache, kpe_cache, sparse_indices.contiguous(), part_acc, part_ml,
        float(sm_scale) * LOG2_E, TOPK=topk, HEADS=heads, D_CKV=d_ckv, D_KPE=d_kpe, CHUNK=chunk, BLOCK=BLOCK_N,
        SPLITS=SPLIT, STAGES=NUM_STAGES, num_warps=NUM_WARPS)
    _sparse_mla_merge[(num_tokens, heads)](part_acc, part_ml, output, lse, HEADS=heads, D_CKV=d_ckv, SPLITS=SPLIT,
                                           num_warps=4)
