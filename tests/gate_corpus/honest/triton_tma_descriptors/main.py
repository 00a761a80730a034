# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""GQA paged decode for page size 64 with in-kernel TMA descriptors (tl.make_tensor_descriptor): one program per
(request, KV head), each page of K and V fetched as one [64, 128] box. Device-side descriptors need a global
scratch, which Triton takes from the allocator set at import (the idiom of Triton's own tutorials)."""

import torch
import triton
import triton.language as tl


def _descriptor_scratch(size: int, alignment: int, stream):
    return torch.empty(size, device="cuda", dtype=torch.int8)


triton.set_allocator(_descriptor_scratch)


@triton.jit
def _decode_tma(q_ptr, k_ptr, v_ptr, indptr_ptr, indices_ptr, last_ptr, out_ptr, lse_ptr, qk_scale, num_pages,
                NUM_KV_HEADS: tl.constexpr, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
                PAGE: tl.constexpr):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    row_stride: tl.constexpr = NUM_KV_HEADS * HEAD_DIM
    k_desc = tl.make_tensor_descriptor(k_ptr, shape=[num_pages * PAGE, row_stride], strides=[row_stride, 1],
                                       block_shape=[PAGE, HEAD_DIM])
    v_desc = tl.make_tensor_descriptor(v_ptr, shape=[num_pages * PAGE, row_stride], strides=[row_stride, 1],
                                       block_shape=[PAGE, HEAD_DIM])
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, HEAD_DIM)
    t = tl.arange(0, PAGE)
    g_ok = g < GROUP
    heads = kvh * GROUP + g
    q = tl.load(q_ptr + (b * NUM_KV_HEADS * GROUP + heads[:, None]) * HEAD_DIM + d[None, :], mask=g_ok[:, None],
                other=0.0)
    first = tl.load(indptr_ptr + b)
    last_page = tl.load(indptr_ptr + b + 1)
    tail = tl.load(last_ptr + b)
    m = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
    for slot in range(first, last_page):
        page = tl.load(indices_ptr + slot)
        n_valid = tl.where(slot == last_page - 1, tail, PAGE)
        ok = t < n_valid
        k = k_desc.load([page * PAGE, kvh * HEAD_DIM])
        v = v_desc.load([page * PAGE, kvh * HEAD_DIM])
        v = tl.where(ok[:, None], v, 0.0)
        s = tl.where(ok[None, :], tl.dot(q, tl.trans(k)) * qk_scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m - m_new)
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    den = tl.where(l > 0, l, 1.0)
    tl.store(out_ptr + (b * NUM_KV_HEADS * GROUP + heads[:, None]) * HEAD_DIM + d[None, :],
             (acc / den[:, None]).to(out_ptr.dtype.element_ty), mask=g_ok[:, None])
    tl.store(lse_ptr + b * NUM_KV_HEADS * GROUP + heads, tl.where(l > 0, m + tl.log2(den), float("-inf")), mask=g_ok)


def run(q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale):
    batch, num_qo_heads, head_dim = q.shape
    num_pages, page, num_kv_heads, _ = k_cache.shape
    group = num_qo_heads // num_kv_heads
    output = torch.empty_like(q)
    lse = torch.empty((batch, num_qo_heads), dtype=torch.float32, device=q.device)
    _decode_tma[(batch, num_kv_heads)](
        q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, output, lse, sm_scale * 1.4426950408889634,
        num_pages, NUM_KV_HEADS=num_kv_heads, GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)),
        HEAD_DIM=head_dim, PAGE=page, num_warps=4, num_stages=2)
    return output, lse
