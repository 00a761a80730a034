# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""GQA paged decode (page size 64) in CUDA: pages staged into shared memory with cp.async, built with
torch.utils.cpp_extension.load from the .cu/.cpp files next to this module, for sm_90a."""

import os

import torch
from torch.utils.cpp_extension import load

_SRC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc")

_module = load(
    name="gqa_cp_async_ps64",
    sources=[os.path.join(_SRC_DIR, "gqa_decode.cu"), os.path.join(_SRC_DIR, "bindings.cpp")],
    extra_cflags=["-O3", "-std=c++17"],
    extra_cuda_cflags=["-O3", "--use_fast_math", "-lineinfo", "-std=c++17",
                       "-gencode", "arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr"],
    verbose=False,
)


def run(q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale, output, lse):
    assert q.is_cuda and q.dtype == torch.bfloat16, "bf16 CUDA tensors expected"
    _module.decode(q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, float(sm_scale), output, lse)
