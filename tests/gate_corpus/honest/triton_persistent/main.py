# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""Persistent GQA paged decode: one program per SM walks (request, kv head) work items, longest
requests first (a host-side argsort of the KV lengths)."""

import math

import torch
import triton
import triton.language as tl

_DEVICE_SMS = {}


@triton.jit
def _persistent_decode(
    q_ptr, k_ptr, v_ptr, indptr_ptr, indices_ptr, order_ptr, out_ptr, lse_ptr, qk_scale,
    total_items, num_kv_heads,
    stride_qb, stride_qh, stride_kp, stride_kh, stride_vp, stride_vh, stride_ob, stride_oh, stride_lb,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
):
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, HEAD_DIM)
    g_ok = g < GROUP
    for item in range(tl.program_id(0), total_items, tl.num_programs(0)):
        b = tl.load(order_ptr + item // num_kv_heads)
        kvh = item % num_kv_heads
        start = tl.load(indptr_ptr + b)
        stop = tl.load(indptr_ptr + b + 1)
        heads = kvh * GROUP + g
        q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + d[None, :], mask=g_ok[:, None], other=0.0)
        m = tl.full([GROUP_PAD], float("-inf"), tl.float32)
        l = tl.zeros([GROUP_PAD], tl.float32)
        acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
        for n0 in range(start, stop, BLOCK_N):
            n = n0 + tl.arange(0, BLOCK_N)
            ok = n < stop
            page = tl.load(indices_ptr + n, mask=ok, other=0).to(tl.int64)
            k = tl.load(k_ptr + page[:, None] * stride_kp + kvh * stride_kh + d[None, :], mask=ok[:, None], other=0.0)
            v = tl.load(v_ptr + page[:, None] * stride_vp + kvh * stride_vh + d[None, :], mask=ok[:, None], other=0.0)
            s = tl.where(ok[None, :], tl.dot(q, tl.trans(k)) * qk_scale, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            p = tl.exp2(s - m_new[:, None])
            alpha = tl.exp2(m - m_new)
            l = l * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m = m_new
        den = tl.where(l > 0, l, 1.0)
        tl.store(out_ptr + b * stride_ob + heads[:, None] * stride_oh + d[None, :],
                 (acc / den[:, None]).to(out_ptr.dtype.element_ty), mask=g_ok[:, None])
        tl.store(lse_ptr + b * stride_lb + heads, tl.where(l > 0, m + tl.log2(den), float("-inf")), mask=g_ok)


def _sm_count(device):
    key = device.index if device.index is not None else torch.cuda.current_device()
    count = _DEVICE_SMS.get(key)
    if count is None:
        count = _DEVICE_SMS[key] = torch.cuda.get_device_properties(key).multi_processor_count
    return count


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    assert torch.cuda.is_available() and q.is_cuda
    assert kv_indices.numel() < torch.iinfo(torch.int32).max
    batch, num_qo_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    group = num_qo_heads // num_kv_heads
    k = k_cache.view(-1, num_kv_heads, head_dim)
    v = v_cache.view(-1, num_kv_heads, head_dim)
    lengths = torch.diff(kv_indptr)
    order = torch.argsort(lengths, descending=True).to(torch.int32)
    total = batch * num_kv_heads
    major, _ = torch.cuda.get_device_capability(q.device)
    grid = (max(1, min(total, _sm_count(q.device) * 2)),)
    with torch.cuda.device(q.device):
        _persistent_decode[grid](
            q, k, v, kv_indptr, kv_indices, order, output, lse, sm_scale / math.log(2.0),
            total, num_kv_heads,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
            output.stride(0), output.stride(1), lse.stride(0),
            GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), HEAD_DIM=head_dim, BLOCK_N=64,
            num_warps=4, num_stages=3 if major >= 9 else 2,
        )
