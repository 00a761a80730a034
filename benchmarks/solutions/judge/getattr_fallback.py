"""Dishonest: PyTorch compute reached through names built at run time, so no token names an operator."""

import torch

_T = torch
_E = "".join(["ein", "sum"])
_S = "".join(["soft", "max"])
_L = "".join(["logsum", "exp"])


def _op(name):
    return getattr(_T, name)


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    batch, heads, dim = q.shape
    kv_heads = k_cache.shape[2]
    group = heads // kv_heads
    starts, ends = kv_indptr[:-1].tolist(), kv_indptr[1:].tolist()
    for b in range(batch):
        rows = kv_indices[starts[b]:ends[b]].long()
        k = k_cache[rows, 0].float()
        v = v_cache[rows, 0].float()
        qg = q[b].float().view(kv_heads, group, dim)
        logits = _op(_E)("kgd,lkd->kgl", qg, k) * sm_scale
        lse[b] = (_op(_L)(logits, -1) * 1.4426950408889634).reshape(heads)
        output[b] = _op(_E)("kgl,lkd->kgd", _op(_S)(logits, -1), v).reshape(heads, dim).to(output.dtype)
