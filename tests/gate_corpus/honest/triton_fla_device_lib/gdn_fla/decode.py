# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""GDN decode (k-last state [B, HV, V, K]) in one Triton kernel: each program owns a [BV, K] slice of one
(batch, v-head) state, computes the gates g = exp(-exp(A_log) * softplus(a + dt_bias)) and beta = sigmoid(b) itself,
decays the slice, applies the delta rule and writes its part of the output and of the new state."""

import math
from typing import Optional

import torch
import triton
import triton.language as tl

from .utils import USE_CUDA_GRAPH, check_shared_mem, get_multiprocessor_count, input_guard, is_nvidia_hopper


@triton.jit
def _softplus(x):
    return tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(x)))


@triton.heuristics({"BV": lambda args: 64 if args["B"] * args["HV"] < args["NUM_SMS"] else 32})
@triton.jit
def gdn_decode_kernel(q, k, v, h0, A_log, a, dt_bias, b, o, ht, scale, B, NUM_SMS,
                      H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr):
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_hv = i_nh // HV, i_nh % HV
    i_h = i_hv // (HV // H)
    o_k = tl.arange(0, K)
    o_v = i_v * BV + tl.arange(0, BV)
    m_v = o_v < V
    b_q = tl.load(q + (i_n * H + i_h) * K + o_k).to(tl.float32) * scale
    b_k = tl.load(k + (i_n * H + i_h) * K + o_k).to(tl.float32)
    b_v = tl.load(v + (i_n * HV + i_hv) * V + o_v, mask=m_v, other=0.0).to(tl.float32)
    x = tl.load(a + i_n * HV + i_hv).to(tl.float32) + tl.load(dt_bias + i_hv)
    b_g = tl.exp(-tl.exp(tl.load(A_log + i_hv)) * _softplus(x))
    b_beta = tl.sigmoid(tl.load(b + i_n * HV + i_hv).to(tl.float32))
    p_h = i_nh * V * K + o_v[:, None] * K + o_k[None, :]
    b_h = tl.load(h0 + p_h, mask=m_v[:, None], other=0.0) * b_g
    b_v = (b_v - tl.sum(b_h * b_k[None, :], axis=1)) * b_beta
    b_h += b_v[:, None] * b_k[None, :]
    tl.store(ht + p_h, b_h, mask=m_v[:, None])
    b_o = tl.sum(b_h * b_q[None, :], axis=1)
    tl.store(o + (i_n * HV + i_hv) * V + o_v, b_o.to(o.dtype.element_ty), mask=m_v)


@input_guard
def fused_recurrent_gdn_decode(q, k, v, state, A_log, a, dt_bias, b, scale: Optional[float], output, new_state):
    batch, _, heads, head_k = q.shape
    v_heads, head_v = v.shape[2], v.shape[3]
    if scale is None or float(scale) == 0.0:
        scale = 1.0 / math.sqrt(head_k)
    num_warps = 4 if is_nvidia_hopper and check_shared_mem("hopper") and not USE_CUDA_GRAPH else 2
    sms = get_multiprocessor_count(q.device.index or 0)

    def grid(meta):
        return (triton.cdiv(head_v, meta["BV"]), batch * v_heads)

    gdn_decode_kernel[grid](q, k, v, state, A_log, a, dt_bias, b, output, new_state, float(scale), batch, sms,
                            H=heads, HV=v_heads, K=head_k, V=head_v, num_warps=num_warps)
