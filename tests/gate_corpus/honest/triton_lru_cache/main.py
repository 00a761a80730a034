# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""GQA paged decode with host-side launch decisions memoised on integers (device index, shapes)."""

import functools
import math

import torch
import triton
import triton.language as tl


@functools.lru_cache(maxsize=None)
def _device_info(device_index):
    props = torch.cuda.get_device_properties(device_index)
    major, minor = torch.cuda.get_device_capability(device_index)
    return props.multi_processor_count, major * 10 + minor


@functools.lru_cache(maxsize=64)
def _launch_config(group, head_dim, page_size, sm_count, arch):
    group_pad = max(16, triton.next_power_of_2(group))
    block_n = 64 if head_dim <= 128 else 32
    if page_size > 1:
        block_n = min(block_n, max(16, triton.next_power_of_2(page_size)))
    num_stages = 3 if arch >= 90 else 2
    num_warps = 8 if group_pad * head_dim >= 4096 and sm_count >= 100 else 4
    return group_pad, block_n, num_warps, num_stages


@triton.jit
def _kernel(
    q_ptr, k_ptr, v_ptr, indptr_ptr, indices_ptr, out_ptr, lse_ptr, qk_scale,
    sqb, sqh, skp, sks, skh, svp, svs, svh, sob, soh, slb,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    p0 = tl.load(indptr_ptr + b)
    n_tok = (tl.load(indptr_ptr + b + 1) - p0) * PAGE_SIZE
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, HEAD_DIM)
    g_ok = g < GROUP
    h = kvh * GROUP + g
    q = tl.load(q_ptr + b * sqb + h[:, None] * sqh + d[None, :], mask=g_ok[:, None], other=0.0)
    m = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
    for n0 in range(0, n_tok, BLOCK_N):
        t = n0 + tl.arange(0, BLOCK_N)
        ok = t < n_tok
        pg = tl.load(indices_ptr + p0 + t // PAGE_SIZE, mask=ok, other=0).to(tl.int64)
        slot = t % PAGE_SIZE
        k = tl.load(k_ptr + pg[:, None] * skp + slot[:, None] * sks + kvh * skh + d[None, :], mask=ok[:, None], other=0.0)
        v = tl.load(v_ptr + pg[:, None] * svp + slot[:, None] * svs + kvh * svh + d[None, :], mask=ok[:, None], other=0.0)
        s = tl.where(ok[None, :], tl.dot(q, tl.trans(k)) * qk_scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        a = tl.exp2(m - m_new)
        l = l * a + tl.sum(p, 1)
        acc = acc * a[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    l_safe = tl.where(l > 0, l, 1.0)
    tl.store(out_ptr + b * sob + h[:, None] * soh + d[None, :], (acc / l_safe[:, None]).to(out_ptr.dtype.element_ty),
             mask=g_ok[:, None])
    tl.store(lse_ptr + b * slb + h, tl.where(l > 0, m + tl.log2(l_safe), float("-inf")), mask=g_ok)


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    batch, num_qo_heads, head_dim = q.shape
    _, page_size, num_kv_heads, _ = k_cache.shape
    if batch == 0:
        return
    device_index = q.device.index if q.device.index is not None else torch.cuda.current_device()
    sm_count, arch = _device_info(device_index)
    group = num_qo_heads // num_kv_heads
    group_pad, block_n, num_warps, num_stages = _launch_config(group, head_dim, page_size, sm_count, arch)
    indptr = kv_indptr if kv_indptr.dtype == torch.int32 else kv_indptr.to(torch.int32)
    indices = kv_indices if kv_indices.dtype == torch.int32 else kv_indices.to(torch.int32)
    with torch.cuda.device_of(q):
        _kernel[(batch, num_kv_heads)](
            q, k_cache, v_cache, indptr, indices, output, lse, sm_scale * math.log2(math.e),
            q.stride(0), q.stride(1),
            k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
            v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
            output.stride(0), output.stride(1), lse.stride(0),
            GROUP=group, GROUP_PAD=group_pad, HEAD_DIM=head_dim, PAGE_SIZE=page_size, BLOCK_N=block_n,
            num_warps=num_warps, num_stages=num_stages,
        )
