# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""GQA paged decode that also takes an fp8 KV cache (e4m3 / e5m2, per-tensor scales), bf16 queries."""

import math

import torch
import triton
import triton.language as tl

_FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
_E8M0 = getattr(torch, "float8_e8m0fnu", None)  # newer torch only; not used for the cache itself
_TL_OUT = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}


@triton.jit
def _fp8_decode(
    q_ptr, k_ptr, v_ptr, indptr_ptr, indices_ptr, out_ptr, lse_ptr, qk_scale, v_scale,
    sqb, sqh, skp, skh, svp, svh, sob, soh, slb,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr,
    OUT_DTYPE: tl.constexpr,
):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    lo = tl.load(indptr_ptr + b)
    hi = tl.load(indptr_ptr + b + 1)
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, D)
    gm = g < GROUP
    h = kvh * GROUP + g
    q = tl.load(q_ptr + b * sqb + h[:, None] * sqh + d[None, :], mask=gm[:, None], other=0.0)
    m = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, D], tl.float32)
    for n0 in range(lo, hi, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        ok = n < hi
        pg = tl.load(indices_ptr + n, mask=ok, other=0).to(tl.int64)
        k = tl.load(k_ptr + pg[:, None] * skp + kvh * skh + d[None, :], mask=ok[:, None], other=0.0).to(q.dtype)
        v = tl.load(v_ptr + pg[:, None] * svp + kvh * svh + d[None, :], mask=ok[:, None], other=0.0).to(q.dtype)
        s = tl.where(ok[None, :], tl.dot(q, tl.trans(k)) * qk_scale, float("-inf"))
        mn = tl.maximum(m, tl.max(s, 1))
        p = tl.exp2(s - mn[:, None])
        al = tl.exp2(m - mn)
        l = l * al + tl.sum(p, 1)
        acc = acc * al[:, None] + tl.dot(p.to(q.dtype), v)
        m = mn
    den = tl.where(l > 0, l, 1.0)
    tl.store(out_ptr + b * sob + h[:, None] * soh + d[None, :], (acc * v_scale / den[:, None]).to(OUT_DTYPE),
             mask=gm[:, None])
    tl.store(lse_ptr + b * slb + h, tl.where(l > 0, m + tl.log2(den), float("-inf")), mask=gm)


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse, k_scale=1.0, v_scale=1.0):
    assert q.dtype in _TL_OUT, f"unsupported query dtype {q.dtype}"
    assert k_cache.dtype in (*_FP8_DTYPES, q.dtype) and v_cache.dtype == k_cache.dtype
    assert _E8M0 is None or k_cache.dtype != _E8M0
    batch, num_qo_heads, head_dim = q.shape
    pages, page_size, num_kv_heads, _ = k_cache.shape
    assert page_size == 1
    group = num_qo_heads // num_kv_heads
    k = k_cache.reshape(pages, num_kv_heads, head_dim)
    v = v_cache.reshape(pages, num_kv_heads, head_dim)
    qk_scale = float(sm_scale) * float(k_scale) * math.log2(math.e)
    _fp8_decode[(batch, num_kv_heads)](
        q, k, v, kv_indptr, kv_indices, output, lse, qk_scale, float(v_scale),
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        output.stride(0), output.stride(1), lse.stride(0),
        GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), D=head_dim, BLOCK_N=64,
        OUT_DTYPE=_TL_OUT[output.dtype],
    )
