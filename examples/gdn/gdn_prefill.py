"""Gated delta net prefill (Qwen3-Next, GVA 4 q/k heads -> 8 v heads, k-last fp32 state) in Triton.

Rendered from skills/gdn/references/triton_gdn_prefill.py.tmpl with
BLOCK_V=32 NUM_WARPS=4 NUM_STAGES=2.

The decode recurrence applied token by token, exactly as the reference does, over the packed sequences
that cu_seqlens delimits. One launch, one program per (sequence, v head, block of BLOCK_V value rows): each
value row of the state evolves independently of the others (see the decode template), so the program loads
its BLOCK_V x 128 fp32 tile of the sequence's initial state once, keeps it in registers across all of the
sequence's tokens, writes each token's output rows, and stores the final tile once into `new_state`:

    for t in sequence:  S = alpha_t S;  S += k_t^T (beta_t (v_t - k_t S));  o_t = scale q_t S

Per token it reads q_t, k_t (128 bf16 each, shared by the two v heads of a q/k head) and BLOCK_V values of
v_t: the state never leaves the chip between tokens. The serial chain is the sequence length; parallelism
is sequences x 8 heads x 128 / BLOCK_V. A sequence of length 0 gets a zero final state, as the reference's
(it skips the sequence and leaves its preallocated zeros). All arithmetic is fp32.
"""

import math

import triton
import triton.language as tl

BLOCK_V = 32  # value rows per program (more programs for few sequences; fewer re-reads of q/k)
NUM_WARPS = 4
NUM_STAGES = 2  # software pipelining of the token loop's loads (q, k, v, gates of later tokens)

HEAD_K = 128
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
def _gdn_prefill_kernel(q_ptr, k_ptr, v_ptr, state_ptr, A_log_ptr, a_ptr, dt_bias_ptr, b_ptr, cu_seqlens_ptr,
                        out_ptr, new_state_ptr, scale, HV: tl.constexpr, GROUP: tl.constexpr, K: tl.constexpr,
                        V: tl.constexpr, BV: tl.constexpr, HAS_STATE: tl.constexpr, THRESHOLD: tl.constexpr,
                        STAGES: tl.constexpr):
    pid_nh = tl.program_id(0)
    pid_v = tl.program_id(1)
    n = (pid_nh // HV).to(tl.int64)  # int64: offsets reach T * 8 * 128 and N * 8 * 128 * 128
    h = pid_nh % HV
    hk = h // GROUP  # GVA: q/k head i serves v heads GROUP*i ... GROUP*i + GROUP-1
    HK: tl.constexpr = HV // GROUP
    offs_k = tl.arange(0, K)
    offs_v = pid_v * BV + tl.arange(0, BV)
    bos = tl.load(cu_seqlens_ptr + n).to(tl.int64)
    eos = tl.load(cu_seqlens_ptr + n + 1).to(tl.int64)

    tile = ((n * HV + h) * V + offs_v[:, None]) * K + offs_k[None, :]  # [BV, K], contiguous along K
    if HAS_STATE:
        s = tl.load(state_ptr + tile)
    else:
        s = tl.zeros([BV, K], dtype=tl.float32)
    for t in tl.range(bos, eos, num_stages=STAGES):
        q = tl.load(q_ptr + (t * HK + hk) * K + offs_k).to(tl.float32)
        k = tl.load(k_ptr + (t * HK + hk) * K + offs_k).to(tl.float32)
        v = tl.load(v_ptr + (t * HV + h) * V + offs_v).to(tl.float32)
        alpha, beta = _gates(a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, t, h, HV, THRESHOLD)
        s = s * alpha
        old = tl.sum(s * k[None, :], axis=1)  # k S: what the state predicts for this key, per value row
        s = s + (beta * (v - old))[:, None] * k[None, :]
        o = tl.sum(s * q[None, :], axis=1) * scale
        tl.store(out_ptr + (t * HV + h) * V + offs_v, o.to(out_ptr.dtype.element_ty))
    s = tl.where(eos > bos, s, 0.0)  # the reference leaves an empty sequence's final state at zero
    tl.store(new_state_ptr + tile, s)


def run(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale, output, new_state):
    total, hq, dk = q.shape
    hv, dv = v.shape[1], v.shape[2]
    num_seqs = cu_seqlens.shape[0] - 1
    assert hq == NUM_QK_HEADS and k.shape[1] == NUM_QK_HEADS and hv == NUM_V_HEADS
    assert dk == HEAD_K and dv == HEAD_V and HEAD_V % BLOCK_V == 0
    # the reference's convention: a missing or zero scale means 1/sqrt(K)
    scale = float(scale) if scale is not None else 0.0
    if scale == 0.0:
        scale = 1.0 / math.sqrt(dk)
    if num_seqs <= 0:
        return
    has_state = state is not None
    q, k, v, a, b = (t.contiguous() for t in (q, k, v, a, b))  # no-ops for the harness's contiguous inputs
    state_arg = state.contiguous() if has_state else new_state  # never read when has_state is False
    grid = (num_seqs * hv, HEAD_V // BLOCK_V)
    _gdn_prefill_kernel[grid](q, k, v, state_arg, A_log, a, dt_bias, b, cu_seqlens.contiguous(), output,
                              new_state, scale, HV=hv, GROUP=hv // hq, K=dk, V=dv, BV=BLOCK_V,
                              HAS_STATE=has_state, THRESHOLD=SOFTPLUS_THRESHOLD, STAGES=NUM_STAGES,
                              num_warps=NUM_WARPS)
