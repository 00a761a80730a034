# ruff: noqa  (written the way contestants write it; linting it is not the point)
"""GDN decode in CUDA: the kernel lives in gdn_decode.cu next to this file, read in a with-statement and built
with load_inline; the
launch table is a plain module of this folder imported absolutely (the folder goes on sys.path once)."""

import sys
from pathlib import Path

import torch
from torch.utils.cpp_extension import load_inline

HERE = Path(__file__).parent
if str(HERE) not in sys.path:
    sys.path.append(str(HERE))

from launch_table import threads_for  # noqa: E402  (needs the folder on sys.path)

_CPP_DECL = """
void gdn_decode(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor state, torch::Tensor A_log,
                torch::Tensor a, torch::Tensor dt_bias, torch::Tensor b, double scale, torch::Tensor output,
                torch::Tensor new_state, int64_t threads);
"""

with open(HERE / "gdn_decode.cu", encoding="utf-8") as f:
    _CUDA_SRC = f.read()

_ext = load_inline(
    name="gdn_decode_read_text",
    cpp_sources=[_CPP_DECL],
    cuda_sources=[_CUDA_SRC],
    functions=["gdn_decode"],
    extra_cuda_cflags=["-O3", "--use_fast_math", "-lineinfo", "-gencode=arch=compute_90a,code=sm_90a"],
    verbose=False,
)


def run(q, k, v, state, A_log, a, dt_bias, b, scale, output, new_state):
    head_k = q.shape[-1]
    if scale is None or scale == 0.0:
        scale = head_k ** -0.5
    _ext.gdn_decode(q, k, v, state, A_log, a, dt_bias, b, float(scale), output, new_state, threads_for(q.shape[0]))
