"""Which regime a GQA paged decode batch is in, from its inputs: the same rules the harness and this skill use.

A dispatching solution (controller/dispatch.py) calls `regime` in its setup, once per batch and outside the
kernel figure (as FlashInfer's plan() is), then runs the kernel that won that regime:

- skewed: the longest request is more than 4x the mean length (a few long requests set the time);
- latency-bound: batch x KV heads programs give the GPU's SMs fewer than UNSPLIT_PROGRAMS_PER_SM each (split the
  tokens);
- memory-bound: otherwise (one program per request and KV head streams K/V at full bandwidth).

The page table is read once to the host (one small copy); the lengths are computed there.
"""

import torch

SKEW_RATIO = 4.0
# One program per (request, KV head) streams at full bandwidth only with at least two per SM: on an H200 (run 16,
# kv4 page 64) 64 requests x 4 KV heads = 256 programs on 132 SMs reached 85-93% of the floor where split chunks
# reached 93-98%, while 256 x 4 = 1024 programs reached 98-103%. Below that the batch is split like a small one.
UNSPLIT_PROGRAMS_PER_SM = 2


def request_lengths(kv_indptr, kv_last_page_len, page_size):
    """Tokens per request: every page full but the last, which holds kv_last_page_len (page size 1: all full)."""
    indptr = kv_indptr.tolist()
    pages = [b - a for a, b in zip(indptr[:-1], indptr[1:])]
    if kv_last_page_len is None or page_size == 1:
        return [p * page_size for p in pages]
    last = kv_last_page_len.tolist()
    return [(p - 1) * page_size + n if p > 0 else 0 for p, n in zip(pages, last)]


def regime(q, k_cache, v_cache, kv_indptr, kv_indices, *rest):
    """rest: (sm_scale,) for page size 1, (kv_last_page_len, sm_scale) for paged definitions."""
    batch, page_size, kv_heads = q.shape[0], k_cache.shape[1], k_cache.shape[2]
    lengths = request_lengths(kv_indptr, rest[0] if len(rest) == 2 else None, page_size)
    mean = sum(lengths) / len(lengths) if lengths else 0.0
    if mean > 0 and max(lengths) / mean > SKEW_RATIO:
        return "skewed"
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 132
    return "latency-bound" if batch * kv_heads < UNSPLIT_PROGRAMS_PER_SM * sms else "memory-bound"
