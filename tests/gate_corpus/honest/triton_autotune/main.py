# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""GQA paged decode, autotuned over BLOCK_N / warps / stages, keyed on the shapes that matter."""

import math

import torch
import triton
import triton.language as tl

LOG2E = math.log2(math.e)
_CONFIGS = [
    triton.Config({"BLOCK_N": bn}, num_warps=w, num_stages=s)
    for bn in (32, 64, 128)
    for w in (4, 8)
    for s in (2, 3)
]


@triton.autotune(configs=_CONFIGS, key=["HEAD_DIM", "GROUP", "PAGE_SIZE"])
@triton.heuristics({"EVEN_GROUP": lambda args: args["GROUP"] == args["GROUP_PAD"]})
@triton.jit
def _decode(
    q_ptr, k_ptr, v_ptr, indptr_ptr, indices_ptr, out_ptr, lse_ptr, qk_scale,
    stride_qb, stride_qk, stride_qg,
    stride_kp, stride_ks, stride_kh,
    stride_ob, stride_oh, stride_lb,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr,
    EVEN_GROUP: tl.constexpr, BLOCK_N: tl.constexpr,
):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    first = tl.load(indptr_ptr + b)
    seq_len = (tl.load(indptr_ptr + b + 1) - first) * PAGE_SIZE
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, HEAD_DIM)
    q_off = b * stride_qb + kvh * stride_qk + g[:, None] * stride_qg + d[None, :]
    if EVEN_GROUP:
        q = tl.load(q_ptr + q_off)
    else:
        q = tl.load(q_ptr + q_off, mask=(g < GROUP)[:, None], other=0.0)
    m = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
    for start in range(0, seq_len, BLOCK_N):
        t = start + tl.arange(0, BLOCK_N)
        ok = t < seq_len
        page = tl.load(indices_ptr + first + t // PAGE_SIZE, mask=ok, other=0).to(tl.int64)
        kv_off = page[:, None] * stride_kp + (t % PAGE_SIZE)[:, None] * stride_ks + kvh * stride_kh + d[None, :]
        k = tl.load(k_ptr + kv_off, mask=ok[:, None], other=0.0)
        v = tl.load(v_ptr + kv_off, mask=ok[:, None], other=0.0)
        s = tl.where(ok[None, :], tl.dot(q, tl.trans(k)) * qk_scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m - m_new)
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    nonempty = l > 0
    denom = tl.where(nonempty, l, 1.0)
    heads = kvh * GROUP + g
    store_ok = g < GROUP
    tl.store(out_ptr + b * stride_ob + heads[:, None] * stride_oh + d[None, :],
             (acc / denom[:, None]).to(out_ptr.dtype.element_ty), mask=store_ok[:, None])
    tl.store(lse_ptr + b * stride_lb + heads, tl.where(nonempty, m + tl.log2(denom), float("-inf")), mask=store_ok)


def _check(q, k_cache, v_cache, output, lse):
    assert q.dtype in (torch.float16, torch.bfloat16), q.dtype
    assert k_cache.dtype == q.dtype and v_cache.dtype == q.dtype
    assert q.layout == torch.strided and k_cache.layout == torch.strided, "dense tensors only"
    assert k_cache.stride() == v_cache.stride(), "k and v caches must share a layout"
    assert q.stride(-1) == 1 and k_cache.stride(-1) == 1
    assert output.shape == q.shape and lse.shape == q.shape[:2] and lse.dtype == torch.float32


def _launch(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    _check(q, k_cache, v_cache, output, lse)
    batch, num_qo_heads, head_dim = q.shape
    _, page_size, num_kv_heads, _ = k_cache.shape
    group = num_qo_heads // num_kv_heads
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(head_dim)
    qg = q.view(batch, num_kv_heads, group, head_dim)
    _decode[(batch, num_kv_heads)](
        qg, k_cache, v_cache, kv_indptr, kv_indices, output, lse, float(sm_scale) * LOG2E,
        qg.stride(0), qg.stride(1), qg.stride(2),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        output.stride(0), output.stride(1), lse.stride(0),
        GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), HEAD_DIM=head_dim, PAGE_SIZE=page_size,
    )


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    _launch(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse)
