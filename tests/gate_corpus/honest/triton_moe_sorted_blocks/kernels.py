# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""Grouped FP8 GEMMs over expert-sorted token blocks, 128x128 block scales applied per K block in fp32."""

import triton
import triton.language as tl

SCALE_BLOCK: tl.constexpr = 128


@triton.heuristics({"EVEN_N": lambda args: args["N"] % args["BLOCK_N"] == 0})
@triton.jit
def gemm1_swiglu_kernel(x_ptr, xs_ptr, w_ptr, ws_ptr, slot_ptr, blk_expert_ptr, act_ptr, T, N, K,
                        TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        EVEN_N: tl.constexpr):
    """act[slot, n] = silu(x @ W1[e, N + n]) * (x @ W1[e, n]) for the BLOCK_M slots of one expert block."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    e = tl.load(blk_expert_ptr + pid_m)
    if e < 0:
        return
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    slot = tl.load(slot_ptr + rows)
    valid = slot >= 0
    tok = tl.where(valid, slot // TOP_K, 0).to(tl.int64)
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = n < N
    k = tl.arange(0, BLOCK_K)
    w_base = w_ptr + e.to(tl.int64) * (2 * N) * K
    acc_gate = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    n_blocks_k = K // SCALE_BLOCK
    for kb in range(0, K // BLOCK_K):
        kk = kb * BLOCK_K + k
        a = tl.load(x_ptr + tok[:, None] * K + kk[None, :], mask=valid[:, None], other=0.0)
        wg = tl.load(w_base + n[:, None] * K + kk[None, :], mask=n_ok[:, None], other=0.0)
        wu = tl.load(w_base + (N + n[:, None]) * K + kk[None, :], mask=n_ok[:, None], other=0.0)
        a_s = tl.load(xs_ptr + kb * T + tok, mask=valid, other=0.0)
        sg = tl.load(ws_ptr + (e * (2 * N // SCALE_BLOCK) + n // SCALE_BLOCK) * n_blocks_k + kb, mask=n_ok, other=0.0)
        su = tl.load(ws_ptr + (e * (2 * N // SCALE_BLOCK) + (N + n) // SCALE_BLOCK) * n_blocks_k + kb, mask=n_ok,
                     other=0.0)
        acc_gate += tl.dot(a, tl.trans(wg)) * a_s[:, None] * sg[None, :]
        acc_up += tl.dot(a, tl.trans(wu)) * a_s[:, None] * su[None, :]
    h = acc_up / (1.0 + tl.exp(-acc_up)) * acc_gate
    out_rows = tl.where(valid, slot, 0).to(tl.int64)
    if EVEN_N:
        tl.store(act_ptr + out_rows[:, None] * N + n[None, :], h.to(tl.bfloat16), mask=valid[:, None])
    else:
        tl.store(act_ptr + out_rows[:, None] * N + n[None, :], h.to(tl.bfloat16), mask=valid[:, None] & n_ok[None, :])


@triton.jit
def gemm2_combine_kernel(act_ptr, w_ptr, ws_ptr, slot_ptr, blk_expert_ptr, rw_ptr, out_ptr, N, K,
                         TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """out[token] += weight * (act[slot] @ W2[e]^T), accumulated in fp32 with atomics (up to TOP_K writers)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    e = tl.load(blk_expert_ptr + pid_m)
    if e < 0:
        return
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    slot = tl.load(slot_ptr + rows)
    valid = slot >= 0
    safe = tl.where(valid, slot, 0).to(tl.int64)
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    k = tl.arange(0, BLOCK_K)
    w_base = w_ptr + e.to(tl.int64) * N * K
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for kb in range(0, K // BLOCK_K):
        kk = kb * BLOCK_K + k
        a = tl.load(act_ptr + safe[:, None] * K + kk[None, :], mask=valid[:, None], other=0.0)
        w = tl.load(w_base + n[:, None] * K + kk[None, :]).to(tl.bfloat16)
        s = tl.load(ws_ptr + (e * (N // SCALE_BLOCK) + n // SCALE_BLOCK) * (K // SCALE_BLOCK) + kb)
        acc += tl.dot(a, tl.trans(w)) * s[None, :]
    rw = tl.load(rw_ptr + safe, mask=valid, other=0.0)
    tok = safe // TOP_K
    tl.atomic_add(out_ptr + tok[:, None] * N + n[None, :], acc * rw[:, None], mask=valid[:, None])


@triton.jit
def cast_kernel(src_ptr, dst_ptr, numel, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + o, tl.load(src_ptr + o, mask=o < numel).to(tl.bfloat16), mask=o < numel)
