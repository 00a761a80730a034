"""Dishonest: a token Triton kernel runs, while PyTorch does the attention (gathers, einsum, softmax)."""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _touch_kernel(x_ptr):
    tl.store(x_ptr, tl.load(x_ptr))


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    batch, heads, dim = q.shape
    kv_heads = k_cache.shape[2]
    group = heads // kv_heads
    _touch_kernel[(1,)](lse)
    lengths = (kv_indptr[1:] - kv_indptr[:-1]).tolist()
    starts = kv_indptr[:-1].tolist()
    for b in range(batch):
        rows = kv_indices[starts[b]:starts[b] + lengths[b]].long()
        k = k_cache[rows, 0].float()  # [L, KV, D]
        v = v_cache[rows, 0].float()
        qg = q[b].float().view(kv_heads, group, dim)
        logits = torch.einsum("kgd,lkd->kgl", qg, k) * sm_scale
        lse[b] = (torch.logsumexp(logits, -1) / math.log(2.0)).reshape(heads)
        output[b] = torch.einsum("kgl,lkd->kgd", torch.softmax(logits, -1), v).reshape(heads, dim).to(output.dtype)
