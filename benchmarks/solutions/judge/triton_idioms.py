"""GQA decode in Triton with the host code contestants write: asserts, autotune, a cached SM count, fp32
scratch zeroed by torch, lengths computed on the GPU, a contiguous output copy at the end."""

import functools
import math

import torch
import triton
import triton.language as tl


@functools.lru_cache(maxsize=8)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


@triton.autotune(configs=[triton.Config({"BLOCK_N": 64}, num_warps=4, num_stages=2),
                          triton.Config({"BLOCK_N": 128}, num_warps=4, num_stages=2)],
                 key=["HEAD_DIM"])
@triton.jit
def _decode_idioms_kernel(q_ptr, k_ptr, v_ptr, indptr_ptr, indices_ptr, out_ptr, lse_ptr, qk_scale,
                          GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
                          NUM_KV: tl.constexpr, BLOCK_N: tl.constexpr):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    rows = tl.arange(0, GROUP_PAD)
    row_ok = rows < GROUP
    heads = kvh * GROUP + rows
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + (b * NUM_KV * GROUP + heads[:, None]) * HEAD_DIM + dims[None, :], mask=row_ok[:, None],
                other=0.0)
    start = tl.load(indptr_ptr + b)
    end = tl.load(indptr_ptr + b + 1)
    m = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
    for t0 in range(start, end, BLOCK_N):
        tok = t0 + tl.arange(0, BLOCK_N)
        ok = tok < end
        page = tl.load(indices_ptr + tok, mask=ok, other=0).to(tl.int64)
        base = (page[:, None] * NUM_KV + kvh) * HEAD_DIM + dims[None, :]
        k = tl.load(k_ptr + base, mask=ok[:, None], other=0.0)
        v = tl.load(v_ptr + base, mask=ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        s = tl.where(ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s - m_new[:, None])
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    has = l > 0
    out = acc / tl.where(has, l, 1.0)[:, None]
    tl.store(out_ptr + (b * NUM_KV * GROUP + heads[:, None]) * HEAD_DIM + dims[None, :], out, mask=row_ok[:, None])
    tl.store(lse_ptr + b * NUM_KV * GROUP + heads, tl.where(has, m + tl.log2(tl.where(has, l, 1.0)), float("-inf")),
             mask=row_ok)


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    assert q.dtype == torch.bfloat16 and k_cache.dtype == torch.bfloat16
    assert q.is_contiguous() and k_cache.stride(-1) == 1
    batch, num_qo_heads, head_dim = q.shape
    _, page_size, num_kv_heads, _ = k_cache.shape
    assert page_size == 1 and head_dim == 128
    if batch == 0:
        return
    group = num_qo_heads // num_kv_heads
    if q.is_cuda:
        _ = _sm_count(q.device.index or 0)  # a cached device query (sizing heuristics read it)
    lengths = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)  # index arithmetic on the GPU
    del lengths
    out32 = torch.zeros((batch, num_qo_heads, head_dim), dtype=torch.float32, device=q.device)
    _decode_idioms_kernel[(batch, num_kv_heads)](
        q, k_cache, v_cache, kv_indptr, kv_indices, out32, lse, float(sm_scale) * math.log2(math.e),
        GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), HEAD_DIM=head_dim, NUM_KV=num_kv_heads)
    tmp = torch.empty_like(output, memory_format=torch.contiguous_format)
    tmp.copy_(out32.to(torch.bfloat16))
    output.copy_(tmp)
