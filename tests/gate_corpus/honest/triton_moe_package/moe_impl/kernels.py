from __future__ import annotations

import itertools

import triton
import triton.language as tl

QB: tl.constexpr = tl.constexpr(128)

_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
    for bm, bn, w, s in itertools.product((16, 32), (128, 64), (4, 8), (2, 3))
]


def _prune(configs, named_args, **kwargs):
    return [c for c in configs if c.kwargs["BLOCK_N"] <= 128] or configs


@triton.autotune(configs=_CONFIGS, key=["H", "I"], prune_configs_by={"early_config_prune": _prune})
@triton.heuristics({"E_P2": lambda args: triton.next_power_of_2(args["E_LOCAL"] + 1)})
@triton.jit
def gemm1_swiglu(hs_ptr, hs_scale_ptr, w_ptr, w_scale_ptr, offsets_ptr, tokens_ptr, inter_ptr, num_tokens,
                 H: tl.constexpr, I: tl.constexpr, E_LOCAL: tl.constexpr, E_P2: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    e = tl.program_id(0)
    mt = tl.program_id(1)
    nt = tl.program_id(2)
    start = tl.load(offsets_ptr + e)
    end = tl.load(offsets_ptr + e + 1)
    rows = start + mt * BLOCK_M + tl.arange(0, BLOCK_M)
    valid = rows < end
    if start + mt * BLOCK_M < end:
        tok = tl.load(tokens_ptr + rows, mask=valid, other=0).to(tl.int64)
        offs_n = nt * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, QB)
        w_base = w_ptr + e.to(tl.int64) * (2 * I * H)
        s_base = w_scale_ptr + e.to(tl.int64) * ((2 * I // QB) * (H // QB))
        up = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        gate = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for kb in range(0, H // QB):
            a = tl.load(hs_ptr + tok[:, None] * H + kb * QB + offs_k[None, :], mask=valid[:, None], other=0.0)
            a = a.to(tl.float32)
            a_s = tl.load(hs_scale_ptr + kb * num_tokens + tok, mask=valid, other=0.0)
            wu = tl.load(w_base + offs_n[:, None] * H + kb * QB + offs_k[None, :]).to(tl.float32)
            wg = tl.load(w_base + (I + offs_n)[:, None] * H + kb * QB + offs_k[None, :]).to(tl.float32)
            su = tl.load(s_base + ((nt * BLOCK_N) // QB) * (H // QB) + kb)
            sg = tl.load(s_base + ((I + nt * BLOCK_N) // QB) * (H // QB) + kb)
            up += tl.dot(a, tl.trans(wu), input_precision="ieee") * (a_s[:, None] * su)
            gate += tl.dot(a, tl.trans(wg), input_precision="ieee") * (a_s[:, None] * sg)
        h = up * (gate / (1.0 + tl.exp(-gate)))
        tl.store(inter_ptr + rows.to(tl.int64)[:, None] * I + offs_n[None, :], h, mask=valid[:, None])


@triton.autotune(configs=_CONFIGS, key=["H", "I"])
@triton.jit
def gemm2_scaled(inter_ptr, w_ptr, w_scale_ptr, offsets_ptr, weights_ptr, out_ptr,
                 H: tl.constexpr, I: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    e = tl.program_id(0)
    mt = tl.program_id(1)
    nt = tl.program_id(2)
    start = tl.load(offsets_ptr + e)
    end = tl.load(offsets_ptr + e + 1)
    rows = start + mt * BLOCK_M + tl.arange(0, BLOCK_M)
    valid = rows < end
    if start + mt * BLOCK_M < end:
        rows64 = rows.to(tl.int64)
        offs_n = nt * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, QB)
        w_base = w_ptr + e.to(tl.int64) * (H * I)
        s_base = w_scale_ptr + e.to(tl.int64) * ((H // QB) * (I // QB)) + ((nt * BLOCK_N) // QB) * (I // QB)
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for kb in range(0, I // QB):
            c = tl.load(inter_ptr + rows64[:, None] * I + kb * QB + offs_k[None, :], mask=valid[:, None], other=0.0)
            w = tl.load(w_base + offs_n[:, None] * I + kb * QB + offs_k[None, :]).to(tl.float32)
            acc += tl.dot(c, tl.trans(w), input_precision="ieee") * tl.load(s_base + kb)
        rw = tl.load(weights_ptr + rows, mask=valid, other=0.0)
        tl.store(out_ptr + rows64[:, None] * H + offs_n[None, :], acc * rw[:, None], mask=valid[:, None])
