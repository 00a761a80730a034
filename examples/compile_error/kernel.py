"""Does not compile: a syntax error in the entry file (a missing colon), reported as COMPILE_ERROR."""

import triton
import triton.language as tl


@triton.jit
def _broken(out_ptr):
    tl.store(out_ptr, undefined_value)


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse)
    _broken[(1,)](output)
