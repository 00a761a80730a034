# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""GDN prefill (k-last state) as a fused recurrence in Triton: one program per (sequence, value head, value block)
walks its tokens with block pointers advanced one row per token; the state tile stays in registers."""

import math

import torch
import triton
import triton.language as tl


@triton.heuristics({"BV": lambda args: 32 if args["V"] >= 128 else args["V"]})
@triton.jit
def _gdn_prefill_kernel(q_ptr, k_ptr, v_ptr, s_ptr, alog_ptr, a_ptr, dtb_ptr, b_ptr, cu_ptr, o_ptr, ns_ptr, scale,
                        HQK: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr):
    n = tl.program_id(0)
    hv = tl.program_id(1)
    v0 = tl.program_id(2) * BV
    hk = hv // (HV // HQK)
    bos = tl.load(cu_ptr + n).to(tl.int32)
    eos = tl.load(cu_ptr + n + 1).to(tl.int32)
    total = tl.load(cu_ptr + tl.num_programs(0)).to(tl.int32)
    state_base = (n * HV + hv).to(tl.int64) * V * K
    s_in = tl.make_block_ptr(s_ptr + state_base, shape=(V, K), strides=(K, 1), offsets=(v0, 0),
                             block_shape=(BV, K), order=(1, 0))
    s_out = tl.make_block_ptr(ns_ptr + state_base, shape=(V, K), strides=(K, 1), offsets=(v0, 0),
                              block_shape=(BV, K), order=(1, 0))
    q_bp = tl.make_block_ptr(q_ptr + hk * K, shape=(total, K), strides=(HQK * K, 1), offsets=(bos, 0),
                             block_shape=(1, K), order=(1, 0))
    k_bp = tl.make_block_ptr(k_ptr + hk * K, shape=(total, K), strides=(HQK * K, 1), offsets=(bos, 0),
                             block_shape=(1, K), order=(1, 0))
    v_bp = tl.make_block_ptr(v_ptr + hv * V, shape=(total, V), strides=(HV * V, 1), offsets=(bos, v0),
                             block_shape=(1, BV), order=(1, 0))
    o_bp = tl.make_block_ptr(o_ptr + hv * V, shape=(total, V), strides=(HV * V, 1), offsets=(bos, v0),
                             block_shape=(1, BV), order=(1, 0))
    h = tl.load(s_in, boundary_check=(0, 1)).to(tl.float32)
    neg_a = -tl.exp(tl.load(alog_ptr + hv))
    dtb = tl.load(dtb_ptr + hv)
    for t in range(bos, eos):
        x = tl.load(a_ptr + t * HV + hv).to(tl.float32) + dtb
        sp = tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(x)))
        g = tl.exp(neg_a * sp)
        beta = tl.sigmoid(tl.load(b_ptr + t * HV + hv).to(tl.float32))
        q = tl.load(q_bp, boundary_check=(0,)).to(tl.float32)  # [1, K]
        k = tl.load(k_bp, boundary_check=(0,)).to(tl.float32)
        v = tl.load(v_bp, boundary_check=(0, 1)).to(tl.float32)  # [1, BV]
        h = h * g
        kh = tl.sum(h * k, axis=1)  # [BV]
        delta = beta * (tl.reshape(v, (BV,)) - kh)
        h = h + delta[:, None] * k
        o = tl.sum(h * q, axis=1) * scale
        tl.store(o_bp, tl.reshape(o, (1, BV)).to(o_ptr.dtype.element_ty), boundary_check=(0, 1))
        q_bp = tl.advance(q_bp, (1, 0))
        k_bp = tl.advance(k_bp, (1, 0))
        v_bp = tl.advance(v_bp, (1, 0))
        o_bp = tl.advance(o_bp, (1, 0))
    tl.store(s_out, h, boundary_check=(0, 1))


def run(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale, output, new_state):
    _, hqk, head_k = q.shape
    hv, head_v = v.shape[1], v.shape[2]
    num_seqs = cu_seqlens.numel() - 1
    if scale is None or scale == 0.0:
        scale = 1.0 / math.sqrt(head_k)
    grid = lambda meta: (num_seqs, hv, triton.cdiv(head_v, meta["BV"]))
    _gdn_prefill_kernel[grid](q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, output, new_state, float(scale),
                              HQK=hqk, HV=hv, K=head_k, V=head_v)
