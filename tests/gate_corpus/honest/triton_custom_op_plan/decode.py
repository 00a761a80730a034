"""GQA paged decode (page size 1) as a registered custom op over two Triton kernels, with a host plan."""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

from .planner import DecodePlan

RCP_LN2 = 1.0 / math.log(2.0)


@triton.jit
def _chunk(q_ptr, k_ptr, v_ptr, idx_ptr, wreq_ptr, wstart_ptr, wend_ptr, po_ptr, pml_ptr, qk_scale,
           HEADS: tl.constexpr, KVH: tl.constexpr, G: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr):
    w = tl.program_id(0)
    kvh = tl.program_id(1)
    req = tl.load(wreq_ptr + w).to(tl.int64)
    start = tl.load(wstart_ptr + w)
    end = tl.load(wend_ptr + w)
    g = tl.arange(0, G)
    d = tl.arange(0, D)
    heads = kvh * G + g
    q = tl.load(q_ptr + (req * HEADS + heads[:, None]) * D + d[None, :])
    m = tl.full([G], float("-inf"), tl.float32)
    l = tl.zeros([G], tl.float32)
    acc = tl.zeros([G, D], tl.float32)
    for off in range(start, end, BLOCK):
        t = off + tl.arange(0, BLOCK)
        ok = t < end
        page = tl.load(idx_ptr + t, mask=ok, other=0).to(tl.int64)
        kv = (page[:, None] * KVH + kvh) * D + d[None, :]
        k = tl.load(k_ptr + kv, mask=ok[:, None], other=0.0)
        v = tl.load(v_ptr + kv, mask=ok[:, None], other=0.0)
        s = tl.sum(q[:, None, :].to(tl.float32) * k[None, :, :].to(tl.float32), 2) * qk_scale
        s = tl.where(ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - safe[:, None])
        alpha = tl.exp2(m - safe)
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :].to(tl.float32), 1)
        m = m_new
    tl.store(po_ptr + (w * HEADS + heads[:, None]) * D + d[None, :], acc)
    tl.store(pml_ptr + (w * HEADS + heads) * 2, m)
    tl.store(pml_ptr + (w * HEADS + heads) * 2 + 1, l)


@triton.jit
def _merge(po_ptr, pml_ptr, mptr_ptr, o_ptr, lse_ptr, HEADS: tl.constexpr, D: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    lo = tl.load(mptr_ptr + b)
    hi = tl.load(mptr_ptr + b + 1)
    d = tl.arange(0, D)
    M = float("-inf")
    for w in range(lo, hi):
        M = tl.maximum(M, tl.load(pml_ptr + (w * HEADS + h) * 2))
    Ms = tl.where(M == float("-inf"), 0.0, M)
    L = 0.0
    acc = tl.zeros([D], tl.float32)
    for w in range(lo, hi):
        mw = tl.load(pml_ptr + (w * HEADS + h) * 2)
        sc = tl.where(mw == float("-inf"), 0.0, tl.exp2(mw - Ms))
        L += sc * tl.load(pml_ptr + (w * HEADS + h) * 2 + 1)
        acc += sc * tl.load(po_ptr + (w * HEADS + h) * D + d)
    has = L > 0
    out = tl.where(has, acc / tl.where(has, L, 1.0), 0.0)
    tl.store(o_ptr + (b * HEADS + h) * D + d, out.to(o_ptr.dtype.element_ty))
    tl.store(lse_ptr + b * HEADS + h, tl.where(has, M + tl.log2(tl.where(has, L, 1.0)), float("-inf")))


@triton_op("stranger::gqa_decode", mutates_args={"output", "lse", "partial_o", "partial_ml"})
def gqa_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, kv_indices: torch.Tensor,
               work_req: torch.Tensor, work_start: torch.Tensor, work_end: torch.Tensor, merge_ptr: torch.Tensor,
               partial_o: torch.Tensor, partial_ml: torch.Tensor, sm_scale: float, output: torch.Tensor,
               lse: torch.Tensor) -> None:
    B, H, D = q.shape
    KVH = k_cache.shape[2]
    if work_req.numel():
        wrap_triton(_chunk)[(work_req.numel(), KVH)](
            q, k_cache, v_cache, kv_indices, work_req, work_start, work_end, partial_o, partial_ml,
            sm_scale * RCP_LN2, HEADS=H, KVH=KVH, G=H // KVH, D=D, BLOCK=16)
    if B:
        wrap_triton(_merge)[(B, H)](partial_o, partial_ml, merge_ptr, output, lse, HEADS=H, D=D)


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse, plan: DecodePlan):
    torch.ops.stranger.gqa_decode(q, k_cache, v_cache, kv_indices, plan.work_req, plan.work_start, plan.work_end,
                                  plan.merge_ptr, plan.partial_o, plan.partial_ml, float(sm_scale), output, lse)
