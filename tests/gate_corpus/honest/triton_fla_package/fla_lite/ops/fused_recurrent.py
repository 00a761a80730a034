from typing import Optional

import torch
import triton
import triton.language as tl

from ..op import exp, softplus
from ..utils import get_multiprocessor_count, input_guard


@triton.heuristics({
    "USE_INITIAL_STATE": lambda args: args["h0"] is not None,
    "IS_VARLEN": lambda args: args["cu_seqlens"] is not None,
})
@triton.autotune(configs=[triton.Config({}, num_warps=nw, num_stages=ns) for nw in [1, 2, 4] for ns in [2, 3]],
                 key=["BK", "BV"])
@triton.jit(do_not_specialize=["T"])
def fused_recurrent_gated_delta_rule_fwd_kernel(
    q, k, v, a, b, A_log, dt_bias, o, h0, ht, cu_seqlens, scale, T,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    USE_INITIAL_STATE: tl.constexpr, IS_VARLEN: tl.constexpr,
):
    i_v, i_nh = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    i_n, i_hv = i_nh // HV, i_nh % HV
    i_h = i_hv // (HV // H)
    if IS_VARLEN:
        bos, eos = tl.load(cu_seqlens + i_n).to(tl.int64), tl.load(cu_seqlens + i_n + 1).to(tl.int64)
        T = eos - bos
    else:
        bos, eos = i_n * T, i_n * T + T
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    p_q = q + (bos * H + i_h) * K + o_k
    p_k = k + (bos * H + i_h) * K + o_k
    p_v = v + (bos * HV + i_hv) * V + o_v
    p_a = a + bos * HV + i_hv
    p_b = b + bos * HV + i_hv
    p_o = o + (bos * HV + i_hv) * V + o_v
    mask_v = o_v < V
    mask_h = mask_v[:, None] & (o_k[None, :] < K)
    b_h = tl.zeros([BV, BK], dtype=tl.float32)
    if USE_INITIAL_STATE:
        p_h0 = h0 + i_nh * V * K + o_v[:, None] * K + o_k[None, :]
        b_h += tl.load(p_h0, mask=mask_h, other=0).to(tl.float32)
    b_A = exp(tl.load(A_log + i_hv).to(tl.float32))
    b_dt = tl.load(dt_bias + i_hv).to(tl.float32)
    for _ in range(0, T):
        b_q = tl.load(p_q).to(tl.float32) * scale
        b_k = tl.load(p_k).to(tl.float32)
        b_v = tl.load(p_v, mask=mask_v, other=0).to(tl.float32)
        x = tl.load(p_a).to(tl.float32) + b_dt
        sp = softplus(x)
        b_g = -b_A * sp
        b_beta = tl.sigmoid(tl.load(p_b).to(tl.float32))
        b_h *= exp(b_g)
        b_v -= tl.sum(b_h * b_k[None, :], 1)
        b_v *= b_beta
        b_h += b_v[:, None] * b_k[None, :]
        b_o = tl.sum(b_h * b_q[None, :], 1)
        tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=mask_v)
        p_q += H * K
        p_k += H * K
        p_v += HV * V
        p_o += HV * V
        p_a += HV
        p_b += HV
    p_ht = ht + i_nh * V * K + o_v[:, None] * K + o_k[None, :]
    tl.store(p_ht, b_h.to(p_ht.dtype.element_ty), mask=mask_h)


@input_guard
def fused_recurrent_gated_delta_rule(q, k, v, initial_state: Optional[torch.Tensor], A_log, a, dt_bias, b,
                                     cu_seqlens, scale, output, final_state):
    total, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    N = cu_seqlens.numel() - 1
    if scale is None or scale == 0:
        scale = K ** -0.5
    BK = triton.next_power_of_2(K)
    BV = min(triton.next_power_of_2(V), 32 if get_multiprocessor_count() > 100 else 64)
    NV = triton.cdiv(V, BV)
    grid = (NV, N * HV)
    fused_recurrent_gated_delta_rule_fwd_kernel[grid](
        q, k, v, a, b, A_log, dt_bias, output, initial_state, final_state, cu_seqlens, float(scale), total,
        H=H, HV=HV, K=K, V=V, BK=BK, BV=BV)
    return output, final_state
