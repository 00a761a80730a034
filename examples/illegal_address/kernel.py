"""Crashes the GPU context: a Triton store far outside any allocation (CUDA illegal memory access)."""

import triton
import triton.language as tl


@triton.jit
def _scribble(out_ptr, n):
    offs = tl.arange(0, 128)
    tl.store(out_ptr + (1 << 40) + offs, tl.zeros([128], tl.float32), mask=offs < n)


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):
    _scribble[(1,)](lse, 128)
