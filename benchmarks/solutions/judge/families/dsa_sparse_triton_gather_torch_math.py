"""DSA sparse attention whose own Triton kernel only gathers the selected rows into a scratch buffer; the
attention itself (the logits, the softmax, the weighted sum) is PyTorch's: batched matmuls and a softmax on the
gathered rows. Correct, and it looks like a Triton solution, but the operator's work is library compute."""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def gather_rows(src_ptr, idx_ptr, dst_ptr, D: tl.constexpr, BD: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    row = tl.load(idx_ptr + r)
    cols = tl.arange(0, BD)
    keep = (cols < D) & (row >= 0)
    vals = tl.load(src_ptr + tl.where(row >= 0, row, 0).to(tl.int64) * D + cols, mask=keep, other=0.0)
    tl.store(dst_ptr + r * D + cols, vals, mask=cols < D)


def gather(cache, indices):
    dim = cache.shape[-1]
    rows = cache.reshape(-1, dim)
    flat = indices.reshape(-1).contiguous()
    out = torch.empty((flat.numel(), dim), dtype=cache.dtype, device=cache.device)
    gather_rows[(flat.numel(),)](rows, flat, out, D=dim, BD=triton.next_power_of_2(dim))
    return out.view(*indices.shape, dim)


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    kc = gather(ckv_cache, sparse_indices).float()  # [T, K, 512]
    kp = gather(kpe_cache, sparse_indices).float()  # [T, K, 64]
    logits = torch.bmm(q_nope.float(), kc.transpose(1, 2)) + torch.bmm(q_pe.float(), kp.transpose(1, 2))
    logits = logits * float(sm_scale)
    logits = logits.masked_fill((sparse_indices < 0)[:, None, :], float("-inf"))
    lse.copy_(torch.logsumexp(logits, dim=-1) / math.log(2.0))
    weights = torch.nan_to_num(torch.softmax(logits, dim=-1))
    output.copy_(torch.bmm(weights, kc).to(output.dtype))
