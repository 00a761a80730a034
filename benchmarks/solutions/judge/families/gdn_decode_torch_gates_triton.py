"""Honest GDN decode: the gates in PyTorch on the host side, one Triton kernel for the delta-rule step.

One program per (batch, v-head, tile of V rows). The state is k-last, [B, HV, V, K]: each program reads its
[BV, K] slice of the old state, decays it, applies the rank-1 delta update and writes the slice to `new_state`
(the harness's preallocated output, never the input state), then reduces it against q for its BV outputs."""

import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def gdn_decode_step(q_ptr, k_ptr, v_ptr, state_ptr, g_ptr, beta_ptr, out_ptr, new_state_ptr, scale,
                    HAS_STATE: tl.constexpr, HQ: tl.constexpr, HV: tl.constexpr, D: tl.constexpr,
                    BV: tl.constexpr):
    bid = tl.program_id(0)
    hv = tl.program_id(1)
    vt = tl.program_id(2)
    hq = hv // (HV // HQ)

    kk = tl.arange(0, D)
    vv = vt * BV + tl.arange(0, BV)

    qv = tl.load(q_ptr + (bid * HQ + hq) * D + kk).to(tl.float32)
    kv = tl.load(k_ptr + (bid * HQ + hq) * D + kk).to(tl.float32)
    vv_in = tl.load(v_ptr + (bid * HV + hv) * D + vv).to(tl.float32)
    g = tl.load(g_ptr + bid * HV + hv)
    beta = tl.load(beta_ptr + bid * HV + hv)

    tile = (bid * HV + hv) * D * D + vv[:, None] * D + kk[None, :]
    if HAS_STATE:
        h = tl.load(state_ptr + tile) * g
    else:
        h = tl.zeros((BV, D), dtype=tl.float32)

    predicted = tl.sum(h * kv[None, :], axis=1)  # k . S for each of the BV value rows
    correction = beta * (vv_in - predicted)
    h = h + correction[:, None] * kv[None, :]
    tl.store(new_state_ptr + tile, h)

    o = tl.sum(h * qv[None, :], axis=1) * scale
    tl.store(out_ptr + (bid * HV + hv) * D + vv, o.to(tl.bfloat16))


def run(q, k, v, state, A_log, a, dt_bias, b, scale, output, new_state):
    batch, _, hq, d = q.shape
    hv = v.shape[2]
    scale = float(scale) if scale is not None else 0.0
    if scale == 0.0:
        scale = 1.0 / math.sqrt(d)

    # gates on the host side, in fp32
    g = torch.exp(-torch.exp(A_log.float()) * F.softplus(a.float() + dt_bias.float()))
    beta = torch.sigmoid(b.float())

    has_state = state is not None
    src = state.contiguous() if has_state else new_state
    bv = 32
    gdn_decode_step[(batch, hv, d // bv)](
        q.contiguous(), k.contiguous(), v.contiguous(), src, g.contiguous(), beta.contiguous(), output, new_state,
        scale, HAS_STATE=has_state, HQ=hq, HV=hv, D=d, BV=bv, num_warps=4)
