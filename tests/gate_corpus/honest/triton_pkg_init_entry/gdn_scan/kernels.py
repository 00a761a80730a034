# ruff: noqa
from __future__ import annotations

import triton
import triton.language as tl

from .constants import SOFTPLUS_THRESHOLD


def _prune(configs, named_args, **kwargs):
    v = named_args["V"] if "V" in named_args else kwargs["V"]
    return [c for c in configs if c.kwargs["BV"] <= v] or configs[:1]


@triton.autotune(
    configs=[triton.Config({"BV": bv}, num_warps=w, num_stages=s) for bv in (64, 32, 16) for w in (4, 8, 2)
             for s in (1, 2)],
    key=["K", "V", "HV"],
    prune_configs_by={"early_config_prune": _prune},
)
@triton.jit(do_not_specialize=["T"])
def gdn_prefill_recurrent_kernel(q, k, v, a, b, a_log, dt_bias, h0, o, ht, cu_seqlens, scale, T,
                                 HQ: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                                 BV: tl.constexpr):
    i_v = tl.program_id(0)
    i_nh = tl.program_id(1)
    i_n = i_nh // HV
    i_hv = i_nh % HV
    i_hq = i_hv // (HV // HQ)
    bos = tl.load(cu_seqlens + i_n).to(tl.int64)
    eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)

    o_k = tl.arange(0, K)
    o_v = i_v * BV + tl.arange(0, BV)
    p_h = (i_n * HV + i_hv) * V * K + o_v[:, None] * K + o_k[None, :]
    h = tl.load(h0 + p_h)
    neg_a = -tl.exp(tl.load(a_log + i_hv))
    bias = tl.load(dt_bias + i_hv)

    for t in tl.range(bos, eos, num_stages=2):
        b_q = tl.load(q + (t * HQ + i_hq) * K + o_k).to(tl.float32)
        b_k = tl.load(k + (t * HQ + i_hq) * K + o_k).to(tl.float32)
        b_v = tl.load(v + (t * HV + i_hv) * V + o_v).to(tl.float32)
        x = tl.load(a + t * HV + i_hv).to(tl.float32) + bias
        sp = tl.where(x > SOFTPLUS_THRESHOLD, x, tl.log(1.0 + tl.exp(x)))
        g = tl.exp(neg_a * sp)
        beta = tl.sigmoid(tl.load(b + t * HV + i_hv).to(tl.float32))
        h = h * g
        delta = (b_v - tl.sum(h * b_k[None, :], axis=1)) * beta
        h = h + delta[:, None] * b_k[None, :]
        b_o = tl.sum(h * b_q[None, :], axis=1) * scale
        tl.store(o + (t * HV + i_hv) * V + o_v, b_o.to(o.dtype.element_ty))
    tl.store(ht + p_h, h)
