"""Numerically wrong on purpose: the softmax scale is ignored (a classic slip); everything else is right.

Destination-passing style: inputs, then the preallocated outputs `output` (bf16) and `lse` (fp32,
base-2 log-sum-exp). Works for any page size; `run` is the page_size == 1 signature, `run_paged` the
page_size > 1 one (with kv_last_page_len).
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _gqa_decode_kernel(
    q_ptr, k_ptr, v_ptr, indptr_ptr, indices_ptr, last_len_ptr, out_ptr, lse_ptr,
    qk_scale,  # sm_scale * log2(e): the softmax runs in base 2
    stride_qb, stride_qh,
    stride_kp, stride_ks, stride_kh,
    stride_vp, stride_vs, stride_vh,
    stride_ob, stride_oh,
    stride_lb,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr, HAS_LAST_LEN: tl.constexpr, BLOCK_N: tl.constexpr,
):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    page_start = tl.load(indptr_ptr + b)
    page_end = tl.load(indptr_ptr + b + 1)
    n_pages = page_end - page_start
    if HAS_LAST_LEN:
        seq_len = tl.where(n_pages > 0, (n_pages - 1) * PAGE_SIZE + tl.load(last_len_ptr + b), 0)
    else:
        seq_len = n_pages

    rows = tl.arange(0, GROUP_PAD)  # query heads of this group; padded rows are masked on store
    dims = tl.arange(0, HEAD_DIM)
    row_ok = rows < GROUP
    q_heads = kvh * GROUP + rows
    q = tl.load(q_ptr + b * stride_qb + q_heads[:, None] * stride_qh + dims[None, :], mask=row_ok[:, None], other=0.0)

    m = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
    offs = tl.arange(0, BLOCK_N)
    for start in range(0, seq_len, BLOCK_N):
        tok = start + offs
        tok_ok = tok < seq_len
        page = tl.load(indices_ptr + page_start + tok // PAGE_SIZE, mask=tok_ok, other=0).to(tl.int64)
        slot = tok % PAGE_SIZE
        k = tl.load(k_ptr + page[:, None] * stride_kp + slot[:, None] * stride_ks + kvh * stride_kh + dims[None, :],
                    mask=tok_ok[:, None], other=0.0)
        v = tl.load(v_ptr + page[:, None] * stride_vp + slot[:, None] * stride_vs + kvh * stride_vh + dims[None, :],
                    mask=tok_ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        s = tl.where(tok_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s - m_new[:, None])
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new

    has_tokens = l > 0
    out = acc / tl.where(has_tokens, l, 1.0)[:, None]
    lse = tl.where(has_tokens, m + tl.log2(tl.where(has_tokens, l, 1.0)), float("-inf"))
    tl.store(out_ptr + b * stride_ob + q_heads[:, None] * stride_oh + dims[None, :], out.to(out_ptr.dtype.element_ty),
             mask=row_ok[:, None])
    tl.store(lse_ptr + b * stride_lb + q_heads, lse, mask=row_ok)


def _launch(q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale, output, lse):
    batch, num_qo_heads, head_dim = q.shape
    _, page_size, num_kv_heads, _ = k_cache.shape
    group = num_qo_heads // num_kv_heads
    if batch == 0:
        return
    _gqa_decode_kernel[(batch, num_kv_heads)](
        q, k_cache, v_cache, kv_indptr, kv_indices,
        kv_last_page_len if kv_last_page_len is not None else kv_indptr,
        output, lse, math.log2(math.e),
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        output.stride(0), output.stride(1), lse.stride(0),
        GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), HEAD_DIM=head_dim,
        PAGE_SIZE=page_size, HAS_LAST_LEN=kv_last_page_len is not None, BLOCK_N=64,
        num_warps=4, num_stages=2,
    )


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    _launch(q, k_cache, v_cache, kv_indptr, kv_indices, None, sm_scale, output, lse)


def run_paged(q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale, output, lse):
    _launch(q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale, output, lse)
