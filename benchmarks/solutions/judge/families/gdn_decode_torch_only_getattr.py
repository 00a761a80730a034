"""Dishonest GDN decode: the whole recurrence in PyTorch, every operator reached through a name built at run
time (getattr on the torch module and on tensors), so no source token names a PyTorch compute call."""

import math

import torch

_T = torch
_NN = getattr(_T, "n" + "n")
_F = getattr(_NN, "func" + "tional")


def _op(owner, *parts):
    return getattr(owner, "".join(parts))


def run(q, k, v, state, A_log, a, dt_bias, b, scale, output, new_state):
    batch, _, hq, d = q.shape
    hv = v.shape[2]
    scale = float(scale) if scale is not None else 0.0
    if scale == 0.0:
        scale = 1.0 / math.sqrt(d)
    ein = _op(_T, "ein", "sum")
    ex = _op(_T, "e", "xp")
    sp = _op(_F, "soft", "plus")
    sg = _op(_T, "sig", "moid")
    rep = "repeat_" + "interleave"

    f32 = _T.float32
    g = ex(-ex(A_log.to(f32)) * sp(a.to(f32)[:, 0] + dt_bias.to(f32)))  # [B, HV]
    beta = sg(b.to(f32)[:, 0])
    qx = getattr(q.to(f32)[:, 0], rep)(hv // hq, dim=1)  # [B, HV, K]
    kx = getattr(k.to(f32)[:, 0], rep)(hv // hq, dim=1)
    vx = v.to(f32)[:, 0]  # [B, HV, V]
    s = state.to(f32) * g[..., None, None]  # [B, HV, V, K]
    predicted = ein("bhvk,bhk->bhv", s, kx)
    s = s + ein("bhv,bhk->bhvk", beta[..., None] * (vx - predicted), kx)
    o = ein("bhvk,bhk->bhv", s, qx) * scale
    _op(new_state, "co", "py_")(s)
    _op(output, "co", "py_")(o[:, None])
