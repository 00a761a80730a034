# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""GQA paged decode (page size 1) in Triton: one program per (request, kv head), a plan picked once per shape."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import torch
import triton
import triton.language as tl

from .planner import DecodePlan, bucket, device_arch, plan_for, sm_count

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["run"]

logger = logging.getLogger(__name__)

LOG2E = math.log2(math.e)

# shape -> plan: module state holding launch parameters only, keyed by integers
_PLAN_CACHE: dict[tuple[int, int, int, int], DecodePlan] = {}


@triton.jit
def _decode_kernel(q_ptr, k_ptr, v_ptr, indptr_ptr, indices_ptr, out_ptr, lse_ptr, scale_log2,
                   sqb, sqh, skt, skh, svt, svh, sob, soh, slb,
                   GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    start = tl.load(indptr_ptr + b)
    n = tl.load(indptr_ptr + b + 1) - start
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, D)
    heads = kvh * GROUP + g
    g_ok = g < GROUP
    q = tl.load(q_ptr + b * sqb + heads[:, None] * sqh + d[None, :], mask=g_ok[:, None], other=0.0)
    m = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, D], tl.float32)
    for n0 in range(0, n, BLOCK_N):
        t = n0 + tl.arange(0, BLOCK_N)
        ok = t < n
        tok = tl.load(indices_ptr + start + t, mask=ok, other=0).to(tl.int64)
        k = tl.load(k_ptr + tok[:, None] * skt + kvh * skh + d[None, :], mask=ok[:, None], other=0.0)
        v = tl.load(v_ptr + tok[:, None] * svt + kvh * svh + d[None, :], mask=ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale_log2
        s = tl.where(ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m - m_safe)
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    l_safe = tl.where(l > 0, l, 1.0)
    tl.store(out_ptr + b * sob + heads[:, None] * soh + d[None, :], (acc / l_safe[:, None]).to(out_ptr.dtype.element_ty),
             mask=g_ok[:, None])
    tl.store(lse_ptr + b * slb + heads, tl.where(l > 0, m + tl.log2(l_safe), float("-inf")), mask=g_ok)


def _plan(q: Tensor, kv_heads: int) -> DecodePlan:
    batch, heads, _ = q.shape
    index = q.device.index or 0
    key = (bucket(batch), heads, kv_heads, index)
    plan = _PLAN_CACHE.get(key)
    if plan is None:
        plan = plan_for(key[0], kv_heads, heads // kv_heads, device_arch(index), sm_count(index))
        _PLAN_CACHE[key] = plan
    return plan


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    batch, heads, dim = q.shape
    kv_heads = k_cache.shape[2]
    k = k_cache.view(-1, kv_heads, dim)  # page size 1: a page is a token
    v = v_cache.view(-1, kv_heads, dim)
    plan = _plan(q, kv_heads)
    _decode_kernel[(batch, kv_heads)](
        q, k, v, kv_indptr, kv_indices, output, lse, float(sm_scale) * LOG2E,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        output.stride(0), output.stride(1), lse.stride(0),
        GROUP=heads // kv_heads, GROUP_PAD=plan.group_pad, D=dim, BLOCK_N=plan.block_n,
        num_warps=plan.num_warps, num_stages=plan.num_stages)
