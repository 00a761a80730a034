"""Honest GDN prefill: a sequential Triton kernel, one program per (sequence, v-head, tile of V rows).

Each program walks its sequence's tokens (bounds from cu_seqlens) with a [BV, K] tile of the k-last state held
in registers, computing the gates of each token in the kernel: g = exp(-exp(A_log) * softplus(a + dt_bias)),
beta = sigmoid(b). The final tile goes to `new_state` (the preallocated output)."""

import math

import triton
import triton.language as tl


@triton.jit
def gdn_prefill_scan(q_ptr, k_ptr, v_ptr, state_ptr, a_log_ptr, a_ptr, dt_bias_ptr, b_ptr, cu_ptr,
                     out_ptr, new_state_ptr, scale,
                     HAS_STATE: tl.constexpr, HQ: tl.constexpr, HV: tl.constexpr, D: tl.constexpr,
                     BV: tl.constexpr):
    seq = tl.program_id(0)
    hv = tl.program_id(1)
    vt = tl.program_id(2)
    hq = hv // (HV // HQ)

    start = tl.load(cu_ptr + seq).to(tl.int32)
    end = tl.load(cu_ptr + seq + 1).to(tl.int32)

    kk = tl.arange(0, D)
    vv = vt * BV + tl.arange(0, BV)
    tile = (seq * HV + hv) * D * D + vv[:, None] * D + kk[None, :]
    if HAS_STATE:
        h = tl.load(state_ptr + tile)
    else:
        h = tl.zeros((BV, D), dtype=tl.float32)

    decay_rate = tl.exp(tl.load(a_log_ptr + hv))
    bias = tl.load(dt_bias_ptr + hv)

    for t in range(start, end):
        x = tl.load(a_ptr + t * HV + hv).to(tl.float32) + bias
        softplus = tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(x)))
        g = tl.exp(-decay_rate * softplus)
        beta = 1.0 / (1.0 + tl.exp(-tl.load(b_ptr + t * HV + hv).to(tl.float32)))

        qt = tl.load(q_ptr + (t * HQ + hq) * D + kk).to(tl.float32)
        kt = tl.load(k_ptr + (t * HQ + hq) * D + kk).to(tl.float32)
        vt_in = tl.load(v_ptr + (t * HV + hv) * D + vv).to(tl.float32)

        h = h * g
        predicted = tl.sum(h * kt[None, :], axis=1)
        h = h + (beta * (vt_in - predicted))[:, None] * kt[None, :]
        o = tl.sum(h * qt[None, :], axis=1) * scale
        tl.store(out_ptr + (t * HV + hv) * D + vv, o.to(tl.bfloat16))

    tl.store(new_state_ptr + tile, h)


def run(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale, output, new_state):
    _, hq, d = q.shape
    hv = v.shape[1]
    num_seqs = cu_seqlens.shape[0] - 1
    scale = float(scale) if scale is not None else 0.0
    if scale == 0.0:
        scale = 1.0 / math.sqrt(d)
    has_state = state is not None
    bv = 32
    gdn_prefill_scan[(num_seqs, hv, d // bv)](
        q.contiguous(), k.contiguous(), v.contiguous(), state.contiguous() if has_state else new_state,
        A_log, a.contiguous(), dt_bias, b.contiguous(), cu_seqlens, output, new_state, scale,
        HAS_STATE=has_state, HQ=hq, HV=hv, D=d, BV=bv, num_warps=4)
