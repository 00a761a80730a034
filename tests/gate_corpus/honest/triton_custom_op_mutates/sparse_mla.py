# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""DSA sparse MLA decode as a torch.library.custom_op that mutates its outputs (destination passing).

The op is registered once at import with a fake (meta) implementation so that torch.compile can trace models
that call it; run() calls it through torch.ops. Inside, one Triton program per token: its 16 heads are the rows
of every tile, the selected KV rows are gathered BLOCK_N at a time straight from the paged caches (index =
page * 64 + offset, -1 is padding), and an online softmax in base 2 keeps the [16, 512] accumulator in
registers. LSE is base 2, -inf for a token with no valid index (its output row is zero)."""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from torch.library import custom_op

LOG2E = 1.4426950408889634


@triton.heuristics({"NUM_BLOCKS": lambda args: triton.cdiv(args["TOPK"], args["BLOCK_N"])})
@triton.jit
def _sparse_mla_fwd(q_nope_ptr, q_pe_ptr, ckv_ptr, kpe_ptr, idx_ptr, out_ptr, lse_ptr, qk_scale,
                    H: tl.constexpr, D_CKV: tl.constexpr, D_KPE: tl.constexpr, TOPK: tl.constexpr,
                    BLOCK_N: tl.constexpr, NUM_BLOCKS: tl.constexpr):
    t = tl.program_id(0)
    h = tl.arange(0, H)
    dc = tl.arange(0, D_CKV)
    dp = tl.arange(0, D_KPE)
    q_nope = tl.load(q_nope_ptr + (t * H + h)[:, None] * D_CKV + dc[None, :])
    q_pe = tl.load(q_pe_ptr + (t * H + h)[:, None] * D_KPE + dp[None, :])

    m_i = tl.full([H], float("-inf"), tl.float32)
    l_i = tl.zeros([H], tl.float32)
    acc = tl.zeros([H, D_CKV], tl.float32)
    for blk in tl.range(0, NUM_BLOCKS, num_stages=2):
        n = blk * BLOCK_N + tl.arange(0, BLOCK_N)
        idx = tl.load(idx_ptr + t * TOPK + n, mask=n < TOPK, other=-1)
        valid = idx >= 0
        row = tl.where(valid, idx, 0).to(tl.int64)
        kc = tl.load(ckv_ptr + row[:, None] * D_CKV + dc[None, :], mask=valid[:, None], other=0.0)
        kp = tl.load(kpe_ptr + row[:, None] * D_KPE + dp[None, :], mask=valid[:, None], other=0.0)
        s = tl.dot(q_nope, tl.trans(kc)) + tl.dot(q_pe, tl.trans(kp))
        s = tl.where(valid[None, :], s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(kc.dtype), kc)
        m_i = m_new

    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    tl.store(out_ptr + (t * H + h)[:, None] * D_CKV + dc[None, :], out.to(out_ptr.dtype.element_ty))
    lse = tl.where(empty, float("-inf"), m_i + tl.log2(tl.where(empty, 1.0, l_i)))
    tl.store(lse_ptr + t * H + h, lse)


@custom_op("honest_dsa::sparse_mla_decode", mutates_args=("output", "lse"))
def sparse_mla_decode(q_nope: torch.Tensor, q_pe: torch.Tensor, ckv_cache: torch.Tensor, kpe_cache: torch.Tensor,
                      sparse_indices: torch.Tensor, sm_scale: float, output: torch.Tensor, lse: torch.Tensor) -> None:
    num_tokens, heads, d_ckv = q_nope.shape
    topk = sparse_indices.shape[-1]
    if num_tokens == 0:
        return
    _sparse_mla_fwd[(num_tokens,)](q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, output, lse,
                                   sm_scale * LOG2E, H=heads, D_CKV=d_ckv, D_KPE=q_pe.shape[-1], TOPK=topk,
                                   BLOCK_N=64, num_warps=8, num_stages=2)


@sparse_mla_decode.register_fake
def _(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    return None


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    scale = float(sm_scale) if sm_scale is not None else 1.0 / math.sqrt(q_nope.shape[-1] + q_pe.shape[-1])
    torch.ops.honest_dsa.sparse_mla_decode(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, scale, output, lse)
