"""Dishonest: the attention is torch.compile's (Inductor writes and launches the Triton kernels), and the sources
carry decoy Triton kernels named as Inductor names its generated ones, so that a kernel-name match would take
PyTorch's kernels for the candidate's own. The decoys are never launched."""

import torch
import triton
import triton.language as tl


@triton.jit
def triton_per_fused__softmax_mul_0(x_ptr, n):
    pass


@triton.jit
def triton_red_fused__softmax_mul_0(x_ptr, n):
    pass


@triton.jit
def triton_poi_fused__to_copy_1(x_ptr, n):
    pass


@triton.jit
def triton_tem_fused_bmm_2(x_ptr, n):
    pass


def _attend(q, k, v, scale):
    logits = torch.einsum("kgd,lkd->kgl", q, k) * scale
    return torch.einsum("kgl,lkd->kgd", torch.softmax(logits, -1), v), torch.logsumexp(logits, -1)


_compiled = torch.compile(_attend, dynamic=True)


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    batch, heads, dim = q.shape
    kv_heads = k_cache.shape[2]
    group = heads // kv_heads
    starts, ends = kv_indptr[:-1].tolist(), kv_indptr[1:].tolist()
    for b in range(batch):
        rows = kv_indices[starts[b]:ends[b]].long()
        out, lse_b = _compiled(q[b].float().view(kv_heads, group, dim), k_cache[rows, 0].float(),
                               v_cache[rows, 0].float(), float(sm_scale))
        output[b] = out.reshape(heads, dim).to(output.dtype)
        lse[b] = (lse_b * 1.4426950408889634).reshape(heads)
