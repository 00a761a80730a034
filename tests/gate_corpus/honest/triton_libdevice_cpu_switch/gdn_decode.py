# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""GDN decode (k-last state) in Triton. The gate math uses CUDA's libdevice on a GPU; without one (the Triton
interpreter on CPU) the plain tl functions stand in, since libdevice's log1p has no host implementation."""

import logging
import math

import torch
import triton
import triton.language as tl

__all__ = ["run", "gdn_decode"]

logger = logging.getLogger(__name__)

_INTERPRET = not torch.cuda.is_available()

if _INTERPRET:
    @triton.jit
    def _exp(x):
        return tl.exp(x)

    @triton.jit
    def _softplus(x):
        return tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(x)))
else:
    @triton.jit
    def _exp(x):
        return tl.extra.cuda.libdevice.exp(x)

    @triton.jit
    def _softplus(x):
        return tl.where(x > 20.0, x, tl.extra.cuda.libdevice.log1p(tl.extra.cuda.libdevice.exp(x)))


@triton.jit
def _gdn_decode_kernel(q_ptr, k_ptr, v_ptr, s_ptr, alog_ptr, a_ptr, dtb_ptr, b_ptr, o_ptr, ns_ptr, scale,
                       HV: tl.constexpr, HQK: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr):
    pid_bh = tl.program_id(0)
    pid_v = tl.program_id(1)
    bi = pid_bh // HV
    hv = pid_bh % HV
    hk = hv // (HV // HQK)
    rk = tl.arange(0, K)
    rv = pid_v * BV + tl.arange(0, BV)
    x = tl.load(a_ptr + bi * HV + hv).to(tl.float32) + tl.load(dtb_ptr + hv)
    g = _exp(-_exp(tl.load(alog_ptr + hv)) * _softplus(x))
    beta = tl.sigmoid(tl.load(b_ptr + bi * HV + hv).to(tl.float32))
    q = tl.load(q_ptr + (bi * HQK + hk) * K + rk).to(tl.float32)
    k = tl.load(k_ptr + (bi * HQK + hk) * K + rk).to(tl.float32)
    v = tl.load(v_ptr + (bi * HV + hv) * V + rv).to(tl.float32)
    s_off = pid_bh * V * K + rv[:, None] * K + rk[None, :]
    s = tl.load(s_ptr + s_off) * g
    kv = tl.sum(s * k[None, :], axis=1)
    delta = beta * (v - kv)
    s = s + delta[:, None] * k[None, :]
    o = tl.sum(s * q[None, :], axis=1) * scale
    tl.store(ns_ptr + s_off, s)
    tl.store(o_ptr + (bi * HV + hv) * V + rv, o.to(o_ptr.dtype.element_ty))


def gdn_decode(q, k, v, state, A_log, a, dt_bias, b, scale, output, new_state):
    batch, seq_len, hqk, head_k = q.shape
    hv, head_v = v.shape[2], v.shape[3]
    if scale is None or scale == 0.0:
        scale = 1.0 / math.sqrt(head_k)
    block_v = 32 if _INTERPRET else 16
    grid = (batch * hv, triton.cdiv(head_v, block_v))
    logger.debug("gdn decode: batch=%d grid=%s interpret=%s", batch, grid, _INTERPRET)
    _gdn_decode_kernel[grid](q, k, v, state, A_log, a, dt_bias, b, output, new_state, float(scale),
                             HV=hv, HQK=hqk, K=head_k, V=head_v, BV=block_v)
    return output, new_state


# registered as a torch op (the older torch.library.Library API) so that a serving stack can call it by name
_lib = torch.library.Library("gdn_rt", "DEF")
_lib.define("decode(Tensor q, Tensor k, Tensor v, Tensor state, Tensor A_log, Tensor a, Tensor dt_bias, Tensor b, "
            "float scale, Tensor(a!) output, Tensor(b!) new_state) -> ()")


def _decode_impl(q, k, v, state, A_log, a, dt_bias, b, scale, output, new_state):
    gdn_decode(q.contiguous(), k.contiguous(), v.contiguous(), state.contiguous(), A_log, a.contiguous(), dt_bias,
               b.contiguous(), scale, output, new_state)


_lib.impl("decode", _decode_impl, "CUDA")
_lib.impl("decode", _decode_impl, "CPU")


def run(q, k, v, state, A_log, a, dt_bias, b, scale, output, new_state):
    torch.ops.gdn_rt.decode(q, k, v, state, A_log, a, dt_bias, b, float(scale or 0.0), output, new_state)
