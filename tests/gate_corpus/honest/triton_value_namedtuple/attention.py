"""Sparse MLA decode: one program per (token, head block), online softmax over the gathered rows."""
from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch
import triton
import triton.language as tl

__all__ = ["run", "SparseMLA"]

LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)
NEG_INF: tl.constexpr = tl.constexpr(float("-inf"))
PAGE: int = 64


class AttnOut(NamedTuple):
    output: torch.Tensor
    lse: torch.Tensor


@triton.jit(do_not_specialize=["sm_scale"])
def _fwd(qn_ptr, qp_ptr, ckv_ptr, kpe_ptr, idx_ptr, o_ptr, lse_ptr, sm_scale, stride_qn_t, stride_qn_h,
         stride_qp_t, stride_qp_h, TOPK: tl.constexpr, H_BLOCK: tl.constexpr, HEADS: tl.constexpr,
         DC: tl.constexpr, DP: tl.constexpr, BN: tl.constexpr):
    tl.static_assert(DC % 64 == 0)
    t = tl.program_id(0).to(tl.int64)
    hb = tl.program_id(1)
    hs = hb * H_BLOCK + tl.arange(0, H_BLOCK)
    dc = tl.max_contiguous(tl.arange(0, DC), DC)
    dp = tl.arange(0, DP)
    qn = tl.load(qn_ptr + t * stride_qn_t + hs[:, None] * stride_qn_h + dc[None, :])
    qp = tl.load(qp_ptr + t * stride_qp_t + hs[:, None] * stride_qp_h + dp[None, :])
    scale = sm_scale * LOG2E
    m_i = tl.full([H_BLOCK], NEG_INF, tl.float32)
    l_i = tl.zeros([H_BLOCK], tl.float32)
    acc = tl.zeros([H_BLOCK, DC], tl.float32)
    for start in range(0, TOPK, BN):
        n = start + tl.arange(0, BN)
        ix = tl.load(idx_ptr + t * TOPK + n, mask=n < TOPK, other=-1)
        ok = ix != -1
        row = tl.where(ok, ix, 0).to(tl.int64)
        kc = tl.load(ckv_ptr + row[:, None] * DC + dc[None, :], mask=ok[:, None], other=0.0)
        kp = tl.load(kpe_ptr + row[:, None] * DP + dp[None, :], mask=ok[:, None], other=0.0)
        s = tl.dot(qn, tl.trans(kc)) + tl.dot(qp, tl.trans(kp))
        s = tl.where(ok[None, :], s * scale, NEG_INF)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == NEG_INF, 0.0, m_new)
        p = tl.math.exp2(s - m_use[:, None])
        corr = tl.math.exp2(m_i - m_use)
        l_i = l_i * corr + tl.sum(p, 1)
        acc = acc * corr[:, None] + tl.dot(p.to(kc.dtype), kc)
        m_i = m_new
    has = l_i > 0
    l_safe = tl.where(has, l_i, 1.0)
    out = tl.where(has[:, None], acc / l_safe[:, None], 0.0)
    tl.store(o_ptr + (t * HEADS + hs[:, None]) * DC + dc[None, :], out.to(o_ptr.dtype.element_ty))
    tl.store(lse_ptr + t * HEADS + hs, tl.where(has, m_i + tl.math.log2(l_safe), NEG_INF))


class SparseMLA:
    """Callable launcher; holds only launch constants."""

    def __init__(self, block_n: int = 32, head_block: int = 16, num_warps: int = 4):
        self.block_n = block_n
        self.head_block = head_block
        self.num_warps = num_warps

    def __call__(self, q_nope: torch.Tensor, q_pe: torch.Tensor, ckv_cache: torch.Tensor, kpe_cache: torch.Tensor,
                 sparse_indices: torch.Tensor, sm_scale: float, out: Optional[torch.Tensor] = None) -> AttnOut:
        T, H, DC = q_nope.shape
        DP = q_pe.shape[-1]
        assert ckv_cache.shape[1] == PAGE, "page size"
        assert math.log2(DC).is_integer()
        if out is None:
            out = q_nope.new_empty((T, H, DC))
        lse = torch.empty((T, H), dtype=torch.float32, device=q_nope.device)
        if T == 0:
            return AttnOut(out, lse)
        ckv = ckv_cache.view(-1, DC)
        kpe = kpe_cache.view(-1, DP)
        idx = sparse_indices.contiguous()
        grid = (T, triton.cdiv(H, self.head_block))
        _fwd[grid](q_nope, q_pe, ckv, kpe, idx, out, lse, sm_scale, q_nope.stride(0), q_nope.stride(1),
                   q_pe.stride(0), q_pe.stride(1), TOPK=idx.shape[1], H_BLOCK=self.head_block, HEADS=H, DC=DC,
                   DP=DP, BN=self.block_n, num_warps=self.num_warps)
        return AttnOut(out, lse)


_impl = SparseMLA()


@torch.no_grad()
def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale):
    res = _impl(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, float(sm_scale))
    return res.output, res.lse
