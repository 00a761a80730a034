# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""GQA paged decode returning (output, lse), allocating both itself."""

import math
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

_NEG_INF = torch.finfo(torch.float32).min


@triton.jit
def _gqa_decode(
    Q, K, V, Indptr, Indices, Out, Lse, scale_log2, neg_big,
    q_sb, q_sh, k_sp, k_sh, v_sp, v_sh, o_sb, o_sh,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr,
):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    beg = tl.load(Indptr + b)
    end = tl.load(Indptr + b + 1)
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, D)
    gm = g < GROUP
    hq = kvh * GROUP + g
    q = tl.load(Q + b * q_sb + hq[:, None] * q_sh + d[None, :], mask=gm[:, None], other=0.0)
    m = tl.full([GROUP_PAD], neg_big, tl.float32)
    l = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, D], tl.float32)
    for i in range(beg, end, BLOCK_N):
        idx = i + tl.arange(0, BLOCK_N)
        ok = idx < end
        page = tl.load(Indices + idx, mask=ok, other=0).to(tl.int64)
        k = tl.load(K + page[:, None] * k_sp + kvh * k_sh + d[None, :], mask=ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale_log2
        s = tl.where(ok[None, :], s, neg_big)
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.where(ok[None, :], tl.exp2(s - m_new[:, None]), 0.0)
        corr = tl.exp2(m - m_new)
        v = tl.load(V + page[:, None] * v_sp + kvh * v_sh + d[None, :], mask=ok[:, None], other=0.0)
        acc = acc * corr[:, None] + tl.dot(p.to(v.dtype), v)
        l = l * corr + tl.sum(p, 1)
        m = m_new
    has = l > 0
    den = tl.where(has, l, 1.0)
    tl.store(Out + b * o_sb + hq[:, None] * o_sh + d[None, :], (acc / den[:, None]).to(Out.dtype.element_ty),
             mask=gm[:, None])
    tl.store(Lse + b * (GROUP * tl.num_programs(1)) + hq, tl.where(has, m + tl.log2(den), float("-inf")), mask=gm)


def run(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, kv_indptr: torch.Tensor,
        kv_indices: torch.Tensor, sm_scale: Optional[float] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    if not q.is_contiguous():
        q = q.contiguous()
    k = k_cache.flatten(0, 1)  # page_size == 1: [pages, kv_heads, d]
    v = v_cache.flatten(0, 1)
    batch, num_qo_heads, head_dim = q.shape
    num_kv_heads = k.size(1)
    group = num_qo_heads // num_kv_heads
    assert head_dim in (64, 128, 256) and num_qo_heads == group * num_kv_heads
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = q.new_empty((batch, num_qo_heads), dtype=torch.float32)
    if sm_scale is None:
        sm_scale = 1 / math.sqrt(head_dim)
    _gqa_decode[(batch, num_kv_heads)](
        q, k, v, kv_indptr, kv_indices, out, lse, sm_scale * 1.4426950408889634, _NEG_INF,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), out.stride(0), out.stride(1),
        GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), D=head_dim, BLOCK_N=32,
    )
    return out, lse
