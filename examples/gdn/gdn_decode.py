"""Gated delta net decode (Qwen3-Next, GVA 4 q/k heads -> 8 v heads, k-last fp32 state) in Triton.

Rendered from skills/gdn/references/triton_gdn_decode.py.tmpl with
BLOCK_V=32 NUM_WARPS=4.

One launch, one program per (batch element, v head, block of BLOCK_V value rows). In the k-last layout
[B, H, V, K] a value row v of the state is 128 contiguous fp32 (512 bytes), and every step of the
recurrence is independent per value row:

    alpha  = exp(-exp(A_log[h]) * softplus(a + dt_bias[h]))     (log-space: one exp, never overflows)
    beta   = sigmoid(b)
    S[v,:] = alpha * S[v,:]
    old[v] = sum_k S[v,k] * k[k]
    S[v,:] = S[v,:] + beta * (v[v] - old[v]) * k[:]             (the delta rule, rank-1 update)
    o[v]   = scale * sum_k S[v,k] * q[k]

so a program reads its BLOCK_V x 128 tile of the state once, fully coalesced along K, keeps it in registers,
and writes the new tile once to `new_state` (never into `state`: inputs stay untouched). q/k head i serves
v heads 2i and 2i+1. All arithmetic is fp32; only the output is rounded to bf16.
"""

import math

import triton
import triton.language as tl

BLOCK_V = 32  # value rows per program: smaller means more programs (B = 1 has only 8 heads)
NUM_WARPS = 4

HEAD_K = 128  # the definition's head_size, for q/k (K) and v (V) alike
HEAD_V = 128
NUM_QK_HEADS = 4
NUM_V_HEADS = 8
SOFTPLUS_THRESHOLD = 20.0  # torch's F.softplus returns x itself above it; matched so the gates agree


@triton.jit
def _gates(a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, row, h, HV: tl.constexpr, THRESHOLD: tl.constexpr):
    """(alpha, beta) of token row ``row``, v head ``h``, in fp32 with no overflow anywhere."""
    x = tl.load(a_ptr + row * HV + h).to(tl.float32) + tl.load(dt_bias_ptr + h)
    # softplus(x) = max(x, 0) + log(1 + exp(-|x|)): exp of a non-positive number only
    softplus = tl.where(x > THRESHOLD, x, tl.maximum(x, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(x))))
    alpha = tl.exp(-tl.exp(tl.load(A_log_ptr + h)) * softplus)  # log-space decay, <= 1
    bb = tl.load(b_ptr + row * HV + h).to(tl.float32)
    beta = 1.0 / (1.0 + tl.exp(-bb))  # exp(-b) may reach inf for very negative b: 1/inf = 0, still right
    return alpha, beta


@triton.jit
def _gdn_decode_kernel(q_ptr, k_ptr, v_ptr, state_ptr, A_log_ptr, a_ptr, dt_bias_ptr, b_ptr, out_ptr,
                       new_state_ptr, scale, HV: tl.constexpr, GROUP: tl.constexpr, K: tl.constexpr,
                       V: tl.constexpr, BV: tl.constexpr, HAS_STATE: tl.constexpr, THRESHOLD: tl.constexpr):
    pid_bh = tl.program_id(0)
    pid_v = tl.program_id(1)
    bi = (pid_bh // HV).to(tl.int64)  # int64: state offsets reach B * 8 * 128 * 128
    h = pid_bh % HV
    hk = h // GROUP  # GVA: q/k head i serves v heads GROUP*i ... GROUP*i + GROUP-1
    HK: tl.constexpr = HV // GROUP
    offs_k = tl.arange(0, K)
    offs_v = pid_v * BV + tl.arange(0, BV)

    q = tl.load(q_ptr + (bi * HK + hk) * K + offs_k).to(tl.float32)
    k = tl.load(k_ptr + (bi * HK + hk) * K + offs_k).to(tl.float32)
    v = tl.load(v_ptr + (bi * HV + h) * V + offs_v).to(tl.float32)
    alpha, beta = _gates(a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, bi, h, HV, THRESHOLD)

    tile = ((bi * HV + h) * V + offs_v[:, None]) * K + offs_k[None, :]  # [BV, K], contiguous along K
    if HAS_STATE:
        s = tl.load(state_ptr + tile) * alpha
    else:
        s = tl.zeros([BV, K], dtype=tl.float32)
    old = tl.sum(s * k[None, :], axis=1)  # k S: what the state predicts for this key, per value row
    s = s + (beta * (v - old))[:, None] * k[None, :]
    o = tl.sum(s * q[None, :], axis=1) * scale
    tl.store(out_ptr + (bi * HV + h) * V + offs_v, o.to(out_ptr.dtype.element_ty))
    tl.store(new_state_ptr + tile, s)


def run(q, k, v, state, A_log, a, dt_bias, b, scale, output, new_state):
    batch, seq_len, hq, dk = q.shape
    hv, dv = v.shape[2], v.shape[3]
    assert seq_len == 1 and hq == NUM_QK_HEADS and k.shape[2] == NUM_QK_HEADS and hv == NUM_V_HEADS
    assert dk == HEAD_K and dv == HEAD_V and HEAD_V % BLOCK_V == 0
    # the reference's convention: a missing or zero scale means 1/sqrt(K)
    scale = float(scale) if scale is not None else 0.0
    if scale == 0.0:
        scale = 1.0 / math.sqrt(dk)
    if batch == 0:
        return
    has_state = state is not None
    q, k, v, a, b = (t.contiguous() for t in (q, k, v, a, b))  # no-ops for the harness's contiguous inputs
    state_arg = state.contiguous() if has_state else new_state  # never read when has_state is False
    grid = (batch * hv, HEAD_V // BLOCK_V)
    _gdn_decode_kernel[grid](q, k, v, state_arg, A_log, a, dt_bias, b, output, new_state, scale,
                             HV=hv, GROUP=hv // hq, K=dk, V=dv, BV=BLOCK_V, HAS_STATE=has_state,
                             THRESHOLD=SOFTPLUS_THRESHOLD, num_warps=NUM_WARPS)

