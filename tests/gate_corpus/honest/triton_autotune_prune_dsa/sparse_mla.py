# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""DSA sparse attention (MLA, 16 heads, ckv 512 + kpe 64, top-2048 tokens) in Triton.

One program per (token, block of heads) streams its selected tokens in tiles. The tile size is autotuned per
(topk, heads); configs that cannot fit shared memory on the current GPU are pruned before benchmarking."""

import itertools
import math

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634
_SMEM_LIMIT = {90: 227 * 1024, 100: 227 * 1024, 89: 99 * 1024, 80: 163 * 1024}


def _configs():
    return [triton.Config({"BLOCK_N": bn, "BLOCK_H": bh}, num_warps=w, num_stages=s)
            for bn, bh, w, s in itertools.product((16, 32, 64), (16,), (4, 8), (1, 2, 3))]


def _smem_bytes(cfg, d_ckv=512, d_kpe=64):
    bn, bh = cfg.kwargs["BLOCK_N"], cfg.kwargs["BLOCK_H"]
    return cfg.num_stages * bn * (d_ckv + d_kpe) * 2 + bh * (d_ckv + d_kpe) * 2


def _early_config_prune(configs, named_args, **kwargs):
    if not torch.cuda.is_available():
        return [min(configs, key=lambda c: (c.num_stages, c.num_warps, -c.kwargs["BLOCK_N"]))]
    major, minor = torch.cuda.get_device_capability()
    limit = _SMEM_LIMIT.get(major * 10 + minor, 99 * 1024)
    kept = [c for c in configs if _smem_bytes(c) <= limit and named_args["topk"] % c.kwargs["BLOCK_N"] == 0]
    return kept or configs[:1]


@triton.autotune(configs=_configs(), key=["topk", "num_heads"],
                 prune_configs_by={"early_config_prune": _early_config_prune})
@triton.heuristics({"EVEN_N": lambda args: args["topk"] % args["BLOCK_N"] == 0,
                    "N_TILES": lambda args: triton.cdiv(args["topk"], args["BLOCK_N"])})
@triton.jit
def _sparse_mla_kernel(qn_ptr, qp_ptr, ckv_ptr, kpe_ptr, idx_ptr, out_ptr, lse_ptr, scale_log2, topk, num_heads,
                       D_CKV: tl.constexpr, D_KPE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_H: tl.constexpr,
                       EVEN_N: tl.constexpr, N_TILES: tl.constexpr):
    t = tl.program_id(0)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    h_ok = h < num_heads
    dc = tl.arange(0, D_CKV)
    dp = tl.arange(0, D_KPE)
    qn = tl.load(qn_ptr + (t * num_heads + h[:, None]) * D_CKV + dc[None, :], mask=h_ok[:, None], other=0.0)
    qp = tl.load(qp_ptr + (t * num_heads + h[:, None]) * D_KPE + dp[None, :], mask=h_ok[:, None], other=0.0)
    m = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, D_CKV], tl.float32)
    for i in range(N_TILES):
        n = i * BLOCK_N + tl.arange(0, BLOCK_N)
        if EVEN_N:
            idx = tl.load(idx_ptr + t * topk + n)
        else:
            idx = tl.load(idx_ptr + t * topk + n, mask=n < topk, other=-1)
        ok = idx >= 0
        row = tl.where(ok, idx, 0).to(tl.int64)
        kc = tl.load(ckv_ptr + row[:, None] * D_CKV + dc[None, :], mask=ok[:, None], other=0.0)
        kp = tl.load(kpe_ptr + row[:, None] * D_KPE + dp[None, :], mask=ok[:, None], other=0.0)
        s = (tl.dot(qn, tl.trans(kc)) + tl.dot(qp, tl.trans(kp))) * scale_log2
        s = tl.where(ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_use[:, None])
        alpha = tl.exp2(m - m_use)
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(kc.dtype), kc)
        m = m_new
    l_div = tl.where(l > 0, l, 1.0)
    tl.store(out_ptr + (t * num_heads + h[:, None]) * D_CKV + dc[None, :], (acc / l_div[:, None]).to(tl.bfloat16),
             mask=h_ok[:, None])
    tl.store(lse_ptr + t * num_heads + h, tl.where(l > 0, m + tl.log2(l_div), float("-inf")), mask=h_ok)


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    num_tokens, num_heads, d_ckv = q_nope.shape
    d_kpe = q_pe.shape[-1]
    topk = sparse_indices.shape[-1]
    ckv = ckv_cache.reshape(-1, d_ckv)
    kpe = kpe_cache.reshape(-1, d_kpe)
    grid = lambda meta: (num_tokens, triton.cdiv(num_heads, meta["BLOCK_H"]))
    _sparse_mla_kernel[grid](q_nope.contiguous(), q_pe.contiguous(), ckv, kpe, sparse_indices.contiguous(), output,
                             lse, float(sm_scale) * LOG2E, topk, num_heads, D_CKV=d_ckv, D_KPE=d_kpe)
